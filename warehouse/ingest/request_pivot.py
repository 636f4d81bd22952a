"""Per-request metric samples as request parts: one ``request_parts`` row per request.

A sample of a mapped metric (see :mod:`warehouse.ingest.metric_mapping`) whose series
carries the request-id label is a *part* of that request, not a Prometheus series.
The parts of one request (tenant, request id) that arrive together are pivoted into
one row before they reach the store, so a write of 100 requests x 5 metrics lands as
100 rows. The store merges the rows of one request that arrive in different flushes
and seals them into ``requests`` (``migrations/*/0004_request_parts.sql``).

Two implementations give the same rows: the C decoder pivots the parts of a whole
flush while it decodes (``_v1_fast.c``, given :func:`c_spec`), and
:func:`split_requests` is the Python reference, for remote write 2.0 and every body
the C decoder leaves out. Both produce a :class:`Pivot` and share
:func:`parts_table`. Pivoting a request's parts (parts in the order they arrived):

=================  ==============================================================
``first_ts``       the earliest sample timestamp of its parts
each measure       the last part's value for it (``start_ts`` from the ``ts``
                   target, ``http_status``, latencies and token counts)
``status_rank``    the highest: 1 for a failure (the ``error`` target above 0),
                   2 when its ``error_class`` makes it a rejection
``error_class``    the last failing part's ``error_class`` label
labels             every label but ``__name__``, the request id, ``tenant`` and
                   ``error_class``, merged by name: a dimension takes the last
                   part's value, any other label (``attrs``) the greatest value
=================  ==============================================================

These are the rules by which the store merges rows of one request (``anyLast``,
``max``, ``maxMap``), so pivoting changes no sealed figure. A sample whose value is
not finite, negative, or too large for its column (Prometheus's staleness markers
among them) measures nothing and is dropped, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.metric_mapping import (
    DIMENSIONS,
    MEASURES,
    PARTS_SCHEMA,
    REJECTION_CLASSES,
    RESERVED_LABELS,
    MetricMapping,
    label_values,
)
from warehouse.ingest.remote_write_tables import DecodedWrite, label_map_array, string_array

__all__ = ["TARGETS", "CSpec", "Pivot", "c_spec", "from_c_columns", "parts_table", "split_requests"]

TARGETS = ("ts", "error", "http_status", *MEASURES)
"""What a mapped metric can fill, in the order of a :class:`Pivot`'s value columns."""

_TS = pa.timestamp("ms", tz="UTC")
_LABELS = pa.map_(pa.string(), pa.string())
_LATEST_MS = 10_413_791_999_999.0  # 2299-12-31 23:59:59.999, DateTime64's last instant
_LARGEST = {
    "ts": _LATEST_MS,
    "error": float(np.finfo(np.float64).max),
    "http_status": 65_535.0,
    **{
        name: float(
            np.finfo(kind.to_pandas_dtype()).max
            if pa.types.is_floating(kind)
            else np.iinfo(kind.to_pandas_dtype()).max
        )
        for name, kind in MEASURES.items()
    },
}
"""The largest value each target takes; a part above it measures nothing."""
_RESERVED = tuple(sorted(RESERVED_LABELS))
_ERROR = TARGETS.index("error")


@dataclass(frozen=True)
class Pivot:
    """Per-request parts pivoted: one entry per request, in order of first appearance."""

    tenant: pa.Array
    request_id: pa.Array
    first_ts: np.ndarray
    """Unix ms, int64."""
    values: np.ndarray
    """float64 ``(requests, len(TARGETS))``: each target's value, where ``present``."""
    present: np.ndarray
    """bool ``(requests, len(TARGETS))``."""
    rank: np.ndarray
    """uint8: 0 ok, 1 error, 2 rejected."""
    error_class: pa.Array
    labels: pa.MapArray
    """Merged labels, sorted by name (dimensions and attrs)."""
    taken: int
    """Samples that became parts."""
    dropped: int
    """Samples of mapped series that measured nothing (not finite, negative, too large)."""


CSpec = tuple[
    bytes,
    bytes | None,
    bool,
    tuple[tuple[bytes, int, float], ...],
    tuple[bytes, ...],
    tuple[bytes, ...],
    tuple[float, ...],
    int,
]
"""The C decoder's ``requests`` argument: request id label, tenant, keep_series, each
metric's (name, target, scale), dimensions, rejection classes, each target's largest
value, the error target."""


