"""Remote-write decoding: snappy-decompressed protobuf bytes in, Arrow tables out.

:func:`decode_v1` reads ``prometheus.WriteRequest`` (Remote-Write 1.0) and
:func:`decode_v2` reads ``io.prometheus.write.v2.Request`` (2.0-rc.4). Both return a
:class:`DecodedWrite` whose tables have the columns of the store tables ``series``,
``samples``, ``histogram_samples``, ``exemplars`` and ``metric_metadata``, so each can
be passed as it is to ``store.insert_arrow(name, table)``. They are pure functions:
no I/O, no state. An invalid write raises :class:`~warehouse.errors.IngestError`
(HTTP 400) naming the problem and where it is, before anything is returned.

Series id
---------
A series is identified by a 128-bit id, the MD5 digest of its *key*, read as a
ClickHouse UUID. The key is the metric name (the ``__name__`` label) followed by
every other label sorted by name (byte order of the UTF-8 encoding), each string
written as ``<length>:<bytes>`` where ``<length>`` is its length in bytes in ASCII
decimal::

    key = S(metric_name) + S(name_1) + S(value_1) + ... + S(name_n) + S(value_n)
    S(s) = str(len(utf8(s))) + ":" + utf8(s)

    e.g. {__name__="up", job="api"}  ->  b"2:up3:job3:api"

The length prefixes make the key unambiguous (no label set has another's key), and
sorting makes it independent of the order a sender lists labels in. The id is
``reinterpretAsUUID(MD5(key))`` in ClickHouse, whose UUID keeps each 8-byte half of
the digest in reversed byte order: in Python,
``uuid.UUID(bytes=d[7::-1] + d[15:7:-1])`` for ``d = md5(key).digest()``.
:data:`SERIES_ID_SQL` computes the same id from the ``series`` table's columns.

Labels whose value is empty are dropped before anything else, as Prometheus treats
an empty value as an absent label. ``labels`` holds the labels without ``__name__``.

Floats are kept bit for bit (NaN payloads, the staleness marker
``0x7ff0000000000002``, infinities, negative zero): float samples move as raw 8-byte
doubles from the wire to Arrow.

How it decodes
--------------
The protobuf runtime (upb) parses the body through *views* of the same wire format
(see :mod:`warehouse.ingest.proto`): one where each series' labels and samples merge
into columns, and one that only counts elements. numpy reads the runtime's
re-encoding of the columns for every series at once. Proto3 leaves zero values off
the wire, so a series with a zero value or timestamp has shorter columns than
samples; the counts show which, and those series are read again from each sample's
own bytes. The full messages are parsed only when the write holds histograms,
exemplars or metadata, or labels with an empty name or value. Python does work per
series (hashing its id) and per histogram or exemplar, but not per float sample.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from warehouse.errors import IngestError
from warehouse.ingest import proto
from warehouse.ingest.proto import Records, gather, packed_doubles, packed_varints, scan

__all__ = [
    "EXEMPLARS_SCHEMA",
    "HISTOGRAMS_SCHEMA",
    "METADATA_SCHEMA",
    "SAMPLES_SCHEMA",
    "SERIES_ID_SQL",
    "SERIES_SCHEMA",
    "TABLES",
    "DecodedWrite",
    "decode_v1",
    "decode_v2",
    "series_id",
    "series_key",
]

_TS = pa.timestamp("ms", tz="UTC")
_LABELS = pa.map_(pa.string(), pa.string())

SERIES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uuid(), nullable=False),
        pa.field("metric_name", pa.string(), nullable=False),
        pa.field("labels", _LABELS, nullable=False),
        pa.field("min_time", _TS, nullable=False),
        pa.field("max_time", _TS, nullable=False),
    ]
)
SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uuid(), nullable=False),
        pa.field("timestamp", _TS, nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)

STARTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uuid(), nullable=False),
        pa.field("start_timestamp", _TS, nullable=False),
    ]
)
HISTOGRAMS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uuid(), nullable=False),
        pa.field("timestamp", _TS, nullable=False),
        pa.field("start_timestamp", _TS),
        pa.field("count", pa.float64(), nullable=False),
        pa.field("sum", pa.float64(), nullable=False),
        pa.field("schema", pa.int32(), nullable=False),
        pa.field("zero_threshold", pa.float64(), nullable=False),
        pa.field("zero_count", pa.float64(), nullable=False),
        pa.field("positive_span_offsets", pa.list_(pa.int32()), nullable=False),
        pa.field("positive_span_lengths", pa.list_(pa.uint32()), nullable=False),
        pa.field("positive_counts", pa.list_(pa.float64()), nullable=False),
        pa.field("negative_span_offsets", pa.list_(pa.int32()), nullable=False),
        pa.field("negative_span_lengths", pa.list_(pa.uint32()), nullable=False),
        pa.field("negative_counts", pa.list_(pa.float64()), nullable=False),
        pa.field("reset_hint", pa.string(), nullable=False),
        pa.field("custom_values", pa.list_(pa.float64()), nullable=False),
    ]
)
EXEMPLARS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.uuid(), nullable=False),
        pa.field("timestamp", _TS, nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("labels", _LABELS, nullable=False),
    ]
)
METADATA_SCHEMA = pa.schema(
    [
        pa.field("metric_family_name", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("unit", pa.string(), nullable=False),
        pa.field("help", pa.string(), nullable=False),
        pa.field("updated_at", _TS, nullable=False),
    ]
)

TABLES = {
    "series": SERIES_SCHEMA,
    "samples": SAMPLES_SCHEMA,
    "histograms": HISTOGRAMS_SCHEMA,
    "exemplars": EXEMPLARS_SCHEMA,
    "metadata": METADATA_SCHEMA,
    "starts": STARTS_SCHEMA,
}
""":class:`DecodedWrite` attribute -> schema. The store table names are ``series``,
``samples``, ``histogram_samples``, ``exemplars`` and ``metric_metadata``."""

SERIES_ID_SQL = (
    "reinterpretAsUUID(MD5(concat(toString(length(metric_name)), ':', metric_name, "
    "arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, "
    "toString(length(kv.2)), ':', kv.2), arraySort(kv -> kv.1, "
    "arrayZip(mapKeys(labels), mapValues(labels))))))))"
)
"""ClickHouse expression of a series' id from its ``metric_name`` and ``labels``."""

