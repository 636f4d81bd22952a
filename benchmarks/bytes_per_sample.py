"""Bytes per sample on disk after merges: llmwh, Prometheus and VictoriaMetrics, from the
same remote-written scrape samples in one run.

    python benchmarks/bytes_per_sample.py [--nodes 12] [--vllm 8] [--hours 4]
        [--jitter-ms 3] [--connections 4] [--receivers llmwh,prometheus,victoria-metrics]
        [--candidates [--candidate-names 'NAME;NAME']] [--seed 1] [--json]

The data is seeded and scrape-like, one sample per series every 15 s:

* ``--nodes`` hosts, each scraped as a node_exporter (CPU seconds per CPU and mode in
  USER_HZ ticks, network and disk byte and operation counters, memory and filesystem
  gauges in whole pages, load averages with two decimals, the exporter's own process and
  Go metrics) and as an inference router whose classic histogram
  ``http_request_duration_seconds`` (default buckets, ``_sum``, ``_count``) counts
  requests of a wandering rate with lognormal latencies;
* ``--vllm`` vLLM servers with vLLM's own ``vllm:`` series: running, waiting and swapped
  requests, KV-cache usage (free blocks over total), prompt and generation token
  counters, finished requests by reason, throughput gauges, and the histograms of time to
  first token, time per output token, end-to-end latency, prompt and generation tokens
  with vLLM's buckets;
* and for every target the series Prometheus adds to a scrape (``up``,
  ``scrape_duration_seconds`` ...).

Counters only grow, by increments drawn from each series' rate; gauges wander (AR(1)
walks); values have the precision the exporters give them (ticks / 100, whole pages,
two-decimal load, full float64 precision for sums of latencies and durations). Every
target has a fixed offset within the 15 s interval and its scrapes a normal jitter of
``--jitter-ms`` (standard deviation); a jitter within 2 ms is snapped back to the
interval, as Prometheus 2.42 does by default (``scrape.timestamp-tolerance``), so most
timestamps are regular and a few are off by some milliseconds. ``--jitter-ms 0`` gives
perfectly regular timestamps. The samples start at 06:00 UTC the day before, so that
each store keeps them in one day (llmwh's partition) and Prometheus in 2-hour blocks.

The samples are sent as remote-write 1.0 bodies of 500 samples (benchmarks/remote_write.py
sends them, benchmarks/disk_bytes.py measures what was stored), each connection owning a
slice of the series and sending them in time order, as a Prometheus shard does, to each
receiver in turn, fresh in a temporary directory:

* ``llmwh serve`` on the embedded ClickHouse, defaults. Then ``OPTIMIZE ... FINAL`` of
  every table holding samples; the bytes are the active parts' ``bytes_on_disk``
  (``system.parts``), split per column by ``system.parts_columns``.
* ``prometheus --web.enable-remote-write-receiver --web.enable-admin-api``. Then the
  admin API's snapshot (``skip_head=false``), which writes the head as a block beside
  the blocks already compacted (a head spanning more than 3 hours compacts its first
  2 hours itself); the bytes are the snapshot's block directories (chunks, index,
  meta.json, tombstones), and their ``meta.json`` counts the samples. The snapshot is
  the head compacted as Prometheus compacts it, written by the server that received the
  samples; a restart would leave the head in the WAL and ``chunks_head``, and
  ``promtool tsdb create-blocks-from`` would not be the receiver's own storage.
* ``victoria-metrics``. Then ``/internal/force_flush`` and
  ``/internal/force_merge``, polling ``/metrics`` until no merge is active and the
  parts stop changing; the bytes are ``data/`` and ``indexdb/`` of its data directory.

Bytes are file sizes (not blocks allocated), for every store alike. ``--candidates``
then copies llmwh's ``samples`` into tables with other codecs, types and sorting keys in
the same ClickHouse, merges each to one part per partition, checks each holds the same
(id, timestamp, value bits) and prints their bytes a sample.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import disk_bytes
import numpy as np
from remote_write import (
    SAMPLES_PER_BODY,
    Receiver,
    _body,
    _cpu_seconds,
    _labels,
    _log,
    _replay,
    _varint,
)

from warehouse.errors import StoreError
from warehouse.store.base import Store
from warehouse.store.embedded import server_status

STEP_MS = 15_000
RECEIVERS = ("llmwh", "prometheus", "victoria-metrics")
TOLERANCE_MS = 2
"""Prometheus 2.42 snaps a scrape's timestamp to the interval when within this much."""
SEND_SECONDS = 3_600.0
SAMPLE_TABLES = ("samples", "series", "sample_starts", "histogram_samples")
"""llmwh's tables that hold remote-written float samples and their series."""


# -- the data ----------------------------------------------------------------------------


@dataclass
class Series:
    labels: dict[str, str]
    values: np.ndarray


@dataclass
class Target:
    """One scrape target: its series share each scrape's timestamp."""

    job: str
    instance: str
    timestamps: np.ndarray
    series: list[Series] = field(default_factory=list)

    def add(self, name: str, values: np.ndarray, **labels: str) -> None:
        all_labels = {"__name__": name, "instance": self.instance, "job": self.job, **labels}
        self.series.append(Series(dict(sorted(all_labels.items())), values))


class Patterns:
    """Value patterns over ``n`` scrapes, from one seeded generator."""

    def __init__(self, rng: np.random.Generator, n: int):
        self.rng = rng
        self.n = n

    def walk(self, mean: float, spread: float, keep: float = 0.97) -> np.ndarray:
        """An AR(1) walk around ``mean``, with stationary standard deviation ``spread``."""
        noise = self.rng.normal(0.0, spread * math.sqrt(1 - keep * keep), self.n)
        out = np.empty(self.n)
        level = self.rng.normal(0.0, spread)
        for k in range(self.n):
            level = keep * level + noise[k]
            out[k] = level
        return mean + out

    def rate(self, mean: float, spread: float = 0.3) -> np.ndarray:
        """A positive rate wandering around ``mean`` (lognormal walk)."""
        return mean * np.exp(self.walk(0.0, spread) - spread * spread / 2)

    def counter(self, increments: np.ndarray, start: float) -> np.ndarray:
        """Cumulative values: ``start`` plus the running sum of non-negative increments."""
        return start + np.cumsum(np.maximum(increments, 0))

    def poisson_counter(self, per_scrape: np.ndarray | float, start: float) -> np.ndarray:
        return self.counter(self.rng.poisson(per_scrape, self.n).astype(float), start)


