"""A real Prometheus remote-writes to a real `llmwh serve`; the warehouse ends up holding
exactly the samples Prometheus holds, as its own HTTP API reports them."""

from __future__ import annotations

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
from pathlib import Path

import pytest

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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not come up")


@pytest.fixture
def receiver(embedded_server, tmp_path):
    """`llmwh serve` on the session's ClickHouse, in a database of its own."""
    url = embedded_server.store_url(f"prw_{uuid.uuid4().hex[:10]}")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warehouse",
            "serve",
            "--store",
            url,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")},
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", url
    finally:
        process.terminate()
        process.wait(timeout=30)
        store = open_store(url)
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()


def start_prometheus(tmp_path: Path, write_url: str) -> tuple[subprocess.Popen, str]:
    binary = require_binary("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{port}"]
remote_write:
  - url: {write_url}
    queue_config:
      batch_send_deadline: 1s
      max_samples_per_send: 500
    metadata_config:
      send_interval: 2s
"""
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
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


def prometheus_samples(base: str, start: float, end: float) -> set[tuple]:
    """Every raw sample Prometheus holds in [start, end], as (labels, ms, value)."""
    query = urllib.parse.urlencode(
        {"query": f'{{__name__=~".+"}}[{int(end - start) + 1}s]', "time": f"{end:.3f}"}
    )
    result = get_json(f"{base}/api/v1/query?{query}")["data"]["result"]
    samples = set()
    for series in result:
        labels = tuple(sorted(series["metric"].items()))
        for ts, value in series["values"]:
            ms = round(float(ts) * 1000)
            if start * 1000 <= ms <= end * 1000:
                samples.add((labels, ms, comparable(float(value))))
    return samples


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


def caught_up(base: str, end: float) -> bool:
    metric = "prometheus_remote_storage_queue_highest_sent_timestamp_seconds"
    result = get_json(f"{base}/api/v1/query?query={metric}")["data"]["result"]
    return bool(result) and float(result[0]["value"][1]) >= end


def test_every_sample_prometheus_holds_is_in_the_warehouse_and_nothing_else(receiver, tmp_path):
    write_url, store_url = receiver
    prometheus, base = start_prometheus(tmp_path, f"{write_url}/api/v1/write")
    try:
        start = time.time()
        time.sleep(RUN_SECONDS)
        end = time.time() - 3  # a window Prometheus has certainly scraped and sent
        deadline = time.monotonic() + 60
        while not caught_up(base, end) and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)  # the last batch acknowledged means committed; allow the send loop
        expected = prometheus_samples(base, start, end)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
    got = warehouse_samples(store_url, start, end)
    assert len(expected) > 1000  # the run really produced data
    assert expected - got == set(), f"{len(expected - got)} samples missing"
    assert got - expected == set(), f"{len(got - expected)} samples Prometheus does not hold"