def c_spec(mapping: MetricMapping, tenant: str | None, keep_series: bool) -> CSpec:
    """The ``requests`` argument of the C decoder (see ``_v1_fast.c``)."""
    return (
        mapping.request_id_label.encode(),
        tenant.encode() if tenant else None,
        keep_series,
        tuple(
            (name.encode(), TARGETS.index(column), scale)
            for name, (column, scale) in mapping.metrics.items()
        ),
        tuple(name.encode() for name in DIMENSIONS),
        tuple(name.encode() for name in REJECTION_CLASSES),
        tuple(_LARGEST[target] for target in TARGETS),
        _ERROR,
    )


_PartColumns = tuple[int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes,
                     bytes, bytes, bytes, bytes, bytes, bytes, int, int]  # fmt: skip
"""The third item the C decoder returns: requests, 16 buffers, samples taken, dropped."""


def from_c_columns(columns: _PartColumns) -> Pivot:
    """The :class:`Pivot` the C decoder returned as its third item."""
    (n, tenant_offsets, tenant_data, id_offsets, id_data, first_ts, values, present, rank,
     class_offsets, class_data, class_valid, label_offsets, name_offsets, name_data,
     value_offsets, value_data, taken, dropped) = columns  # fmt: skip
    valid = pa.py_buffer(np.packbits(np.frombuffer(class_valid, np.uint8), bitorder="little"))
    return Pivot(
        tenant=string_array(n, tenant_offsets, tenant_data),
        request_id=string_array(n, id_offsets, id_data),
        first_ts=np.frombuffer(first_ts, np.int64),
        values=np.frombuffer(values, np.float64).reshape(n, len(TARGETS)),
        present=np.frombuffer(present, np.uint8).reshape(n, len(TARGETS)).astype(bool),
        rank=np.frombuffer(rank, np.uint8),
        error_class=pa.Array.from_buffers(
            pa.string(), n, [valid, pa.py_buffer(class_offsets), pa.py_buffer(class_data)]
        ),
        labels=label_map_array(
            n, label_offsets, name_offsets, name_data, value_offsets, value_data
        ),
        taken=taken,
        dropped=dropped,
    )


_NO_PARTS = PARTS_SCHEMA.empty_table()


def parts_table(pivot: Pivot) -> pa.Table:
    """The ``request_parts`` rows of a pivot (``received`` is now)."""
    n = len(pivot.rank)
    if n == 0:  # a write of plain series: building the columns below cost 0.6 ms a flush
        return _NO_PARTS

    def target(name: str, kind: pa.DataType) -> pa.Array:
        k = TARGETS.index(name)
        column = pa.array(pivot.values[:, k], pa.float64(), mask=~pivot.present[:, k])
        if name == "ts":
            column = pc.cast(pc.round(column), pa.int64())
        return pc.cast(column, kind, safe=False)

    dims = label_values(pivot.labels, list(DIMENSIONS))
    columns = {
        "tenant": pivot.tenant.cast(pa.string()),
        "request_id": pivot.request_id.cast(pa.string()),
        "first_ts": pa.array(pivot.first_ts, pa.int64()).cast(_TS),
        "start_ts": target("ts", _TS),
        "received": pa.repeat(pa.scalar(datetime.now(UTC), _TS), n),
        **dims,
        "status_rank": pa.array(pivot.rank, pa.uint8()),
        "error_class": pivot.error_class.cast(pa.string()),
        "http_status": target("http_status", pa.uint16()),
        **{name: target(name, kind) for name, kind in MEASURES.items()},
        "attrs": _without(pivot.labels, DIMENSIONS),
    }
    return pa.table([columns[f.name] for f in PARTS_SCHEMA], schema=PARTS_SCHEMA)


def split_requests(
    decoded: DecodedWrite, mapping: MetricMapping, tenant: str | None, keep_series: bool
) -> tuple[DecodedWrite, Pivot]:
    """A decoded write without its per-request samples (with them too, when
    ``keep_series``), and those samples pivoted: the Python reference of the C decoder's
    pivot. ``tenant`` (from the tenant header) overrides a ``tenant`` label.
    """
    pivot, mapped_series, part_samples = _pivot(decoded, mapping, tenant)
    if keep_series or not mapped_series.any():
        return decoded, pivot
    rest = replace(
        decoded,
        series=decoded.series.filter(pa.array(~mapped_series)),
        samples=decoded.samples.filter(pa.array(~part_samples)),
        samples_written=decoded.samples_written - pivot.dropped,
    )
    return rest, pivot