def _timestamps(rng: np.random.Generator, start_ms: int, n: int, jitter_ms: float) -> np.ndarray:
    offset = int(rng.integers(0, STEP_MS))
    jitter = np.rint(rng.normal(0.0, jitter_ms, n)) if jitter_ms > 0 else np.zeros(n)
    jitter[np.abs(jitter) <= TOLERANCE_MS] = 0
    return start_ms + offset + np.arange(n, dtype=np.int64) * STEP_MS + jitter.astype(np.int64)


def _meta(p: Patterns, target: Target, samples_scraped: int) -> None:
    """The series Prometheus adds to every scrape."""
    n = p.n
    target.add("up", np.ones(n))
    target.add("scrape_duration_seconds", np.abs(p.walk(0.012, 0.004, 0.5)) + 0.001)
    target.add("scrape_samples_scraped", np.full(n, float(samples_scraped)))
    target.add("scrape_samples_post_metric_relabeling", np.full(n, float(samples_scraped)))
    target.add("scrape_series_added", np.zeros(n))


def _process(p: Patterns, target: Target, go: bool) -> None:
    """The exporter's own process metrics (and a Go program's runtime metrics)."""
    n = p.n
    cpu_ticks = p.poisson_counter(p.rate(1.5), float(p.rng.integers(1_000, 100_000)))
    target.add("process_cpu_seconds_total", cpu_ticks / 100)
    rss = np.rint(p.walk(30e6 if go else 2.5e9, 2e6 if go else 5e7, 0.9) / 4096) * 4096
    target.add("process_resident_memory_bytes", rss)
    target.add("process_open_fds", np.rint(p.walk(12 if go else 90, 2, 0.8)))
    target.add(
        "process_start_time_seconds", np.full(n, 1.76e9 + float(p.rng.integers(0, 5 * 10**6)))
    )
    if go:
        target.add("go_goroutines", np.rint(p.walk(9, 1.5, 0.5)))
        target.add("go_memstats_alloc_bytes", np.rint(p.walk(4e6, 1.5e6, 0.3)))
        target.add("go_memstats_heap_objects", np.rint(p.walk(3e4, 5e3, 0.3)))
        gcs = p.poisson_counter(0.8, float(p.rng.integers(100, 10_000)))
        target.add("go_gc_duration_seconds_count", gcs)
        pauses = p.counter(np.diff(gcs, prepend=gcs[0]) * p.rng.lognormal(-9.5, 0.5, n), 1.2)
        target.add("go_gc_duration_seconds_sum", pauses)
        for q in ("0", "0.25", "0.5", "0.75", "1"):
            scale = {"0": 0.4, "0.25": 0.7, "0.5": 1.0, "0.75": 1.4, "1": 3.0}[q]
            quantile = np.abs(p.walk(6e-5 * scale, 1.5e-5 * scale, 0.7))
            target.add("go_gc_duration_seconds", quantile, quantile=q)
    else:
        for generation in ("0", "1", "2"):
            collected = p.poisson_counter(p.rate(400 / (1 + 10 * int(generation))), 1e5)
            target.add("python_gc_objects_collected_total", collected, generation=generation)


