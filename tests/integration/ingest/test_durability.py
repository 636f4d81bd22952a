"""A 2xx means kept and readable: timestamps across the whole int64 range, on every path.

Each door (events, remote write 1.0 and 2.0, per-request metrics, OTLP spans and metric
points) is sent one write per timestamp. What a door acknowledges must be stored and
come back from the reads that cover it (SQL, a drill-down, remote read); what it will
not keep it must refuse (a 4xx, or OTLP's partial_success) and store nothing of.
Timestamps are drawn over the whole int64 range of milliseconds, with the edges of
what the store keeps (the retentions, ``max_future_seconds``, 1970, 2106) always in.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from polling import poll_until

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.ingest.events import encode_ndjson
from warehouse.ingest.time_window import LAST_MS
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests
from warehouse.wire.prometheus import READ, V1, V2

DAY_MS = 86_400_000
INT64 = 2**63


def edges(now_ms: int) -> list[int]:
    """The timestamps where keeping turns into refusing, and their neighbours."""
    around = [
        -INT64, -1, 0, 1,
        now_ms - 100 * DAY_MS, now_ms - 90 * DAY_MS + 60_000, now_ms - 31 * DAY_MS,
        now_ms - 29 * DAY_MS, now_ms - 3_600_000, now_ms, now_ms + 300_000,
        now_ms + 660_000, now_ms + DAY_MS, LAST_MS, LAST_MS + 1,
        9_223_372_036_854,  # int64 nanoseconds run out (2262-04-11)
        10_413_792_000_000,  # DateTime64 runs out (2300-01-01)
        INT64 - 1,
    ]  # fmt: skip
    return around


anywhere = st.integers(-INT64, INT64 - 1)
recent = st.integers(-120 * DAY_MS, DAY_MS).map(lambda d: int(time.time() * 1000) + d)


SEALING = Config(seal_after_seconds=1, seal_every_seconds=1)


@pytest.fixture
def sealing_often(store):
    """Migrated to seal each second, so that per-request metrics reach `requests` soon
    (not ``migrated``, whose databases are migrated with the default settings)."""
    Migrator(store, SEALING).up()
    return store


@pytest.fixture
def receiver(sealing_often, client_for):
    return client_for(sealing_often, seal_after_seconds=1, seal_every_seconds=1)


# -- the doors: each sends one write at `ms` and says whether it was acknowledged --------


def one_event(ms: int, key: str) -> bytes:
    row = json.loads(encode_ndjson(synthetic_requests(1, seed=1)).decode())
    row.update(ts=ms, request_id=key, model=key, is_probe=False)
    return (json.dumps(row) + "\n").encode()


def send_event(client, ms: int, key: str) -> bool:
    answer = client.post("/api/v1/requests", one_event(ms, key),
                         content_type="application/x-ndjson")  # fmt: skip
    assert answer.status in (200, 400), answer.text
    assert answer.status == 200 or "ts" in answer.text
    return answer.status == 200


def _v1(labels: list[tuple[str, str]], ms: int, value: float = 1.0) -> bytes:
    request = V1.WriteRequest()
    series = request.timeseries.add()
    for name, label in sorted(labels):
        series.labels.add(name=name, value=label)
    series.samples.add(value=value, timestamp=ms)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def _remote_write(client, body: bytes, proto: str) -> bool:
    kind = "application/x-protobuf" + (
        "" if proto == "1.0" else ";proto=io.prometheus.write.v2.Request"
    )
    # 429 (sealing behind, a full buffer) asks the sender to come back, as one would.
    answer = poll_until(
        lambda: client.post("/api/v1/write", body, content_type=kind, content_encoding="snappy"),
        "an answer other than 429",
        until=lambda response: response.status != 429,
        every=0.5,
    )
    assert answer.status in (204, 400), answer.text
    assert answer.status == 204 or "were not written" in answer.text, answer.text
    return answer.status == 204


def send_sample_v1(client, ms: int, key: str) -> bool:
    return _remote_write(client, _v1([("__name__", "probe_v1"), ("probe", key)], ms), "1.0")


def send_sample_v2(client, ms: int, key: str) -> bool:
    request = V2.Request(symbols=["", "__name__", "probe_v2", "probe", key])
    request.timeseries.add(labels_refs=[1, 2, 3, 4]).samples.add(value=1.0, timestamp=ms)
    body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    return _remote_write(client, body, "2.0")


def send_request_metric(client, ms: int, key: str) -> bool:
    labels = [("__name__", "llm_request_ttft_seconds"), ("request_id", key), ("model", key)]
    return _remote_write(client, _v1(labels, ms, 0.2), "1.0")


def send_span(client, ms: int, key: str) -> bool | None:
    if not 0 <= ms * 1_000_000 < 2**64 - 1_000_000_000:
        return None  # not a time OTLP can carry
    span = Span(
        trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="llm_request",
        start_time_unix_nano=ms * 1_000_000, end_time_unix_nano=ms * 1_000_000 + 900_000_000,
        attributes=[
            KeyValue(key="gen_ai.request.id", value=AnyValue(string_value=key)),
            KeyValue(key="gen_ai.response.model", value=AnyValue(string_value=key)),
        ],
    )  # fmt: skip
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    answer = _otlp_export(client, "/v1/traces", request, ExportTraceServiceResponse)
    return answer is not None and answer.partial_success.rejected_spans == 0


def send_point(client, ms: int, key: str) -> bool | None:
    if not 0 <= ms * 1_000_000 < 2**64:
        return None
    metric = otlp.Metric(name="probe_otlp", gauge=otlp.Gauge(data_points=[otlp.NumberDataPoint(
        as_double=1.0, time_unix_nano=ms * 1_000_000,
        attributes=[KeyValue(key="probe", value=AnyValue(string_value=key))],
    )]))  # fmt: skip
    request = ExportMetricsServiceRequest()
    request.resource_metrics.add().scope_metrics.add().metrics.append(metric)
    answer = _otlp_export(client, "/v1/metrics", request, ExportMetricsServiceResponse)
    return answer is not None and answer.partial_success.rejected_data_points == 0


def _otlp_export(client, path: str, request, answer_type):
    """The export's answer, or None when it was refused whole (400)."""
    answer = client.post(path, request.SerializeToString(), content_type="application/x-protobuf")
    assert answer.status in (200, 400), answer.text
    return answer_type.FromString(answer.body) if answer.status == 200 else None


