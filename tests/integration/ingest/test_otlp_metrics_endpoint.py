"""POST /v1/metrics: OTLP/HTTP metric points land as the Prometheus series the
compatibility rules name, on every store, answered as the OTLP specification says."""

from __future__ import annotations

import asyncio
import gzip
import json
import time

from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp
from polling import poll_until
from test_otlp_traces import FailingInserts
from test_receiver import V1_TYPE, snappy

from warehouse.config import Config
from warehouse.ingest.sealing import POLL_SECONDS as SEALING_POLL_SECONDS
from warehouse.store.migrations import Migrator
from warehouse.wire.prometheus import V1

PROTOBUF = "application/x-protobuf"
T0 = (int(time.time()) - 3600) * 10**9  # recent: older samples fall to the TTL
SECOND = 10**9


def point(value: float, at: int = T0, start: int = T0 - SECOND, **labels) -> otlp.NumberDataPoint:
    return otlp.NumberDataPoint(
        start_time_unix_nano=start,
        time_unix_nano=at,
        as_double=value,
        attributes=[KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in labels.items()],
    )


def export(*metrics: otlp.Metric) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add()
    for key, value in (("service.name", "gateway"), ("cloud.region", "eu-west-1")):
        resource_metrics.resource.attributes.add(key=key, value=AnyValue(string_value=value))
    resource_metrics.scope_metrics.add().metrics.extend(metrics)
    return request


def tokens(*points: otlp.NumberDataPoint, temporality=otlp.AGGREGATION_TEMPORALITY_CUMULATIVE):
    return otlp.Metric(
        name="gen_ai.client.token.usage",
        unit="{token}",
        sum=otlp.Sum(
            data_points=list(points), aggregation_temporality=temporality, is_monotonic=True
        ),
    )


def ttft() -> otlp.Metric:
    histogram = otlp.HistogramDataPoint(
        start_time_unix_nano=T0 - SECOND,
        time_unix_nano=T0,
        count=4,
        sum=1.0,
        explicit_bounds=[0.2, 0.5],
        bucket_counts=[1, 2, 1],
    )
    return otlp.Metric(
        name="gen_ai.server.time_to_first_token",
        unit="s",
        histogram=otlp.Histogram(
            data_points=[histogram], aggregation_temporality=otlp.AGGREGATION_TEMPORALITY_CUMULATIVE
        ),
    )


def e2e() -> otlp.Metric:
    native = otlp.ExponentialHistogramDataPoint(
        time_unix_nano=T0,
        count=3,
        sum=6.0,
        scale=2,
        positive=otlp.ExponentialHistogramDataPoint.Buckets(offset=4, bucket_counts=[2, 1]),
    )
    return otlp.Metric(
        name="gen_ai.server.request.duration",
        unit="s",
        exponential_histogram=otlp.ExponentialHistogram(
            data_points=[native], aggregation_temporality=otlp.AGGREGATION_TEMPORALITY_CUMULATIVE
        ),
    )


def samples_in(store) -> dict[str, list[float]]:
    """Every float sample by metric name, in time order; a retry's repeats collapsed
    (ClickHouse merges them away in the background: FINAL reads as if merged)."""
    db = store.database
    final = " FINAL" if store.capabilities.dialect == "clickhouse" else ""
    rows = store.query_arrow(
        f"SELECT s.metric_name AS name, sa.value AS value FROM {db}.samples AS sa{final} "
        f"JOIN (SELECT DISTINCT id, metric_name FROM {db}.series) AS s ON sa.id = s.id "
        "ORDER BY name, sa.timestamp, sa.value"
    ).to_pylist()
    found: dict[str, list[float]] = {}
    for row in rows:
        found.setdefault(row["name"], []).append(row["value"])
    return found


def native_counts(store) -> list[float]:
    db = store.database
    return store.query_arrow(f"SELECT count FROM {db}.histogram_samples").column(0).to_pylist()


