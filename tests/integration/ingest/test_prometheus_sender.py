"""A real Prometheus remote-writes to a real `llmwh serve`; the warehouse ends up holding
exactly the samples Prometheus holds, as its own HTTP API reports them."""

from __future__ import annotations

import time
import urllib.parse

import pytest
from polling import poll_until
from senders import (
    RUN_SECONDS,
    comparable,
    get_json,
    sent_up_to,
    settle,
    start_prometheus,
    warehouse_samples,
)


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


@pytest.mark.slow
def test_every_sample_prometheus_holds_is_in_the_warehouse_and_nothing_else(receiver, tmp_path):
    write_url, store_url = receiver
    prometheus, base = start_prometheus(tmp_path, remote_write=f"{write_url}/api/v1/write")
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
    settle(write_url)  # acknowledged: in the receiver's log, in the store shortly after
    got = warehouse_samples(store_url, start, end)
    assert len(expected) > 1000  # the run really produced data
    assert expected - got == set(), f"{len(expected - got)} samples missing"
    assert got - expected == set(), f"{len(got - expected)} samples Prometheus does not hold"
