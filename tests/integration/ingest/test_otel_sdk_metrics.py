"""A real OTLP metrics sender: the OpenTelemetry SDK exports every kind of instrument to
`llmwh serve` on each store, with cumulative and with delta temporality, and each point
lands where the Prometheus compatibility rules put it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from senders import drop_store, llmwh_command, running_serve, store_url_for

DELTA = {
    Counter: AggregationTemporality.DELTA,
    UpDownCounter: AggregationTemporality.DELTA,
    Histogram: AggregationTemporality.DELTA,
}
TTFT_BOUNDS = (0.1, 0.25, 0.5, 1.0)


TEMPORALITIES = {"cumulative": {}, "delta": DELTA}
"""Each sent by a gateway instance of its own (``instance`` tells their series apart)."""


def send(base: str, temporality: dict, instance: str) -> list[float]:
    """Two exports of a gateway's instruments; returns the TTFTs it recorded."""
    exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics", preferred_temporality=temporality)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create(
            {"service.name": "gateway", "service.instance.id": instance, "cloud.region": "eu"}
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


@dataclass
class Landed:
    url: str
    folder: Path
    recorded: dict[str, list[float]]
    """The TTFTs each instance recorded, by temporality."""


def llmwh_sql(landed: Landed, sql: str) -> list[dict]:
    """`llmwh sql` as a user runs it (chdb and DuckDB take one process at a time)."""
    return json.loads(llmwh_command(landed.url, landed.folder, "sql", sql, "--format", "json"))


@pytest.fixture(scope="module", params=["clickhouse", "chdb", "duckdb"])
def landed(request, embedded_server, tmp_path_factory) -> Iterator[Landed]:
    """Both gateways' exports sent to `llmwh serve` on one store, which is then stopped."""
    folder = tmp_path_factory.mktemp(f"otel-metrics-{request.param}")
    url = store_url_for(request.param, embedded_server, folder, "otelm")
    with running_serve(url, folder) as base:
        recorded = {name: send(base, t, f"gw-{name}") for name, t in TEMPORALITIES.items()}
    yield Landed(url, folder, recorded)
    drop_store(url)


def last_values(landed: Landed, instance: str) -> dict[tuple[str, tuple], object]:
    """The newest sample of each of an instance's series, by (name, labels other than
    job, instance and the scope's name); the newest native histogram under "native"."""
    rows = llmwh_sql(
        landed,
        "SELECT s.metric_name AS name, s.labels AS labels, sa.timestamp AS ts, "
        "sa.value AS value FROM samples AS sa "
        "JOIN (SELECT DISTINCT id, metric_name, labels FROM series) AS s ON sa.id = s.id "
        "ORDER BY ts",
    )
    natives = llmwh_sql(
        landed,
        "SELECT h.count AS count, h.sum AS sum, h.schema AS schema, s.labels AS labels "
        "FROM histogram_samples AS h "
        "JOIN (SELECT DISTINCT id, labels FROM series) AS s ON h.id = s.id "
        "ORDER BY h.timestamp",
    )
    found: dict[tuple[str, tuple], object] = {}
    for row in rows:
        labels = _labels(row["labels"])
        if labels.get("instance") != instance:
            continue
        common = {k: labels.pop(k, None) for k in ("job", "instance", "otel_scope_name")}
        if row["name"] != "target_info":
            assert common["job"] == "gateway" and common["otel_scope_name"] == "llm.gateway"
        found[(row["name"], tuple(sorted(labels.items())))] = row["value"]  # newest wins
    mine = [n for n in natives if _labels(n["labels"]).get("instance") == instance]
    found[("native", ())] = mine[-1]
    return found


def _labels(value: object) -> dict[str, str]:
    """A map column as `llmwh sql` writes it: an object, or a list of key/value pairs."""
    if isinstance(value, dict):
        if set(value) == {"key", "value"}:
            return dict(zip(value["key"], value["value"], strict=True))
        return dict(value)
    return {pair["key"]: pair["value"] if isinstance(pair, dict) else pair[1] for pair in value}


@pytest.mark.parametrize("temporality", list(TEMPORALITIES))
def test_the_sdks_metrics_land_as_prometheus_series(landed, temporality):
    recorded = landed.recorded[temporality]
    found = last_values(landed, f"gw-{temporality}")
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
    assert found[("gpu_utilization_ratio", (("gpu", "0"), *version))] == 0.75
    (info,) = [dict(labels) for (name, labels) in found if name == "target_info"]
    assert {k: v for k, v in info.items() if not k.startswith("telemetry_sdk_")} == {
        "cloud_region": "eu"
    }
    native = found[("native", ())]
    assert native["count"] == 60
    assert native["sum"] == pytest.approx(sum(0.5 + n / 20 for n in range(60)))
    assert -4 <= native["schema"] <= 8