def test_points_of_every_kind_are_committed_before_200(client, migrated):
    request = export(tokens(point(5.0), point(9.0, at=T0 + SECOND)), ttft(), e2e())
    response = client.post("/v1/metrics", request.SerializeToString(), content_type=PROTOBUF)
    assert response.status == 200 and response.headers["content-type"] == PROTOBUF
    assert not ExportMetricsServiceResponse.FromString(response.body).HasField("partial_success")
    found = samples_in(migrated)
    assert found["gen_ai_client_token_usage_total"] == [5.0, 9.0]
    assert found["gen_ai_server_time_to_first_token_seconds_bucket"] == [1.0, 3.0, 4.0]
    assert found["gen_ai_server_time_to_first_token_seconds_count"] == [4.0]
    assert found["gen_ai_server_time_to_first_token_seconds_sum"] == [1.0]
    assert found["target_info"] == [1.0]
    assert native_counts(migrated) == [3.0]


def test_an_otlp_histogram_and_a_scraped_one_are_one_series_family(client, migrated):
    """What a Prometheus scraping the same histogram remote-writes lands in the very
    series the OTLP export made (an SDK's Prometheus exporter names it so)."""
    otlp_only = ExportMetricsServiceRequest()
    otlp_only.CopyFrom(export(ttft()))
    del otlp_only.resource_metrics[0].resource.attributes[1]  # no target_info
    assert (
        client.post("/v1/metrics", otlp_only.SerializeToString(), content_type=PROTOBUF).status
        == 200
    )
    scraped = V1.WriteRequest()
    for suffix, extra, value in (("_count", (), 6.0), ("_bucket", (("le", "0.5"),), 5.0)):
        series = scraped.timeseries.add()
        labels = (("__name__", f"gen_ai_server_time_to_first_token_seconds{suffix}"),
                  ("job", "gateway"), *extra)  # fmt: skip
        for name, label in labels:
            series.labels.add(name=name, value=label)
        series.samples.add(value=value, timestamp=(T0 + SECOND) // 1_000_000)
    written = client.post(
        "/api/v1/write", snappy(scraped.SerializeToString()), content_type=V1_TYPE
    )
    assert written.status == 204
    db = migrated.database
    families = (
        migrated.query_arrow(f"SELECT count(DISTINCT id) AS n FROM {db}.series")
        .column(0)
        .to_pylist()
    )
    assert families == [5]  # 3 buckets, count and sum: the scrape added no series
    found = samples_in(migrated)
    assert found["gen_ai_server_time_to_first_token_seconds_count"] == [4.0, 6.0]
    assert found["gen_ai_server_time_to_first_token_seconds_bucket"] == [1.0, 3.0, 4.0, 5.0]


def test_gzip_and_json_bodies_are_taken_and_answered_in_json(client, migrated):
    document = {
        "resourceMetrics": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "gw"}}]
                },
                "scopeMetrics": [
                    {
                        "metrics": [
                            {
                                "name": "queue.depth",
                                "unit": "{request}",
                                "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asInt": "12"}]},
                            }
                        ]
                    }
                ],
            }
        ]
    }
    body = gzip.compress(json.dumps(document).encode())
    response = client.post(
        "/v1/metrics", body, content_type="application/json", content_encoding="gzip"
    )
    assert response.status == 200 and response.headers["content-type"] == "application/json"
    assert json.loads(response.body) == {}
    assert samples_in(migrated)["queue_depth"] == [12.0]


def test_points_that_cannot_be_taken_are_a_partial_success(client, migrated):
    no_time = point(1.0, at=0)
    request = export(tokens(no_time, point(7.0)))
    response = client.post("/v1/metrics", request.SerializeToString(), content_type=PROTOBUF)
    answer = ExportMetricsServiceResponse.FromString(response.body)
    assert response.status == 200
    assert answer.partial_success.rejected_data_points == 1
    assert "no time" in answer.partial_success.error_message
    assert samples_in(migrated)["gen_ai_client_token_usage_total"] == [7.0]


