"""The tables of a decoded remote write: schemas, series ids, checks and assembly.

Both decoders of :mod:`warehouse.ingest.remote_write` parse a write into a
:class:`Parsed` (columns, every row carrying its series index);
:func:`assemble` checks it and builds the :class:`DecodedWrite` whose tables have the
columns of the store tables, so each can be passed as it is to
``store.insert_arrow(name, table)``.

Series id
---------
A series is identified by a 128-bit id, read as a ClickHouse UUID, made of two
64-bit hashes: the first 8 bytes of the MD5 digest of the series' *key*, and the
first 8 bytes of the MD5 digest of its *target key*. The key is the metric name
(the ``__name__`` label) followed by every other label sorted by name (byte order of
the UTF-8 encoding), each string written as ``<length>:<bytes>`` where ``<length>``
is its length in bytes in ASCII decimal; the target key is the same for the labels
that name the series' scrape target and tenant alone (:data:`TARGET_LABELS`:
``__tenant__``, ``instance``, ``job``, those the series has)::

    key        = S(metric_name) + S(name_1) + S(value_1) + ... + S(name_n) + S(value_n)
    target_key = S(name_i) + S(value_i) + ...   for name_i in TARGET_LABELS, sorted
    S(s) = str(len(utf8(s))) + ":" + utf8(s)

    e.g. {__name__="up", job="api"}  ->  key b"2:up3:job3:api", target key b"3:job3:api"

The length prefixes make each key unambiguous (no label set has another's key), and
sorting makes it independent of the order a sender lists labels in. A series with
none of the target labels has the empty target key, so all such series share one
target hash (MD5 of b"").

The id is ``reinterpretAsUUID(concat(substring(MD5(key), 1, 8),
substring(MD5(target_key), 1, 8)))`` in ClickHouse, whose UUID keeps each 8-byte half
in reversed byte order: in Python, ``uuid.UUID(bytes=s[7::-1] + t[7::-1])`` for
``s = md5(key).digest()`` and ``t = md5(target_key).digest()``. ClickHouse sorts
UUIDs by their second half first, so ``samples``' key ``(id, timestamp)`` keeps a
scrape target's series together (they share each scrape's timestamp, and ZSTD finds
one series' values in another's: docs/benchmarks.md, "Bytes per sample"), and still
finds one series by its id. The series' own 64 bits tell apart the series of one
target (the target hash is the same for all of them): two series of a target of
``n`` series share an id with probability about ``n**2 / 2**65`` (1e-8 for a million
series in one target). Before migration 0023 the id was the whole MD5 digest of the
key; its first half is the same 8 bytes. :data:`SERIES_ID_SQL` computes the id from
the ``series`` table's columns.

Labels whose value is empty are dropped before anything else, as Prometheus treats
an empty value as an absent label. ``labels`` holds the labels without ``__name__``.

Floats are kept bit for bit (NaN payloads, the staleness marker
``0x7ff0000000000002``, infinities, negative zero): float samples move as raw 8-byte
doubles from the wire to Arrow.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import IngestError
from warehouse.store.tenancy import SERIES_TENANT_LABEL

__all__ = [
    "EXEMPLARS_SCHEMA",
    "HISTOGRAMS_SCHEMA",
    "METADATA_SCHEMA",
    "SAMPLES_SCHEMA",
    "SERIES_ID_SQL",
    "SERIES_SCHEMA",
    "STARTS_SCHEMA",
    "TABLES",
    "TARGET_LABELS",
    "DecodedWrite",
    "Parsed",
    "assemble",
    "from_columns",
    "label_map_array",
    "series_id",
    "series_id_bytes",
    "series_key",
    "string_array",
    "target_key",
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

TARGET_LABELS = ("__tenant__", "instance", "job")
"""The labels whose values make a series' target key, in byte order of their names:
Prometheus's scrape target (``job``, ``instance``, which it sets on every scraped
series) and the tenant (``__tenant__``, multi-tenant mode), so a tenant's series are
never another's target's."""

_KEY_PART = "concat(toString(length(kv.1)), ':', kv.1, toString(length(kv.2)), ':', kv.2)"
_SORTED_LABELS = "arraySort(kv -> kv.1, arrayZip(mapKeys(labels), mapValues(labels)))"
SERIES_ID_SQL = (
    "reinterpretAsUUID(concat("
    "substring(MD5(concat(toString(length(metric_name)), ':', metric_name, "
    f"arrayStringConcat(arrayMap(kv -> {_KEY_PART}, {_SORTED_LABELS})))), 1, 8), "
    f"substring(MD5(arrayStringConcat(arrayMap(kv -> {_KEY_PART}, arrayFilter(kv -> kv.1 IN "
    f"({', '.join(repr(n) for n in TARGET_LABELS)}), {_SORTED_LABELS})))), 1, 8)))"
)
"""ClickHouse expression of a series' id from its ``metric_name`` and ``labels``."""

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
    """``series``: one row per distinct series of the write (from the C decoder given a
    :class:`~warehouse.ingest.series_cache.WrittenSeries`, only the rows not yet written)."""
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
    series_seen: int | None = None
    """The series of the write, when ``series`` holds only the rows it still has to write
    (the C decoder's, given a :class:`~warehouse.ingest.series_cache.WrittenSeries`)."""
    filing: tuple[bytes, ...] = ()
    """The C decoder's rows to file once committed (``WrittenSeries.remember``)."""

    @property
    def series_count(self) -> int:
        """How many series the write holds."""
        return self.series.num_rows if self.series_seen is None else self.series_seen

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
    """The bytes hashed into a series id's first half (see the module docstring)."""
    parts = [metric_name]
    for name in sorted(k for k in labels if k != _NAME):
        parts += (name, labels[name])
    return _prefixed(parts)


