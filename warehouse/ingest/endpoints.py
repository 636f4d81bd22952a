"""The receiver's own endpoints: the write doors as HTTP carries them, its metrics and
its health checks.

Each endpoint reads what HTTP says of a write (Content-Type, Content-Encoding, the
body), hands it to the transport-neutral :class:`~warehouse.ingest.service.WriteService`
and answers; the checks every request takes first (credential, the tenant's share of
the buffer, errors as status codes) are the receiver's (:mod:`warehouse.ingest.app`).
An endpoint returns the status it sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from warehouse.config import Config
from warehouse.errors import StoreError, UnsupportedMediaType
from warehouse.ingest import events
from warehouse.ingest.http import (
    Receive,
    Scope,
    Send,
    content_encoding,
    header,
    media_type,
    require_snappy,
    respond,
)
from warehouse.ingest.otlp import wire as otlp_wire
from warehouse.ingest.otlp.exports import OtlpExports
from warehouse.ingest.receiver_metrics import ReceiverMetrics
from warehouse.ingest.service import WriteService
from warehouse.store.base import Store
from warehouse.wire.compression import DECOMPRESSORS, gunzip

__all__ = [
    "Receiver",
    "healthz",
    "metrics",
    "otlp_metrics",
    "otlp_traces",
    "partial_write",
    "readyz",
    "remote_write",
    "requests",
]

V1_PROTO = "prometheus.WriteRequest"
V2_PROTO = "io.prometheus.write.v2.Request"
NDJSON_TYPES = {
    "application/x-ndjson",
    "application/jsonl",
    "application/json-seq",
    "application/ndjson",
}
ARROW_STREAM_TYPES = {"application/vnd.apache.arrow.stream"}


class Receiver(Protocol):
    """What an endpoint needs of the app that routes to it
    (:class:`warehouse.ingest.app.Receiver`)."""

    store: Store
    config: Config
    writes: WriteService
    otlp: OtlpExports
    metrics: ReceiverMetrics
    exposition: Callable[[], bytes] | None

    def tenant_of(self, scope: Scope) -> str | None: ...

    async def body_of(self, scope: Scope, receive: Receive) -> bytes: ...


async def remote_write(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """Prometheus remote write 1.0 or 2.0, as the Content-Type's ``proto`` says."""
    kind, params = media_type(header(scope, "content-type"))
    proto = params.get("proto", V1_PROTO)
    if kind not in ("", "application/x-protobuf") or proto not in (V1_PROTO, V2_PROTO):
        raise UnsupportedMediaType(
            f"unsupported Content-Type {header(scope, 'content-type')!r}: remote write takes "
            f"application/x-protobuf with proto={V1_PROTO} or proto={V2_PROTO}"
        )
    require_snappy(scope, "remote write")
    tenant = receiver.tenant_of(scope)  # before the body: a refusal reads none
    body = await receiver.body_of(scope, receive)
    written = await receiver.writes.remote_write(body, proto == V2_PROTO, tenant)
    headers = []
    if proto == V2_PROTO and written.decoded is not None:
        decoded = written.decoded
        headers = [
            ("x-prometheus-remote-write-samples-written", str(decoded.samples_written)),
            ("x-prometheus-remote-write-histograms-written", str(decoded.histograms_written)),
            ("x-prometheus-remote-write-exemplars-written", str(decoded.exemplars_written)),
        ]
    refused, why = written.refused
    if refused:
        await respond(send, 400, partial_write(refused, why), headers)
        return 400
    await respond(send, 204, headers=headers)
    return 204


def partial_write(refused: int, why: str) -> str:
    """The answer to a partial write: the rest is committed; its 400 tells the sender not
    to retry what can never be stored (as Prometheus does for out-of-bounds samples)."""
    return (
        f"{refused} samples, histograms, exemplars or per-request metrics were "
        f"not written ({why}); the rest was\n"
    )


async def requests(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """Per-request events: NDJSON or an Arrow IPC stream, identity, gzip or zstd."""
    kind, _ = media_type(header(scope, "content-type"))
    if kind in NDJSON_TYPES:
        decode = events.decode_ndjson
    elif kind in ARROW_STREAM_TYPES:
        decode = events.decode_arrow_stream
    else:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {kind or '(none)'!r}: per-request events are "
            "application/x-ndjson or application/vnd.apache.arrow.stream"
        )
    encoding = content_encoding(scope, "identity")
    if encoding not in DECOMPRESSORS:
        raise UnsupportedMediaType(
            f"unsupported Content-Encoding {encoding!r}: use identity, gzip or zstd"
        )
    tenant = receiver.tenant_of(scope)  # before the body: a refusal reads none
    body = await receiver.body_of(scope, receive)
    accepted = await receiver.writes.requests(body, encoding, decode, tenant)
    await respond(send, 200, f'{{"accepted": {accepted}}}\n', content_type="application/json")
    return 200


async def otlp_traces(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """OTLP/HTTP spans (docs/otlp.md): each LLM-request span becomes a request."""
    kind, raw = await _otlp_body(receiver, scope, receive)
    answer = await receiver.otlp.traces(raw, kind, receiver.tenant_of(scope))
    await respond(send, 200, otlp_wire.encode(answer, kind), content_type=kind)
    return 200


async def otlp_metrics(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """OTLP/HTTP metric points (docs/otlp.md): series as Prometheus would name them."""
    kind, raw = await _otlp_body(receiver, scope, receive)
    answer = await receiver.otlp.metrics(raw, kind, receiver.tenant_of(scope))
    await respond(send, 200, otlp_wire.encode(answer, kind), content_type=kind)
    return 200


async def _otlp_body(receiver: Receiver, scope: Scope, receive: Receive) -> tuple[str, bytes]:
    """An OTLP/HTTP request's media type and its body, inflated."""
    kind, _ = media_type(header(scope, "content-type"))
    if kind not in (otlp_wire.PROTOBUF, otlp_wire.JSON):
        raise UnsupportedMediaType(
            f"unsupported Content-Type {kind or '(none)'!r}: OTLP/HTTP takes "
            f"{otlp_wire.PROTOBUF} or {otlp_wire.JSON}"
        )
    encoding = content_encoding(scope, "identity")
    if encoding not in ("identity", "gzip"):
        raise UnsupportedMediaType(
            f"unsupported Content-Encoding {encoding!r}: OTLP/HTTP takes gzip or none"
        )
    body = await receiver.body_of(scope, receive)
    if encoding == "identity":
        return kind, body
    return kind, await asyncio.to_thread(gunzip, body, receiver.config.max_body_bytes)


async def metrics(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """The receiver's own metrics, in Prometheus' text format."""
    own = receiver.metrics
    own.buffer_bytes.set(receiver.writes.committer.buffer.buffered_bytes)
    if receiver.exposition is not None:
        body = await asyncio.to_thread(receiver.exposition)
    else:
        body = generate_latest(own.registry)
    await respond(send, 200, body, content_type=CONTENT_TYPE_LATEST)
    return 200


async def healthz(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """The process is up."""
    await respond(send, 200, "ok\n")
    return 200


async def readyz(receiver: Receiver, scope: Scope, receive: Receive, send: Send) -> int:
    """The store answers within 5 seconds."""
    try:
        await asyncio.wait_for(asyncio.to_thread(receiver.store.query_arrow, "SELECT 1 AS ok"), 5)
    except (StoreError, TimeoutError) as exc:
        await respond(send, 503, f"store not ready: {exc}\n")
        return 503
    await respond(send, 200, "ready\n")
    return 200
