"""A real OTLP sender: the OpenTelemetry Python SDK exports spans to `llmwh serve`.

The spans are shaped as vLLM's ``llm_request`` span and as a GenAI client span; each
becomes one request with the columns the span mapping names.
"""

from __future__ import annotations

import time

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode

from warehouse.store import open_store


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_the_sdks_spans_land_as_requests(receiver, compression):
    base, store_url = receiver
    provider = TracerProvider(
        resource=Resource.create({"service.name": "vllm", "cloud.region": "us-east-1"})
    )
    exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", compression=compression)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    now_ns = time.time_ns()
    for n in range(40):
        with tracer.start_as_current_span("llm_request", start_time=now_ns + n) as span:
            span.set_attributes(
                {
                    "gen_ai.request.id": f"cmpl-{n}",
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
                "gen_ai.response.id": "chatcmpl-x",
                "error.type": "RateLimitError",
            }
        )
        span.set_status(Status(StatusCode.ERROR))
    with tracer.start_as_current_span("GET /healthz"):  # not an LLM request
        pass
    assert provider.force_flush(timeout_millis=30_000)
    provider.shutdown()

    store = open_store(store_url)
    try:
        db = store.database
        rows = store.query_arrow(
            f"SELECT request_id, service, region, model, prompt_tokens, ttft_ms, e2e_ms, "
            f"status, error_class, attrs['trace_id'] AS trace_id FROM {db}.requests "
            "ORDER BY request_id"
        ).to_pylist()
    finally:
        store.close()
    assert len(rows) == 41  # the health check span is not a request
    by_id = {row["request_id"]: row for row in rows}
    seventh = by_id["cmpl-7"]
    assert (seventh["service"], seventh["region"], seventh["model"]) == (
        "vllm",
        "us-east-1",
        "llama-3-8b",
    )
    assert seventh["prompt_tokens"] == 107
    assert seventh["ttft_ms"] == pytest.approx(70, rel=1e-6)
    assert seventh["e2e_ms"] == pytest.approx(1070, rel=1e-6)
    assert len(seventh["trace_id"]) == 32
    failed = by_id["chatcmpl-x"]
    assert (failed["model"], failed["status"], failed["error_class"]) == (
        "gpt-4o",
        "rejected",
        "rate_limited",
    )
