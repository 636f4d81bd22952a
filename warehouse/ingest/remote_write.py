"""Remote-write decoding: snappy-decompressed protobuf bytes in, Arrow tables out.

:func:`decode_v1` reads ``prometheus.WriteRequest`` (Remote-Write 1.0) and
:func:`decode_v2` reads ``io.prometheus.write.v2.Request`` (2.0-rc.4). Both return a
:class:`DecodedWrite` whose tables have the columns of the store tables ``series``,
``samples``, ``histogram_samples``, ``exemplars`` and ``metric_metadata``, so each can
be passed as it is to ``store.insert_arrow(name, table)``. They are pure functions:
no I/O, no state. An invalid write raises :class:`~warehouse.errors.IngestError`
(HTTP 400) naming the problem and where it is, before anything is returned.

The tables, the series id and the checks every write passes are defined in
:mod:`warehouse.ingest.remote_write_tables`.

How it decodes
--------------
A 1.0 write of float samples (the common one) is decoded in C when the extension
``_v1_fast`` is built (see ``hatch_build.py``): one pass over the bytes, without the
GIL, straight into the columns; :func:`decode_v1_batch` decodes a whole flush of
bodies in one call. Everything else, and every error message, is Python's:

The protobuf runtime (upb) parses the body through *views* of the same wire format
(see :mod:`warehouse.wire.prometheus`): one where each series' labels and samples merge
into columns, and one that only counts elements. numpy reads the runtime's
re-encoding of the columns for every series at once. Proto3 leaves zero values off
the wire, so a series with a zero value or timestamp has shorter columns than
samples; the counts show which, and those series are read again from each sample's
own bytes. The full messages are parsed only when the write holds histograms,
exemplars or metadata, or labels with an empty name or value. Python does work per
series (hashing its id) and per histogram or exemplar, but not per float sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from warehouse.errors import IngestError, NotBuilt
from warehouse.ingest.remote_write_tables import (
    EXEMPLARS_SCHEMA,
    HISTOGRAMS_SCHEMA,
    METADATA_SCHEMA,
    SAMPLES_SCHEMA,
    SERIES_ID_SQL,
    SERIES_SCHEMA,
    TABLES,
    DecodedWrite,
    Parsed,
    assemble,
    from_columns,
    series_id,
    series_key,
)
from warehouse.ingest.request_pivot import CSpec, Pivot, from_c_columns
from warehouse.wire import prometheus as proto
from warehouse.wire.prometheus import Records, gather, packed_doubles, packed_varints, scan

try:  # the C decoder of the common 1.0 write (see hatch_build.py); optional
    import warehouse.ingest._v1_fast as _v1_fast
except ImportError:  # pragma: no cover - built without a C compiler
    _v1_fast = None

if TYPE_CHECKING:
    from warehouse.ingest._v1_fast import KnownSeries

FAST_V1 = _v1_fast is not None
"""Whether the C decoder of remote write 1.0 is built (:func:`decode_v1_batch` needs it)."""

__all__ = [
    "EXEMPLARS_SCHEMA",
    "FAST_V1",
    "HISTOGRAMS_SCHEMA",
    "METADATA_SCHEMA",
    "SAMPLES_SCHEMA",
    "SERIES_ID_SQL",
    "SERIES_SCHEMA",
    "TABLES",
    "DecodedWrite",
    "decode_v1",
    "decode_v1_batch",
    "decode_v2",
    "series_id",
    "series_key",
]

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
_MIN_INT64 = -(2**63)
_RESET_HINTS = ("unknown", "yes", "no", "gauge")


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


@overload
def decode_v1_batch(
    bodies: Sequence[bytes],
    min_timestamp: int,
    limits: tuple[int, int, int, int] = ...,
    requests: None = None,
    max_timestamp: int = ...,
    tenant: str | None = None,
    known: KnownSeries | None = None,
) -> tuple[DecodedWrite, None, list[int]]: ...


@overload
def decode_v1_batch(
    bodies: Sequence[bytes],
    min_timestamp: int,
    limits: tuple[int, int, int, int],
    requests: CSpec,
    max_timestamp: int = ...,
    tenant: str | None = None,
    known: KnownSeries | None = None,
) -> tuple[DecodedWrite, Pivot, list[int]]: ...


def decode_v1_batch(
    bodies: Sequence[bytes],
    min_timestamp: int,
    limits: tuple[int, int, int, int] = (0, 0, 0, 0),
    requests: CSpec | None = None,
    max_timestamp: int = 2**63 - 1,
    tenant: str | None = None,
    known: KnownSeries | None = None,
) -> tuple[DecodedWrite, Pivot | None, list[int]]:
    """Decode many 1.0 bodies in C as one write; its request parts; the bodies left out.

    A body is left out whole when it holds anything but float samples, anything
    :func:`decode_v1` would refuse, a sample (or a per-request part) outside
    ``[min_timestamp, max_timestamp]`` (Unix ms: :mod:`~warehouse.ingest.time_window`), or
    more than ``limits`` allow (:meth:`WriteLimits.as_tuple
    <warehouse.ingest.limits.WriteLimits.as_tuple>`): decode it alone with
    :func:`decode_v1`. With ``requests`` (:func:`~warehouse.ingest.request_pivot.c_spec`)
    per-request samples are pivoted into a :class:`~warehouse.ingest.request_pivot.Pivot`
    as :func:`~warehouse.ingest.request_pivot.split_requests` would. With ``tenant``,
    every series is that tenant's, as :func:`~warehouse.ingest.remote_write_tables.with_tenant`
    makes it (in C, as each series is hashed). With ``known`` (a
    :class:`~warehouse.ingest.series_cache.WrittenSeries`' table), series it holds are not
    read again and the ``series`` table holds only the rows still to write. Needs the C
    decoder (:data:`FAST_V1`).
    """
    if _v1_fast is None:
        raise NotBuilt("the C decoder of remote write 1.0 is not built")
    columns, left_out, parts = _v1_fast.columns(
        bodies,
        min_timestamp,
        limits,
        requests,
        max_timestamp,
        tenant.encode() if tenant else None,
        known,
    )
    decoded = from_columns(columns)
    if parts is None:
        return decoded, None, left_out
    pivot = from_c_columns(parts)
    assert requests is not None  # the C decoder pivots parts only with a spec
    keep_series = requests[2]
    if not keep_series:  # the parts' samples are written, as parts
        decoded = replace(decoded, samples_written=decoded.samples_written + pivot.taken)
    return decoded, pivot, left_out


def decode_v1(data: bytes) -> DecodedWrite:
    """Decode a ``prometheus.WriteRequest`` (Remote-Write 1.0), already decompressed."""
    if _v1_fast is not None:
        columns, refused, _ = _v1_fast.columns([data], _MIN_INT64)
        if not refused:
            return from_columns(columns)
    return _decode_v1_python(data)


def _decode_v1_python(data: bytes) -> DecodedWrite:
    """:func:`decode_v1` without the C decoder: any write, and every error message."""
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
        assert full is not None  # parsed above: there are labels to redo
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
        assert full is not None  # parsed above: there are histograms or exemplars
        for i in np.flatnonzero(counts[:, 3:].any(axis=1)).tolist():
            series = full.timeseries[i]
            for j, h in enumerate(series.histograms):
                histograms.append((i, _histogram(h, f"series {i}, histogram {j}", start=None)))
            for e in series.exemplars:
                pairs = [(label.name, label.value) for label in e.labels]
                exemplars.append((i, e.timestamp, e.value, pairs))

    rows: list[tuple[str, str, str, str]] = []
    if has_metadata:
        assert full is not None  # parsed above: there is metadata
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

    return assemble(
        Parsed(
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
        assert full is not None  # parsed above: there are histograms or exemplars
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

    return assemble(
        Parsed(
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
