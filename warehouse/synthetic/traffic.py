"""Seeded synthetic LLM inference traffic, built column by column (no per-row objects).

Realistic enough to exercise every column and every analysis: a diurnal arrival rate;
skewed, correlated tenant, service, model, region and client mixes; latencies that grow
with prompt and output length, with load and with KV-cache misses, heavy-tailed; errors
of the taxonomy and rejections at realistic rates; health-check probes on a beat;
free-form ``attrs``; and injectable :mod:`incidents <warehouse.synthetic.incidents>`.

Requests are generated in blocks of :data:`BLOCK_ROWS` in time order, each block from
its own seeded stream, so any number of rows streams in bounded memory and the same
arguments give the same rows, however they are batched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from warehouse.errors import InvalidArgument
from warehouse.model import REQUESTS_SCHEMA
from warehouse.synthetic.arrivals import arrivals
from warehouse.synthetic.incidents import Incident

__all__ = ["BLOCK_ROWS", "request_batches", "synthetic_requests"]

BLOCK_ROWS = 100_000
MODELS = {
    # name: (TTFT base ms, per 1k prompt tokens ms, TPOT ms, mean output tokens)
    "llama-3-70b": (70.0, 55.0, 22.0, 220.0),
    "llama-3-8b": (35.0, 18.0, 8.0, 180.0),
    "mixtral-8x7b": (60.0, 40.0, 14.0, 240.0),
    "qwen2-72b": (75.0, 60.0, 24.0, 260.0),
    # A small code model, as editors' inline completion runs: fast first token and decode.
    "coder-7b": (20.0, 12.0, 6.0, 90.0),
}


@dataclass(frozen=True)
class Workload:
    """What one service asks of the fleet, as its shipped SLO (if any) expects it."""

    request_type: str
    """The request type it mostly sends (some requests are tool calls)."""
    error_rate: float
    """Share of its requests that fail outside incidents."""
    cache_hits: float
    """Share of its requests whose prompt prefix the KV cache holds."""
    mean_output: float | None = None
    """Mean output tokens; None: the model's."""
    shed: float = 1.0
    """How much of the fleet's load shedding reaches it (a job queue holds work back)."""
    model: str | None = None
    """The model that serves it; None: the tenant's own."""


WORKLOADS = {
    # Chat carries long shared prefixes (system prompt, history): the cache hits there.
    "chat": Workload("chat", 0.0007, 0.9),
    "completions": Workload("completion", 0.002, 0.35),
    "embeddings-rerank": Workload("rerank", 0.001, 0.35),
    # Summaries of one corpus share an instruction prefix; a job runner retries
    # transient failures before they count, so few documents fail for good.
    "summarize": Workload("batch", 0.0002, 0.5, shed=0.2),
    # Inline completion: a line or a few from the code model, on the file's cached prefix.
    "code": Workload("completion", 0.002, 0.8, mean_output=16.0, model="coder-7b"),
}
SERVICES = tuple(WORKLOADS)
FLEET = {
    # Who calls what, the same whatever the seed (a platform keeps its tenants): each
    # tenant mostly its first service and model, from the busiest tenant to the quietest.
    # Chat is the largest workload, and every service with a shipped SLO has tenants.
    "acme": (("chat", "completions"), ("llama-3-70b", "llama-3-8b")),
    "globex": (("code", "chat"), ("mixtral-8x7b", "qwen2-72b")),
    "initech": (("summarize", "chat"), ("mixtral-8x7b", "llama-3-70b")),
    "umbrella": (("chat", "embeddings-rerank"), ("qwen2-72b", "llama-3-8b")),
    "hooli": (("completions", "code"), ("llama-3-8b", "mixtral-8x7b")),
    "stark": (("embeddings-rerank", "summarize"), ("llama-3-8b", "qwen2-72b")),
    "wayne": (("chat", "summarize"), ("mixtral-8x7b", "llama-3-70b")),
    "tyrell": (("summarize", "completions"), ("qwen2-72b", "llama-3-70b")),
}
TENANTS = tuple(FLEET)
ERRORS = {
    # class of the taxonomy: (share of errors, HTTP statuses it comes with)
    "client_error": (0.25, (400, 422)),
    "cancelled": (0.20, (499,)),
    "timeout": (0.15, (504,)),
    "server_error": (0.15, (500, 502)),
    "safety_block": (0.08, (400,)),
    "format_error": (0.05, (200,)),
    "truncated": (0.05, (200,)),
    "logit_anomaly": (0.04, (200,)),
    "hallucination_flag": (0.03, (200,)),
}
REJECTION_RATE = 0.0002
SHED_ABOVE = 0.5
"""Baseline share of rejected requests, and the utilisation beyond which load shedding
adds more (a fleet sized for its daily peak sheds little even then)."""
STALL_RATE = 0.0005
"""Share of requests stuck behind a stall (a preemption, a long prefill ahead of them)."""
REGIONS = {"hz": ("hz-a", "hz-b"), "sh": ("sh-a", "sh-b", "sh-c"), "us-east": ("use-1a", "use-1b")}
CLIENT_APPS = ("web", "ios", "android", "api-sdk", "ide-plugin")
CLIENT_OS = ("linux", "macos", "windows", "ios", "android")
NETWORKS = ("wifi", "4g", "5g", "ethernet")
AB_GROUPS = ("control", "treatment")
"""Experiment arms: 70% of traffic stays on control."""
GPUS = ("a100", "h100", "l40s")


