"""OTLP spans become `requests` rows through the span mapping; the rest is accounted for."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from warehouse.errors import ConfigError, IngestError
from warehouse.ingest.otlp import wire
from warehouse.ingest.otlp.span_mapping import load_span_mapping
from warehouse.ingest.otlp.spans import spans_to_requests
from warehouse.model import REQUESTS_SCHEMA

START_NS = 1_764_849_600_000_000_000  # 2025-12-04T12:00:00Z
MAPPING = load_span_mapping()


def value(v: object) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, list):
        return AnyValue(array_value=ArrayValue(values=[value(x) for x in v]))
    return AnyValue(string_value=v)


def span(n: int, attributes: dict, seconds: float = 1.5, status: int = 0) -> Span:
    return Span(
        trace_id=bytes([n]) * 16,
        span_id=bytes([n]) * 8,
        name="llm_request",
        start_time_unix_nano=START_NS + n * 1_000_000,
        end_time_unix_nano=START_NS + n * 1_000_000 + int(seconds * 1e9),
        attributes=[KeyValue(key=k, value=value(v)) for k, v in attributes.items()],
        status=Status(code=status),
    )


def export(*spans: Span, resource: dict | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    for key, v in (resource or {"service.name": "vllm", "cloud.region": "eu-west-1"}).items():
        resource_spans.resource.attributes.add(key=key, value=value(v))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


VLLM = {
    "gen_ai.request.id": "cmpl-7",
    "gen_ai.response.model": "llama-3-8b",
    "gen_ai.usage.prompt_tokens": 812,
    "gen_ai.usage.completion_tokens": 41,
    "gen_ai.latency.time_in_queue": 0.012,
    "gen_ai.latency.time_to_first_token": 0.21,
    "gen_ai.latency.e2e": 1.41,
    "gen_ai.latency.time_in_model_prefill": 0.15,
    "gen_ai.latency.time_in_model_decode": 1.2,
}


def rows(request: ExportTraceServiceRequest) -> list[dict]:
    return spans_to_requests(request, MAPPING).table.to_pylist()


def test_a_vllm_llm_request_span_is_one_request_with_its_latencies_in_ms():
    (row,) = rows(export(span(1, VLLM)))
    assert row["request_id"] == "cmpl-7" and row["model"] == "llama-3-8b"
    assert (row["service"], row["region"]) == ("vllm", "eu-west-1")
    assert (row["prompt_tokens"], row["output_tokens"]) == (812, 41)
    assert row["queue_ms"] == pytest.approx(12) and row["ttft_ms"] == pytest.approx(210)
    assert row["e2e_ms"] == pytest.approx(1410)  # the attribute, not the span's 1.5 s
    assert row["tpot_ms"] == pytest.approx((1410 - 210) / 40)
    assert row["ts"].timestamp() == pytest.approx((START_NS + 1_000_000) / 1e9)
    assert (row["status"], row["error_class"]) == ("ok", "")
    attrs = dict(row["attrs"])
    assert attrs["trace_id"] == "01" * 16 and attrs["span_id"] == "01" * 8
    assert float(attrs["prefill_ms"]) == pytest.approx(150)
    assert float(attrs["decode_ms"]) == pytest.approx(1200)


def test_a_genai_client_span_takes_the_conventions_names_and_its_own_duration():
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 11,
        "gen_ai.response.finish_reasons": ["stop", "length"],
        "gen_ai.response.id": "chatcmpl-1",
        "server.address": "api.example.com",
    }
    (row,) = rows(export(span(2, attributes, seconds=0.8)))
    assert (row["request_id"], row["model"], row["request_type"]) == (
        "chatcmpl-1",
        "gpt-4o",
        "chat",
    )
    assert row["finish_reason"] == "stop"
    assert row["e2e_ms"] == pytest.approx(800)
    assert dict(row["attrs"])["server.address"] == "api.example.com"


def test_the_span_id_is_the_request_id_when_no_attribute_names_one():
    (row,) = rows(export(span(3, {"gen_ai.operation.name": "chat"})))
    assert row["request_id"] == "03" * 8


def test_a_mapping_without_request_id_or_e2e_attributes_keeps_their_defaults(tmp_path):
    path = tmp_path / "spans.toml"
    path.write_text('[columns]\nmodel = ["gen_ai.request.model"]\n')
    found = spans_to_requests(export(span(13, VLLM, seconds=0.5)), load_span_mapping(path))
    (row,) = found.table.to_pylist()
    assert row["request_id"] == "0d" * 8 and row["e2e_ms"] == pytest.approx(500)


def test_a_span_attribute_wins_over_the_resource_one():
    request = export(span(4, {**VLLM, "service.name": "router"}), resource={"service.name": "vllm"})
    assert rows(request)[0]["service"] == "router"


@pytest.mark.parametrize(
    ("error_type", "http_status", "status", "error_class"),
    [
        ("timeout", None, "error", "timeout"),
        ("RateLimitError", None, "rejected", "rate_limited"),
        ("503", None, "rejected", "overloaded"),
        ("404", None, "error", "client_error"),
        ("_OTHER", 500, "error", "server_error"),
        ("SomethingElse", None, "error", "server_error"),
        (None, 429, "rejected", "rate_limited"),
    ],
)
def test_a_failed_span_gets_a_status_and_an_error_class(
    error_type, http_status, status, error_class
):
    attributes = {"gen_ai.operation.name": "chat"}
    if error_type is not None:
        attributes["error.type"] = error_type
    if http_status is not None:
        attributes["http.response.status_code"] = http_status
    (row,) = rows(export(span(5, attributes, status=Status.STATUS_CODE_ERROR)))
    assert (row["status"], row["error_class"]) == (status, error_class)


@pytest.mark.parametrize("error_type", ["²", "9" * 5_000, "٤٢٩"])
def test_an_error_type_of_odd_digits_is_a_server_error_not_a_crash(error_type):
    attributes = {"gen_ai.operation.name": "chat", "error.type": error_type}
    (row,) = rows(export(span(12, attributes, status=Status.STATUS_CODE_ERROR)))
    assert (row["status"], row["error_class"]) == ("error", "server_error")


def test_spans_that_are_not_llm_requests_are_skipped_and_counted():
    found = spans_to_requests(export(span(6, {"db.system": "redis"}), span(7, VLLM)), MAPPING)
    assert found.skipped == 1 and found.rejected == 0 and found.table.num_rows == 1


def test_a_span_that_cannot_be_taken_is_rejected_by_name_and_the_rest_kept():
    bad_tokens = {**VLLM, "gen_ai.request.id": "r-bad", "gen_ai.usage.completion_tokens": -3}
    bad_type = {**VLLM, "gen_ai.request.id": "r-text", "gen_ai.usage.prompt_tokens": "many"}
    found = spans_to_requests(
        export(span(8, VLLM), span(9, bad_tokens), span(10, bad_type)), MAPPING
    )
    assert found.rejected == 2 and found.table.column("request_id").to_pylist() == ["cmpl-7"]
    reasons = " | ".join(found.reasons)
    assert "span 0909090909090909: field output_tokens: must be an integer" in reasons
    assert "span 0a0a0a0a0a0a0a0a: field prompt_tokens: must be a number, got 'many'" in reasons


def test_an_export_without_llm_spans_has_no_table():
    found = spans_to_requests(export(span(11, {"http.route": "/"})), MAPPING)
    assert found.table is None and found.skipped == 1


def test_otlp_json_carries_hex_ids_and_numbers_as_strings():
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "gw"}}]
                },
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "chat",
                                "kind": 3,
                                "startTimeUnixNano": str(START_NS),
                                "endTimeUnixNano": str(START_NS + 250_000_000),
                                "attributes": [
                                    {
                                        "key": "gen_ai.usage.input_tokens",
                                        "value": {"intValue": "12"},
                                    }
                                ],
                                "someFutureField": True,
                            }
                        ]
                    }
                ],
            }
        ]
    }
    request = wire.decode(json.dumps(document).encode(), wire.JSON, ExportTraceServiceRequest)
    (row,) = rows(request)
    assert row["request_id"] == "eee19b7ec3c1b174" and row["prompt_tokens"] == 12
    assert dict(row["attrs"])["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert row["e2e_ms"] == pytest.approx(250)


@pytest.mark.parametrize(
    ("body", "media_type", "problem"),
    [
        (b"\xff\xff\xff", wire.PROTOBUF, "not a opentelemetry.proto.collector.trace"),
        (b"{not json", wire.JSON, "not JSON"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "xyz"}]}]}]}',
            wire.JSON,
            "not hex",
        ),
        (b'{"resourceSpans": 3}', wire.JSON, "in OTLP JSON"),
        (b"[" * 100_000, wire.JSON, "nested too deeply"),
        (b"[]", wire.JSON, "not an object"),
        (b'"resourceSpans"', wire.JSON, "not an object"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "ee e1"}]}]}]}',
            wire.JSON,
            "not hex",
        ),
        (b'{"a":' * 5_000 + b"1" + b"}" * 5_000, wire.JSON, "nested too deeply"),
    ],
)
def test_an_undecodable_body_is_an_ingest_error_naming_the_problem(body, media_type, problem):
    with pytest.raises(IngestError, match=problem):
        wire.decode(body, media_type, ExportTraceServiceRequest)


def test_a_mapping_naming_an_unknown_column_or_error_class_is_refused(tmp_path):
    path = tmp_path / "spans.toml"
    path.write_text('[columns]\nttft = ["gen_ai.latency.time_to_first_token"]\n')
    with pytest.raises(ConfigError, match="no column 'ttft'"):
        load_span_mapping(path)
    path.write_text('[error_types]\nBoom = "kaboom"\n')
    with pytest.raises(ConfigError, match=r"error_types\.Boom is 'kaboom'"):
        load_span_mapping(path)


# -- hostile spans -----------------------------------------------------------------------

_MAPPED = sorted(
    {s.attribute for sources in MAPPING.columns.values() for s in sources}
    | {s.attribute for sources in MAPPING.attrs.values() for s in sources}
    | {"error.type"}
)
_ANY_SCALAR = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=12)),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(double_value=v), st.floats()),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=4)),
    st.just(AnyValue()),
)
_ANY = st.one_of(
    _ANY_SCALAR,
    st.builds(
        lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(_ANY_SCALAR, max_size=3)
    ),
)
_SPAN = st.builds(
    lambda attributes, start, length, code, span_id: Span(
        span_id=span_id,
        start_time_unix_nano=start,
        end_time_unix_nano=min(start + length, 2**64 - 1),
        status=Status(code=code),
        attributes=[KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat"))]
        + [KeyValue(key=k, value=v) for k, v in attributes],
    ),
    st.lists(st.tuples(st.sampled_from(_MAPPED), _ANY), max_size=6),
    st.sampled_from([0, 1, START_NS, 2**64 - 1]),
    st.integers(0, 2**40),
    st.integers(0, 2),
    st.sampled_from([b"", b"\x01" * 8]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SPAN, min_size=1, max_size=5))
def test_any_span_is_either_a_checked_row_or_a_counted_rejection(spans):
    found = spans_to_requests(export(*spans), MAPPING)
    taken = found.table.num_rows if found.table is not None else 0
    assert taken + found.rejected == len(spans)
    if found.table is not None:
        assert found.table.schema.equals(REQUESTS_SCHEMA)
        assert len(found.reasons) == min(found.rejected, 3)