# --- the Python pivot ---------------------------------------------------------------------


def _pivot(
    decoded: DecodedWrite, mapping: MetricMapping, tenant: str | None
) -> tuple[Pivot, np.ndarray, np.ndarray]:
    """The pivot of a write's parts; which series are mapped, which samples are parts."""
    series, samples = decoded.series, decoded.samples
    metric = series.column("metric_name").combine_chunks()
    labels = series.column("labels").combine_chunks()
    names = pa.array(list(mapping.metrics), pa.string())
    which = pc.fill_null(pc.index_in(metric, names), -1).to_numpy(zero_copy_only=False)
    found = label_values(labels, [mapping.request_id_label, *_RESERVED])
    request_id = found[mapping.request_id_label]
    mapped = (which >= 0) & pc.is_valid(request_id).to_numpy(zero_copy_only=False)
    owner = pc.index_in(_storage(samples.column("id")), _storage(series.column("id")))
    owner = owner.to_numpy(zero_copy_only=False).astype(np.int64)
    is_part = mapped[owner] if len(owner) else np.zeros(0, bool)
    rows = np.flatnonzero(is_part)
    s = owner[rows]
    targets = np.array([TARGETS.index(c) for c, _ in mapping.metrics.values()], np.int64)
    scales = np.array([scale for _, scale in mapping.metrics.values()], np.float64)
    target = targets[which[s]]
    largest = np.array([_LARGEST[t] for t in TARGETS])
    with np.errstate(invalid="ignore", over="ignore"):
        value = samples.column("value").to_numpy()[rows] * scales[which[s]]
        valid = (value >= 0) & (value <= largest[target])
    dropped = int((~valid).sum())
    s, target, value = s[valid], target[valid], value[valid]
    timestamps = samples.column("timestamp").cast(pa.int64()).to_numpy()[rows][valid]
    n_parts = len(s)

    tenants = (
        pa.repeat(pa.scalar(tenant, pa.string()), len(metric))
        if tenant
        else pc.fill_null(found["tenant"], "")
    )
    part_tenant, part_id = tenants.take(pa.array(s)), request_id.take(pa.array(s))
    key = pc.binary_join_element_wise(
        pc.cast(pc.binary_length(part_tenant), pa.string()), ":", part_tenant, part_id, ""
    ).dictionary_encode()
    group = np.asarray(key.indices, np.int64)
    n = len(key.dictionary)
    first = np.full(n, n_parts, np.int64)
    np.minimum.at(first, group, np.arange(n_parts))

    first_ts = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_ts, group, timestamps)
    k = len(TARGETS)
    last = np.full(n * k, -1, np.int64)
    np.maximum.at(last, group * k + target, np.arange(n_parts))
    present = (last >= 0).reshape(n, k)
    values = np.where(last >= 0, value[np.maximum(last, 0)], 0.0).reshape(n, k)

    error_class = found["error_class"].take(pa.array(s))
    failed = (target == _ERROR) & (value > 0)
    rejected = failed & pc.is_in(error_class, pa.array(REJECTION_CLASSES)).to_numpy(
        zero_copy_only=False
    )
    rank = np.zeros(n, np.uint8)
    np.maximum.at(rank, group, np.where(rejected, 2, np.where(failed, 1, 0)).astype(np.uint8))
    classified = failed & pc.is_valid(error_class).to_numpy(zero_copy_only=False)
    last_class = np.full(n, -1, np.int64)
    np.maximum.at(last_class, group[classified], np.flatnonzero(classified))

    pivot = Pivot(
        tenant=part_tenant.take(pa.array(first)),
        request_id=part_id.take(pa.array(first)),
        first_ts=first_ts,
        values=values,
        present=present,
        rank=rank,
        error_class=error_class.take(pa.array(last_class, mask=last_class < 0)),
        labels=_merged_labels(labels, s, group, n, mapping.request_id_label),
        taken=n_parts,
        dropped=dropped,
    )
    return pivot, mapped, is_part


