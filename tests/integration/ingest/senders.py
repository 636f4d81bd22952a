"""Helpers shared by the tests in which real senders (Prometheus, vmagent, the
OpenTelemetry SDK) write to `llmwh serve`."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import poll_until

from warehouse.store import open_store

RUN_SECONDS = 20
STALE_NAN = struct.pack("<Q", 0x7FF0000000000002)


def comparable(value: float) -> float | str:
    """NaN never equals itself; the API spells every NaN the same, so compare it as a word."""
    return "NaN" if math.isnan(value) else value


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("LLMWH_REQUIRE_SYSTEM_DEPS"):
            pytest.fail(f"{name} is required here (CI) but not installed")
        pytest.skip(f"{name} is not installed: `make system-deps` (root) installs it")
    return path


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(url: str, timeout: float = 30) -> None:
    """Wait until ``url`` answers 2xx (a server is up and ready)."""
    poll_until(
        lambda: urllib.request.urlopen(url, timeout=1).close() or True,
        f"{url} to answer",
        timeout=timeout,
        ignoring=(OSError,),
    )


def wal_inserted(base: str) -> bool:
    """Whether `llmwh serve` at ``base`` holds nothing it acknowledged that its store
    lacks: its write-ahead log (on by default) is empty. The log inserts its writes in
    the order they came, so once it is seen empty every write acknowledged before is in
    the store."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    # One line, or one a receiver process (--workers: labelled worker="i").
    pending = [line for line in lines if line.startswith("llmwh_receiver_wal_pending_bytes")]
    return bool(pending) and all(line.endswith(" 0.0") for line in pending)


def settle(base: str, timeout: float = 30) -> None:
    """Wait until every write `llmwh serve` at ``base`` acknowledged so far is in its
    store (with the write-ahead log, up to wal_flush_ms after its 2xx)."""
    poll_until(
        lambda: wal_inserted(base),
        f"{base} to have inserted what it acknowledged",
        timeout=timeout,
        every=0.1,
        ignoring=(OSError,),
    )


def warehouse_samples(url: str, start: float, end: float) -> set[tuple]:
    store = open_store(url)
    try:
        rows = store.query_arrow(
            f"""
            SELECT s.metric_name AS name, s.labels AS labels,
                   toUnixTimestamp64Milli(p.timestamp) AS ms, p.value AS value
            FROM {store.database}.samples AS p FINAL
            INNER JOIN (SELECT id, any(metric_name) AS metric_name, any(labels) AS labels
                        FROM {store.database}.series GROUP BY id) AS s ON s.id = p.id
            WHERE p.timestamp BETWEEN fromUnixTimestamp64Milli({int(start * 1000)})
                                  AND fromUnixTimestamp64Milli({int(end * 1000)})
            """
        ).to_pylist()
    finally:
        store.close()
    samples = set()
    for row in rows:
        if struct.pack("<d", row["value"]) == STALE_NAN:
            continue  # staleness markers: stored, but Prometheus's query API never shows them
        labels = tuple(sorted([*dict(row["labels"]).items(), ("__name__", row["name"])]))
        samples.add((labels, row["ms"], comparable(row["value"])))
    return samples


def start_prometheus(
    directory: Path, *, remote_write: str | None = None, remote_read: str | None = None
) -> tuple[subprocess.Popen, str]:
    """Debian's Prometheus on its own port and TSDB in ``directory``: scraping itself
    every second and remote-writing to ``remote_write``, or scraping nothing and reading
    through ``remote_read`` (an empty TSDB of its own, so every answer comes from there)."""
    binary = require_binary("prometheus")
    port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "prometheus.yml"
    text = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
    if remote_write:
        text += f"""scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{port}"]
remote_write:
  - url: {remote_write}
    queue_config:
      batch_send_deadline: 1s
      max_samples_per_send: 500
    metadata_config:
      send_interval: 2s
"""
    if remote_read:
        text += f"""remote_read:
  - url: {remote_read}
    read_recent: true
"""
    config.write_text(text)
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(f"{base}/-/ready")
    return process, base


def sent_up_to(base: str, end: float) -> bool:
    """Whether every sample Prometheus scraped up to ``end`` has been acknowledged.

    It has sent one stamped ``end`` or later (so every earlier one has been queued:
    it scrapes only itself, in order) and none is pending (queued, being sent or
    retried), as one scrape of its own metrics says: one query reads both.
    """
    sent = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"
    pending = "prometheus_remote_storage_samples_pending"
    query = urllib.parse.urlencode({"query": f"{sent} >= {end:.3f} and on() sum({pending}) == 0"})
    return bool(get_json(f"{base}/api/v1/query?{query}")["data"]["result"])


# -- `llmwh serve` and `llmwh` commands on a store of their own ----------------------------


def clean_environment() -> dict[str, str]:
    """This process's environment without LLMWH_ settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}


def store_url_for(backend: str, embedded_server, folder: Path, database: str) -> str:
    """A store of its own on ``backend``: a fresh database on the session's ClickHouse;
    for chdb and DuckDB, files under ``folder`` (this process may hold another chdb
    directory open in process, and chdb takes one a process)."""
    return {
        "clickhouse": embedded_server.store_url(f"{database}_{uuid.uuid4().hex[:10]}"),
        "chdb": f"chdb://{folder / 'chdb'}?database={database}",
        "duckdb": f"duckdb://{folder / 'warehouse.duckdb'}?database={database}",
    }[backend]


def drop_store(url: str) -> None:
    """Drop a ClickHouse store's database (files of the others go with their folder)."""
    if url.startswith("http"):
        store = open_store(url)
        store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
        store.close()


@contextlib.contextmanager
def running_serve(url: str, folder: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`llmwh serve --store URL` while the block runs (its base URL, once ready); then
    stopped with SIGTERM, which must end it cleanly (every acknowledged write drained)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "warehouse", "serve", "--store", url,
         "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder,
        env=clean_environment() | (env or {}),
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output


def llmwh_command(url: str, folder: Path, *args: str) -> str:
    """`llmwh ARGS --store URL` as a user runs it; its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "warehouse", *args, "--store", url],
        capture_output=True, text=True, timeout=120, cwd=folder, env=clean_environment(),
    )  # fmt: skip
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def emit_shaped_spans(tracer, id_prefix: str = "") -> None:
    """40 spans shaped as vLLM's ``llm_request`` (request ids ``{prefix}cmpl-N``), one
    failed GenAI client span (``{prefix}chatcmpl-x``, a rate limit) and a health check,
    which is not an LLM request: 42 spans, 41 requests."""
    from opentelemetry.trace import Status, StatusCode

    now_ns = time.time_ns()
    for n in range(40):
        with tracer.start_as_current_span("llm_request", start_time=now_ns + n) as span:
            span.set_attributes(
                {
                    "gen_ai.request.id": f"{id_prefix}cmpl-{n}",
                    "gen_ai.response.model": "llama-3-8b",
                    "gen_ai.usage.prompt_tokens": 100 + n,
                    "gen_ai.usage.completion_tokens": 10,
                    "gen_ai.latency.time_to_first_token": n / 100,
                    "gen_ai.latency.e2e": 1 + n / 100,
                }
            )
    with tracer.start_as_current_span("chat gpt-4o") as span:
        span.set_attributes(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.id": f"{id_prefix}chatcmpl-x",
                "error.type": "RateLimitError",
            }
        )
        span.set_status(Status(StatusCode.ERROR))
    with tracer.start_as_current_span("GET /healthz"):  # not an LLM request
        pass