def target_key(labels: Mapping[str, str]) -> bytes:
    """The bytes hashed into a series id's second half: its target labels."""
    parts: list[str] = []
    for name in TARGET_LABELS:  # in byte order already
        if name in labels:
            parts += (name, labels[name])
    return _prefixed(parts)


def _prefixed(parts: list[str]) -> bytes:
    out = bytearray()
    for part in parts:
        encoded = part.encode()
        out += b"%d:%b" % (len(encoded), encoded)
    return bytes(out)


def series_id_bytes(metric_name: str, labels: Mapping[str, str]) -> bytes:
    """A series' id as the 16 bytes of its UUID (as ``uuid.UUID.bytes`` holds them)."""
    own = _md5(series_key(metric_name, labels)).digest()
    target = _md5(target_key(labels)).digest()
    return own[7::-1] + target[7::-1]  # each half as ClickHouse's reinterpretAsUUID


def series_id(metric_name: str, labels: Mapping[str, str]) -> str:
    """A series' id as ClickHouse prints the UUID."""
    raw = series_id_bytes(metric_name, labels)
    return f"{raw[:4].hex()}-{raw[4:6].hex()}-{raw[6:8].hex()}-{raw[8:10].hex()}-{raw[10:].hex()}"


TENANT_LABEL = SERIES_TENANT_LABEL
"""The label that makes a series one tenant's in multi-tenant mode (docs/security.md):
reserved, as Prometheus reserves every name starting with ``__``; the tenant reader's
row policies read it (:mod:`warehouse.store.tenancy`)."""


def with_tenant(decoded: DecodedWrite, tenant: str) -> DecodedWrite:
    """The write's series as ``tenant``'s own: ``__tenant__`` set among their labels
    (whatever a sender put there), so that their ids, hashed over every label, differ
    from another tenant's series of the same labels; every table's ids follow."""
    series = decoded.series
    if not series.num_rows:
        return decoded
    labels, ids = [], []
    for name, pairs in zip(
        series.column("metric_name").to_pylist(), series.column("labels").to_pylist(), strict=True
    ):
        tagged = {**dict(pairs), TENANT_LABEL: tenant}
        labels.append(sorted(tagged.items()))
        ids.append(series_id_bytes(name, tagged))
    old = _storage(series.column("id"))
    new = pa.array(ids, pa.binary(16))

    def renamed(table: pa.Table) -> pa.Table:
        if not table.num_rows:
            return table
        index = table.schema.get_field_index("id")
        taken = new.take(pc.index_in(_storage(table.column("id")), value_set=old))
        column = pa.ExtensionArray.from_storage(pa.uuid(), taken)
        return table.set_column(index, table.schema.field(index), column)

    series = renamed(series)
    index = series.schema.get_field_index("labels")
    series = series.set_column(
        index, series.schema.field(index), pa.array(labels, series.schema.field(index).type)
    )
    # A series whose sender set `__tenant__` may now be another series of the write (the
    # same labels once the tenant replaced it): write it once, as the C decoder does.
    # Its time span is then both rows' together.
    groups = pc.index_in(new, value_set=pc.unique(new)).to_numpy()
    _, first = np.unique(groups, return_index=True)
    if len(first) < series.num_rows:
        spans = (
            pa.table({"g": groups, "lo": series["min_time"], "hi": series["max_time"]})
            .group_by("g")
            .aggregate([("lo", "min"), ("hi", "max")])
            .sort_by("g")
        )
        kept = np.sort(first)
        series = series.take(pa.array(kept))
        of_kept = pa.array(groups[kept])
        for name, spanned in (("min_time", "lo_min"), ("max_time", "hi_max")):
            index = series.schema.get_field_index(name)
            value = spans[spanned].take(of_kept).cast(series.schema.field(index).type)
            series = series.set_column(index, series.schema.field(index), value)
    return replace(
        decoded,
        series=series,
        samples=renamed(decoded.samples),
        histograms=renamed(decoded.histograms),
        exemplars=renamed(decoded.exemplars),
        starts=renamed(decoded.starts),
    )


