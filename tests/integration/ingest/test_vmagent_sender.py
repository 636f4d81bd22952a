"""vmagent (VictoriaMetrics' agent) remote-writes to `llmwh serve` and to a real
VictoriaMetrics at once; the warehouse holds the same samples VictoriaMetrics does."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
from polling import poll_until
from senders import RUN_SECONDS, free_port, require_binary, wait_for, warehouse_samples


def victoria_metrics(tmp_path) -> tuple[subprocess.Popen, str]:
    binary = require_binary("victoria-metrics")
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={tmp_path / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=1y",
            "-loggerLevel=ERROR",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_for(f"{base}/health")
    return process, base


def vmagent(tmp_path, write_urls: list[str]) -> subprocess.Popen:
    binary = require_binary("vmagent")
    port = free_port()
    config = tmp_path / "scrape.yml"
    config.write_text(
        f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: vmagent
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""
    )
    process = subprocess.Popen(
        [
            binary,
            f"-promscrape.config={config}",
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-remoteWrite.tmpDataPath={tmp_path / 'vmagent'}",
            "-loggerLevel=ERROR",
            # One queue per URL: each receiver gets the scrapes in the order they were
            # made, so one that holds a scrape holds every earlier one.
            "-remoteWrite.queues=1",
            *(f"-remoteWrite.url={url}" for url in write_urls),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(f"http://127.0.0.1:{port}/health")
    return process


def exported(base: str, start: float, end: float) -> dict[tuple, float]:
    urllib.request.urlopen(f"{base}/internal/force_flush", timeout=10).close()
    # The bounds in whole milliseconds, truncated as warehouse_samples truncates them:
    # "%.3f" of the raw seconds rounds, and took in a scrape made within half a
    # millisecond after ``end`` that the warehouse's bound left out.
    since, until = int(start * 1000) / 1000, int(end * 1000) / 1000
    query = urllib.parse.urlencode(
        {"match[]": '{__name__=~".+"}', "start": f"{since:.3f}", "end": f"{until:.3f}"}
    )
    samples = {}
    with urllib.request.urlopen(f"{base}/api/v1/export?{query}", timeout=30) as response:
        for line in response:
            series = json.loads(line)
            labels = tuple(sorted(series["metric"].items()))
            for ms, value in zip(series["timestamps"], series["values"], strict=True):
                samples[(labels, ms)] = float(value)
    return samples


@pytest.mark.slow
def test_vmagent_samples_match_victoria_metrics(receiver, tmp_path):
    write_url, store_url = receiver
    vm, vm_base = victoria_metrics(tmp_path)
    agent = vmagent(tmp_path, [f"{write_url}/api/v1/write", f"{vm_base}/api/v1/write"])
    try:
        start = time.time()
        time.sleep(RUN_SECONDS)  # the load: vmagent scrapes and sends for this long
        end = time.time()
        poll_until(
            lambda: (
                len(warehouse_samples(store_url, end + 0.001, end + 600)),
                len(exported(vm_base, end + 0.001, end + 600)),
            ),
            "both receivers to hold a scrape made after the window (so all of it)",
            until=all,
            timeout=30,
            every=0.5,
        )
        agent.terminate()
        agent.wait(timeout=30)
        expected = exported(vm_base, start, end)
    finally:
        agent.kill()
        vm.terminate()
        vm.wait(timeout=30)
    got = {(labels, ms): value for labels, ms, value in warehouse_samples(store_url, start, end)}
    assert len(expected) > 500
    assert set(expected) == set(got)
    # VictoriaMetrics stores floats as decimals (about 12 significant digits).
    for key, value in expected.items():
        mine = got[key]
        assert (mine == "NaN" and math.isnan(value)) or math.isclose(mine, value, rel_tol=1e-11)