def synthetic_requests(
    n: int,
    seed: int = 0,
    start: datetime | None = None,
    span: timedelta = timedelta(hours=1),
    incidents: Sequence[Incident] = (),
    diurnal: float = 0.5,
) -> pa.Table:
    """``n`` requests over ``span`` from ``start`` (default: ``span`` ago), in one table."""
    return pa.Table.from_batches(
        [
            b
            for t in request_batches(n, seed, start, span, incidents, diurnal)
            for b in t.to_batches()
        ],
        schema=REQUESTS_SCHEMA,
    )


def request_batches(
    n: int,
    seed: int = 0,
    start: datetime | None = None,
    span: timedelta = timedelta(hours=1),
    incidents: Sequence[Incident] = (),
    diurnal: float = 0.5,
) -> Iterator[pa.Table]:
    """The same requests as :func:`synthetic_requests`, a block of at most
    :data:`BLOCK_ROWS` at a time, in time order.

    ``diurnal`` is the depth of the daily cycle of the arrival rate (0: flat); the
    latencies follow the load it makes.
    """
    if n < 0:
        raise InvalidArgument(f"n must be >= 0, got {n}")
    if start is None:
        start = datetime.now(UTC).replace(microsecond=0) - span
    start_ms = int(start.timestamp() * 1000)
    span_ms = max(1, int(span.total_seconds() * 1000))
    when = arrivals(np.random.default_rng([seed, 1]), n, start_ms, span_ms, diurnal)
    for block, first in enumerate(range(0, n, BLOCK_ROWS)):
        rows = slice(first, min(first + BLOCK_ROWS, n))
        rng = np.random.default_rng([seed, 3, block])
        draft = _draft(rng, when.ts[rows], when.is_probe[rows], when.load[rows])
        for i, incident in enumerate(incidents):
            # Its own stream, so that rows it does not hit stay as they would be without it.
            incident.inject(draft, np.random.default_rng([seed, 4, block, i]), start_ms, span_ms)
        yield _table(rng, seed, draft)


_TENANT_SERVICES = np.array([[SERVICES.index(s) for s in ss] for ss, _ in FLEET.values()])
_TENANT_MODELS = np.array([[list(MODELS).index(m) for m in ms] for _, ms in FLEET.values()])
_SERVICE_MODEL = np.array(
    [list(MODELS).index(w.model) if w.model else -1 for w in WORKLOADS.values()]
)
_MEAN_OUTPUT = np.array([w.mean_output or np.nan for w in WORKLOADS.values()])
_CACHE_HITS = np.array([w.cache_hits for w in WORKLOADS.values()])
_ERROR_RATE = np.array([w.error_rate for w in WORKLOADS.values()])
_SHED = np.array([w.shed for w in WORKLOADS.values()])


