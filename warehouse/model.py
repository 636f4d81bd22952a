"""The logical data model, defined once: the `requests` columns and their Arrow types.

Every backend's DDL (``migrations/``) holds these columns; ingest validates against
:data:`REQUESTS_SCHEMA`; the query layer takes its dimensions and measures from here.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa

from warehouse.errors import ConfigError

__all__ = [
    "BUCKET_GROWTH",
    "BUCKET_MIN_MS",
    "DIMENSIONS",
    "ERROR_CLASSES",
    "LABEL_COLUMNS",
    "LATENCY_COLUMNS",
    "REQUESTS_SCHEMA",
    "ROLLUP_DIMENSIONS",
    "ROLLUP_LATENCIES",
    "SLA_ROLLUP_DIMENSIONS",
    "STATUSES",
    "TOKEN_COLUMNS",
    "bucket_bounds",
    "fold_histogram",
    "histogram_quantiles",
    "histogram_share_below",
    "latency_bucket",
]

LABEL_COLUMNS = (
    "tenant",
    "service",
    "model",
    "model_version",
    "region",
    "zone",
    "node",
    "client_app",
    "client_os",
    "network",
    "ab_group",
    "request_type",
)
"""Who and where a request came from: free-form strings, '' when unknown."""

DIMENSIONS = (*LABEL_COLUMNS, "status", "error_class", "finish_reason")
"""Columns people group and filter by. ``attrs['key']`` adds any further label."""

ROLLUP_DIMENSIONS = (
    "tenant",
    "service",
    "model",
    "model_version",
    "region",
    "zone",
    "ab_group",
    "request_type",
    "is_probe",
)
"""The dimensions kept by the hourly rollup (`requests_1h`), every one a rollup keeps."""

SLA_ROLLUP_DIMENSIONS = ("tenant", "service", "model", "region", "is_probe")
"""The dimensions kept by the minute rollup (`requests_1m`) and the hourly SLA rollup
(`requests_sla_1h`): those SLAs are written against."""

LATENCY_COLUMNS = ("queue_ms", "ttft_ms", "e2e_ms", "tpot_ms", "itl_p99_ms")
ROLLUP_LATENCIES = ("queue_ms", "ttft_ms", "tpot_ms", "e2e_ms")
TOKEN_COLUMNS = ("prompt_tokens", "output_tokens", "cached_prompt_tokens", "max_context_tokens")

STATUSES = ("ok", "error", "rejected")
ERROR_CLASSES = (
    "timeout",
    "rate_limited",
    "overloaded",
    "server_error",
    "client_error",
    "safety_block",
    "format_error",
    "truncated",
    "hallucination_flag",
    "logit_anomaly",
    "cancelled",
)

_TS = pa.timestamp("ms", tz="UTC")

REQUESTS_SCHEMA = pa.schema(
    [
        pa.field("ts", _TS, nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        *(pa.field(name, pa.string(), nullable=False) for name in LABEL_COLUMNS),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error_class", pa.string(), nullable=False),
        pa.field("http_status", pa.uint16(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("is_probe", pa.bool_(), nullable=False),
        *(pa.field(name, pa.float32()) for name in LATENCY_COLUMNS),
        *(pa.field(name, pa.uint32()) for name in TOKEN_COLUMNS),
        pa.field("consistency_score", pa.float32()),
        pa.field("hallucination", pa.float32()),
        pa.field("attrs", pa.map_(pa.string(), pa.string()), nullable=False),
    ]
)
"""Arrow schema of one `requests` row: units are in the names (ms, tokens)."""

BUCKET_MIN_MS = 0.01
"""Latencies below this many milliseconds fall in histogram bucket 0."""
BUCKET_GROWTH = 1.02
"""Each histogram bucket is this factor wider than the last (2% of value)."""


def latency_bucket(values_ms: np.ndarray) -> np.ndarray:
    """Histogram bucket of each latency, as the rollups compute it in SQL."""
    values = np.asarray(values_ms, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.floor(np.log(values / BUCKET_MIN_MS) / math.log(BUCKET_GROWTH)) + 1
    return np.where(values < BUCKET_MIN_MS, 0, np.minimum(k, 65535)).astype(np.uint16)


def bucket_bounds(bucket: int) -> tuple[float, float]:
    """The half-open value range ``[low, high)`` in ms of a histogram bucket."""
    if bucket == 0:
        return 0.0, BUCKET_MIN_MS
    return BUCKET_MIN_MS * BUCKET_GROWTH ** (bucket - 1), BUCKET_MIN_MS * BUCKET_GROWTH**bucket


def histogram_share_below(histogram: dict[int, int], threshold_ms: float) -> float:
    """Share of values below ``threshold_ms`` from a bucket histogram (bucket -> count).

    Whole buckets below the threshold count fully; the bucket holding it counts in
    proportion to where the threshold falls inside it (values are taken as spread
    evenly within a bucket), so the error is at most that one bucket's share.
    """
    total = sum(histogram.values())
    if total == 0:
        return float("nan")
    below = 0.0
    for bucket, count in histogram.items():
        low, high = bucket_bounds(bucket)
        if high <= threshold_ms:
            below += count
        elif low < threshold_ms:
            below += count * (threshold_ms - low) / (high - low)
    return below / total


def fold_histogram(
    offsets: np.ndarray, keys: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket histograms of every request from rollup histograms, whose keys are
    ``bucket * 2 + ok`` (successful requests on the odd keys).

    The histograms come flattened as Arrow lays out a column of maps (keys sorted in
    each). Returns ``(offsets, buckets, counts)`` of histograms over buckets alone.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    keys = np.asarray(keys, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.float64)
    owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    buckets = keys // 2
    # Keys are sorted within each histogram, so a bucket's two keys are neighbours.
    first = np.ones(len(buckets), bool)
    first[1:] = (buckets[1:] != buckets[:-1]) | (owner[1:] != owner[:-1])
    starts = np.flatnonzero(first)
    summed = np.add.reduceat(counts, starts) if len(starts) else counts[:0]
    folded = np.zeros(len(offsets), np.int64)
    np.cumsum(np.bincount(owner[starts], minlength=len(offsets) - 1), out=folded[1:])
    return folded, buckets[starts], summed


def histogram_quantiles(
    offsets: np.ndarray, buckets: np.ndarray, counts: np.ndarray, levels: list[float]
) -> np.ndarray:
    """Quantiles of many bucket histograms at once, one row per histogram.

    The histograms come flattened, as Arrow lays out a column of maps: histogram ``g``
    holds ``buckets[offsets[g]:offsets[g + 1]]`` (sorted) with their ``counts``. For
    level ``q`` the rank is ``q * (n - 1)``, as for linear interpolation between order
    statistics; the value is read from the bucket holding the order statistic at the
    rank's floor, values taken as spread evenly within the bucket. So the answer lies in
    the same 2%-wide bucket as that order statistic, next to the exact percentile.
    Empty histograms give NaN.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.float64)
    buckets = np.asarray(buckets, dtype=np.int64)
    result = np.full((len(offsets) - 1, len(levels)), np.nan)
    if counts.size == 0:
        return result
    running = np.cumsum(counts)
    before = np.concatenate(([0.0], running))[offsets]  # count ahead of each histogram
    totals = before[1:] - before[:-1]
    filled = totals > 0
    low = np.where(buckets == 0, 0.0, BUCKET_MIN_MS * BUCKET_GROWTH ** (buckets - 1.0))
    high = BUCKET_MIN_MS * BUCKET_GROWTH ** buckets.astype(np.float64)
    for column, q in enumerate(levels):
        rank = q * (totals - 1)
        target = before[:-1] + np.floor(rank)
        index = np.searchsorted(running, target[filled], side="right")
        ahead = np.where(index > 0, running[np.maximum(index - 1, 0)], 0.0)
        within = (before[:-1][filled] + rank[filled] - ahead + 0.5) / counts[index]
        share = np.clip(within, 0.0, 1.0)
        result[filled, column] = low[index] + share * (high[index] - low[index])
    return result


_TENANT_NAME = re.compile(r"[A-Za-z0-9!._*'()-]{1,150}")


def check_tenant(tenant: str) -> str:
    """``tenant``, or a :class:`ConfigError` naming why it cannot be a tenant.

    A tenant is 1-150 characters of letters, digits and ``! - _ . * ' ( )`` (the rule
    Cortex and Mimir give tenant IDs), neither ``.`` nor ``..``: it travels in HTTP
    headers and file names as it is.
    """
    if not isinstance(tenant, str) or not _TENANT_NAME.fullmatch(tenant) or tenant in (".", ".."):
        shown = repr(tenant)[:60]
        raise ConfigError(
            f"tenant {shown} is not a tenant name: 1-150 letters, digits and ! - _ . * ' ( ) "
            "(and not . or ..)"
        )
    return tenant
