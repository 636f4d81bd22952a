"""Damaged real payloads at the receiver: never a crash or a 5xx, never a partial write.

Each case starts from a real body (per-request samples as a gateway remote-writes them,
a 2.0 write with histograms and exemplars, NDJSON and Arrow events, OTLP spans and
metrics in protobuf and JSON) and damages it the
ways networks and buggy senders do: flipped bits, cut short, bytes inserted or
repeated, before or after compression. Whatever comes in, the answer is a 2xx with
what decoded written, or a 4xx with a message and nothing written. One 4xx writes: remote
write's refusal of points the store would not keep (a damaged timestamp far in the
future), which names how many it refused and stores the rest, as Prometheus does for
out-of-bounds samples (docs/reliability.md).
"""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta

import cramjam
import pyarrow as pa
import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from test_otlp_metrics_endpoint import e2e, export, point, tokens, ttft
from test_receiver import V1_TYPE, V2_TYPE, count, v2_request

from warehouse.ingest.events import encode_ndjson
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.samples import remote_write_body
from warehouse.synthetic.spans import otlp_traces_body

START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
REQUESTS = synthetic_requests(4, seed=3, start=START)
V1_RAW = bytes(cramjam.snappy.decompress_raw(remote_write_body(REQUESTS)))
V2_RAW = v2_request().SerializeToString()
NDJSON = encode_ndjson(REQUESTS)
_sink = pa.BufferOutputStream()
with pa.ipc.new_stream(_sink, REQUESTS.schema) as _writer:
    _writer.write_table(REQUESTS)
ARROW = _sink.getvalue().to_pybytes()
OTLP = otlp_traces_body(REQUESTS)
_otlp = MessageToDict(ExportTraceServiceRequest.FromString(OTLP))
for _span in (s for r in _otlp["resourceSpans"] for ss in r["scopeSpans"] for s in ss["spans"]):
    for _key in ("traceId", "spanId"):  # OTLP JSON writes ids in hex
        _span[_key] = base64.b64decode(_span[_key]).hex()
OTLP_JSON = json.dumps(_otlp).encode()
_metrics = export(tokens(point(5.0, model="m1"), point(9.0, model="m2")), ttft(), e2e())
OTLP_METRICS = _metrics.SerializeToString()
OTLP_METRICS_JSON = json.dumps(MessageToDict(_metrics)).encode()

ENDPOINTS = {
    "v1": ("/api/v1/write", V1_TYPE, V1_RAW, True),
    "v2": ("/api/v1/write", V2_TYPE, V2_RAW, True),
    "ndjson": ("/api/v1/requests", "application/x-ndjson", NDJSON, False),
    "arrow": ("/api/v1/requests", "application/vnd.apache.arrow.stream", ARROW, False),
    "otlp": ("/v1/traces", "application/x-protobuf", OTLP, False),
    "otlp-json": ("/v1/traces", "application/json", OTLP_JSON, False),
    "otlp-metrics": ("/v1/metrics", "application/x-protobuf", OTLP_METRICS, False),
    "otlp-metrics-json": ("/v1/metrics", "application/json", OTLP_METRICS_JSON, False),
}

PARTIAL = re.compile(
    r"[1-9]\d* samples, histograms, exemplars or per-request metrics were not written "
    r"\(.* (?:ahead of the receiver's clock \(max_future_seconds\)|retention \(\d+ days\)"
    r"|is before 1970)\); the rest was"
)
"""Remote write's answer when it refuses some points and stores the rest."""


@st.composite
def damaged(draw: st.DrawFn, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "repeat", "delete"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "repeat":
            data[at:at] = data[at : at + draw(st.integers(1, 64))]
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


def table_counts(store) -> dict[str, int]:
    """Rows per table; FINAL where ClickHouse merges rows away in the background."""
    counts = {}
    for name in (
        "samples",
        "series",
        "request_parts",
        "requests",
        "histogram_samples",
        "exemplars",
    ):
        final = (
            " FINAL" if store.capabilities.dialect == "clickhouse" and name != "requests" else ""
        )
        counts[name] = count(store, f"SELECT count(*) FROM {store.database}.{name}{final}")
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_damaged_payloads_are_a_4xx_with_a_message_or_written_whole(client, migrated, endpoint):
    path, content_type, original, snappy = ENDPOINTS[endpoint]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(damaged(original), st.booleans())
    def case(raw: bytes, damage_after_compression: bool) -> None:
        if snappy:
            body = bytes(cramjam.snappy.compress_raw(raw))
            if damage_after_compression:  # the damage hits the compressed bytes instead
                body = bytes(cramjam.snappy.compress_raw(original))[: len(body) // 2] + raw[:8]
        else:
            body = raw
        before = table_counts(migrated)
        response = client.post(path, body, content_type=content_type)
        assert response.status < 500, response.text
        if response.status >= 400:
            assert response.body.strip(), f"{response.status} without a message"
            after = table_counts(migrated)
            partial = path == "/api/v1/write" and response.status == 400
            if not (partial and PARTIAL.fullmatch(response.text.strip())):
                assert after == before, response.text

    case()