def _draft(
    rng: np.random.Generator, ts: np.ndarray, is_probe: np.ndarray, load: np.ndarray
) -> dict[str, np.ndarray]:
    """One block of requests as numpy columns that incidents may still change."""
    n = ts.size
    # Mostly a tenant's first service and model (unless the service has a model of its
    # own); the service sets the request type; most traffic runs on a model's current
    # version.
    tenant_idx = _skewed_index(rng, len(TENANTS), n, 1.1)
    service_idx = _TENANT_SERVICES[tenant_idx, (rng.random(n) < 0.2).astype(int)]
    model_idx = _TENANT_MODELS[tenant_idx, (rng.random(n) < 0.25).astype(int)]
    model_idx = np.where(_SERVICE_MODEL[service_idx] >= 0, _SERVICE_MODEL[service_idx], model_idx)
    request_type = np.array([w.request_type for w in WORKLOADS.values()], dtype=object)[service_idx]
    request_type[rng.random(n) < 0.1] = "tool_call"
    region_names = list(REGIONS)
    region_idx = _skewed_index(rng, len(region_names), n, 0.5)
    zone = np.empty(n, dtype=object)
    for i, name in enumerate(region_names):
        mask = region_idx == i
        zone[mask] = rng.choice(REGIONS[name], mask.sum())
    node = np.char.add("gpu-node-", rng.integers(0, 40, n).astype(str)).astype(object)

    # The KV cache hits on shared prefixes (system prompts, history, the file being
    # edited) far more than on one-off prompts.
    prompt = np.clip(rng.lognormal(6.3, 0.9, n), 1, 120_000).astype(np.uint32)
    params = np.array(list(MODELS.values()))[model_idx]
    mean_output = np.where(
        np.isnan(_MEAN_OUTPUT[service_idx]), params[:, 3], _MEAN_OUTPUT[service_idx]
    )
    output = np.clip(rng.gamma(2.0, mean_output / 2.0), 1, 8192).astype(np.uint32)
    hits = rng.random(n) < _CACHE_HITS[service_idx]
    cached = (prompt * rng.beta(4, 2, n) * hits).astype(np.uint32)

    # Queueing grows steeply with load (M/M/1-like); TTFT is queue + prefill of the
    # uncached prompt; TPOT degrades a little as batches fill.
    utilisation = np.clip(0.45 * load, 0.05, 0.9)
    queue = rng.exponential(6.0 * utilisation / (1 - utilisation), n)
    queue *= 1 + (rng.random(n) < STALL_RATE) * rng.exponential(40.0, n)
    uncached = (prompt - cached) / 1000.0
    ttft = queue + params[:, 0] * rng.lognormal(0, 0.2, n) + params[:, 1] * uncached
    tpot = params[:, 2] * rng.lognormal(0, 0.2, n) * (0.85 + 0.3 * utilisation)

    status = np.full(n, "ok", dtype=object)
    roll = rng.random(n)
    error_rate = _ERROR_RATE[service_idx]
    status[roll < error_rate] = "error"
    shed = _SHED[service_idx] * (
        REJECTION_RATE + 0.003 * np.clip(utilisation - SHED_ABOVE, 0, None)
    )
    status[(roll >= error_rate) & (roll < error_rate + shed)] = "rejected"
    error_class = np.full(n, "", dtype=object)
    is_error = status == "error"
    classes = list(ERRORS)
    which = rng.choice(len(classes), is_error.sum(), p=[share for share, _ in ERRORS.values()])
    error_class[is_error] = np.array(classes, dtype=object)[which]
    http_status = np.full(n, 200, dtype=np.uint16)
    http_status[is_error] = [rng.choice(ERRORS[classes[k]][1]) for k in which]
    is_rejected = status == "rejected"
    error_class[is_rejected] = rng.choice(["rate_limited", "overloaded"], is_rejected.sum())
    http_status[is_rejected] = 429
    finish_reason = np.where(rng.random(n) < 0.9, "stop", "length").astype(object)
    finish_reason[status != "ok"] = ""

    columns = {
        "ts": ts,
        "is_probe": is_probe,
        "tenant": np.array(TENANTS, dtype=object)[tenant_idx],
        "service": np.array(SERVICES, dtype=object)[service_idx],
        "model": np.array(list(MODELS), dtype=object)[model_idx],
        "model_version": np.where(rng.random(n) < 0.95, "v2", "v1").astype(object),
        "region": np.array(region_names, dtype=object)[region_idx],
        "zone": zone,
        "node": node,
        "client_app": _skewed(rng, CLIENT_APPS, n, 0.6),
        "client_os": _skewed(rng, CLIENT_OS, n, 0.4),
        "network": _skewed(rng, NETWORKS, n, 0.5),
        "ab_group": np.array(AB_GROUPS, dtype=object)[(rng.random(n) < 0.3).astype(int)],
        "request_type": request_type,
        "status": status,
        "error_class": error_class,
        "http_status": http_status,
        "finish_reason": finish_reason,
        "queue_ms": queue,
        "ttft_ms": ttft,
        "tpot_ms": tpot,
        "itl_spread": rng.uniform(1.5, 4.0, n),
        "prompt_tokens": prompt,
        "output_tokens": output,
        "cached_prompt_tokens": cached,
        "prefill_ms_per_1k": params[:, 1],
        "no_latency": is_rejected | (is_error & (rng.random(n) < 0.5)),
    }
    _probes(rng, columns)
    return columns


