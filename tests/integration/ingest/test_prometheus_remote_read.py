"""Two real Prometheus servers: one scrapes itself and remote-writes to `llmwh serve`, the
other has an empty TSDB and reads through the warehouse's remote read. Asked the same
PromQL over the same window, they give the same answers."""

from __future__ import annotations

import struct
import time
import urllib.parse
import urllib.request

import cramjam
import pytest
from polling import poll_until
from senders import RUN_SECONDS, get_json, sent_up_to, settle, start_prometheus

from warehouse.wire.prometheus import V1

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]

INSTANT = [
    "prometheus_http_requests_total",
    "rate(prometheus_tsdb_head_samples_appended_total[5s])",
    "sum by (job, handler) (rate(prometheus_http_requests_total[10s]))",
    "histogram_quantile(0.9, sum by (le) "
    "(rate(prometheus_http_request_duration_seconds_bucket[10s])))",
    '{__name__=~"prometheus_tsdb_head_(series|chunks)", job=~"prom.*"}',
    'go_gc_duration_seconds{quantile!~"0|1"}',
    'prometheus_http_requests_total{handler!="/metrics", code="200"}',
    'count by (__name__) ({__name__=~"go_memstats_.*"})',
    "absent(no_such_metric)",
    'absent(up{job="prometheus"})',
]
RANGE = [
    "up",
    "rate(prometheus_http_requests_total[5s])",
    "sum(scrape_samples_scraped)",
]


def promql(base: str, path: str, **params: str) -> list[dict]:
    query = urllib.parse.urlencode(params)
    answer = get_json(f"{base}/api/v1/{path}?{query}")
    assert answer["status"] == "success", answer
    return sorted(answer["data"]["result"], key=lambda r: sorted(r["metric"].items()))


def write(url: str, name: str, points: list[tuple[int, float]]) -> None:
    request = V1.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value=name)
    series.labels.add(name="job", value="crafted")
    for ms, value in points:
        series.samples.add(timestamp=ms, value=value)
    body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    sent = urllib.request.Request(
        f"{url}/api/v1/write",
        data=body,
        headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"},
    )
    with urllib.request.urlopen(sent, timeout=10) as response:
        assert response.status == 204
    settle(url)  # acknowledged: in the receiver's log, readable once inserted


@pytest.fixture(scope="module")
def both(module_receiver, tmp_path_factory):
    """(the writing Prometheus, the reading one, the window both hold, the warehouse).

    One run for the module: the crafted series a test writes is one no query of the
    other test selects."""
    url, _ = module_receiver
    tmp_path = tmp_path_factory.mktemp("prometheus")
    writer, written = start_prometheus(tmp_path / "writer", remote_write=f"{url}/api/v1/write")
    reader = None
    try:
        start = time.time()
        end = start + RUN_SECONDS  # the load: Prometheus scrapes and sends for this long
        poll_until(
            lambda: sent_up_to(written, end),
            "the writer to have every sample of the window acknowledged",
            timeout=RUN_SECONDS + 60,
            every=0.5,
        )
        settle(url)
        reader, read = start_prometheus(tmp_path / "reader", remote_read=f"{url}/api/v1/read")
        yield written, read, (start, end), url
    finally:
        for process in (writer, reader):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)


@pytest.mark.slow
def test_promql_through_remote_read_answers_as_the_writers_own_tsdb(both):
    written, read, (start, end), _ = both
    at = f"{end - 1:.3f}"
    for query in INSTANT:
        expected = promql(written, "query", query=query, time=at)
        assert promql(read, "query", query=query, time=at) == expected, query
    assert promql(written, "query", query=INSTANT[0], time=at)  # the run produced data
    window = {"start": f"{start + 12:.3f}", "end": at, "step": "1"}
    for query in RANGE:
        expected = promql(written, "query_range", query=query, **window)
        assert expected and promql(read, "query_range", query=query, **window) == expected, query


@pytest.mark.slow
def test_nan_infinities_and_the_staleness_marker_survive_the_round_trip(both):
    _, read, (start, _), url = both
    t0 = int(start) * 1000
    points = [(t0, 1.0), (t0 + 1000, float("nan")), (t0 + 2000, float("inf"))]
    points += [(t0 + 3000, float("-inf")), (t0 + 4000, STALE)]
    write(url, "crafted_values", points)
    (series,) = promql(
        read,
        "query_range",
        query="crafted_values",
        start=f"{t0 / 1000:.3f}",
        end=f"{t0 / 1000 + 8:.3f}",
        step="1",
    )
    assert series["metric"] == {"__name__": "crafted_values", "job": "crafted"}
    # The marker ends the series: without it, the last value would stand for 5 minutes.
    assert [value for _, value in series["values"]] == ["1", "NaN", "+Inf", "-Inf"]