def _storage(column: pa.ChunkedArray) -> pa.Array:
    """The 16 bytes of each UUID of a column."""
    return (
        pa.concat_arrays([chunk.storage for chunk in column.chunks])
        if column.num_chunks
        else (pa.array([], pa.binary(16)))
    )


# --- what both decoders produce, before the checks ------------------------------------------


@dataclass
class Parsed:
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


# --- validation and tables ----------------------------------------------------------------


def assemble(p: Parsed) -> DecodedWrite:
    """Check a parsed write (label names, metric names) and build its tables."""
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
    return _tables(p, _ids(metric, keys, vals, offsets), metric, label_maps)


_V1Columns = tuple[Any, ...]
"""The first item the C decoder returns: the number of series, then its 16 buffers."""

_FILING = slice(12, 17)
"""Of the C decoder's buffers, those ``KnownSeries.remember`` takes after the series ids:
the rows' series, time ranges and keys."""


def from_columns(columns: _V1Columns) -> DecodedWrite:
    """The tables of a write the C decoder read: checked, sorted and hashed already.

    ``columns`` is what ``warehouse.ingest._v1_fast.columns`` returns (see its source).
    Its ``series`` table holds the rows the decoder gave (without a known-series table,
    every series of the write).
    """
    (n, ids, metric_offsets, metric_data, label_offsets, name_offsets, name_data,
     value_offsets, value_data, owner, timestamps, values, row_series, row_min, row_max,
     *_) = columns  # fmt: skip
    all_ids = np.frombuffer(ids, np.uint8).reshape(-1, 16)
    rows = np.frombuffer(row_series, np.int64)
    samples = _samples_table(
        all_ids,
        np.frombuffer(owner, np.int64),
        np.frombuffer(timestamps, np.int64),
        np.frombuffer(values, np.float64),
    )
    if len(rows):
        metric = string_array(len(rows), metric_offsets, metric_data)
        label_maps = label_map_array(
            len(rows), label_offsets, name_offsets, name_data, value_offsets, value_data
        )
        series = _distinct_rows(
            all_ids[rows],
            metric,
            label_maps,
            np.frombuffer(row_min, np.int64),
            np.frombuffer(row_max, np.int64),
        )
    else:
        series = _NO_SERIES
    return DecodedWrite(
        series=series,
        samples=samples,
        histograms=_NO_HISTOGRAMS,
        exemplars=_NO_EXEMPLARS,
        metadata=_NO_METADATA_ROWS,
        samples_written=samples.num_rows,
        histograms_written=0,
        exemplars_written=0,
        series_seen=n,
        filing=(ids, *columns[_FILING]),
    )


def string_array(length: int, offsets: bytes, data: bytes) -> pa.Array:
    """A string array over the C decoder's buffers: ``length + 1`` int32 offsets, data."""
    return pa.Array.from_buffers(
        pa.string(), length, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def label_map_array(
    n: int,
    offsets: bytes,
    name_offsets: bytes,
    name_data: bytes,
    value_offsets: bytes,
    value_data: bytes,
) -> pa.MapArray:
    """``n`` label maps over the C decoder's buffers: int32 offsets into the labels, and
    the labels' names and values as :func:`string_array` takes them."""
    n_labels = len(name_offsets) // 4 - 1
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)]),
        string_array(n_labels, name_offsets, name_data),
        string_array(n_labels, value_offsets, value_data),
        type=_LABELS,
    )


# Empty tables of the kinds most writes lack, built once (an empty table of nested types
# costs about 0.1 ms to build, and a flush of one body builds several).
_NO_SERIES = SERIES_SCHEMA.empty_table()
_NO_HISTOGRAMS = HISTOGRAMS_SCHEMA.empty_table()
_NO_EXEMPLARS = EXEMPLARS_SCHEMA.empty_table()
_NO_METADATA_ROWS = METADATA_SCHEMA.empty_table()
_NO_STARTS = STARTS_SCHEMA.empty_table()


def _tables(p: Parsed, ids: np.ndarray, metric: pa.Array, label_maps: pa.Array) -> DecodedWrite:
    """The write's tables, from its series' ids, metric names and label maps."""
    samples = _samples_table(ids, p.sample_owner, p.sample_timestamps, p.sample_values)
    starts = _starts_table(ids, p.start_owner, p.start_ms)
    histograms = _histogram_table(ids, p.histograms)
    exemplars = _exemplar_table(ids, p.exemplars)
    series = _series_table(p.n, ids, metric, label_maps, p)
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