_METRIC_TYPES = (
    "unknown",
    "counter",
    "gauge",
    "histogram",
    "gaugehistogram",
    "summary",
    "info",
    "stateset",
)
_RESET_HINTS = ("unknown", "yes", "no", "gauge")
try:  # CPython's own MD5: for keys this short, several times faster than OpenSSL's
    from _md5 import md5 as _md5
except ImportError:  # pragma: no cover - interpreters built without it
    _md5 = hashlib.md5

_UUID_ORDER = np.array([7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8])
_NAME = "__name__"


@dataclass(frozen=True)
class DecodedWrite:
    """One decoded write, as tables ready for ``store.insert_arrow``.

    ``*_written`` are the exact numbers a receiver reports in the
    ``X-Prometheus-Remote-Write-{Samples,Histograms,Exemplars}-Written`` headers
    once the tables are stored.
    """

    series: pa.Table
    """``series``: one row per distinct series of the write."""
    samples: pa.Table
    """``samples``: float samples."""
    histograms: pa.Table
    """``histogram_samples``: native histogram samples, bucket counts absolute."""
    exemplars: pa.Table
    """``exemplars``."""
    metadata: pa.Table
    """``metric_metadata``: TYPE, HELP and UNIT per metric family."""
    samples_written: int
    histograms_written: int
    exemplars_written: int
    starts: pa.Table = dataclass_field(default_factory=STARTS_SCHEMA.empty_table)
    """``sample_starts``: each distinct (series, start timestamp) of the float samples
    (2.0 only; a start timestamp changes only when a counter resets)."""

    @property
    def nbytes(self) -> int:
        """Bytes of Arrow memory the tables hold."""
        return sum(
            t.nbytes
            for t in (
                self.series,
                self.samples,
                self.histograms,
                self.exemplars,
                self.metadata,
                self.starts,
            )
        )


# --- the series id ------------------------------------------------------------------------


def series_key(metric_name: str, labels: Mapping[str, str]) -> bytes:
    """The bytes hashed into a series id (see the module docstring)."""
    parts = [metric_name]
    for name in sorted(k for k in labels if k != _NAME):
        parts += (name, labels[name])
    out = bytearray()
    for part in parts:
        encoded = part.encode()
        out += b"%d:%b" % (len(encoded), encoded)
    return bytes(out)


def series_id(metric_name: str, labels: Mapping[str, str]) -> str:
    """A series' id as ClickHouse prints the UUID."""
    digest = hashlib.md5(series_key(metric_name, labels), usedforsecurity=False).digest()
    raw = digest[7::-1] + digest[15:7:-1]
    return f"{raw[:4].hex()}-{raw[4:6].hex()}-{raw[6:8].hex()}-{raw[8:10].hex()}-{raw[10:].hex()}"


# --- what both decoders produce before validation -----------------------------------------


