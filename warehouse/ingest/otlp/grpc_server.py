"""OTLP/gRPC: the collector protocol's trace and metrics services, on ``grpc.aio``.

The server runs on the receiver's own event loop (uvicorn's uvloop: grpc.aio runs on
it as on asyncio's loop, at the same cost a call) and hands each export to the
transport-neutral exports of the write service
(:class:`~warehouse.ingest.otlp.exports.OtlpExports`). Requests reach
them as the raw bytes grpc received (inflated when the sender used gzip), unparsed:
those bytes are the deduplication token that makes a retried export change nothing.

Errors map onto the codes the OTLP specification names, so that senders retry what
may succeed later and drop what never will:

==============================================  ==========================================
bad data, missing tenant                        INVALID_ARGUMENT (not retried)
wrong or missing credentials                    UNAUTHENTICATED (not retried)
a message over ``max_body_bytes``               RESOURCE_EXHAUSTED without RetryInfo (not
                                                retried; grpc's own answer past its limit)
ingest buffer full, store down, failed commit   UNAVAILABLE with RetryInfo (retried)
==============================================  ==========================================
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from warehouse.auth import Access
from warehouse.config import parse_listen
from warehouse.errors import (
    BufferFull,
    ConfigError,
    Forbidden,
    IngestError,
    NotRunning,
    PayloadTooLarge,
    StoreError,
    StoreUnavailable,
)
from warehouse.ingest.otlp import wire as otlp_wire
from warehouse.ingest.otlp.exports import OtlpExports

__all__ = ["METRICS_METHOD", "TRACES_METHOD", "OtlpGrpcServer", "refusal"]

log = logging.getLogger("llmwh.receiver")

TRACES_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
TRACES_METHOD = f"/{TRACES_SERVICE}/Export"
METRICS_METHOD = f"/{METRICS_SERVICE}/Export"
RETRY_AFTER_SECONDS = 1
STOP_GRACE_SECONDS = 30.0
"""How long :meth:`OtlpGrpcServer.stop` lets exports in flight finish before cancelling
them (a cancelled one was never acknowledged: its sender retries)."""

Export = Callable[[bytes, str, str | None], Awaitable[Message]]


class OtlpGrpcServer:
    """The OTLP/gRPC services of ``exports`` on ``listen`` (HOST:PORT), open to the
    credentials of ``access`` that may write."""

    def __init__(self, exports: OtlpExports, access: Access, listen: str):
        self.exports = exports
        self.access = access
        self.listen = listen
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Listen and serve; :class:`ConfigError` when the address cannot be bound."""
        host, port = parse_listen(self.listen, "--otlp-grpc-listen")
        config = self.exports.writes.config
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_body_bytes),
                # grpc's default lets a second server share a bound port, silently
                # splitting the senders between them: refuse a port in use instead.
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers(
            (
                self._service(TRACES_SERVICE, self.exports.traces, ExportTraceServiceResponse),
                self._service(METRICS_SERVICE, self.exports.metrics, ExportMetricsServiceResponse),
            )
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            server.add_insecure_port(address)
        except RuntimeError:
            raise ConfigError(
                f"the OTLP/gRPC server could not listen on {self.listen} (in use?)"
            ) from None
        await server.start()
        self._server = server

    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Take no more calls and let those in flight finish (up to ``grace`` seconds)."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    def _service(
        self, service: str, export: Export, response: type[Message]
    ) -> grpc.GenericRpcHandler:
        method = f"/{service}/Export"

        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Message:
            return await self._export(method, export, raw, context)

        # No request deserializer: the handler gets grpc's bytes as they came.
        rpc = grpc.unary_unary_rpc_method_handler(
            handle, response_serializer=response.SerializeToString
        )
        return grpc.method_handlers_generic_handler(service, {"Export": rpc})

    async def _export(
        self, method: str, export: Export, raw: bytes, context: grpc.aio.ServicerContext
    ) -> Message:
        writes = self.exports.writes
        # Counted as cancelled unless it ends otherwise (the sender went, or stop()'s
        # grace ran out): nothing was acknowledged.
        code, message, retry_after = grpc.StatusCode.CANCELLED, "", None
        try:
            pairs = list(context.invocation_metadata() or ())
            metadata = dict(pairs)
            grant = self.access.grant(metadata.get("authorization"))
            if grant is None:
                code, message = grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials"
            else:
                if not grant.allows("write"):
                    raise Forbidden(f"credential {grant.name!r} may not write here")
                wanted = (writes.tenants.header or "").lower()
                tenant = writes.tenants.of_request(
                    (value for key, value in pairs if key.lower() == wanted), grant
                )
                with writes.committer.hold(len(raw), tenant or ""):
                    answer = await export(raw, otlp_wire.PROTOBUF, tenant)
                code = grpc.StatusCode.OK
                return answer
        except (IngestError, StoreError, NotRunning) as exc:
            code, message, retry_after = refusal(exc)
            if isinstance(exc, StoreUnavailable | NotRunning):
                log.warning("store unavailable: %s", exc)
            elif isinstance(exc, StoreError):
                log.error("the store could not commit the write on %s: %s", method, exc)
        except Exception:
            log.exception("OTLP/gRPC export on %s failed", method)
            code, message = grpc.StatusCode.INTERNAL, "internal error (see the receiver's log)"
        finally:
            writes.metrics.labelled(writes.metrics.grpc_requests, method, code.name).inc()
        await context.abort(code, message, trailing_metadata=_details(code, message, retry_after))
        raise AssertionError("unreachable: abort raises")  # pragma: no cover


def refusal(exc: IngestError | StoreError | NotRunning) -> tuple[grpc.StatusCode, str, int | None]:
    """The gRPC code, message and retry delay (seconds; None: not to be retried) of an
    error a write raised."""
    if isinstance(exc, BufferFull):
        return grpc.StatusCode.UNAVAILABLE, str(exc), exc.retry_after
    if isinstance(exc, PayloadTooLarge):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), None
    if isinstance(exc, Forbidden):
        return grpc.StatusCode.PERMISSION_DENIED, str(exc), None
    if isinstance(exc, IngestError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc), None
    if isinstance(exc, StoreUnavailable | NotRunning):
        return grpc.StatusCode.UNAVAILABLE, str(exc), RETRY_AFTER_SECONDS
    # A failed commit: the write may succeed later, and OTLP senders retry UNAVAILABLE.
    return (
        grpc.StatusCode.UNAVAILABLE,
        f"the store could not commit the write: {exc}",
        RETRY_AFTER_SECONDS,
    )


def _details(
    code: grpc.StatusCode, message: str, retry_after: int | None
) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata of a refusal: the ``google.rpc.Status`` (with ``RetryInfo`` when
    it may be retried) in ``grpc-status-details-bin``, where Go and Java senders (the
    Collector) look for it, and the ``RetryInfo`` alone in ``google.rpc.retryinfo-bin``,
    where the Python SDK's exporter looks."""
    status = Status(code=code.value[0], message=message)
    metadata = []
    if retry_after is not None:
        info = RetryInfo(retry_delay=Duration(seconds=retry_after))
        detail = AnyMessage()
        detail.Pack(info)
        status.details.append(detail)
        metadata.append(("google.rpc.retryinfo-bin", info.SerializeToString()))
    metadata.append(("grpc-status-details-bin", status.SerializeToString()))
    return tuple(metadata)
