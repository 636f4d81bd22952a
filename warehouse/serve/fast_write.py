"""Remote write 1.0 answered in the HTTP protocol's own callbacks, below the ASGI cycle.

One receiver process answers every write under one interpreter lock, and with
long-lived series the lock, not the work, bounds it (docs/benchmarks.md, "Where
llmwh's time goes now"). Much of a write's share went to the ASGI request cycle: a
task and an event per request, ASGI messages both ways, a timeout's timer, the
headers checked again as they are sent. On this path a remote write 1.0 is read by
the protocol's parser callbacks, handed to the write service's committer, and answered
by the committer's future's callback: no task, no ASGI messages.

A request takes this path only when nothing about it needs more than the common case,
decided from its head before any byte of its body is read: ``POST /api/v1/write`` over
HTTP/1.1 kept alive, not pipelined behind another, without ``Expect``; a
Content-Length up to ``max_body_bytes`` and
:data:`~warehouse.ingest.service.INLINE_DECOMPRESS_BYTES`; remote write 1.0's
Content-Type and Content-Encoding; a credential that may write; a tenant named as the
tenant rule wants (multi-tenant mode); room in the buffer; and the write service's C
path. Any other request, and every request those checks would refuse, goes the ASGI
way, which answers it as it always has. What this path answers itself (204, and the
refusals of a body: 400, 408, 429, 503, 500) it answers with the words of the ASGI path
(:meth:`~warehouse.ingest.app.Receiver.refusal`, :func:`~warehouse.ingest.http.response_parts`)
in uvicorn's framing, byte for byte (``tests/integration/ingest/test_fast_write.py``).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from warehouse.errors import BufferFull, IngestError
from warehouse.ingest.buffer import Held, Serving
from warehouse.ingest.endpoints import V1_PROTO, partial_write
from warehouse.ingest.http import body_timeout, media_type, response_parts
from warehouse.ingest.service import INLINE_DECOMPRESS_BYTES

if TYPE_CHECKING:
    from warehouse.ingest.app import Receiver

__all__ = ["FastRemoteWrite", "protocol_for"]

PATH = "/api/v1/write"
_RAW_PATH = PATH.encode()
_INTERNAL_ERROR = (
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: 21\r\nconnection: close\r\n"
    b"\r\nInternal Server Error"
)
"""What uvicorn answers after the status line and its own headers when an ASGI app
raises before answering."""

log = logging.getLogger("uvicorn.error")


class _NoEvent:
    """uvicorn's protocol sets its cycle's ``message_event`` when the connection goes."""

    def set(self) -> None:
        pass


_NO_EVENT = _NoEvent()


class _Write:
    """One remote write on this path. While it is open it stands in for uvicorn's request
    cycle in the protocol (``self.cycle``), which reads these attributes of it."""

    __slots__ = (
        "body",
        "disconnected",
        "held",
        "keep_alive",
        "message_event",
        "response_complete",
        "started",
        "tenant",
        "timer",
    )

    def __init__(self, held: Held, tenant: str | None, started: float):
        self.held, self.tenant, self.started = held, tenant, started
        self.body = bytearray()
        self.keep_alive = True
        self.disconnected = False
        self.response_complete = False
        self.message_event = _NO_EVENT
        self.timer: asyncio.TimerHandle | None = None


class FastRemoteWrite:
    """The receiver's side of this path: which requests take it, and their writes."""

    def __init__(self, receiver: Receiver):
        self.receiver = receiver
        config = receiver.config
        self.writes = receiver.writes
        self.max_length = min(config.max_body_bytes, INLINE_DECOMPRESS_BYTES)
        self.timeout = config.body_timeout_seconds
        tenant_header = (config.tenant_header or "").lower()
        self.tenant_header = tenant_header.encode("latin-1") if tenant_header else None
        metrics = receiver.metrics
        self.bytes_received = metrics.labelled(metrics.bytes_received, PATH)
        self.http_requests = metrics.http_requests
        self.enabled = self.writes.v1_flush is not None and self.timeout > 0

    def admit(self, headers: list[tuple[bytes, bytes]], started: float) -> _Write | None:
        """A write held for a request with these headers (names in lower case), when it
        may take this path; None for the ASGI path. Has no effect on None."""
        content_type = encoding = length = authorization = None
        tenants: list[str] = []
        for name, value in headers:
            if name == b"content-type":
                content_type = value if content_type is None else content_type
            elif name == b"content-encoding":
                encoding = value if encoding is None else encoding
            elif name == b"content-length":
                if length is not None:
                    return None
                length = value
            elif name == b"authorization":
                authorization = value if authorization is None else authorization
            elif name in (b"transfer-encoding", b"expect"):
                return None
            if name == self.tenant_header:
                tenants.append(value.decode("latin-1"))
        if length is None or not length.isdigit() or int(length) > self.max_length:
            return None
        kind, params = media_type(None if content_type is None else content_type.decode("latin-1"))
        if kind not in ("", "application/x-protobuf") or params.get("proto", V1_PROTO) != V1_PROTO:
            return None
        if ((encoding or b"").decode("latin-1") or "snappy").strip().lower() != "snappy":
            return None
        receiver = self.receiver
        grant = receiver.access.grant(
            None if authorization is None else authorization.decode("latin-1")
        )
        if grant is None or not grant.allows("write"):
            return None
        policy = self.writes.tenants
        try:
            tenant = policy.of_request(tenants, grant)
        except IngestError:
            return None
        share = policy.share(tenants[0] if tenants else None)
        try:
            held = self.writes.committer.hold(0, share, write=True)
        except BufferFull:
            return None
        return _Write(held, tenant, started)

    def write(self, write: _Write, answer: Any) -> None:
        """Hand a whole body over; ``answer(write, status, message, headers)`` is called
        once it is committed or refused."""
        body = bytes(write.body)
        self.bytes_received.inc(len(body))
        try:
            with Serving(write.held):
                future, written_at = self.writes.put_v1(body, write.tenant)
        except Exception as exc:
            self.refuse(write, exc, answer)
            return
        future.add_done_callback(partial(self._written, write, written_at, answer))

    def _written(self, write: _Write, written_at: float, answer: Any, future: Any) -> None:
        if future.cancelled():
            answer(write, 500, None, None)
            return
        try:
            written = self.writes.v1_written(future.result(), write.tenant, written_at)
        except Exception as exc:
            self.refuse(write, exc, answer)
            return
        refused, why = written.refused
        if refused:
            answer(write, 400, partial_write(refused, why), [])
        else:
            answer(write, 204, None, [])

    def refuse(self, write: _Write, exc: Exception, answer: Any) -> None:
        """Answer ``exc`` as the ASGI path would; a fault of ours as uvicorn does (500)."""
        try:
            status, message, headers = self.receiver.refusal(exc, PATH, True)
        except Exception:
            log.error("Exception in ASGI application\n", exc_info=exc)  # as uvicorn logs it
            answer(write, 500, None, None)
            return
        answer(write, status, f"{message}\n", headers or [])

    def counted(self, status: int) -> None:
        self.receiver.metrics.labelled(self.http_requests, PATH, str(status)).inc()


class FastWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with remote write 1.0 on :class:`FastRemoteWrite`'s
    path (see the module docstring); every other request as uvicorn serves it."""

    fast: FastRemoteWrite | None = None
    """Set on the class :func:`protocol_for` makes."""

    _write: _Write | None = None

    def on_headers_complete(self) -> None:
        fast = self.fast
        write = None
        if (
            fast is not None
            and fast.enabled
            and self.url == _RAW_PATH
            and self.parser.get_method() == b"POST"
            and self.parser.get_http_version() == "1.1"
            and self.parser.should_keep_alive()
            and not self.parser.should_upgrade()
            and not self.expect_100_continue
            and (self.cycle is None or self.cycle.response_complete)
            and self.limit_concurrency is None
            and not self.root_path
        ):
            try:
                write = fast.admit(self.headers, self.loop.time())
            except Exception:  # never a 400 from the parser for a fault of ours
                log.exception("remote write 1.0 left to the ASGI path")
        if write is None:
            super().on_headers_complete()
            return
        self.scope["method"] = "POST"
        self.scope["path"] = PATH
        self.scope["raw_path"] = _RAW_PATH
        self.scope["query_string"] = b""
        self._write = write
        self.cycle = write  # type: ignore[assignment]  # read as uvicorn reads its cycle

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        write = self._write
        if write is not None and write.timer is None and not write.response_complete:
            # A body still arriving after all this read: it must be whole in time.
            assert self.fast is not None
            deadline = write.started + self.fast.timeout
            write.timer = self.loop.call_at(deadline, self._timed_out, write)

    def on_body(self, body: bytes) -> None:
        write = self._write
        if write is None:
            super().on_body(body)
            return
        if write.response_complete:
            return
        try:
            write.held.grow(len(body))
        except BufferFull as exc:
            assert self.fast is not None
            self.fast.refuse(write, exc, self._answer)
            return
        write.body += body

    def on_message_complete(self) -> None:
        write = self._write
        if write is None:
            super().on_message_complete()
            return
        self._write = None
        if write.timer is not None:
            write.timer.cancel()
        if not write.response_complete:
            assert self.fast is not None
            self.fast.write(write, self._answer)

    def connection_lost(self, exc: Exception | None) -> None:
        write = self._write
        if write is not None and not write.response_complete:
            # The body will not come whole: the ASGI path's refusal, to no one.
            assert self.fast is not None
            self._write = None
            if write.timer is not None:
                write.timer.cancel()
            write.disconnected = True
            self.fast.refuse(
                write,
                IngestError("the client disconnected before sending the whole body"),
                self._answer,
            )
        super().connection_lost(exc)

    def _timed_out(self, write: _Write) -> None:
        write.timer = None
        if not write.response_complete:
            assert self.fast is not None
            self.fast.refuse(write, body_timeout(self.fast.timeout), self._answer)

    def _answer(
        self,
        write: _Write,
        status: int,
        message: str | None,
        headers: list[tuple[str, str]] | None,
    ) -> None:
        """Send a whole answer as uvicorn frames one (headers None: its own 500), let go
        of the write and count it."""
        if write.response_complete:
            return
        write.response_complete = True
        write.disconnected = write.disconnected or self.transport.is_closing()
        if not write.disconnected:
            content = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                content += [name, b": ", value, b"\r\n"]
            if headers is None:
                write.keep_alive = False
                content.append(_INTERNAL_ERROR)
            else:
                raw, payload = response_parts(status, message or b"", headers)
                for name, value in raw:
                    content += [name, b": ", value, b"\r\n"]
                if not write.keep_alive:
                    content.append(b"connection: close\r\n")
                content += [b"\r\n", payload]
            self.transport.write(b"".join(content))
            if not write.keep_alive:
                self.transport.close()
        write.held.release()
        assert self.fast is not None
        self.fast.counted(status)
        if not write.disconnected:
            self.on_response_complete()


def protocol_for(receiver: Receiver) -> type[FastWriteProtocol]:
    """The protocol class uvicorn serves ``receiver`` with."""
    return type("ReceiverProtocol", (FastWriteProtocol,), {"fast": FastRemoteWrite(receiver)})
