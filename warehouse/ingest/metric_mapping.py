"""Per-request LLM metrics sent as Prometheus samples, mapped to `requests` columns.

A sample such as ``llm_request_ttft_seconds{request_id="r1", model="m"} 0.21`` is one
*part* of request ``r1``. This module holds the mapping (which metric fills which
column, and the label that names the request) and the ``request_parts`` schema;
:mod:`warehouse.ingest.request_pivot` turns the parts of a write into rows, one per
request. The store merges the rows of a request and seals it into ``requests`` (see
``migrations/*/0004_request_parts.sql``).

The mapping is data: ``metric_mapping.toml`` beside this module holds the defaults, and
a file of the same shape replaces it (``metric_mapping`` setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.config import read_toml
from warehouse.errors import ConfigError
from warehouse.model import LABEL_COLUMNS, REQUESTS_SCHEMA

__all__ = [
    "DEFAULT_MAPPING",
    "DIMENSIONS",
    "MEASURES",
    "PARTS_SCHEMA",
    "REJECTION_CLASSES",
    "RESERVED_LABELS",
    "MetricMapping",
    "label_values",
    "load_mapping",
]

DEFAULT_MAPPING = Path(__file__).with_name("metric_mapping.toml")

_TS = pa.timestamp("ms", tz="UTC")
DIMENSIONS = (*(c for c in LABEL_COLUMNS if c != "tenant"), "finish_reason")
MEASURES = {
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
REJECTION_CLASSES = ("rate_limited", "overloaded")
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
        *(pa.field(name, kind) for name, kind in MEASURES.items()),
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
    data = read_toml(source, "metric mapping")
    metrics = {}
    for name, spec in data.get("metrics", {}).items():
        column = spec.get("column") if isinstance(spec, dict) else None
        if column not in MEASURES and column not in _SPECIAL:
            known = ", ".join(sorted([*MEASURES, *_SPECIAL]))
            raise ConfigError(f"metric mapping {source}: {name} maps to {column!r}; known: {known}")
        metrics[name] = (column, float(spec.get("scale", 1)))
    return MetricMapping(data.get("request_id_label", "request_id"), metrics)


def label_values(labels: pa.MapArray, names: list[str]) -> dict[str, pa.Array]:
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