def _probes(rng: np.random.Generator, c: dict[str, np.ndarray]) -> None:
    """Health checks: the platform's own client, a tiny prompt and one token back."""
    p = c["is_probe"]
    k = int(p.sum())
    c["tenant"][p] = "platform"
    c["client_app"][p] = "healthcheck"
    c["request_type"][p] = "completion"
    c["prompt_tokens"][p] = 8
    c["output_tokens"][p] = 1
    c["cached_prompt_tokens"][p] = 0
    c["ttft_ms"][p] = c["queue_ms"][p] + rng.lognormal(np.log(25.0), 0.2, k)


def _table(rng: np.random.Generator, seed: int, c: dict[str, np.ndarray]) -> pa.Table:
    n = c["ts"].size
    output = c["output_tokens"]
    no_latency = c["no_latency"]
    is_rejected = c["status"] == "rejected"
    e2e = c["ttft_ms"] + c["tpot_ms"] * np.maximum(output.astype(np.float64) - 1, 0)
    has_quality = rng.random(n) < 0.3
    offsets, attrs_keys, attrs_values = _attrs(rng, n)
    columns = {
        "ts": pa.array(c["ts"], pa.timestamp("ms", tz="UTC")),
        "request_id": pa.array(_request_ids(rng, seed, n)),
        **{name: c[name] for name in _DRAFT_COLUMNS},
        "queue_ms": _masked(c["queue_ms"], is_rejected & (rng.random(n) < 0.5)),
        "ttft_ms": _masked(c["ttft_ms"], no_latency),
        "e2e_ms": _masked(e2e, no_latency),
        "tpot_ms": _masked(c["tpot_ms"], no_latency | (output <= 1)),
        "itl_p99_ms": _masked(c["tpot_ms"] * c["itl_spread"], no_latency | (output <= 2)),
        "prompt_tokens": _masked(c["prompt_tokens"], is_rejected),
        "output_tokens": _masked(output, no_latency),
        "cached_prompt_tokens": _masked(c["cached_prompt_tokens"], is_rejected),
        "max_context_tokens": pa.array(np.full(n, 131_072, dtype=np.uint32)),
        "consistency_score": _masked(rng.beta(8, 2, n), ~has_quality),
        "hallucination": _masked((rng.random(n) < 0.02).astype(np.float32), ~has_quality),
        "attrs": pa.MapArray.from_arrays(offsets, attrs_keys, attrs_values),
    }
    arrays = [pa.array(columns[f.name], f.type) for f in REQUESTS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=REQUESTS_SCHEMA)


_DRAFT_COLUMNS = (
    "tenant", "service", "model", "model_version", "region", "zone", "node", "client_app",
    "client_os", "network", "ab_group", "request_type", "status", "error_class",
    "http_status", "finish_reason", "is_probe",
)  # fmt: skip


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