def _samples_table(
    ids: np.ndarray, owner: np.ndarray, timestamps: np.ndarray, values: np.ndarray
) -> pa.Table:
    """``samples``: each float sample with its series' id (``ids[owner]``)."""
    return pa.table(
        {
            "id": _uuid(ids, owner),
            "timestamp": pa.array(timestamps, pa.int64()).cast(_TS),
            "value": pa.array(values, pa.float64()),
        },
        schema=SAMPLES_SCHEMA,
    )


def _starts_table(ids: np.ndarray, owner: np.ndarray, start_ms: np.ndarray) -> pa.Table:
    """Each distinct (series, start timestamp) pair."""
    if not len(owner):
        return _NO_STARTS
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
    own = b"".join([_md5(k).digest()[:8] for k in key.cast(pa.binary()).to_pylist()])
    # The target key: the same pieces, of the target labels alone.
    is_target = pc.is_in(keys, value_set=pa.array(TARGET_LABELS))
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    target_offsets = np.zeros(len(offsets), np.int32)
    counts = np.bincount(owner[np.asarray(is_target, bool)], minlength=len(offsets) - 1)
    np.cumsum(counts, out=target_offsets[1:])
    target_pieces = pieces.filter(is_target)
    targets = pc.binary_join(pa.ListArray.from_arrays(pa.array(target_offsets), target_pieces), "")
    digests: dict[bytes, bytes] = {}  # a write's series share few targets
    target = b"".join(
        [
            digests.get(t) or digests.setdefault(t, _md5(t).digest()[:8])
            for t in pc.fill_null(targets, "").cast(pa.binary()).to_pylist()
        ]
    )
    halves = np.concatenate(
        [
            np.frombuffer(own, np.uint8).reshape(-1, 8),
            np.frombuffer(target, np.uint8).reshape(-1, 8),
        ],
        axis=1,
    )
    return halves[:, _UUID_ORDER]


def _uuid(ids: np.ndarray, rows: np.ndarray | list[int]) -> pa.Array:
    chosen = np.ascontiguousarray(ids[np.asarray(rows, np.int64)])
    storage = pa.Array.from_buffers(
        pa.binary(16), len(chosen), [None, pa.py_buffer(chosen.tobytes())]
    )
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _series_table(
    n: int, ids: np.ndarray, metric: pa.Array, label_maps: pa.Array, p: Parsed
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
    return _distinct_rows(ids, metric, label_maps, low, high)


def _distinct_rows(
    ids: np.ndarray, metric: pa.Array, label_maps: pa.Array, low: np.ndarray, high: np.ndarray
) -> pa.Table:
    """``series`` rows: one per distinct id among the candidates that carry data (``low``
    at most ``high``), first seen first, over the time range of all of its candidates."""
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
    if not rows:  # the usual write
        return _NO_HISTOGRAMS
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
    if not rows:
        return _NO_EXEMPLARS
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
    if not rows.num_rows:
        return _NO_METADATA_ROWS
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


def series_times_of_kept(decoded: DecodedWrite) -> DecodedWrite:
    """``decoded`` with its series cut to those that still carry a sample, histogram or
    exemplar, and their first and last times taken from those: after some were dropped
    (refused as outside what the store keeps), a series row must not keep their times."""
    times = [_id_times(t) for t in (decoded.samples, decoded.histograms) if t.num_rows]
    if decoded.exemplars.num_rows:  # a series with only exemplars takes their times
        exemplars = _id_times(decoded.exemplars)
        if times:
            sampled = pa.concat_arrays([t.column("id").combine_chunks() for t in times])
            exemplars = exemplars.filter(pc.invert(pc.is_in(exemplars.column("id"), sampled)))
        times.append(exemplars)
    if not times:
        return replace(decoded, series=decoded.series.schema.empty_table())
    spans = (
        pa.concat_tables(times)
        .group_by("id")
        .aggregate([("timestamp", "min"), ("timestamp", "max")])
    )
    series = decoded.series
    found = pc.index_in(_storage(series.column("id")), spans.column("id"))
    carrying = pc.is_valid(found)
    found = found.filter(carrying)
    kept = series.filter(carrying)
    kept = kept.set_column(3, "min_time", spans.column("timestamp_min").take(found))
    kept = kept.set_column(4, "max_time", spans.column("timestamp_max").take(found))
    kept = kept.cast(SERIES_SCHEMA)
    return replace(decoded, series=kept)


def _id_times(table: pa.Table) -> pa.Table:
    """Each row's series id (its 16 bytes) and time."""
    return pa.table({"id": _storage(table.column("id")), "timestamp": table.column("timestamp")})
