"""Send requests to a receiver, paced: per-request events (Arrow IPC), remote write, or
OTLP spans (over HTTP, or gRPC: ``--via otlp-grpc``, see :mod:`.grpc_send`).

A write the receiver refuses for its content (4xx other than 429) stops the sender with
the receiver's message; 429 and 5xx answers and lost connections are retried with
backoff (``Retry-After`` honoured), as Prometheus does, so nothing is dropped.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pyarrow as pa

from warehouse.errors import ConfigError, SendError
from warehouse.synthetic.samples import remote_write_body
from warehouse.synthetic.spans import otlp_traces_body

__all__ = ["ENDPOINTS", "Sender"]

GRPC = "otlp-grpc"
ENDPOINTS = {
    "events": "/api/v1/requests",
    "remote-write": "/api/v1/write",
    "otlp": "/v1/traces",
    GRPC: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",  # at HOST:PORT
}
# otlp: the OpenTelemetry SDK's batch span processor exports 512 spans at most.
_ROWS_PER_WRITE = {"events": 5_000, "remote-write": 200, "otlp": 512, GRPC: 512}
_RETRIES = 8


@dataclass
class Sender:
    """Posts requests to ``url`` (a receiver's base URL, or one of its endpoints; for
    ``otlp-grpc``, its ``HOST:PORT`` or ``grpc://HOST:PORT``).

    ``rate`` caps requests per second (``None``: as fast as the receiver takes them).
    """

    url: str
    via: str = "events"
    rate: float | None = None
    timeout: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every write: credentials (``Authorization``), a tenant header ..."""

    def __post_init__(self) -> None:
        if self.rate is not None and self.rate <= 0:
            raise ConfigError(f"--rate must be > 0 requests/s, got {self.rate}")
        self._started: float | None = None
        self.sent = 0
        self._grpc = None
        if self.via == GRPC or self.url.startswith("grpc://"):
            from warehouse.synthetic.grpc_send import GrpcTraces  # grpc: when asked

            self.via = GRPC
            self._grpc = GrpcTraces(self.url, self.timeout, _RETRIES)
            return
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"--send needs an http(s) URL such as http://127.0.0.1:9201, got {self.url!r}"
            )
        path = parts.path.rstrip("/")
        for via, endpoint in ENDPOINTS.items():
            if path.endswith(endpoint):
                self.via, path = via, path[: -len(endpoint)]
        if self.via not in ENDPOINTS:
            raise ConfigError(f"unknown --via {self.via!r}: expected {' or '.join(ENDPOINTS)}")
        if self.via == GRPC:  # named by the URL's path, but gRPC takes no http:// URL
            raise ConfigError(f"--via {GRPC} sends to HOST:PORT, got {self.url!r}")
        self._path = path + ENDPOINTS[self.via]
        connection = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        self._connection = connection(parts.hostname, parts.port, timeout=self.timeout)

    def send(
        self, batches: Iterable[pa.Table], progress: Callable[[int], None] | None = None
    ) -> int:
        """Send every request of ``batches``, in order; returns how many were acknowledged."""
        for table in batches:
            for chunk in self._chunks(table):
                self._pace()
                body, headers = self._body(chunk)
                if self._grpc is not None:
                    self._grpc.export(body, self.headers)
                else:
                    self._post(body, {**headers, **self.headers})
                self.sent += chunk.num_rows
                if progress is not None:
                    progress(chunk.num_rows)
        return self.sent

    def close(self) -> None:
        if self._grpc is not None:
            self._grpc.close()
        else:
            self._connection.close()

    def _chunks(self, table: pa.Table) -> Iterator[pa.Table]:
        size = _ROWS_PER_WRITE[self.via]
        if self.rate is not None:  # a write at least every half second at low rates
            size = max(1, min(size, int(self.rate / 2)))
        for first in range(0, table.num_rows, size):
            yield table.slice(first, size)

    def _pace(self) -> None:
        if self.rate is None:
            return
        now = time.monotonic()
        if self._started is None:
            self._started = now
        due = self._started + self.sent / self.rate
        if due > now:
            time.sleep(due - now)

    def _body(self, chunk: pa.Table) -> tuple[bytes, dict[str, str]]:
        if self.via == "remote-write":
            headers = {
                "Content-Type": "application/x-protobuf",
                "Content-Encoding": "snappy",
                "X-Prometheus-Remote-Write-Version": "0.1.0",
            }
            return remote_write_body(chunk), headers
        if self.via in ("otlp", GRPC):
            return otlp_traces_body(chunk), {"Content-Type": "application/x-protobuf"}
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, chunk.schema) as writer:
            writer.write_table(chunk)
        return sink.getvalue().to_pybytes(), {"Content-Type": "application/vnd.apache.arrow.stream"}

    def _post(self, body: bytes, headers: dict[str, str]) -> None:
        delay = 0.25
        for attempt in range(_RETRIES + 1):
            try:
                self._connection.request("POST", self._path, body, headers)
                response = self._connection.getresponse()
                answer = response.read().decode(errors="replace").strip()
            except (OSError, http.client.HTTPException) as exc:
                self._connection.close()
                status, answer, retry_after = 0, str(exc), None
            else:
                status, retry_after = response.status, response.getheader("Retry-After")
            if 200 <= status < 300:
                return
            if status and status != 429 and status < 500:
                raise SendError(f"the receiver refused a write ({status}): {answer}")
            if attempt == _RETRIES:
                break
            time.sleep(_retry_delay(retry_after, delay))
            delay = min(delay * 2, 10.0)
        last = f"{status} {answer}" if status else answer
        raise SendError(f"{self.url} did not take a write after {_RETRIES} retries (last: {last})")


def _retry_delay(retry_after: str | None, backoff: float) -> float:
    if retry_after and retry_after.strip().isdigit():
        return min(float(retry_after), 30.0)
    return backoff