# -- the reads -----------------------------------------------------------------------------


def requests_of(store, key: str) -> int:
    return store.query_arrow(
        f"SELECT count(*) AS n FROM {store.database}.requests WHERE request_id = '{key}'"
    )["n"][0].as_py()  # keys are the test's own: letters, digits and dashes


def samples_of(store, key: str) -> int:
    return store.query_arrow(
        f"SELECT count(*) AS n FROM {store.database}.samples WHERE id IN "
        f"(SELECT id FROM {store.database}.series WHERE labels['probe'] = '{key}')"
    )["n"][0].as_py()


def drilled(store, ms: int, key: str) -> int:
    at = datetime.fromtimestamp(ms / 1000, UTC)
    until = at + timedelta(milliseconds=1)
    found = Warehouse(store).drill(
        filters={"model": key}, since=at, until=until, include_probes=True
    )
    return int(found["count"].sum()) if found.height else 0


def read_back(client, ms: int, key: str) -> list[int]:
    matcher = READ.LabelMatcher(type=0, name="probe", value=key)
    query = READ.Query(start_timestamp_ms=ms, end_timestamp_ms=ms, matchers=[matcher])
    body = READ.ReadRequest(queries=[query]).SerializeToString()
    answer = client.post("/api/v1/read", bytes(cramjam.snappy.compress_raw(body)),
                         content_type="application/x-protobuf", content_encoding="snappy",
                         x_prometheus_remote_read_version="0.1.0")  # fmt: skip
    assert answer.status == 200, answer.text
    decoded = READ.ReadResponse.FromString(bytes(cramjam.snappy.decompress_raw(answer.body)))
    return [s.timestamp for ts in decoded.results[0].timeseries for s in ts.samples]


DOORS = {
    "events": (send_event, "requests"),
    "remote write 1.0": (send_sample_v1, "samples"),
    "remote write 2.0": (send_sample_v2, "samples"),
    "per-request metrics": (send_request_metric, "requests"),
    "OTLP spans": (send_span, "requests"),
    "OTLP metric points": (send_point, "samples"),
}


@pytest.mark.parametrize("door", DOORS)
@settings(
    max_examples=2,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=st.lists(st.one_of(anywhere, recent), min_size=12, max_size=12))
def test_what_a_door_acknowledges_is_kept_and_read_back(receiver, sealing_often, door, drawn):
    migrated = sealing_often
    send, table = DOORS[door]
    now_ms = int(time.time() * 1000)
    prefix = f"{door.split()[0].lower()}-{now_ms}-{id(drawn)}"
    sent = {}
    for k, ms in enumerate([*edges(now_ms), *drawn]):
        key = f"{prefix}-{k}"
        acknowledged = send(receiver, ms, key)
        if acknowledged is not None:
            sent[key] = (ms, acknowledged)
    kept = {key for key, (_, ok) in sent.items() if ok}
    assert kept, "the edges include times every door keeps"
    assert len(kept) < len(sent), "the edges include times every door refuses"
    count = requests_of if table == "requests" else samples_of

    def stored() -> dict[str, int]:
        if not migrated.capabilities.scheduled_views:
            receiver.loop.run_until_complete(receiver.app.writes.sealer.seal())
        return {key: count(migrated, key) for key in sent}

    # Per-request metrics become requests when sealed: wait for every kept one.
    found = poll_until(stored, "every acknowledged write stored",
                       until=lambda seen: all(seen[key] == 1 for key in kept))  # fmt: skip
    for key, (ms, ok) in sent.items():
        assert found[key] == (1 if ok else 0), (door, ms, ok, found[key])
        if ok and table == "requests":
            assert drilled(migrated, ms, key) == 1, (door, ms)
        if ok and table == "samples":
            assert read_back(receiver, ms, key) == [ms], (door, ms)
