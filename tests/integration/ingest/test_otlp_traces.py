"""POST /v1/traces: OTLP/HTTP spans that are LLM requests land as `requests` rows, on every
store, and the answers are the ones the OTLP specification names."""

from __future__ import annotations

import gzip
import json
import time

import pytest
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from warehouse.errors import StoreError

PROTOBUF = "application/x-protobuf"
START_NS = (int(time.time()) - 3600) * 10**9  # recent: older rows fall to the TTL


def vllm_span(n: int, **extra) -> Span:
    attributes = {
        "gen_ai.request.id": f"req-{n}",
        "gen_ai.response.model": "llama-3-8b",
        "gen_ai.usage.prompt_tokens": AnyValue(int_value=100 + n),
        "gen_ai.usage.completion_tokens": AnyValue(int_value=20),
        "gen_ai.latency.time_to_first_token": AnyValue(double_value=0.1 + n / 1000),
        **extra,
    }
    return Span(
        trace_id=n.to_bytes(16, "big"),
        span_id=n.to_bytes(8, "big"),
        name="llm_request",
        start_time_unix_nano=START_NS + n * 1_000_000,
        end_time_unix_nano=START_NS + n * 1_000_000 + 900_000_000,
        attributes=[
            KeyValue(key=k, value=v if isinstance(v, AnyValue) else AnyValue(string_value=v))
            for k, v in attributes.items()
        ],
    )


def export(*spans: Span) -> bytes:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(key="service.name", value=AnyValue(string_value="vllm"))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request.SerializeToString()


def requests_in(store) -> list[dict]:
    db = store.database
    table = store.query_arrow(
        f"SELECT request_id, service, model, prompt_tokens, ttft_ms, e2e_ms "
        f"FROM {db}.requests ORDER BY request_id"
    )
    return table.to_pylist()


def test_spans_of_llm_requests_are_committed_before_200(client, migrated):
    body = export(*(vllm_span(n) for n in range(1, 6)))
    response = client.post("/v1/traces", body, content_type=PROTOBUF)
    assert response.status == 200 and response.headers["content-type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.body)
    assert not answer.HasField("partial_success")
    rows = requests_in(migrated)
    assert [r["request_id"] for r in rows] == [f"req-{n}" for n in range(1, 6)]
    assert rows[0]["service"] == "vllm" and rows[0]["model"] == "llama-3-8b"
    assert rows[0]["prompt_tokens"] == 101
    assert rows[0]["ttft_ms"] == pytest.approx(101, rel=1e-6)
    assert rows[0]["e2e_ms"] == pytest.approx(900, rel=1e-6)


def test_gzip_and_json_bodies_are_taken_and_answered_in_json(client, migrated):
    document = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "chat",
                                "startTimeUnixNano": str(START_NS),
                                "endTimeUnixNano": str(START_NS + 250_000_000),
                                "attributes": [
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "m"}}
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    body = gzip.compress(json.dumps(document).encode())
    response = client.post(
        "/v1/traces", body, content_type="application/json", content_encoding="gzip"
    )
    assert response.status == 200 and response.headers["content-type"] == "application/json"
    assert json.loads(response.body) == {}
    assert requests_in(migrated)[0]["request_id"] == "eee19b7ec3c1b174"


def test_spans_that_cannot_be_taken_are_a_partial_success(client, migrated):
    bad = vllm_span(2, **{"gen_ai.usage.completion_tokens": AnyValue(int_value=-1)})
    plain = Span(span_id=b"\x09" * 8, name="db", start_time_unix_nano=START_NS)
    response = client.post("/v1/traces", export(vllm_span(1), bad, plain), content_type=PROTOBUF)
    assert response.status == 200
    partial = ExportTraceServiceResponse.FromString(response.body).partial_success
    assert partial.rejected_spans == 1
    assert "span 0000000000000002: field output_tokens" in partial.error_message
    assert [r["request_id"] for r in requests_in(migrated)] == ["req-1"]
    metrics = client.get("/metrics").text
    assert 'llmwh_receiver_otlp_spans_left_out_total{reason="skipped"} 1.0' in metrics
    assert 'llmwh_receiver_otlp_spans_left_out_total{reason="rejected"} 1.0' in metrics


def test_a_span_over_a_label_limit_is_rejected_alone(make_client, migrated):
    client = make_client(max_label_value_bytes=64)
    long_model = vllm_span(2, **{"gen_ai.response.model": "m" * 100})
    response = client.post("/v1/traces", export(vllm_span(1), long_model), content_type=PROTOBUF)
    assert response.status == 200
    partial = ExportTraceServiceResponse.FromString(response.body).partial_success
    assert partial.rejected_spans == 1
    assert "span 0000000000000002: field model: a label value of 100 bytes" in partial.error_message
    assert [r["request_id"] for r in requests_in(migrated)] == ["req-1"]


def test_a_span_whose_request_id_is_over_the_limit_is_rejected_alone(client, migrated):
    huge = vllm_span(2, **{"gen_ai.request.id": "r" * 10_000_000})
    response = client.post("/v1/traces", export(vllm_span(1), huge), content_type=PROTOBUF)
    assert response.status == 200
    answer = ExportTraceServiceResponse.FromString(response.body)
    assert answer.partial_success.rejected_spans == 1
    assert "max_label_value_bytes" in answer.partial_success.error_message
    assert [r["request_id"] for r in requests_in(migrated)] == ["req-1"]


