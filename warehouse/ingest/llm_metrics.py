"""Per-request LLM metrics sent as Prometheus samples, mapped to `requests` columns.

A sample such as ``llm_request_ttft_seconds{request_id="r1", model="m"} 0.21`` is one
*part* of request ``r1``: :func:`request_parts` turns every mapped sample of a write
into a row of ``request_parts`` (one measure set, the others NULL), columnar, with
no Python object per sample. The store merges the parts of a request and seals it
into ``requests`` (see ``migrations/*/0004_request_parts.sql``).

The mapping is data: ``llm_metrics.toml`` beside this module holds the defaults, and
a file of the same shape replaces it (``metric_mapping`` setting).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import ConfigError
from warehouse.model import LABEL_COLUMNS, REQUESTS_SCHEMA

__all__ = [
    "DEFAULT_MAPPING",
    "DIMENSIONS",
    "PARTS_SCHEMA",
    "RESERVED_LABELS",
    "MetricMapping",
    "load_mapping",
    "request_parts",
]

DEFAULT_MAPPING = Path(__file__).with_name("llm_metrics.toml")

_TS = pa.timestamp("ms", tz="UTC")
DIMENSIONS = (*(c for c in LABEL_COLUMNS if c != "tenant"), "finish_reason")
_MEASURES = {
    name: REQUESTS_SCHEMA.field(name).type
    for name in (
        "queue_ms",
        "ttft_ms",
        "e2e_ms",
        "tpot_ms",
        "itl_p99_ms",
        "prompt_tokens",
        "output_tokens",
        "cached_prompt_tokens",
        "max_context_tokens",
    )
}
_SPECIAL = {"ts", "error", "http_status"}
_REJECTIONS = ("rate_limited", "overloaded")
RESERVED_LABELS = {"error_class", "tenant"}

PARTS_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("first_ts", _TS, nullable=False),
        pa.field("start_ts", _TS),
        pa.field("received", _TS, nullable=False),
        *(pa.field(name, pa.string()) for name in DIMENSIONS),
        pa.field("status_rank", pa.uint8(), nullable=False),
        pa.field("error_class", pa.string()),
        pa.field("http_status", pa.uint16()),
        *(pa.field(name, kind) for name, kind in _MEASURES.items()),
        pa.field("attrs", pa.map_(pa.string(), pa.string()), nullable=False),
    ]
)
"""Arrow schema of ``request_parts`` rows."""


@dataclass(frozen=True)
class MetricMapping:
    """Metric name -> (target column, scale), and the label naming the request."""

    request_id_label: str
    metrics: dict[str, tuple[str, float]]


def load_mapping(path: str | Path | None = None) -> MetricMapping:
    """Read a mapping file (default: the built-in one); unknown columns are refused."""
    source = Path(path) if path else DEFAULT_MAPPING
    try:
        data = tomllib.loads(source.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"metric mapping {source}: {exc}") from None
    metrics = {}
    for name, spec in data.get("metrics", {}).items():
        column = spec.get("column") if isinstance(spec, dict) else None
        if column not in _MEASURES and column not in _SPECIAL:
            known = ", ".join(sorted([*_MEASURES, *_SPECIAL]))
            raise ConfigError(f"metric mapping {source}: {name} maps to {column!r}; known: {known}")
        metrics[name] = (column, float(spec.get("scale", 1)))
    return MetricMapping(data.get("request_id_label", "request_id"), metrics)


def request_parts(
    series: pa.Table, samples: pa.Table, mapping: MetricMapping, tenant: str | None = None
) -> pa.Table:
    """The ``request_parts`` rows for every mapped sample of one decoded write.

    ``series`` and ``samples`` are a decoded write's tables. A sample counts when its
    metric is in the mapping and its series carries the request id label; ``tenant``
    (from the tenant header) overrides a ``tenant`` label.
    """
    names = pa.array(list(mapping.metrics), pa.string())
    mapped = series.filter(pc.is_in(series.column("metric_name"), names))
    if mapped.num_rows:
        request_ids = _label(mapped.column("labels").combine_chunks(), mapping.request_id_label)
        mapped = mapped.append_column("request_id", request_ids).filter(
            pc.invert(pc.is_null(request_ids))
        )
    if not mapped.num_rows:
        return PARTS_SCHEMA.empty_table()
    # Each sample finds its series by position (Arrow's join takes no map columns).
    position = pc.index_in(_storage(samples.column("id")), _storage(mapped.column("id")))
    found = pc.is_valid(position)
    mapped_samples = samples.filter(found)
    rows = mapped.take(position.filter(found))
    rows = rows.append_column("timestamp", mapped_samples.column("timestamp")).append_column(
        "value", mapped_samples.column("value")
    )
    n = rows.num_rows
    metric = rows.column("metric_name").combine_chunks()
    value = rows.column("value").combine_chunks().cast(pa.float64())
    which = pc.index_in(metric, names)
    target = pc.take(pa.array([column for column, _ in mapping.metrics.values()]), which)
    scale = pc.take(pa.array([s for _, s in mapping.metrics.values()], pa.float64()), which)
    scaled = pc.multiply(value, scale)

    def where(column: str, kind: pa.DataType) -> pa.Array:
        hit = pc.equal(target, column)
        return pc.if_else(hit, pc.cast(scaled, kind, safe=False), pa.nulls(n, kind))

    labels = rows.column("labels").combine_chunks()
    found = _labels(labels, [*DIMENSIONS, "error_class", "tenant"])
    error_class = found["error_class"]
    failed = pc.and_(pc.equal(target, "error"), pc.greater(value, 0))
    rejected = pc.and_(failed, pc.is_in(pc.fill_null(error_class, ""), pa.array(_REJECTIONS)))
    rank = pc.if_else(rejected, 2, pc.if_else(failed, 1, 0)).cast(pa.uint8())
    tenant_column = pa.repeat(pa.scalar(tenant), n) if tenant else pc.fill_null(found["tenant"], "")
    received = pa.repeat(pa.scalar(datetime.now(UTC), _TS), n)
    start_ms = pc.round(where("ts", pa.float64()))
    columns = {
        "tenant": tenant_column,
        "request_id": rows.column("request_id"),
        "first_ts": rows.column("timestamp"),
        "start_ts": pc.cast(pc.cast(start_ms, pa.int64()), _TS),
        "received": received,
        **{name: found[name] for name in DIMENSIONS},
        "status_rank": rank,
        "error_class": pc.if_else(failed, error_class, pa.nulls(n, pa.string())),
        "http_status": where("http_status", pa.uint16()),
        **{name: where(name, kind) for name, kind in _MEASURES.items()},
        "attrs": _attrs(labels, mapping.request_id_label),
    }
    return pa.table([columns[f.name] for f in PARTS_SCHEMA], schema=PARTS_SCHEMA)


def _storage(column: pa.ChunkedArray) -> pa.Array:
    """The plain array under an extension type (UUID), which compute kernels take."""
    array = column.combine_chunks()
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _label(labels: pa.MapArray, name: str) -> pa.Array:
    """The value of label ``name`` per row, NULL where the series has none."""
    return _labels(labels, [name])[name]


def _labels(labels: pa.MapArray, names: list[str]) -> dict[str, pa.Array]:
    """The value of each label of ``names`` per row, NULL where the series has none.

    One hash pass over all the keys, then a scatter per name: several times cheaper
    than a ``map_lookup`` per name. Label names are unique within a series.
    """
    offsets = labels.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    items = labels.items.slice(first, last - first)
    owner = np.repeat(np.arange(len(labels)), np.diff(offsets))
    which = pc.index_in(labels.keys.slice(first, last - first), pa.array(names, pa.string()))
    which = pc.fill_null(which, -1).to_numpy(zero_copy_only=False)
    found = {}
    for k, name in enumerate(names):
        hits = np.flatnonzero(which == k)
        index = np.zeros(len(labels), np.int64)
        missing = np.ones(len(labels), bool)
        index[owner[hits]] = hits
        missing[owner[hits]] = False
        found[name] = items.take(pa.array(index, mask=missing))
    return found


def _attrs(labels: pa.MapArray, request_id_label: str) -> pa.MapArray:
    """The labels that are not a `requests` column nor the request id: `attrs`."""
    offsets = labels.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    keys = labels.keys.slice(first, last - first)
    items = labels.items.slice(first, last - first)
    drop = {request_id_label, *DIMENSIONS, *RESERVED_LABELS}
    keep = pc.invert(pc.is_in(keys, pa.array(sorted(drop)))).to_numpy(zero_copy_only=False)
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    new_offsets = kept_before[offsets - first].astype(np.int32)
    mask = pa.array(keep)
    return pa.MapArray.from_arrays(pa.array(new_offsets), keys.filter(mask), items.filter(mask))