@dataclass
class _Parsed:
    """A request as columns, before validation; every row carries its series index."""

    n: int
    label_owner: np.ndarray
    label_names: pa.Array
    label_values: pa.Array
    sample_owner: np.ndarray
    sample_timestamps: np.ndarray
    sample_values: np.ndarray
    histograms: list[tuple[int, dict[str, Any]]]
    exemplars: list[tuple[int, int, float, list[tuple[str, str]]]]
    metadata: pa.Table
    """``owner`` (series index, or -1), ``metric_family_name`` (when no owner: 1.0),
    ``type``, ``unit``, ``help``; the last row of a family wins."""
    start_owner: np.ndarray = dataclass_field(default_factory=lambda: np.zeros(0, np.int64))
    start_ms: np.ndarray = dataclass_field(default_factory=lambda: np.zeros(0, np.int64))
    """Float samples' start timestamps (2.0), with the series index of each."""


def _corrupt(message: str, exc: Exception) -> IngestError:
    return IngestError(f"the body is not a valid {message} protobuf message: {exc}")


def _parse(view: Any, data: bytes, message: str) -> Any:
    try:
        return view.FromString(data)
    except DecodeError as exc:
        raise _corrupt(message, exc) from exc


def _strings(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    data, offsets = gather(buf, start, length)
    return pa.Array.from_buffers(
        pa.large_string(), len(length), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _per_owner(owner: np.ndarray, amount: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.int64)
    out[owner] = amount
    return out


def _counts(data: bytes, view: Any, split: Any, message: str) -> np.ndarray:
    """Per series, how many elements each of its fields holds (``[series, field]``)."""
    counted = _parse(view, data, message)
    counted.DiscardUnknownFields()
    return proto.element_counts(counted.SerializeToString(), split, 4, first=True)


# --- 1.0 ----------------------------------------------------------------------------------


def decode_v1(data: bytes) -> DecodedWrite:
    """Decode a ``prometheus.WriteRequest`` (Remote-Write 1.0), already decompressed."""
    message = "prometheus.WriteRequest"
    columns = _parse(proto.V1_COLUMNS.WriteRequest, data, message)
    totals = _parse(proto.V1_TOTALS.WriteRequest, data, message)
    n = len(columns.timeseries)
    all_labels, all_samples = len(totals.timeseries.labels), len(totals.timeseries.samples)
    rich = len(totals.timeseries.exemplars) + len(totals.timeseries.histograms) > 0
    has_metadata = len(totals.metadata) > 0
    columns.DiscardUnknownFields()
    records = proto.split_records(
        columns.SerializeToString(), proto.V1_SPLIT.WriteRequest, first=True
    )
    buf = records.buf
    top = scan(records)

    labels = top.only(1)
    inner = scan(Records(buf, labels.start, labels.length))
    names, values = inner.only(1), inner.only(2)
    name_owner = labels.owner[names.owner]
    value_owner = labels.owner[values.owner]
    # One pass over the buffer for names and values alike, then split them.
    strings = _strings(buf, inner.start, inner.length)
    label_names = strings.filter(pa.array(inner.number == 1))
    label_values = strings.filter(pa.array(inner.number == 2))
    n_names = np.bincount(name_owner, minlength=n)
    n_label_values = np.bincount(value_owner, minlength=n)

    samples = top.only(2)
    inner = scan(Records(buf, samples.start, samples.length))
    doubles, stamps = inner.only(1), inner.only(2)
    sample_values = packed_doubles(doubles, buf)
    timestamps, per_field = packed_varints(stamps, buf)
    sample_timestamps = timestamps.view(np.int64)
    n_values = _per_owner(samples.owner[doubles.owner], doubles.length // 8, n)
    n_stamps = _per_owner(samples.owner[stamps.owner], per_field, n)

    # Columns are never longer than the elements they come from, so when the totals
    # agree every series' columns are complete: the common case needs no counts.
    # Otherwise a label with an empty name or value, or a sample with a zero
    # timestamp, left a field off the wire: count each series' elements.
    if (
        rich
        or n_names.sum() != all_labels
        or n_label_values.sum() != all_labels
        or n_stamps.sum() != all_samples
    ):
        counts = _counts(data, proto.V1_COUNTS.WriteRequest, proto.V1_SPLIT.WriteRequest, message)
    else:
        counts = np.zeros((n, 5), np.int64)
        counts[:, 1], counts[:, 2] = n_names, n_stamps
    redo_labels = np.flatnonzero((n_names != counts[:, 1]) | (n_label_values != counts[:, 1]))
    redo_samples = np.flatnonzero((n_values != counts[:, 2]) | (n_stamps != counts[:, 2]))

    full = None
    if redo_labels.size or counts[:, 3:].any() or has_metadata:
        full = _parse(proto.V1.WriteRequest, data, message)

    label_owner = name_owner
    if redo_labels.size:
        keep_names = ~np.isin(name_owner, redo_labels)
        keep_values = ~np.isin(value_owner, redo_labels)
        slow_owner, slow_names, slow_values = [], [], []
        for i in redo_labels.tolist():
            for label in full.timeseries[i].labels:
                slow_owner.append(i)
                slow_names.append(label.name)
                slow_values.append(label.value)
        label_owner = np.concatenate((name_owner[keep_names], np.asarray(slow_owner, np.int64)))
        label_names = pa.concat_arrays(
            [label_names.filter(keep_names), pa.array(slow_names, pa.large_string())]
        )
        label_values = pa.concat_arrays(
            [label_values.filter(keep_values), pa.array(slow_values, pa.large_string())]
        )

    if redo_samples.size:  # zero values or timestamps were left off the wire
        sample_owner, sample_timestamps, sample_values = _redo_samples(
            n,
            n_values,
            n_stamps,
            sample_values,
            sample_timestamps,
            redo_samples,
            proto.V1_RAW.WriteRequest.FromString(data),
            proto.V1.Sample,
        )
    else:
        sample_owner = np.repeat(np.arange(n), n_stamps)

    histograms: list[tuple[int, dict[str, Any]]] = []
    exemplars: list[tuple[int, int, float, list[tuple[str, str]]]] = []
    if counts[:, 3:].any():
        for i in np.flatnonzero(counts[:, 3:].any(axis=1)).tolist():
            series = full.timeseries[i]
            for j, h in enumerate(series.histograms):
                histograms.append((i, _histogram(h, f"series {i}, histogram {j}", start=None)))
            for e in series.exemplars:
                pairs = [(label.name, label.value) for label in e.labels]
                exemplars.append((i, e.timestamp, e.value, pairs))

    rows: list[tuple[str, str, str, str]] = []
    if has_metadata:
        for k, m in enumerate(full.metadata):
            if not m.metric_family_name:
                raise IngestError(f"metadata {k}: empty metric_family_name")
            rows.append((m.metric_family_name, _metric_type(m.type), m.unit, m.help))
    metadata = pa.table(
        {
            "owner": pa.array([-1] * len(rows), pa.int64()),
            **{
                name: pa.array([row[k] for row in rows], pa.string())
                for k, name in enumerate(("metric_family_name", "type", "unit", "help"))
            },
        }
    )

    return _assemble(
        _Parsed(
            n,
            label_owner,
            label_names,
            label_values,
            sample_owner,
            sample_timestamps,
            sample_values,
            histograms,
            exemplars,
            metadata,
        )
    )


def _redo_samples(
    n: int,
    n_values: np.ndarray,
    n_stamps: np.ndarray,
    values: np.ndarray,
    stamps: np.ndarray,
    redo: np.ndarray,
    raw: Any,
    sample_class: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns of every series, with series ``redo`` read from each sample's own bytes."""
    ok = np.ones(n, bool)
    ok[redo] = False
    value_owner = np.repeat(np.arange(n), n_values)
    stamp_owner = np.repeat(np.arange(n), n_stamps)
    keep_values, keep_stamps = ok[value_owner], ok[stamp_owner]
    raws: list[bytes] = []
    slow_counts = []
    for i in redo.tolist():
        samples = raw.timeseries[i].samples
        raws.extend(samples)
        slow_counts.append(len(samples))
    slow_values, slow_stamps = proto.read_samples(raws, sample_class)
    owner = np.concatenate((stamp_owner[keep_stamps], np.repeat(redo, slow_counts)))
    order = np.argsort(owner, kind="stable")
    merged_stamps = np.concatenate((stamps[keep_stamps], slow_stamps))
    merged_values = np.concatenate((values[keep_values], slow_values))
    return owner[order], merged_stamps[order], merged_values[order]


def _metric_type(number: int) -> str:
    return _METRIC_TYPES[number] if 0 <= number < len(_METRIC_TYPES) else "unknown"


def _histogram(h: Any, where: str, start: int | None) -> dict[str, Any]:
    """One native histogram as a row; integer bucket deltas become absolute counts."""
    kind = h.WhichOneof("count")
    row: dict[str, Any] = {
        "timestamp": h.timestamp,
        "start_timestamp": start or None,
        "count": float(h.count_float if kind == "count_float" else h.count_int),
        "sum": h.sum,
        "schema": h.schema,
        "zero_threshold": h.zero_threshold,
        "zero_count": float(
            h.zero_count_float
            if h.WhichOneof("zero_count") == "zero_count_float"
            else h.zero_count_int
        ),
        "reset_hint": _RESET_HINTS[h.reset_hint] if 0 <= h.reset_hint < 4 else "unknown",
        "custom_values": list(h.custom_values),
    }
    for side in ("positive", "negative"):
        spans = getattr(h, f"{side}_spans")
        offsets = [s.offset for s in spans]
        lengths = [s.length for s in spans]
        deltas = getattr(h, f"{side}_deltas")
        counts = getattr(h, f"{side}_counts")
        if len(deltas) and len(counts):
            raise IngestError(f"{where}: both {side}_deltas and {side}_counts are set")
        buckets = sum(lengths)
        given, name = (len(counts), "counts") if len(counts) else (len(deltas), "deltas")
        if given != buckets:
            raise IngestError(
                f"{where}: {side}_spans cover {buckets} buckets but {given} {side}_{name} are given"
            )
        if len(counts):
            absolute = np.array(counts, np.float64)
        else:
            absolute = np.cumsum(np.array(deltas, np.int64)).astype(np.float64)
        row[f"{side}_span_offsets"] = offsets
        row[f"{side}_span_lengths"] = lengths
        row[f"{side}_counts"] = absolute
    return row


# --- 2.0 ----------------------------------------------------------------------------------


def decode_v2(data: bytes) -> DecodedWrite:
    """Decode an ``io.prometheus.write.v2.Request`` (Remote-Write 2.0), already decompressed.

    Float samples' ``start_timestamp`` goes to ``starts`` (one row per distinct value of a
    series, see ``0005_sample_starts.sql``); histograms keep theirs on each row.
    """
    message = "io.prometheus.write.v2.Request"
    columns = _parse(proto.V2_COLUMNS.Request, data, message)
    totals = _parse(proto.V2_TOTALS.Request, data, message).timeseries
    n = len(columns.timeseries)
    symbols = list(columns.symbols)
    if symbols and symbols[0] != "":
        raise IngestError(f"symbols[0] must be the empty string, not {symbols[0]!r}")
    table = pa.array(symbols, pa.string())
    all_samples = len(totals.samples)
    rich = len(totals.histograms) + len(totals.exemplars) > 0
    columns.DiscardUnknownFields()
    split = proto.V2_SPLIT.Request
    records = proto.split_records(columns.SerializeToString(), split, first=False)
    buf = records.buf
    top = scan(records)

    refs_fields = top.only(1)
    refs, per_field = packed_varints(refs_fields, buf)
    n_refs = _per_owner(refs_fields.owner, per_field, n)
    odd = np.flatnonzero(n_refs % 2)
    if odd.size:
        raise IngestError(f"series {odd[0]}: odd number of labels_refs ({n_refs[odd[0]]})")
    ref_owner = np.repeat(np.arange(n), n_refs)
    bad = np.flatnonzero(refs >= len(symbols))
    if bad.size:
        k = bad[0]
        i = ref_owner[k]
        position = k - (np.cumsum(n_refs) - n_refs)[i]
        raise IngestError(
            f"series {i}: labels_refs[{position}] = {refs[k]} is out of range "
            f"({len(symbols)} symbols)"
        )
    refs = refs.astype(np.int64)
    label_owner = ref_owner[0::2]
    label_names = table.take(pa.array(refs[0::2]))
    label_values = table.take(pa.array(refs[1::2]))

    samples = top.only(2)
    inner = scan(Records(buf, samples.start, samples.length))
    doubles, stamps, starts = inner.only(1), inner.only(2), inner.only(3)
    sample_values = packed_doubles(doubles, buf)
    timestamps, per_field = packed_varints(stamps, buf)
    # Start timestamps are kept per series, not per sample: absent (0) ones are left off
    # the wire, so only their values and owners matter, not their positions.
    start_ms, per_start = packed_varints(starts, buf)
    start_owner = np.repeat(samples.owner[starts.owner], per_start)
    n_values = _per_owner(samples.owner[doubles.owner], doubles.length // 8, n)
    n_stamps = _per_owner(samples.owner[stamps.owner], per_field, n)
    if rich or n_stamps.sum() != all_samples:  # see decode_v1
        counts = _counts(data, proto.V2_COUNTS.Request, split, message)
    else:
        counts = np.zeros((n, 5), np.int64)
        counts[:, 2] = n_stamps
    both = np.flatnonzero((counts[:, 2] > 0) & (counts[:, 3] > 0))
    if both.size:
        raise IngestError(
            f"series {both[0]}: has both samples and histograms; 2.0 requires a "
            "separate series for each"
        )
    redo = np.flatnonzero((n_values != counts[:, 2]) | (n_stamps != counts[:, 2]))

    full = None
    if counts[:, 3:].any():
        full = _parse(proto.V2.Request, data, message)
    if redo.size:
        sample_owner, sample_timestamps, sample_values = _redo_samples(
            n,
            n_values,
            n_stamps,
            sample_values,
            timestamps.view(np.int64),
            redo,
            proto.V2_RAW.Request.FromString(data),
            proto.V2.Sample,
        )
    else:
        sample_owner = np.repeat(np.arange(n), n_stamps)
        sample_timestamps = timestamps.view(np.int64)

    metadata = _v2_metadata(top.only(5), buf, n, table)

    histograms: list[tuple[int, dict[str, Any]]] = []
    exemplars: list[tuple[int, int, float, list[tuple[str, str]]]] = []
    if counts[:, 3:].any():
        for i in np.flatnonzero(counts[:, 3:].any(axis=1)).tolist():
            series = full.timeseries[i]
            for j, h in enumerate(series.histograms):
                where = f"series {i}, histogram {j}"
                histograms.append((i, _histogram(h, where, start=h.start_timestamp)))
            for j, e in enumerate(series.exemplars):
                where = f"series {i}, exemplar {j}"
                if e.timestamp == 0:
                    raise IngestError(f"{where}: no timestamp (2.0 requires one)")
                exemplars.append((i, e.timestamp, e.value, _pairs(e.labels_refs, symbols, where)))

    return _assemble(
        _Parsed(
            n,
            label_owner,
            label_names,
            label_values,
            sample_owner,
            sample_timestamps,
            sample_values,
            histograms,
            exemplars,
            metadata,
            start_owner,
            start_ms.view(np.int64),
        )
    )


def _v2_metadata(meta: proto.Fields, buf: np.ndarray, n: int, symbols: pa.Array) -> pa.Table:
    """Each series' TYPE, HELP and UNIT (when it gives any), refs checked and resolved."""
    fields = scan(Records(buf, meta.start, meta.length))
    kind, help_ref, unit_ref = (
        _per_owner(meta.owner[fields.only(f).owner], fields.only(f).value, n) for f in (1, 3, 4)
    )
    for name, refs in (("help_ref", help_ref), ("unit_ref", unit_ref)):
        bad = np.flatnonzero(refs >= len(symbols))
        if bad.size:
            raise IngestError(
                f"series {bad[0]}: metadata {name} = {refs[bad[0]]} is out of range "
                f"({len(symbols)} symbols)"
            )
    given = np.flatnonzero((kind > 0) | (help_ref > 0) | (unit_ref > 0))
    names = np.array(_METRIC_TYPES, object)
    types = np.where(kind[given] < len(_METRIC_TYPES), kind[given], 0)
    return pa.table(
        {
            "owner": pa.array(given, pa.int64()),
            "metric_family_name": pa.nulls(len(given), pa.string()),
            "type": pa.array(names[types], pa.string()),
            "unit": symbols.take(pa.array(unit_ref[given])),
            "help": symbols.take(pa.array(help_ref[given])),
        }
    )


def _pairs(refs: Iterable[int], symbols: list[str], where: str) -> list[tuple[str, str]]:
    refs = list(refs)
    if len(refs) % 2:
        raise IngestError(f"{where}: odd number of labels_refs ({len(refs)})")
    for k, ref in enumerate(refs):
        if ref >= len(symbols):
            raise IngestError(
                f"{where}: labels_refs[{k}] = {ref} is out of range ({len(symbols)} symbols)"
            )
    return [(symbols[refs[k]], symbols[refs[k + 1]]) for k in range(0, len(refs), 2)]


# --- validation and tables ----------------------------------------------------------------


def _assemble(p: _Parsed) -> DecodedWrite:
    n = p.n
    owner, names, values = p.label_owner, p.label_names, p.label_values
    keep = pc.greater(pc.binary_length(values), 0)
    if not pc.all(keep).as_py() and len(values):
        owner = owner[np.asarray(keep)]
        names, values = names.filter(keep), values.filter(keep)
    empty = np.flatnonzero(np.asarray(pc.equal(pc.binary_length(names), 0)))
    if empty.size:
        k = empty[0]
        raise IngestError(f"series {owner[k]}: empty label name (with value {values[k].as_py()!r})")
    if not _sorted(owner, names):
        order = pc.sort_indices(
            pa.table({"o": owner, "n": names}), sort_keys=[("o", "ascending"), ("n", "ascending")]
        )
        owner, names, values = owner[np.asarray(order)], names.take(order), values.take(order)
    if len(names) > 1:
        same = (owner[1:] == owner[:-1]) & np.asarray(pc.equal(names[1:], names[:-1]))
        if same.any():
            k = int(np.flatnonzero(same)[0])
            raise IngestError(f"series {owner[k]}: duplicate label name {names[k].as_py()!r}")
    is_name = np.asarray(pc.equal(names, _NAME), bool) if len(names) else np.zeros(0, bool)
    has_name = np.bincount(owner[is_name], minlength=n)
    missing = np.flatnonzero(has_name == 0)
    if missing.size:
        i = missing[0]
        rows = owner == i
        shown = dict(
            zip(names.filter(rows).to_pylist(), values.filter(rows).to_pylist(), strict=True)
        )
        raise IngestError(f"series {i}: no {_NAME} label (labels: {shown})")
    metric = values.filter(pa.array(is_name)).cast(pa.string())
    rest = ~is_name
    label_owner = owner[rest]
    keys = names.filter(pa.array(rest)).cast(pa.string())
    vals = values.filter(pa.array(rest)).cast(pa.string())
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(label_owner, minlength=n), out=offsets[1:])
    label_maps = pa.MapArray.from_arrays(pa.array(offsets), keys, vals, type=_LABELS)
    ids = _ids(metric, keys, vals, offsets)

    samples = pa.table(
        {
            "id": _uuid(ids, p.sample_owner),
            "timestamp": pa.array(p.sample_timestamps, pa.int64()).cast(_TS),
            "value": pa.array(p.sample_values, pa.float64()),
        },
        schema=SAMPLES_SCHEMA,
    )
    starts = _starts_table(ids, p.start_owner, p.start_ms)
    histograms = _histogram_table(ids, p.histograms)
    exemplars = _exemplar_table(ids, p.exemplars)
    series = _series_table(n, ids, metric, label_maps, p)
    metadata = _metadata_table(metric, p.metadata)
    return DecodedWrite(
        series=series,
        samples=samples,
        histograms=histograms,
        exemplars=exemplars,
        metadata=metadata,
        samples_written=samples.num_rows,
        histograms_written=histograms.num_rows,
        exemplars_written=exemplars.num_rows,
        starts=starts,
    )


def _starts_table(ids: np.ndarray, owner: np.ndarray, start_ms: np.ndarray) -> pa.Table:
    """Each distinct (series, start timestamp) pair."""
    if not len(owner):
        return STARTS_SCHEMA.empty_table()
    pairs = np.unique(np.stack([owner.astype(np.int64), start_ms.astype(np.int64)], axis=1), axis=0)
    return pa.table(
        {
            "id": _uuid(ids, pairs[:, 0]),
            "start_timestamp": pa.array(pairs[:, 1], pa.int64()).cast(_TS),
        },
        schema=STARTS_SCHEMA,
    )


def _sorted(owner: np.ndarray, names: pa.Array) -> bool:
    """Labels already in series order and by name within each series (the usual case)."""
    if len(owner) < 2:
        return True
    step = np.diff(owner)
    if (step < 0).any():
        return False
    descending = np.asarray(pc.less(names[1:], names[:-1]), bool)
    return not (descending & (step == 0)).any()


def _ids(metric: pa.Array, keys: pa.Array, values: pa.Array, offsets: np.ndarray) -> np.ndarray:
    """The id of every series as ``(n, 16)`` bytes in ClickHouse's UUID layout."""

    def prefixed(strings: pa.Array) -> list[pa.Array]:
        return [pc.cast(pc.binary_length(strings), pa.string()), ":", strings]

    pieces = pc.binary_join_element_wise(*prefixed(keys), *prefixed(values), "")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pieces), "")
    key = pc.binary_join_element_wise(*prefixed(metric), pc.fill_null(joined, ""), "")
    digests = b"".join([_md5(k).digest() for k in key.cast(pa.binary()).to_pylist()])
    return np.frombuffer(digests, np.uint8).reshape(-1, 16)[:, _UUID_ORDER]


def _uuid(ids: np.ndarray, rows: np.ndarray | list[int]) -> pa.Array:
    chosen = np.ascontiguousarray(ids[np.asarray(rows, np.int64)])
    storage = pa.Array.from_buffers(
        pa.binary(16), len(chosen), [None, pa.py_buffer(chosen.tobytes())]
    )
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _series_table(
    n: int, ids: np.ndarray, metric: pa.Array, label_maps: pa.Array, p: _Parsed
) -> pa.Table:
    """One row per distinct id among the series that carry data, first seen first."""
    low = np.full(n, np.iinfo(np.int64).max)
    high = np.full(n, np.iinfo(np.int64).min)
    if len(p.sample_owner):
        np.minimum.at(low, p.sample_owner, p.sample_timestamps)
        np.maximum.at(high, p.sample_owner, p.sample_timestamps)
    for i, row in p.histograms:
        low[i] = min(low[i], row["timestamp"])
        high[i] = max(high[i], row["timestamp"])
    sampled = low <= high  # series with only exemplars take their times from those
    for i, timestamp, _, _ in p.exemplars:
        if not sampled[i]:
            low[i] = min(low[i], timestamp)
            high[i] = max(high[i], timestamp)
    carrying = np.flatnonzero(low <= high)
    # Dictionary-encoding the ids finds the distinct ones in order of first appearance.
    encoded = _uuid(ids, carrying).storage.dictionary_encode()
    inverse = np.asarray(encoded.indices)
    groups = len(encoded.dictionary)
    first = np.full(groups, len(carrying), np.int64)
    np.minimum.at(first, inverse, np.arange(len(carrying)))
    group_low = np.full(groups, np.iinfo(np.int64).max)
    group_high = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(group_low, inverse, low[carrying])
    np.maximum.at(group_high, inverse, high[carrying])
    rows = carrying[first]
    return pa.table(
        {
            "id": _uuid(ids, rows),
            "metric_name": metric.take(pa.array(rows, pa.int64())),
            "labels": label_maps.take(pa.array(rows, pa.int64())),
            "min_time": pa.array(group_low, pa.int64()).cast(_TS),
            "max_time": pa.array(group_high, pa.int64()).cast(_TS),
        },
        schema=SERIES_SCHEMA,
    )


def _histogram_table(ids: np.ndarray, rows: list[tuple[int, dict[str, Any]]]) -> pa.Table:
    columns: dict[str, Any] = {"id": _uuid(ids, [i for i, _ in rows])}
    for field in HISTOGRAMS_SCHEMA:
        if field.name == "id":
            continue
        column = [row[field.name] for _, row in rows]
        if field.name in ("timestamp", "start_timestamp"):
            columns[field.name] = pa.array(column, pa.int64()).cast(_TS)
        elif pa.types.is_list(field.type):
            columns[field.name] = pa.array([list(c) for c in column], field.type)
        else:
            columns[field.name] = pa.array(column, field.type)
    return pa.table(columns, schema=HISTOGRAMS_SCHEMA)


def _exemplar_table(
    ids: np.ndarray, rows: list[tuple[int, int, float, list[tuple[str, str]]]]
) -> pa.Table:
    labels = []
    for k, (i, _, _, pairs) in enumerate(rows):
        kept = sorted((name, value) for name, value in pairs if value)
        where = f"series {i}, exemplar {k}"
        for (name, _), (after, _) in itertools.pairwise(kept):
            if name == after:
                raise IngestError(f"{where}: duplicate label name {name!r}")
        if kept and kept[0][0] == "":
            raise IngestError(f"{where}: empty label name")
        labels.append(kept)
    return pa.table(
        {
            "id": _uuid(ids, [i for i, _, _, _ in rows]),
            "timestamp": pa.array([r[1] for r in rows], pa.int64()).cast(_TS),
            "value": pa.array([r[2] for r in rows], pa.float64()),
            "labels": pa.array(labels, _LABELS),
        },
        schema=EXEMPLARS_SCHEMA,
    )


def _metadata_table(metric: pa.Array, rows: pa.Table) -> pa.Table:
    """One row per metric family; the last one a write gives wins."""
    owner = np.asarray(rows.column("owner"))
    family = rows.column("metric_family_name").combine_chunks()
    if (owner >= 0).any():  # 2.0: the family is the series' metric name
        by_series = metric.take(pa.array(np.maximum(owner, 0)))
        family = pc.if_else(pa.array(owner >= 0), by_series, family)
    encoded = family.dictionary_encode()
    last = np.full(len(encoded.dictionary), -1, np.int64)
    np.maximum.at(last, np.asarray(encoded.indices), np.arange(len(owner)))
    take = pa.array(last)
    now = int(datetime.now(UTC).timestamp() * 1000)
    return pa.table(
        {
            "metric_family_name": encoded.dictionary.cast(pa.string()),
            "type": rows.column("type").take(take),
            "unit": rows.column("unit").take(take),
            "help": rows.column("help").take(take),
            "updated_at": pa.array(np.full(len(last), now), pa.int64()).cast(_TS),
        },
        schema=METADATA_SCHEMA,
    )
