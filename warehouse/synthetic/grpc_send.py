"""OTLP/gRPC trace exports for :class:`~warehouse.synthetic.send.Sender`: serialized
``ExportTraceServiceRequest`` bytes on a plain channel, retried as the OTLP
specification says (UNAVAILABLE and the like; RESOURCE_EXHAUSTED only with a
``RetryInfo``, whose delay is honoured)."""

from __future__ import annotations

import time

import grpc
from google.protobuf.message import DecodeError
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from warehouse.config import parse_listen
from warehouse.errors import ConfigError, SendError
from warehouse.ingest.otlp.grpc_server import TRACES_METHOD

__all__ = ["GrpcTraces"]

_RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


class GrpcTraces:
    """Trace exports to ``target`` (``HOST:PORT`` or ``grpc://HOST:PORT``)."""

    def __init__(self, target: str, timeout: float, retries: int):
        address = target.removeprefix("grpc://").rstrip("/")
        if "://" in address:
            raise ConfigError(f"--via otlp-grpc sends to HOST:PORT, got {target!r}")
        host, port = parse_listen(address, "--send")
        self.target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.timeout, self.retries = timeout, retries
        self._channel = grpc.insecure_channel(self.target)
        # No serializers: the request goes as the bytes given, the answer comes as bytes.
        self._export = self._channel.unary_unary(TRACES_METHOD)

    def export(self, body: bytes, headers: dict[str, str]) -> None:
        """Send one export until it is acknowledged; :class:`SendError` when it is refused
        or every retry failed."""
        metadata = tuple((name.lower(), value) for name, value in headers.items())
        backoff = 0.25
        for attempt in range(self.retries + 1):
            try:
                self._export(body, metadata=metadata, timeout=self.timeout)
                return
            except grpc.RpcError as exc:
                code, details = exc.code(), exc.details()
                delay = _retry_delay(exc)
                if code not in _RETRYABLE and not (
                    code == grpc.StatusCode.RESOURCE_EXHAUSTED and delay is not None
                ):
                    raise SendError(
                        f"the receiver refused a write ({code.name}): {details}"
                    ) from None
            if attempt == self.retries:
                break
            time.sleep(min(delay, 30.0) if delay is not None else backoff)
            backoff = min(backoff * 2, 10.0)
        raise SendError(
            f"{self.target} did not take a write after {self.retries} retries "
            f"(last: {code.name} {details})"
        )

    def close(self) -> None:
        self._channel.close()


def _retry_delay(error: grpc.RpcError) -> float | None:
    """The ``RetryInfo`` delay in the error's ``google.rpc.Status`` details, if any."""
    trailing = dict(error.trailing_metadata() or ())
    raw = trailing.get("grpc-status-details-bin")
    if not raw:
        return None
    try:
        status = Status.FromString(raw)
    except DecodeError:
        return None
    for detail in status.details:
        info = RetryInfo()
        if detail.Unpack(info):
            return info.retry_delay.seconds + info.retry_delay.nanos / 1e9
    return None
