"""A real Prometheus remote-writes to a real `llmwh serve`; the warehouse ends up holding
exactly the samples Prometheus holds, as its own HTTP API reports them."""

from __future__ import annotations

import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from polling import poll_until
from senders import (
    RUN_SECONDS,
    comparable,
    free_port,
    get_json,
    require_binary,
    wait_for,
    warehouse_samples,
)


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


def test_every_sample_prometheus_holds_is_in_the_warehouse_and_nothing_else(receiver, tmp_path):
    write_url, store_url = receiver
    prometheus, base = start_prometheus(tmp_path, f"{write_url}/api/v1/write")
    try:
        start = time.time()
        time.sleep(RUN_SECONDS)  # the load: Prometheus scrapes and sends for this long
        end = time.time() - 3  # a window Prometheus has certainly scraped
        poll_until(
            lambda: sent_up_to(base, end),
            "Prometheus to have every sample of the window acknowledged",
            timeout=60,
            every=0.5,
        )
        expected = prometheus_samples(base, start, end)
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
    got = warehouse_samples(store_url, start, end)
    assert len(expected) > 1000  # the run really produced data
    assert expected - got == set(), f"{len(expected - got)} samples missing"
    assert got - expected == set(), f"{len(got - expected)} samples Prometheus does not hold"
