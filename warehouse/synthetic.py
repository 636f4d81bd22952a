"""Seeded synthetic LLM inference traffic, built column by column (no per-row objects).

Realistic enough to exercise every column: skewed tenant and model mixes, latencies
that grow with prompt and output length, heavy tails, KV-cache hits, errors of the
taxonomy, rejections with no latencies, health-check probes and free-form ``attrs``.
Same seed, same table.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA

__all__ = ["synthetic_requests"]

TENANTS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell")
SERVICES = ("chat", "completions", "embeddings-rerank", "summarize", "code")
MODELS = {
    # name: (TTFT base ms, per 1k prompt tokens ms, TPOT ms, mean output tokens)
    "llama-3-70b": (120.0, 90.0, 28.0, 220.0),
    "llama-3-8b": (45.0, 25.0, 9.0, 180.0),
    "mixtral-8x7b": (80.0, 60.0, 16.0, 240.0),
    "qwen2-72b": (130.0, 95.0, 30.0, 260.0),
    "coder-33b": (70.0, 50.0, 14.0, 90.0),
}
REGIONS = {"hz": ("hz-a", "hz-b"), "sh": ("sh-a", "sh-b", "sh-c"), "us-east": ("use-1a", "use-1b")}
CLIENT_APPS = ("web", "ios", "android", "api-sdk", "ide-plugin")
CLIENT_OS = ("linux", "macos", "windows", "ios", "android")
NETWORKS = ("wifi", "4g", "5g", "ethernet")
SERVICE_REQUEST_TYPES = ("chat", "completion", "rerank", "batch", "completion")
"""The request type each of SERVICES mostly sees (some requests are tool calls)."""
AB_GROUPS = ("control", "treatment")
GPUS = ("a100", "h100", "l40s")


def synthetic_requests(
    n: int, seed: int = 0, start: datetime | None = None, span: timedelta = timedelta(hours=1)
) -> pa.Table:
    """``n`` requests arriving uniformly over ``span`` from ``start`` (default: an hour ago)."""
    rng = np.random.default_rng(seed)
    if start is None:
        start = datetime.now(UTC).replace(microsecond=0) - span
    start_ms = int(start.timestamp() * 1000)
    ts = np.sort(start_ms + rng.integers(0, int(span.total_seconds() * 1000), n))

    # Dimensions are correlated as in real fleets: each tenant calls two services and
    # two models of its own, mostly the first of each; the service sets the request
    # type; most traffic runs on a model's current version.
    tenant_idx = _skewed_index(rng, len(TENANTS), n, 1.1)
    tenant = np.array(TENANTS, dtype=object)[tenant_idx]
    model_names = list(MODELS)
    tenant_services = np.array([rng.permutation(len(SERVICES))[:2] for _ in TENANTS])
    tenant_models = np.array([rng.permutation(len(model_names))[:2] for _ in TENANTS])
    secondary = (rng.random(n) < 0.2).astype(int)
    service_idx = tenant_services[tenant_idx, secondary]
    model_idx = tenant_models[tenant_idx, (rng.random(n) < 0.25).astype(int)]
    request_type = np.array(SERVICE_REQUEST_TYPES, dtype=object)[service_idx]
    request_type[rng.random(n) < 0.1] = "tool_call"
    region_names = list(REGIONS)
    region_idx = _skewed_index(rng, len(region_names), n, 0.5)
    zone = np.empty(n, dtype=object)
    for i, name in enumerate(region_names):
        mask = region_idx == i
        zone[mask] = rng.choice(REGIONS[name], mask.sum())
    node = np.char.add("gpu-node-", rng.integers(0, 40, n).astype(str)).astype(object)

    prompt = np.clip(rng.lognormal(6.3, 0.9, n), 1, 120_000).astype(np.uint32)
    params = np.array([MODELS[m] for m in model_names])[model_idx]
    output = np.clip(rng.gamma(2.0, params[:, 3] / 2.0), 1, 8192).astype(np.uint32)
    cached = (prompt * rng.beta(2, 3, n) * (rng.random(n) < 0.6)).astype(np.uint32)

    queue = rng.exponential(8.0, n) * (1 + (rng.random(n) < 0.03) * rng.exponential(40.0, n))
    uncached = (prompt - cached) / 1000.0
    ttft = queue + params[:, 0] * rng.lognormal(0, 0.35, n) + params[:, 1] * uncached
    tpot = params[:, 2] * rng.lognormal(0, 0.25, n)
    e2e = ttft + tpot * np.maximum(output.astype(np.float64) - 1, 0)
    itl_p99 = tpot * rng.uniform(1.5, 4.0, n)

    status = np.full(n, "ok", dtype=object)
    roll = rng.random(n)
    status[roll < 0.02] = "error"
    status[(roll >= 0.02) & (roll < 0.03)] = "rejected"
    error_class = np.full(n, "", dtype=object)
    is_error = status == "error"
    error_class[is_error] = rng.choice(
        [c for c in ERROR_CLASSES if c not in ("rate_limited", "overloaded")], is_error.sum()
    )
    is_rejected = status == "rejected"
    error_class[is_rejected] = rng.choice(["rate_limited", "overloaded"], is_rejected.sum())
    http_status = np.full(n, 200, dtype=np.uint16)
    http_status[is_error] = rng.choice([500, 502, 504, 400, 422], is_error.sum())
    http_status[is_rejected] = 429
    finish_reason = np.where(rng.random(n) < 0.9, "stop", "length").astype(object)
    finish_reason[~(status == "ok")] = ""

    no_latency = is_rejected | (is_error & (rng.random(n) < 0.5))
    is_probe = rng.random(n) < 0.005
    consistency = rng.beta(8, 2, n)
    has_quality = rng.random(n) < 0.3

    offsets, attrs_keys, attrs_values = _attrs(rng, n)
    columns = {
        "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "request_id": pa.array(_request_ids(rng, seed, n)),
        "tenant": tenant,
        "service": np.array(SERVICES, dtype=object)[service_idx],
        "model": np.array(model_names, dtype=object)[model_idx],
        "model_version": np.where(rng.random(n) < 0.95, "v2", "v1").astype(object),
        "region": np.array(region_names, dtype=object)[region_idx],
        "zone": zone,
        "node": node,
        "client_app": _skewed(rng, CLIENT_APPS, n, 0.6),
        "client_os": _skewed(rng, CLIENT_OS, n, 0.4),
        "network": _skewed(rng, NETWORKS, n, 0.5),
        "ab_group": rng.choice(AB_GROUPS, n).astype(object),
        "request_type": request_type,
        "status": status,
        "error_class": error_class,
        "http_status": http_status,
        "finish_reason": finish_reason,
        "is_probe": is_probe,
        "queue_ms": _masked(queue, is_rejected & (rng.random(n) < 0.5)),
        "ttft_ms": _masked(ttft, no_latency),
        "e2e_ms": _masked(e2e, no_latency),
        "tpot_ms": _masked(tpot, no_latency | (output <= 1)),
        "itl_p99_ms": _masked(itl_p99, no_latency | (output <= 2)),
        "prompt_tokens": _masked(prompt, is_rejected),
        "output_tokens": _masked(output, no_latency),
        "cached_prompt_tokens": _masked(cached, is_rejected),
        "max_context_tokens": pa.array(np.full(n, 131_072, dtype=np.uint32)),
        "consistency_score": _masked(consistency, ~has_quality),
        "hallucination": _masked((rng.random(n) < 0.02).astype(np.float32), ~has_quality),
        "attrs": pa.MapArray.from_arrays(offsets, attrs_keys, attrs_values),
    }
    arrays = [pa.array(columns[f.name], f.type) for f in REQUESTS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=REQUESTS_SCHEMA)


def _skewed_index(rng: np.random.Generator, k: int, n: int, s: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, k + 1) ** s
    return rng.choice(k, n, p=weights / weights.sum())


def _skewed(rng: np.random.Generator, values: tuple[str, ...], n: int, s: float) -> np.ndarray:
    return np.array(values, dtype=object)[_skewed_index(rng, len(values), n, s)]


def _masked(values: np.ndarray, null: np.ndarray) -> pa.Array:
    return pa.array(values, mask=null)


def _request_ids(rng: np.random.Generator, seed: int, n: int) -> list[str]:
    hexes = rng.integers(0, 2**63, n, dtype=np.int64)
    return np.char.add(f"req-{seed}-", np.char.mod("%016x", hexes)).tolist()


def _attrs(rng: np.random.Generator, n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Zero to two labels per request: ``gpu`` on most, ``priority`` on a few."""
    has_gpu = rng.random(n) < 0.85
    has_priority = rng.random(n) < 0.1
    counts = has_gpu.astype(np.int32) + has_priority
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    keys = np.empty(offsets[-1], dtype=object)
    values = np.empty(offsets[-1], dtype=object)
    first = offsets[:-1]
    keys[first[has_gpu]] = "gpu"
    values[first[has_gpu]] = rng.choice(GPUS, has_gpu.sum())
    second = first + has_gpu
    keys[second[has_priority]] = "priority"
    values[second[has_priority]] = rng.choice(["high", "low"], has_priority.sum())
    return pa.array(offsets), pa.array(keys, pa.string()), pa.array(values, pa.string())