def test_a_retried_delta_export_changes_no_figure(client, migrated):
    delta = otlp.AGGREGATION_TEMPORALITY_DELTA
    first = export(tokens(point(5.0, start=T0 - SECOND, at=T0), temporality=delta))
    second = export(tokens(point(3.0, start=T0, at=T0 + SECOND), temporality=delta))
    for body in (first, first, second, second):
        response = client.post("/v1/metrics", body.SerializeToString(), content_type=PROTOBUF)
        assert response.status == 200
    assert samples_in(migrated)["gen_ai_client_token_usage_total"] == [5.0, 8.0]


def test_a_series_over_a_label_limit_refuses_the_export_as_remote_write_does(make_client, migrated):
    client = make_client(max_label_value_bytes=40)
    request = export(tokens(point(1.0, model="a-model-name-longer-than-forty-bytes-or-so")))
    response = client.post("/v1/metrics", request.SerializeToString(), content_type=PROTOBUF)
    assert response.status == 400
    assert "model" in RpcStatus.FromString(response.body).message
    assert samples_in(migrated) == {}


def test_in_multi_tenant_mode_the_header_names_the_tenant(make_client, migrated):
    client = make_client(tenant_header="X-Scope-OrgID")
    body = export(tokens(point(2.0))).SerializeToString()
    refused = client.post("/v1/metrics", body, content_type=PROTOBUF)
    assert refused.status == 400
    assert "tenant" in RpcStatus.FromString(refused.body).message
    taken = client.post("/v1/metrics", body, content_type=PROTOBUF, x_scope_orgid="team-a")
    assert taken.status == 200
    db = migrated.database
    labels = (
        migrated.query_arrow(
            f"SELECT labels FROM {db}.series WHERE metric_name = 'gen_ai_client_token_usage_total'"
        )
        .column(0)
        .to_pylist()
    )
    assert ("__tenant__", "team-a") in [tuple(pair) for pair in labels[0]]


def test_a_failed_commit_is_503_with_retry_after(migrated, client_for):
    client = client_for(FailingInserts(migrated))
    body = export(tokens(point(1.0))).SerializeToString()
    response = client.post("/v1/metrics", body, content_type=PROTOBUF)
    assert response.status == 503 and response.headers["retry-after"].isdigit()
    assert RpcStatus.FromString(response.body).code == 14  # UNAVAILABLE


def test_an_undecodable_export_is_400_with_a_status(refusing_client):
    response = refusing_client.post("/v1/metrics", b"\x0a\xff\xff\xff\x0f", content_type=PROTOBUF)
    assert response.status == 400
    status = RpcStatus.FromString(response.body)
    assert status.code == 3 and "ExportMetricsServiceRequest" in status.message
    refused = refusing_client.post("/v1/metrics", b"x", content_type="text/plain")
    assert refused.status == 415


def test_per_request_parts_sent_over_otlp_never_wedge_sealing(store, client_for):
    """A gauge named as a mapped per-request metric, with a request id, becomes a request
    part. Its write time was once taken after the parts were stamped received, so it
    never counted as sealed, and every sender's per-request metrics got 429 from then
    on: sealing must be seen to catch up with it."""
    Migrator(store, Config(seal_after_seconds=1, seal_every_seconds=1)).up()
    client = client_for(store, seal_after_seconds=1, seal_every_seconds=1)
    now = time.time_ns()
    part = otlp.Metric(
        name="llm_request_ttft_seconds",
        gauge=otlp.Gauge(data_points=[point(0.25, at=now, start=0, request_id="r-otlp")]),
    )
    body = export(part).SerializeToString()
    answer = client.post("/v1/metrics", body, content_type="application/x-protobuf")
    assert answer.status == 200, answer.text

    def caught_up() -> bool:
        client.loop.run_until_complete(asyncio.sleep(SEALING_POLL_SECONDS))
        if not store.capabilities.scheduled_views:
            client.loop.run_until_complete(client.app.writes.sealer.seal())
        return not client.app.writes.sealer.lag.waiting

    poll_until(caught_up, "sealing to be seen past the export's parts", timeout=30)
    rows = store.query_arrow(f"SELECT request_id FROM {store.database}.requests")
    assert rows.column("request_id").to_pylist() == ["r-otlp"]
