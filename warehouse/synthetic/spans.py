"""Requests as the OpenTelemetry spans vLLM exports: one ``llm_request`` span a request.

The attribute names are the receiver's defaults (``warehouse/ingest/otlp/span_mapping.toml``):
vLLM's ``gen_ai.request.id``, ``gen_ai.usage.*`` and ``gen_ai.latency.*`` (seconds),
the GenAI conventions' model, operation and finish reasons, and the deployment's
``service.name``, ``cloud.*`` and ``host.name`` on the resource. A failed request's
span has status ERROR and its error class as ``error.type``.

Only what the default span mapping reads is sent: ``model_version``, the client and
network dimensions, ``ab_group``, ``itl_p99_ms``, ``max_context_tokens``, the quality
scores, ``attrs`` and probes have no attribute there (probes are left out, as a probe
sent this way would count as user traffic).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

__all__ = ["otlp_traces_body"]

_RESOURCE = {
    "service": "service.name",
    "region": "cloud.region",
    "zone": "cloud.availability_zone",
    "node": "host.name",
}
_STRINGS = {
    "request_id": "gen_ai.request.id",
    "model": "gen_ai.response.model",
    "request_type": "gen_ai.operation.name",
    "tenant": "tenant.id",
}
_INTEGERS = {
    "prompt_tokens": "gen_ai.usage.prompt_tokens",
    "output_tokens": "gen_ai.usage.completion_tokens",
    "cached_prompt_tokens": "gen_ai.usage.cache_read.input_tokens",
    "http_status": "http.response.status_code",
}
_SECONDS = {
    "queue_ms": "gen_ai.latency.time_in_queue",
    "ttft_ms": "gen_ai.latency.time_to_first_token",
    "e2e_ms": "gen_ai.latency.e2e",
}


def otlp_traces_body(requests: pa.Table) -> bytes:
    """An ``ExportTraceServiceRequest`` (protobuf) with a span for each non-probe request."""
    requests = requests.filter(pc.invert(requests.column("is_probe")))
    export = ExportTraceServiceRequest()
    by_resource: dict[tuple[Any, ...], list[Span]] = {}
    columns = {name: requests.column(name).to_pylist() for name in requests.column_names}
    for i in range(requests.num_rows):
        resource = tuple(columns[name][i] for name in _RESOURCE)
        by_resource.setdefault(resource, []).append(_span({k: v[i] for k, v in columns.items()}))
    for resource, spans in by_resource.items():
        resource_spans = export.resource_spans.add()
        resource_spans.resource.attributes.extend(
            _kv(key, value)
            for key, value in zip(_RESOURCE.values(), resource, strict=True)
            if value
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "llmwh.synthetic"
        scope_spans.spans.extend(spans)
    return export.SerializeToString()


def _span(row: dict[str, Any]) -> Span:
    digest = hashlib.blake2b(row["request_id"].encode(), digest_size=24).digest()
    start_ns = int(row["ts"].timestamp() * 1000) * 1_000_000
    attributes = [_kv(key, row[name]) for name, key in _STRINGS.items() if row[name]]
    attributes += [_kv(k, row[n]) for n, k in _INTEGERS.items() if row[n] is not None]
    attributes += [_kv(k, row[n] / 1000) for n, k in _SECONDS.items() if row[n] is not None]
    if row["finish_reason"]:
        attributes.append(
            KeyValue(
                key="gen_ai.response.finish_reasons",
                value=AnyValue(
                    array_value=ArrayValue(values=[AnyValue(string_value=row["finish_reason"])])
                ),
            )
        )
    status = Status()
    if row["status"] != "ok":
        status.code = Status.STATUS_CODE_ERROR
        attributes.append(_kv("error.type", row["error_class"] or "server_error"))
    e2e_ns = int((row["e2e_ms"] or 0) * 1_000_000)
    return Span(
        trace_id=digest[:16],
        span_id=digest[16:],
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + e2e_ns,
        attributes=attributes,
        status=status,
    )


def _kv(key: str, value: str | int | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))
