"""A real OTLP metrics sender: the OpenTelemetry SDK exports every kind of instrument to
`llmwh serve`, with cumulative and with delta temporality, and each point lands where
the Prometheus compatibility rules put it."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

from warehouse.store import open_store

DELTA = {
    Counter: AggregationTemporality.DELTA,
    UpDownCounter: AggregationTemporality.DELTA,
    Histogram: AggregationTemporality.DELTA,
}
TTFT_BOUNDS = (0.1, 0.25, 0.5, 1.0)


def send(base: str, temporality: dict) -> list[float]:
    """Two exports of a gateway's instruments; returns the TTFTs it recorded."""
    exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", preferred_temporality=temporality)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create(
            {"service.name": "gateway", "service.instance.id": "gw-1", "cloud.region": "eu"}
        ),
        views=[
            View(
                instrument_name="gen_ai.client.operation.duration",
                aggregation=ExponentialBucketHistogramAggregation(max_size=40),
            )
        ],
    )
    meter = provider.get_meter("llm.gateway", "1.2")
    usage = meter.create_counter("gen_ai.client.token.usage", unit="{token}")
    running = meter.create_up_down_counter("gen_ai.server.requests.running", unit="{request}")
    ttft = meter.create_histogram(
        "gen_ai.server.time_to_first_token",
        unit="s",
        explicit_bucket_boundaries_advisory=list(TTFT_BOUNDS),
    )
    duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
    meter.create_observable_gauge(
        "gpu.utilization", [lambda options: [Observation(0.75, {"gpu": "0"})]], unit="1"
    )
    recorded = []
    for n in range(60):
        model = {"gen_ai.request.model": "llama-3-8b"}
        usage.add(10, {**model, "gen_ai.token.type": "input"})
        running.add(1 if n % 3 else -1, model)
        seconds = (n % 12) / 10
        ttft.record(seconds, model)
        recorded.append(seconds)
        duration.record(0.5 + n / 20, model)
        if n in (29, 59):
            assert reader.force_flush(timeout_millis=30_000)
    provider.shutdown()
    return recorded


def last_values(store_url: str) -> dict[tuple[str, tuple], float]:
    """The newest float sample of each series: {(name, labels without job/instance/scope)}."""
    store = open_store(store_url)
    try:
        db = store.database
        rows = store.query_arrow(
            f"SELECT s.metric_name AS name, s.labels AS labels, "
            f"argMax(sa.value, sa.timestamp) AS value FROM {db}.samples AS sa FINAL "
            f"JOIN (SELECT DISTINCT id, metric_name, labels FROM {db}.series) AS s "
            "ON sa.id = s.id GROUP BY name, labels"
        ).to_pylist()
        natives = store.query_arrow(
            f"SELECT argMax(count, timestamp) AS count, argMax(sum, timestamp) AS sum, "
            f"any(schema) AS schema FROM {db}.histogram_samples FINAL"
        ).to_pylist()
    finally:
        store.close()
    found = {}
    for row in rows:
        labels = dict(row["labels"])
        common = {k: labels.pop(k, None) for k in ("job", "instance", "otel_scope_name")}
        if row["name"] != "target_info":
            assert common == {
                "job": "gateway",
                "instance": "gw-1",
                "otel_scope_name": "llm.gateway",
            }
        found[(row["name"], tuple(sorted(labels.items())))] = row["value"]
    found[("native", ())] = natives[0]
    return found


@pytest.mark.parametrize("temporality", [{}, DELTA], ids=["cumulative", "delta"])
def test_the_sdks_metrics_land_as_prometheus_series(receiver, temporality):
    base, store_url = receiver
    recorded = send(base, temporality)
    found = last_values(store_url)
    model = (("gen_ai_request_model", "llama-3-8b"),)
    version = (("otel_scope_version", "1.2"),)

    def value(name: str, *labels: tuple[str, str]) -> float:
        return found[(name, tuple(sorted((*model, *version, *labels))))]

    assert value("gen_ai_client_token_usage_total", ("gen_ai_token_type", "input")) == 600
    assert value("gen_ai_server_requests_running") == 20  # 40 up, 20 down
    family = "gen_ai_server_time_to_first_token_seconds"
    for bound in TTFT_BOUNDS:
        le = f"{bound:g}"
        expected = sum(1 for s in recorded if s <= bound)
        assert value(f"{family}_bucket", ("le", le)) == expected, le
    assert value(f"{family}_bucket", ("le", "+Inf")) == 60
    assert value(f"{family}_count") == 60
    assert value(f"{family}_sum") == pytest.approx(sum(recorded))
    gauge = found[("gpu_utilization_ratio", (("gpu", "0"), *version))]
    assert gauge == 0.75
    (info,) = [dict(labels) for (name, labels) in found if name == "target_info"]
    assert {k: v for k, v in info.items() if not k.startswith("telemetry_sdk_")} == {
        "cloud_region": "eu"
    }
    native = found[("native", ())]
    assert native["count"] == 60
    assert native["sum"] == pytest.approx(sum(0.5 + n / 20 for n in range(60)))
    assert -4 <= native["schema"] <= 8