def _merged_labels(
    labels: pa.MapArray, part_series: np.ndarray, group: np.ndarray, n: int, request_id: str
) -> pa.MapArray:
    """Each request's labels, merged over its parts as the module docstring says."""
    offsets = labels.offsets.to_numpy().astype(np.int64)
    starts, lengths = offsets[part_series], np.diff(offsets)[part_series]
    total = int(lengths.sum())
    entry = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
    keys, items = labels.keys.take(pa.array(entry)), labels.items.take(pa.array(entry))
    kept = pc.invert(pc.is_in(keys, pa.array([request_id, *_RESERVED])))
    table = pa.table(
        {
            "group": np.repeat(group, lengths),
            "seq": np.repeat(np.arange(len(group)), lengths),
            "name": keys,
            "value": items,
            "dim": pc.is_in(keys, pa.array(DIMENSIONS)),
        }
    ).filter(kept)
    # A dimension: the last part's value; any other label: the greatest value.
    dims = _last_per_name(table.filter(table.column("dim")), "seq")
    others = _last_per_name(table.filter(pc.invert(table.column("dim"))), "value")
    merged = pa.concat_tables([dims, others])
    merged = merged.take(pc.sort_indices(merged, [("group", "ascending"), ("name", "ascending")]))
    counts = np.bincount(merged.column("group").to_numpy(), minlength=n)
    map_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=map_offsets[1:])
    return pa.MapArray.from_arrays(
        pa.array(map_offsets),
        merged.column("name").combine_chunks(),
        merged.column("value").combine_chunks(),
        type=_LABELS,
    )


def _last_per_name(table: pa.Table, order: str) -> pa.Table:
    """Per (group, name), the row that sorts last by ``order``."""
    if not table.num_rows:
        return table.select(["group", "name", "value"])
    table = table.take(
        pc.sort_indices(
            table, [("group", "ascending"), ("name", "ascending"), (order, "ascending")]
        )
    )
    group = table.column("group").to_numpy()
    name = table.column("name").combine_chunks()
    ends = np.ones(table.num_rows, bool)
    ends[:-1] = (group[1:] != group[:-1]) | pc.not_equal(name[1:], name[:-1]).to_numpy(
        zero_copy_only=False
    )
    return table.filter(pa.array(ends)).select(["group", "name", "value"])


def _without(labels: pa.MapArray, names: tuple[str, ...]) -> pa.MapArray:
    """``labels`` less the entries named in ``names``."""
    offsets = labels.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    keys = labels.keys.slice(first, last - first)
    items = labels.items.slice(first, last - first)
    keep = pc.invert(pc.is_in(keys, pa.array(names))).to_numpy(zero_copy_only=False)
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    new_offsets = kept_before[offsets - first].astype(np.int32)
    mask = pa.array(keep)
    return pa.MapArray.from_arrays(
        pa.array(new_offsets), keys.filter(mask), items.filter(mask), type=_LABELS
    )


def _storage(column: pa.ChunkedArray) -> pa.Array:
    """The plain array under an extension type (UUID), which compute kernels take."""
    array = column.combine_chunks()
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def pivot_rows(pivot: Pivot, keep: np.ndarray) -> Pivot:
    """``pivot`` with only the requests where ``keep`` (bool, one per request) is true."""
    mask = pa.array(keep, pa.bool_())
    return replace(
        pivot,
        tenant=pivot.tenant.filter(mask),
        request_id=pivot.request_id.filter(mask),
        first_ts=pivot.first_ts[keep],
        values=pivot.values[keep],
        present=pivot.present[keep],
        rank=pivot.rank[keep],
        error_class=pivot.error_class.filter(mask),
        labels=pivot.labels.filter(mask),
    )


def request_times(pivot: Pivot) -> tuple[np.ndarray, np.ndarray]:
    """Each request's first sample (Unix ms) and its start time where a part gave one
    (Unix ms; ``first_ts`` where none did): the times its row may carry."""
    k = TARGETS.index("ts")
    given = pivot.present[:, k]
    start = pivot.first_ts.astype(np.int64, copy=True)
    start[given] = np.round(pivot.values[given, k]).astype(np.int64)  # at most 2299: fits
    return pivot.first_ts, start