def _node(p: Patterns, rng: np.random.Generator, start_ms: int, jitter_ms: float, i: int) -> Target:
    n = p.n
    t = Target(
        "node", f"10.0.{i // 200}.{i % 200 + 10}:9100", _timestamps(rng, start_ms, n, jitter_ms)
    )
    uptime_ticks = float(rng.integers(5, 60)) * 86400 * 100
    busy = np.clip(p.walk(float(rng.uniform(0.1, 0.6)), 0.1), 0.01, 0.98)
    shares = {"user": 0.62, "system": 0.24, "iowait": 0.04, "irq": 0.01, "softirq": 0.06}
    for cpu in range(8):
        ticks_busy = busy * STEP_MS / 10  # 100 ticks a second
        used = np.zeros(n)
        for mode, share in shares.items():
            inc = rng.poisson(np.clip(ticks_busy * share, 0, None))
            used += inc
            t.add(
                "node_cpu_seconds_total",
                p.counter(inc, uptime_ticks * share * 0.3) / 100,
                cpu=str(cpu),
                mode=mode,
            )
        for mode in ("nice", "steal"):
            t.add(
                "node_cpu_seconds_total",
                p.counter(rng.poisson(0.02, n), 100.0 * cpu) / 100,
                cpu=str(cpu),
                mode=mode,
            )
        idle = np.maximum(STEP_MS / 10 - used + rng.integers(-2, 3, n), 0)
        t.add(
            "node_cpu_seconds_total",
            p.counter(idle, uptime_ticks * 0.7) / 100,
            cpu=str(cpu),
            mode="idle",
        )
    for device, scale in (("eth0", 2e7), ("eth1", 3e6), ("lo", 4e5)):
        for direction in ("receive", "transmit"):
            rate = p.rate(scale * (1.0 if direction == "receive" else 0.6))
            octets = np.rint(rate * 15 * rng.uniform(0.9, 1.1, n))
            packets = np.rint(octets / rng.uniform(600, 1200))
            start = float(rng.integers(10**10, 10**13))
            t.add(f"node_network_{direction}_bytes_total", p.counter(octets, start), device=device)
            t.add(
                f"node_network_{direction}_packets_total",
                p.counter(packets, start / 900),
                device=device,
            )
        t.add("node_network_receive_drop_total", p.poisson_counter(0.01, 3.0), device=device)
        t.add("node_network_receive_errs_total", np.zeros(n), device=device)
    for device in ("nvme0n1", "nvme1n1"):
        for op, scale in (("read", 2e6), ("written", 8e6)):
            ops = rng.poisson(p.rate(scale / 32768 * 15))
            t.add(
                f"node_disk_{op}_bytes_total",
                p.counter(
                    ops * 4096 * rng.integers(1, 16, n), float(rng.integers(10**11, 10**13)) * 4096
                ),
                device=device,
            )
            name = "reads" if op == "read" else "writes"
            t.add(
                f"node_disk_{name}_completed_total",
                p.counter(ops, float(rng.integers(10**7, 10**9))),
                device=device,
            )
            t.add(
                f"node_disk_{op.replace('written', 'write')}_time_seconds_total",
                p.counter(
                    np.rint(ops * rng.uniform(0.05, 0.3, n)), float(rng.integers(10**6, 10**8))
                )
                / 1000,
                device=device,
            )
        t.add(
            "node_disk_io_time_seconds_total",
            p.counter(rng.integers(50, 2000, n), float(rng.integers(10**7, 10**9))) / 1000,
            device=device,
        )
    total_kb = float(rng.choice([128, 256, 512])) * 1024 * 1024
    available = np.clip(p.walk(total_kb * 0.55, total_kb * 0.08, 0.995), 1e6, total_kb)
    cached = np.clip(p.walk(total_kb * 0.3, total_kb * 0.03, 0.995), 1e5, total_kb)
    t.add("node_memory_MemTotal_bytes", np.full(n, total_kb * 1024))
    t.add("node_memory_MemAvailable_bytes", np.rint(available) * 1024)
    t.add("node_memory_MemFree_bytes", np.rint(available - cached * 0.8) * 1024)
    t.add("node_memory_Cached_bytes", np.rint(cached) * 1024)
    t.add("node_memory_Buffers_bytes", np.rint(p.walk(2e5, 2e4, 0.99)) * 1024)
    t.add("node_memory_Active_bytes", np.rint(total_kb - available) * 1024)
    t.add("node_memory_Dirty_bytes", np.rint(np.abs(p.walk(2e3, 1.5e3, 0.6))) * 1024)
    load1 = np.abs(p.walk(8 * busy.mean(), 1.0, 0.9))
    load5 = np.convolve(load1, np.ones(20) / 20, mode="full")[:n]
    load15 = np.convolve(load1, np.ones(60) / 60, mode="full")[:n]
    for name, load in (("node_load1", load1), ("node_load5", load5), ("node_load15", load15)):
        t.add(name, np.round(load, 2))
    for mountpoint, device, size_gb in (
        ("/", "/dev/nvme0n1p2", 200),
        ("/data", "/dev/nvme1n1", 3600),
    ):
        size = size_gb * 2**30
        blocks = size // 4096
        taken = np.cumsum(rng.integers(-200, 400, n)) + int(blocks * rng.uniform(0.2, 0.8))
        labels = {"device": device, "fstype": "ext4", "mountpoint": mountpoint}
        t.add("node_filesystem_size_bytes", np.full(n, float(size)), **labels)
        t.add("node_filesystem_free_bytes", (blocks - taken) * 4096.0, **labels)
        t.add("node_filesystem_avail_bytes", (blocks - taken - blocks // 20) * 4096.0, **labels)
        t.add("node_filesystem_files", np.full(n, float(size // 16384)), **labels)
        t.add(
            "node_filesystem_files_free",
            size // 16384 - 10**5 - np.cumsum(rng.integers(-3, 5, n)).astype(float),
            **labels,
        )
    t.add("node_context_switches_total", p.counter(rng.poisson(p.rate(3e4) * 15), 1e11))
    t.add("node_intr_total", p.counter(rng.poisson(p.rate(2e4) * 15), 8e10))
    t.add("node_forks_total", p.counter(rng.poisson(p.rate(20) * 15), 5e7))
    t.add("node_procs_running", np.rint(np.abs(p.walk(3, 2, 0.3))) + 1)
    t.add("node_procs_blocked", np.rint(np.abs(p.walk(0, 0.4, 0.3))))
    t.add("node_boot_time_seconds", np.full(n, 1.76e9 - uptime_ticks / 100))
    _process(p, t, go=True)
    _meta(p, t, len(t.series) + 5)
    return t


HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""The Prometheus client libraries' default buckets."""


def _histogram(
    n: int,
    t: Target,
    name: str,
    buckets: tuple[float, ...],
    scrape: np.ndarray,
    observed: np.ndarray,
    weights: np.ndarray | None = None,
    **labels: str,
) -> None:
    """A classic histogram (``_bucket`` by ``le``, ``_sum``, ``_count``) of observations
    made at the given scrapes, each counted ``weights`` times (once by default)."""
    w = np.ones(len(observed)) if weights is None else weights
    bucket = np.searchsorted(np.asarray(buckets, dtype=float), observed, side="left")
    width = len(buckets) + 1
    table = np.bincount(scrape * width + bucket, weights=w, minlength=n * width).reshape(n, width)
    cumulative = np.cumsum(np.cumsum(table, axis=1), axis=0)
    for b, le in enumerate((*buckets, math.inf)):
        t.add(f"{name}_bucket", cumulative[:, b], le=_le(float(le)), **labels)
    sums = np.bincount(scrape, weights=observed * w, minlength=n)
    t.add(f"{name}_sum", np.cumsum(sums), **labels)
    t.add(f"{name}_count", cumulative[:, -1], **labels)


def _le(value: float) -> str:
    """A bucket bound as the Go and Python clients print it."""
    if math.isinf(value):
        return "+Inf"
    return repr(float(value)) if value != int(value) else f"{value:.1f}"


def _router(
    p: Patterns, rng: np.random.Generator, start_ms: int, jitter_ms: float, i: int
) -> Target:
    t = Target(
        "inference-router",
        f"10.0.{i // 200}.{i % 200 + 10}:8080",
        _timestamps(rng, start_ms, p.n, jitter_ms),
    )
    rate = p.rate(float(rng.uniform(20, 60)))
    for handler, method, code, share, median in (
        ("/v1/chat/completions", "POST", "200", 0.80, 0.9),
        ("/v1/chat/completions", "POST", "429", 0.01, 0.002),
        ("/v1/chat/completions", "POST", "500", 0.002, 0.3),
        ("/v1/completions", "POST", "200", 0.15, 0.6),
        ("/healthz", "GET", "200", 0.0, 0.0008),
        ("/metrics", "GET", "200", 0.0, 0.004),
    ):
        per_scrape = (
            rate * 15 * share if share else np.full(p.n, 1.0 if handler == "/metrics" else 3.0)
        )
        counts = rng.poisson(per_scrape)
        scrape = np.repeat(np.arange(p.n), counts)
        observed = rng.lognormal(math.log(median), 0.6, len(scrape))
        _histogram(
            p.n,
            t,
            "http_request_duration_seconds",
            HTTP_BUCKETS,
            scrape,
            observed,
            code=code,
            handler=handler,
            method=method,
        )
    _process(p, t, go=True)
    _meta(p, t, len(t.series) + 5)
    return t


TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
N_BUCKETS = (1, 2, 5, 10, 20)
MODELS = (
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
)


def _vllm(p: Patterns, rng: np.random.Generator, start_ms: int, jitter_ms: float, i: int) -> Target:
    n = p.n
    t = Target(
        "vllm", f"10.1.{i // 200}.{i % 200 + 10}:8000", _timestamps(rng, start_ms, n, jitter_ms)
    )
    model = {"model_name": MODELS[i % len(MODELS)]}
    rate = p.rate(float(rng.uniform(2, 8)))
    requests = rng.poisson(rate * 15)
    m = int(requests.sum())
    scrape = np.repeat(np.arange(n), requests)
    prompt = np.clip(np.rint(rng.lognormal(6.5, 1.0, m)), 1, 8000)
    output = np.clip(np.rint(rng.lognormal(5.0, 0.9, m)), 1, 4000)
    ttft = rng.lognormal(math.log(0.12), 0.7, m) * (1 + prompt / 4000)
    tpot = rng.lognormal(math.log(0.035), 0.25, m)
    e2e = ttft + tpot * output

    def summed(values: np.ndarray) -> np.ndarray:
        return np.bincount(scrape, weights=values, minlength=n)

    running = rng.poisson(rate * 8)
    t.add("vllm:num_requests_running", running.astype(float), **model)
    t.add("vllm:num_requests_waiting", np.maximum(running - 40, 0).astype(float), **model)
    t.add("vllm:num_requests_swapped", np.zeros(n), **model)
    total_blocks = 12_000
    used_blocks = np.clip(running * 160 + rng.integers(-300, 300, n), 0, total_blocks)
    t.add("vllm:gpu_cache_usage_perc", 1.0 - (total_blocks - used_blocks) / total_blocks, **model)
    t.add("vllm:cpu_cache_usage_perc", np.zeros(n), **model)
    t.add("vllm:gpu_prefix_cache_hit_rate", np.clip(p.walk(0.35, 0.05, 0.95), 0, 1), **model)
    t.add("vllm:num_preemptions_total", p.poisson_counter(0.05, 12.0), **model)
    t.add(
        "vllm:prompt_tokens_total",
        p.counter(summed(prompt), float(rng.integers(10**8, 10**9))),
        **model,
    )
    t.add(
        "vllm:generation_tokens_total",
        p.counter(summed(output), float(rng.integers(10**7, 10**8))),
        **model,
    )
    stopped = rng.binomial(requests, 0.93)
    t.add("vllm:request_success_total", p.counter(stopped, 1e6), finished_reason="stop", **model)
    t.add(
        "vllm:request_success_total",
        p.counter(requests - stopped, 7e4),
        finished_reason="length",
        **model,
    )
    t.add(
        "vllm:avg_prompt_throughput_toks_per_s",
        summed(prompt) / 15 * rng.uniform(0.8, 1.2, n),
        **model,
    )
    t.add(
        "vllm:avg_generation_throughput_toks_per_s",
        summed(output) / 15 * rng.uniform(0.8, 1.2, n),
        **model,
    )

    for name, buckets, values, weights in (
        ("vllm:time_to_first_token_seconds", TTFT_BUCKETS, ttft, None),
        # One observation per output token after the first (each at its request's TPOT).
        ("vllm:time_per_output_token_seconds", TPOT_BUCKETS, tpot, output - 1),
        ("vllm:e2e_request_latency_seconds", E2E_BUCKETS, e2e, None),
        ("vllm:request_prompt_tokens", TOKEN_BUCKETS, prompt, None),
        ("vllm:request_generation_tokens", TOKEN_BUCKETS, output, None),
        ("vllm:request_params_n", N_BUCKETS, np.ones(m), None),
    ):
        _histogram(n, t, name, tuple(map(float, buckets)), scrape, values, weights, **model)
    t.add(
        "vllm:cache_config_info",
        np.ones(n),
        block_size="16",
        cache_dtype="auto",
        gpu_memory_utilization="0.9",
        num_gpu_blocks=str(total_blocks),
    )
    _process(p, t, go=False)
    _meta(p, t, len(t.series) + 5)
    return t


def build_targets(nodes: int, vllm: int, hours: float, jitter_ms: float, seed: int) -> list[Target]:
    """The seeded scrape data: every target with its timestamps and series' values."""
    rng = np.random.default_rng(seed)
    n = int(hours * 3600_000 // STEP_MS)
    day_ms = 86_400_000
    start_ms = (int(time.time() * 1000) // day_ms - 1) * day_ms + 6 * 3600_000
    p = Patterns(rng, n)
    targets = []
    for i in range(nodes):
        targets.append(_node(p, rng, start_ms, jitter_ms, i))
        targets.append(_router(p, rng, start_ms, jitter_ms, i))
    for i in range(vllm):
        targets.append(_vllm(p, rng, start_ms, jitter_ms, i))
    return targets


# -- bodies ------------------------------------------------------------------------------


_DOUBLE = struct.Struct("<d")


def _sample_bytes(value: float, ts: int) -> bytes:
    """A ``TimeSeries.samples`` field of one sample, written by hand (field 2, bytes:
    ``Sample`` = value as field 1 fixed64, timestamp as field 2 varint); the value is
    written even when 0, which a decoder reads the same."""
    sample = b"\x09" + _DOUBLE.pack(value) + b"\x10" + _varint(ts)
    return b"\x12" + bytes([len(sample)]) + sample


def build_lanes(targets: list[Target], connections: int) -> list[list[bytes]]:
    """The bodies of each connection: a slice of the series, in time order, 500 samples a
    body (the last body of a lane may hold fewer)."""
    flat = [(s, t.timestamps) for t in targets for s in t.series]
    lanes = []
    for c in range(connections):
        mine = [
            (_labels(s.labels), s.values.tolist(), ts.tolist()) for s, ts in flat[c::connections]
        ]
        n = len(mine[0][1]) if mine else 0

        def stream(
            mine: list[tuple[bytes, list[float], list[int]]] = mine, n: int = n
        ) -> Iterator[bytes]:
            for k in range(n):
                for labels, values, stamps in mine:
                    yield labels + _sample_bytes(values[k], stamps[k])

        lane, pending = [], []
        for series in stream():
            pending.append(series)
            if len(pending) == SAMPLES_PER_BODY:
                lane.append(_body(pending))
                pending = []
        if pending:
            lane.append(_body(pending))
        lanes.append(lane)
    return lanes


# -- receivers ---------------------------------------------------------------------------


def measure_llmwh(root: Path, port: int, sent: int) -> dict[str, Any]:
    result = disk_bytes.llmwh(root, port, SAMPLE_TABLES)
    store = disk_bytes.llmwh_store(root)
    try:
        db = store.database
        stored = store.query_arrow(f"SELECT count() AS n FROM {db}.samples FINAL").column("n")
        result["stored_samples"] = int(stored[0].as_py())
        result["columns"] = disk_bytes.column_bytes(store, SAMPLE_TABLES)
        if ARGS.candidates:
            server = server_status(root / "data")
            if server is None:
                raise RuntimeError("the embedded ClickHouse is not running")
            result["candidates"] = measure_candidates(store, db, sent, server.pid)
        return result
    finally:
        store.close()


# -- candidates for `samples` ------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A layout of ``samples``: its columns, how they are filled from ``samples``, how
    ``value`` is read back from them, and its sorting key."""

    name: str
    id: str = "UUID"
    timestamp: str = "DoubleDelta, ZSTD(1)"
    value: str = "Gorilla, ZSTD(1)"
    order: str = "id, timestamp"
    columns: str = ""
    """Columns other than (id, timestamp, value Float64); replaces ``value`` when set."""
    select: str = "value"
    """Their values from ``samples``' row (a ``SELECT`` list after id and timestamp)."""
    read: str = "value"
    """``value`` read back."""
    source: str = "{db}.samples"
    """What ``select`` reads (a subquery may add columns)."""
    check_id: str = "id"
    """The id as the check hashes it (0: a candidate with ids of its own)."""
    settings: str = ""
    """Table settings beside ``index_granularity``."""

    def ddl(self, table: str) -> str:
        values = self.columns or f"value Float64 CODEC({self.value})"
        return (
            f"CREATE TABLE {table} (id {self.id}, "
            f"timestamp DateTime64(3, 'UTC') CODEC({self.timestamp}), {values}) "
            f"ENGINE = ReplacingMergeTree PARTITION BY toDate(timestamp) ORDER BY ({self.order}) "
            f"SETTINGS index_granularity = 8192{', ' + self.settings if self.settings else ''}"
        )


_INTEGRAL = (
    "(value = floor(value) AND abs(value) < 9007199254740992 "
    "AND reinterpretAsUInt64(value) != 9223372036854775808)"
)
"""A value held exactly by an Int64 (not -0.0, which would come back as 0.0)."""
_DECIMALS = (
    "arrayFirst(k -> toInt64(round(value * exp10(k))) / exp10(k) = value "
    "AND abs(value * exp10(k)) < 9007199254740992, range(10))"
)
"""The fewest decimal digits (0-9) that give ``value`` back exactly, else 0 (see below)."""
_IS_DECIMAL = (
    "(isFinite(value) AND reinterpretAsUInt64(value) != 9223372036854775808 "
    f"AND toInt64(round(value * exp10({_DECIMALS}))) / exp10({_DECIMALS}) = value "
    f"AND abs(value * exp10({_DECIMALS})) < 9007199254740992)"
)
_FITS = (
    "(isFinite(value) AND reinterpretAsUInt64(value) != 9223372036854775808 "
    "AND abs(value * exp10(s)) < 9007199254740992 "
    "AND toInt64(round(value * exp10(s))) / exp10(s) = value)"
)
"""``value`` is an Int64 mantissa over 10^s, exactly."""

_ID_BEFORE_0023 = (
    "reinterpretAsUUID(MD5(concat(toString(length(metric_name)), ':', metric_name, "
    "arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, "
    "toString(length(kv.2)), ':', kv.2), arraySort(kv -> kv.1, "
    "arrayZip(mapKeys(labels), mapValues(labels))))))))"
)
"""The series id before migration 0023: the whole MD5 digest of the key."""

CANDIDATES = [
    Candidate("shipped (0001)"),
    Candidate("value ZSTD(1)", value="ZSTD(1)"),
    Candidate("value ZSTD(3)", value="ZSTD(3)"),
    Candidate("value ZSTD(9)", value="ZSTD(9)"),
    Candidate("value Gorilla, ZSTD(3)", value="Gorilla, ZSTD(3)"),
    Candidate("value Gorilla", value="Gorilla"),
    Candidate("value FPC, ZSTD(1)", value="FPC, ZSTD(1)"),
    Candidate("value DoubleDelta, ZSTD(1)", value="DoubleDelta, ZSTD(1)"),
    Candidate("value Delta, ZSTD(1)", value="Delta, ZSTD(1)"),
    Candidate("value Delta, ZSTD(3)", value="Delta, ZSTD(3)"),
    Candidate("value Delta, ZSTD(9)", value="Delta, ZSTD(9)"),
    Candidate("value Delta, LZ4HC(9)", value="Delta, LZ4HC(9)"),
    Candidate("timestamp Delta, ZSTD(1)", timestamp="Delta, ZSTD(1)"),
    Candidate("timestamp Delta, ZSTD(3)", timestamp="Delta, ZSTD(3)"),
    Candidate("timestamp DoubleDelta", timestamp="DoubleDelta"),
    Candidate("timestamp DoubleDelta, ZSTD(3)", timestamp="DoubleDelta, ZSTD(3)"),
    Candidate("id ZSTD(1)", id="UUID CODEC(ZSTD(1))"),
    Candidate(
        "0022 with ZSTD(9)",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(9)",
        value="Delta, ZSTD(9)",
    ),
    Candidate("time first (timestamp, id)", order="timestamp, id"),
    Candidate("hour first (hour, id, timestamp)", order="toStartOfHour(timestamp), id, timestamp"),
    Candidate(
        "id ZSTD(1), ts Delta, value Delta ZSTD(3)",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(1)",
        value="Delta, ZSTD(3)",
    ),
    # Larger compressed blocks: with the key's random series order, a block of a few MB
    # holds several series of each target, which share their scrapes' timestamps and
    # often their values' shapes (a histogram's buckets, a node's CPU modes), so ZSTD
    # finds one series in another.
    *(
        Candidate(
            f"0022 + blocks of {mb} MB, ZSTD({level})",
            id="UUID CODEC(ZSTD(1))",
            timestamp=f"Delta, ZSTD({level})",
            value=f"Delta, ZSTD({level})",
            settings=(
                f"min_compress_block_size = {mb * 2**20}, max_compress_block_size = {mb * 2**20}"
            ),
        )
        for mb, level in ((4, 3), (16, 3), (1, 9), (4, 9), (16, 9), (64, 9), (16, 15))
    ),
    # A key that keeps a scrape target's series together (they share every scrape's
    # timestamp, and a histogram's buckets their shapes): the target's hash first, as if
    # the series id began with it (VictoriaMetrics numbers series as they arrive, which
    # keeps a scrape's series together). Not shippable as a codec change either: reads by
    # id alone would no longer find a series by the key.
    *(
        Candidate(
            f"target key, blocks of {kb} KB, ZSTD({level})",
            id="UUID CODEC(ZSTD(1))",
            timestamp=f"Delta, ZSTD({level})",
            columns=(
                "target UInt64 CODEC(ZSTD(1)), metric LowCardinality(String), "
                f"value Float64 CODEC(Delta, ZSTD({level}))"
            ),
            order="target, metric, id, timestamp",
            source=(
                "(SELECT s.id AS id, s.timestamp AS timestamp, s.value AS value, "
                "cityHash64(t.labels['job'], t.labels['instance']) AS target, "
                "t.metric_name AS metric "
                "FROM {db}.samples AS s INNER JOIN "
                "(SELECT id, any(labels) AS labels, any(metric_name) AS metric_name "
                "FROM {db}.series GROUP BY id) AS t ON t.id = s.id)"
            ),
            select="target, metric, value",
            settings=(
                f"min_compress_block_size = {kb * 1024}, max_compress_block_size = {kb * 1024}"
                if kb != 64
                else ""
            ),
        )
        for kb, level in ((64, 3), (64, 9), (1024, 9))
    ),
    # The same order from the id alone: a series id whose one half is the target's hash
    # (either half, to see which one ClickHouse sorts UUIDs by first), the other the
    # series' own; a read by id then finds the series by the key.
    *(
        Candidate(
            f"id = target hash + series hash ({half}), 1 MB blocks, ZSTD(9)",
            id="UUID CODEC(ZSTD(1))",
            timestamp="Delta, ZSTD(9)",
            value="Delta, ZSTD(9)",
            source=(
                "(SELECT s.timestamp AS timestamp, s.value AS value, "
                f"reinterpretAsUUID(concat({pair})) AS id "
                "FROM {db}.samples AS s INNER JOIN "
                "(SELECT id, cityHash64(any(labels)['job'], any(labels)['instance']) AS target "
                "FROM {db}.series GROUP BY id) AS t ON t.id = s.id)"
            ),
            settings=f"min_compress_block_size = {2**20}, max_compress_block_size = {2**20}",
            check_id="0",
        )
        for half, pair in (
            (
                "first",
                "toFixedString(reinterpretAsString(target), 8), "
                "toFixedString(reinterpretAsString(cityHash64(s.id)), 8)",
            ),
            (
                "second",
                "toFixedString(reinterpretAsString(cityHash64(s.id)), 8), "
                "toFixedString(reinterpretAsString(target), 8)",
            ),
        )
    ),
    # Migration 0023's layout (ids that begin with their target, so llmwh's own samples
    # are already in target order) with other levels and block sizes.
    *(
        Candidate(
            f"0023: blocks of {kb} KB, timestamp ZSTD({ts}), value ZSTD({level})",
            id="UUID CODEC(ZSTD(1))",
            timestamp=f"Delta, ZSTD({ts})",
            value=f"Delta, ZSTD({level})",
            settings=(
                f"min_compress_block_size = {kb * 1024}, max_compress_block_size = {kb * 1024}"
            ),
        )
        for kb, ts, level in (
            (1024, 9, 9),
            (1024, 3, 9),
            (1024, 9, 12),
            (1024, 9, 15),
            (1024, 9, 10),
            (1024, 9, 11),
            (1024, 12, 12),
            (2048, 9, 9),
            (512, 9, 9),
        )
    ),
    # 0022 as it was, on the ids before 0023 (the whole MD5 of the key, in no target's
    # order): what reading one series cost before.
    Candidate(
        "0022 on the ids before 0023",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(1)",
        value="Delta, ZSTD(3)",
        source=(
            "(SELECT s.timestamp AS timestamp, s.value AS value, t.old AS id "
            "FROM {db}.samples AS s INNER JOIN "
            f"(SELECT id, {_ID_BEFORE_0023} AS old FROM (SELECT id, any(metric_name) "
            "AS metric_name, any(labels) AS labels FROM {db}.series GROUP BY id)) AS t "
            "ON t.id = s.id)"
        ),
        check_id="0",
    ),
    # Designs that change the type of `value` (not shippable as a codec change: every
    # writer and reader of `value` would change). Integral values in an Int64 (counters,
    # bucket counts, bytes) and the rest as floats:
    Candidate(
        "split: Int64 whole + Float64 rest",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(1)",
        columns="whole Int64 CODEC(Delta, ZSTD(3)), rest Float64 CODEC(Gorilla, ZSTD(3))",
        select=f"if({_INTEGRAL}, toInt64(value), 0), if({_INTEGRAL}, 0, value)",
        read="if(rest = 0 AND reinterpretAsUInt64(rest) = 0, toFloat64(whole), rest)",
    ),
    # As VictoriaMetrics stores them: a decimal mantissa and a power of ten (the fewest
    # digits that give the value back exactly), the rest as floats.
    Candidate(
        "decimal: Int64 mantissa + Int8 digits + rest",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(1)",
        columns=(
            "mantissa Int64 CODEC(Delta, ZSTD(3)), digits Int8 CODEC(ZSTD(3)), "
            "rest Float64 CODEC(Gorilla, ZSTD(3))"
        ),
        select=(
            f"if({_IS_DECIMAL}, toInt64(round(value * exp10({_DECIMALS}))), 0), "
            f"if({_IS_DECIMAL}, {_DECIMALS}, -1), if({_IS_DECIMAL}, 0, value)"
        ),
        read="if(digits >= 0, mantissa / exp10(digits), rest)",
    ),
    # The same with one power of ten per series (the most digits any of its values
    # needs), as VictoriaMetrics has one per block of a series: consecutive mantissas
    # of a counter then differ by its increments.
    Candidate(
        "decimal per series: mantissa + digits + rest",
        id="UUID CODEC(ZSTD(1))",
        timestamp="Delta, ZSTD(1)",
        columns=(
            "mantissa Int64 CODEC(Delta, ZSTD(3)), digits Int8 CODEC(ZSTD(3)), "
            "rest Float64 CODEC(Gorilla, ZSTD(3))"
        ),
        source=(
            "(SELECT id, timestamp, value, max(d) OVER (PARTITION BY id) AS s FROM "
            f"(SELECT id, timestamp, value, if({_IS_DECIMAL}, {_DECIMALS}, 0) AS d "
            "FROM {db}.samples))"
        ),
        select=(
            f"if({_FITS}, toInt64(round(value * exp10(s))), 0), "
            f"if({_FITS}, s, -1), if({_FITS}, 0, value)"
        ),
        read="if(digits >= 0, mantissa / exp10(digits), rest)",
    ),
]


def _series_read_ms(store: Store, table: str, read: str, runs: int = 7) -> float:
    """Median time to read one series' samples (``--read-runs`` series in turn), on the
    server."""
    ids = store.query_arrow(
        f"SELECT id FROM {table} GROUP BY id ORDER BY cityHash64(id) LIMIT {runs}"
    ).column("id")
    times = []
    for uid in ids.to_pylist():
        started = time.perf_counter()
        store.query_arrow(
            f"SELECT timestamp, {read} AS value FROM {table} FINAL WHERE id = {{id:UUID}} "
            "ORDER BY timestamp",
            {"id": str(uid)},
        )
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure_candidates(store: Store, db: str, sent: int, server_pid: int) -> list[dict[str, Any]]:
    """Each candidate's bytes a sample on llmwh's own samples, merged like them."""
    check = (
        "SELECT count() AS n, "
        "sum(cityHash64({id}, timestamp, reinterpretAsUInt64({value}))) AS h FROM {t} FINAL"
    )
    references = {
        key: store.query_arrow(check.format(t=f"{db}.samples", id=key, value="value")).to_pylist()[
            0
        ]
        for key in {c.check_id for c in CANDIDATES}
    }
    out: list[dict[str, Any]] = []
    for k, candidate in enumerate(CANDIDATES):
        if ARGS.candidate_names and candidate.name not in ARGS.candidate_names:
            continue
        local = f"bps_candidate_{k}"
        table = f"{db}.{local}"
        store.command(f"DROP TABLE IF EXISTS {table}")
        started = time.perf_counter()
        cpu_before = sum(_cpu_seconds(server_pid))
        try:
            store.command(candidate.ddl(table))
            store.command(
                f"INSERT INTO {table} SELECT id, timestamp, {candidate.select} "
                f"FROM {candidate.source.format(db=db)}"
            )
        except StoreError as exc:  # a codec ClickHouse refuses is a result
            out.append({"candidate": candidate.name, "error": str(exc).splitlines()[0][:160]})
            continue
        store.command(f"OPTIMIZE TABLE {table} FINAL")
        write_s = time.perf_counter() - started
        cpu_s = sum(_cpu_seconds(server_pid)) - cpu_before
        answer = store.query_arrow(
            check.format(t=table, id=candidate.check_id, value=candidate.read)
        ).to_pylist()[0]
        reference = references[candidate.check_id]
        read_ms = _series_read_ms(store, table, candidate.read, ARGS.read_runs)
        bytes_ = disk_bytes.table_bytes(store, (local,))[local]
        cols = {c["column"]: c["bytes"] for c in disk_bytes.column_bytes(store, (local,))}
        values = sum(b for c, b in cols.items() if c not in ("id", "timestamp", "target", "metric"))
        out.append(
            {
                "candidate": candidate.name,
                "bytes": bytes_["bytes"],
                "bytes_per_sample": bytes_["bytes"] / sent,
                "columns_per_sample": {
                    **{c: b / sent for c, b in cols.items()},
                    "value": values / sent,
                },
                "same_samples": answer == reference,
                "write_s": round(write_s, 1),
                "write_cpu_s": round(cpu_s, 2),
                "series_read_ms": round(read_ms, 1),
            }
        )
        _log(
            f"  candidate {candidate.name}: {bytes_['bytes'] / sent:.3f} bytes/sample, "
            f"same: {answer == reference}, insert+merge {write_s:.1f}s, a series {read_ms:.1f}ms"
        )
        store.command(f"DROP TABLE {table}")
    return out


def run_one(name: str, lanes: list[list[bytes]], sent: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"llmwh-bps-{name}-") as tmp:
        receiver = Receiver(name, Path(tmp))
        try:
            receiver.start()
            tally, elapsed = _replay(receiver.port, lanes, SEND_SECONDS)
            bad = {str(s): n for s, n in tally.items() if not (isinstance(s, int) and s < 300)}
            _log(f"  {name}: sent in {elapsed:.1f}s, non-2xx {bad or 'none'}")
            if name == "llmwh":
                result = measure_llmwh(receiver.root, receiver.port, sent)
            else:
                result = disk_bytes.measure(name, receiver.root, receiver.port)
            result.update(
                receiver=name, sent_samples=sent, send_seconds=round(elapsed, 1), non_2xx=bad
            )
            result["bytes_per_sample"] = result["bytes"] / sent
            return result
        finally:
            receiver.stop()


# -- report ------------------------------------------------------------------------------


def print_table(results: list[dict[str, Any]], series: int, sent: int) -> None:
    a = ARGS
    print(
        f"\n{series:,} series x {sent // max(series, 1):,} scrapes at 15 s = {sent:,} samples "
        f"({a.nodes} nodes, {a.vllm} vLLM servers, {a.hours:g} h, jitter sd {a.jitter_ms:g} ms, "
        f"seed {a.seed})"
    )
    header = f"{'receiver':<18} {'stored':>11} {'bytes':>13} {'bytes/sample':>13}  of which"
    print(header)
    print("-" * len(header))
    for r in results:
        if r["receiver"] == "llmwh":
            parts = ", ".join(
                f"{t} {v['bytes'] / sent:.3f}" for t, v in r["tables"].items() if v["bytes"]
            )
        elif r["receiver"] == "prometheus":
            parts = (
                f"chunks {r['chunks_bytes'] / sent:.3f}, index {r['index_bytes'] / sent:.3f} "
                f"({r['blocks']} blocks)"
            )
        else:
            parts = f"data {r['data_bytes'] / sent:.3f}, indexdb {r['indexdb_bytes'] / sent:.3f}"
        print(
            f"{r['receiver']:<18} {r['stored_samples']:>11,} {r['bytes']:>13,} "
            f"{r['bytes_per_sample']:>13.3f}  {parts}"
        )
    for r in results:
        if r["non_2xx"]:
            print(f"{r['receiver']} non-2xx: {r['non_2xx']}")
    for r in results:
        if r["receiver"] != "llmwh":
            continue
        print("\nllmwh per column (active parts after OPTIMIZE FINAL), bytes a sample:")
        print(f"{'table.column':<30} {'type':<44} {'on disk':>8} {'raw':>8} {'ratio':>6}")
        for c in r["columns"]:
            if not c["bytes"]:
                continue
            ratio = c["raw"] / c["compressed"] if c["compressed"] else 0
            print(
                f"{c['table'] + '.' + c['column']:<30} {c['type'][:44]:<44} "
                f"{c['bytes'] / sent:>8.3f} {c['raw'] / sent:>8.3f} {ratio:>6.1f}"
            )
        if r.get("candidates"):
            print(
                "\ncandidates for samples (same samples, one part per partition), bytes a sample:"
            )
            print(
                f"{'candidate':<44} {'total':>6} {'id':>6} {'ts':>6} {'value':>6} "
                f"{'write s':>7} {'CPU s':>6} {'read ms':>7}  same"
            )
            for c in r["candidates"]:
                if "error" in c:
                    print(f"{c['candidate']:<44} refused: {c['error']}")
                    continue
                cols = c["columns_per_sample"]
                print(
                    f"{c['candidate']:<44} {c['bytes_per_sample']:>6.3f} {cols.get('id', 0):>6.3f} "
                    f"{cols.get('timestamp', 0):>6.3f} {cols.get('value', 0):>6.3f} "
                    f"{c['write_s']:>7.1f} {c['write_cpu_s']:>6.2f} {c['series_read_ms']:>7.1f}  "
                    f"{c['same_samples']}"
                )
            print("write s: insert and OPTIMIZE FINAL of every sample; CPU s: the ClickHouse")
            print("  server's CPU seconds meanwhile; read ms: one series'")
            print(f"  samples read with FINAL (median of {ARGS.read_runs} series), through HTTP")
    print("bytes: file sizes after merges (llmwh: active parts; Prometheus: the snapshot's")
    print("  blocks; VictoriaMetrics: data/ and indexdb/), over the samples sent")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=12, help="hosts (node_exporter + router)")
    parser.add_argument("--vllm", type=int, default=8, help="vLLM servers")
    parser.add_argument("--hours", type=float, default=4.0, help="hours of scrapes at 15 s")
    parser.add_argument("--jitter-ms", type=float, default=3.0, help="sd of scrape time jitter")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--receivers", default=",".join(RECEIVERS))
    parser.add_argument("--candidates", action="store_true", help="measure codecs for samples")
    parser.add_argument(
        "--candidate-names",
        type=lambda s: s.split(";"),
        default=None,
        help="only these candidates (';'-separated names)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--read-runs", type=int, default=7, help="series read, one at a time, per candidate"
    )
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


ARGS: argparse.Namespace


def main() -> None:
    global ARGS
    ARGS = parse_args()
    receivers = [r.strip() for r in ARGS.receivers.split(",") if r.strip()]
    if set(receivers) - set(RECEIVERS):
        sys.exit(f"unknown receivers; known: {', '.join(RECEIVERS)}")
    started = time.perf_counter()
    targets = build_targets(ARGS.nodes, ARGS.vllm, ARGS.hours, ARGS.jitter_ms, ARGS.seed)
    ARGS.start_ms = int(min(t.timestamps[0] for t in targets))
    series = sum(len(t.series) for t in targets)
    sent = series * len(targets[0].timestamps)
    lanes = build_lanes(targets, ARGS.connections)
    _log(f"built {series:,} series, {sent:,} samples in {time.perf_counter() - started:.1f}s")
    results = [run_one(name, lanes, sent) for name in receivers]
    if ARGS.json:
        print(
            json.dumps(
                {"series": series, "samples": sent, "args": vars(ARGS), "results": results},
                indent=2,
                default=str,
            )
        )
    else:
        print_table(results, series, sent)


if __name__ == "__main__":
    main()