def test_every_member_of_a_gzip_body_is_read_and_trailing_bytes_refused(client, migrated):
    body = gzip.compress(export(vllm_span(1))) + gzip.compress(export(vllm_span(2)))
    response = client.post("/v1/traces", body, content_type=PROTOBUF, content_encoding="gzip")
    assert response.status == 200
    assert [r["request_id"] for r in requests_in(migrated)] == ["req-1", "req-2"]
    garbage = gzip.compress(export(vllm_span(3))) + b"garbage"
    refused = client.post("/v1/traces", garbage, content_type=PROTOBUF, content_encoding="gzip")
    assert refused.status == 400
    assert "not valid gzip" in RpcStatus.FromString(refused.body).message


class FailingInserts:
    """A real store whose inserts fail as ClickHouse's do under a transient overload."""

    def __init__(self, store):
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_arrow(self, *args, **kwargs):
        raise StoreError("ClickHouse error 252 (TOO_MANY_PARTS): too many parts (simulated)")


def test_a_failed_commit_is_503_with_retry_after_which_otlp_senders_retry(migrated, client_for):
    client = client_for(FailingInserts(migrated))
    response = client.post("/v1/traces", export(vllm_span(1)), content_type=PROTOBUF)
    assert response.status == 503 and response.headers["retry-after"].isdigit()
    assert "TOO_MANY_PARTS" in RpcStatus.FromString(response.body).message
    assert requests_in(migrated) == []


def test_a_retried_export_changes_no_figure(client, migrated):
    body = export(*(vllm_span(n) for n in range(1, 4)))
    for _ in range(2):
        assert client.post("/v1/traces", body, content_type=PROTOBUF).status == 200
    count = migrated.query_arrow(f"SELECT count() AS n FROM {migrated.database}.requests")
    assert count.column(0).to_pylist() == [3]  # the body's token dropped the second


@pytest.mark.parametrize(
    ("body", "content_type", "problem"),
    [
        (b"\x0a\xff\xff\xff\x0f", PROTOBUF, "not a opentelemetry.proto.collector.trace"),
        (b'{"resourceSpans": [', "application/json", "not JSON"),
    ],
)
def test_an_undecodable_export_is_400_with_a_status_and_writes_nothing(
    refusing_client, module_migrated, body, content_type, problem
):
    response = refusing_client.post("/v1/traces", body, content_type=content_type)
    assert response.status == 400 and response.headers["content-type"] == content_type
    if content_type == PROTOBUF:
        status = RpcStatus.FromString(response.body)
        assert status.code == 3 and problem in status.message
    else:
        assert json.loads(response.body)["code"] == 3
        assert problem in json.loads(response.body)["message"]
    db = module_migrated.database
    assert (
        module_migrated.query_arrow(f"SELECT count() FROM {db}.requests").column(0)[0].as_py() == 0
    )


def test_other_media_types_and_encodings_are_415_with_a_status(refusing_client):
    refused = refusing_client.post("/v1/traces", b"x", content_type="text/plain")
    assert refused.status == 415 and refused.headers["content-type"] == PROTOBUF
    assert "application/json" in RpcStatus.FromString(refused.body).message
    refused = refusing_client.post(
        "/v1/traces", b"x", content_type="application/json", content_encoding="br"
    )
    assert refused.status == 415 and refused.headers["content-type"] == "application/json"
    assert "gzip" in json.loads(refused.body)["message"]


def test_a_body_that_inflates_past_the_limit_is_413(make_client):
    client = make_client(max_body_bytes=100_000)
    bomb = gzip.compress(b"\0" * 1_000_000)
    response = client.post("/v1/traces", bomb, content_type=PROTOBUF, content_encoding="gzip")
    assert response.status == 413
    assert "100,000-byte limit" in RpcStatus.FromString(response.body).message


def test_a_full_buffer_is_429_with_retry_after_and_a_status(client):
    committer = client.app.writes.committer
    committer.buffer.buffered_bytes = committer.buffer.max_buffer_bytes  # saturated
    try:
        response = client.post("/v1/traces", export(vllm_span(1)), content_type=PROTOBUF)
    finally:
        client.app.writes.committer.buffer.buffered_bytes = 0
    assert response.status == 429 and response.headers["retry-after"].isdigit()
    assert RpcStatus.FromString(response.body).code == 8  # RESOURCE_EXHAUSTED


def test_with_a_token_configured_exports_need_it(make_client):
    client = make_client(auth_token="s3cret")
    body = export(vllm_span(1))
    refused = client.post("/v1/traces", body, content_type=PROTOBUF)
    assert refused.status == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert RpcStatus.FromString(refused.body).code == 16  # UNAUTHENTICATED
    accepted = client.post("/v1/traces", body, content_type=PROTOBUF, authorization="Bearer s3cret")
    assert accepted.status == 200


def test_strict_mode_reports_spans_that_are_not_llm_requests_as_rejected(make_client, migrated):
    health = Span(
        trace_id=b"\x09" * 16,
        span_id=b"\x09" * 8,
        name="GET /healthz",
        start_time_unix_nano=START_NS,
        end_time_unix_nano=START_NS + 1_000_000,
    )
    body = export(vllm_span(1), health)
    quiet = make_client().post("/v1/traces", body, content_type=PROTOBUF)
    assert not ExportTraceServiceResponse.FromString(quiet.body).HasField("partial_success")
    strict = make_client(otlp_strict_spans=True).post("/v1/traces", body, content_type=PROTOBUF)
    answer = ExportTraceServiceResponse.FromString(strict.body)
    assert strict.status == 200 and answer.partial_success.rejected_spans == 1
    assert "0909090909090909: not an LLM request" in answer.partial_success.error_message
    assert [r["request_id"] for r in requests_in(migrated)] == ["req-1"]
