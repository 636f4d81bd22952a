"""The receiver: a plain ASGI app, the write endpoints and the checks every request takes.

==========================  =====================================================
``POST /api/v1/write``      Prometheus remote write 1.0 and 2.0 (by Content-Type)
``POST /api/v1/requests``   per-request events: NDJSON or an Arrow IPC stream
``POST /v1/traces``         OTLP/HTTP spans; those of LLM requests become requests
``POST /v1/metrics``        OTLP/HTTP metric points, as Prometheus series
``GET /metrics``            the receiver's own metrics
``GET /healthz``            the process is up
``GET /readyz``             the store answers
==========================  =====================================================

Each request takes the same checks first (its credential and the right the route needs,
its bytes held against its tenant's share of the buffer as they arrive, errors mapped
onto status codes); an endpoint (:mod:`warehouse.ingest.endpoints`) then reads the body
as HTTP carries it and hands it to the transport-neutral
:class:`~warehouse.ingest.service.WriteService`. A 2xx is sent only once what it wrote
is committed.

Reads (remote read, the overview and report pages) and the OTLP/gRPC server are mounted
by ``llmwh serve``'s composition root (:mod:`warehouse.serve.app`), through
:meth:`Receiver.mount` and the start and stop hooks: ingest imports no reader.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from warehouse.auth import EVERYTHING, challenge, load_access
from warehouse.config import Config
from warehouse.errors import (
    BufferFull,
    Forbidden,
    IngestError,
    InvalidArgument,
    NotRunning,
    QueryError,
    StoreError,
    StoreUnavailable,
    WireError,
)
from warehouse.ingest import endpoints
from warehouse.ingest.http import (
    Receive,
    Scope,
    Send,
    header,
    header_values,
    media_type,
    read_body,
    respond,
)
from warehouse.ingest.otlp import wire as otlp_wire
from warehouse.ingest.otlp.exports import OTLP_METRICS_PATH, OTLP_TRACES_PATH, OtlpExports
from warehouse.ingest.service import WriteService
from warehouse.store.base import Store

__all__ = ["Endpoint", "Receiver", "Route"]

log = logging.getLogger("llmwh.receiver")

OTLP_PATHS = (OTLP_TRACES_PATH, OTLP_METRICS_PATH)
RETRY_AFTER_SECONDS = 1

Endpoint = Callable[[Scope, Receive, Send], Awaitable[int]]
"""An endpoint answers a request and returns the status it sent."""
Hook = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    """An endpoint at ``method path``, open to credentials with ``right`` (``write``,
    ``read`` or ``admin``; None: open to anyone, as health checks are)."""

    method: str
    path: str
    endpoint: Endpoint
    right: str | None


class Receiver:
    """The ASGI app. Its lifespan starts and drains the write service."""

    def __init__(self, store: Store, config: Config | None = None):
        self.store = store
        self.config = config or Config()
        self.started = time.monotonic()
        self.access = load_access(self.config)
        self._tenant_header = (self.config.tenant_header or "").lower()
        self.writes = WriteService(store, self.config)
        self.otlp = OtlpExports(self.writes)
        self.metrics = self.writes.metrics
        self.exposition: Callable[[], bytes] | None = None
        """What ``/metrics`` answers, when not this receiver's registry alone (several
        receiver processes: :mod:`warehouse.serve.worker_metrics`); called in a thread."""
        self._on_start: list[Hook] = []
        self._on_stop: list[Hook] = []
        self._routes: dict[tuple[str, str], Route] = {}
        for method, path, endpoint, right in (
            ("POST", "/api/v1/write", endpoints.remote_write, "write"),
            ("POST", "/api/v1/requests", endpoints.requests, "write"),
            ("POST", OTLP_TRACES_PATH, endpoints.otlp_traces, "write"),
            ("POST", OTLP_METRICS_PATH, endpoints.otlp_metrics, "write"),
            ("GET", "/metrics", endpoints.metrics, "admin"),
            # Health and readiness stay open for load balancers: they tell nothing else.
            ("GET", "/healthz", endpoints.healthz, None),
            ("GET", "/readyz", endpoints.readyz, None),
        ):
            self.mount(Route(method, path, functools.partial(endpoint, self), right))

    def mount(self, route: Route) -> None:
        """Serve ``route`` behind the receiver's checks (credential and its rights, the
        tenant's share of the buffer, errors as status codes)."""
        self._routes[route.method, route.path] = route

    def on_start(self, hook: Hook) -> None:
        """Run ``hook`` once the write service has started (a start hook that raises
        stops the receiver again)."""
        self._on_start.append(hook)

    def on_stop(self, hook: Hook) -> None:
        """Run ``hook`` first when stopping, while the write service still takes writes."""
        self._on_stop.append(hook)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        """Start the write service, then the start hooks."""
        await self.writes.start()
        for hook in self._on_start:
            try:
                await hook()
            except BaseException:  # undo what started
                await self.stop()
                raise

    async def stop(self) -> None:
        """Run the stop hooks, then commit every acknowledged write and stop."""
        for hook in self._on_stop:  # e.g. gRPC exports in flight: they need the committer
            await hook()
        await self.writes.stop()

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        route = self._routes.get((method, path))
        if route is None:
            allowed = sorted(m for (m, p) in self._routes if p == path)
            if allowed:
                await respond(
                    send, 405, f"{method} not allowed on {path}\n", [("allow", ", ".join(allowed))]
                )
            else:
                await respond(send, 404, f"no such endpoint: {path}\n")
            return
        endpoint = path
        status = 500
        writes = route.right == "write"
        try:
            guarded = route.right is not None
            grant = self.access.grant(header(scope, "authorization")) if guarded else EVERYTHING
            if grant is None:
                status = 401
                await self._refuse(
                    scope,
                    send,
                    401,
                    "missing or wrong credentials",
                    [("www-authenticate", challenge(self.config.auth_token))],
                )
                return
            if route.right is not None and not grant.allows(route.right):
                raise Forbidden(f"credential {grant.name!r} may not {route.right} here")
            scope["llmwh.grant"] = grant
            # Bytes are held as they arrive, for the tenant the header names (checked by
            # the handler): an idle sender holds what it sent, not what it declared.
            share = self.writes.tenants.share(
                header(scope, (self.config.tenant_header or "").lower())
            )
            with self.writes.committer.hold(0, share, write=writes) as held:
                scope["llmwh.held"] = held
                status = await route.endpoint(scope, receive, send)
        except (IngestError, QueryError, InvalidArgument, WireError, StoreError, NotRunning) as exc:
            status, message, headers = self.refusal(exc, path, writes)
            await self._refuse(scope, send, status, message, headers)
        finally:
            self.metrics.labelled(self.metrics.http_requests, endpoint, str(status)).inc()

    def refusal(
        self, exc: Exception, path: str, writes: bool
    ) -> tuple[int, str, list[tuple[str, str]] | None]:
        """The answer to a request on ``path`` that raised ``exc`` (``writes``: a write
        route): its status, message and extra headers; logs what the operator must see.
        Raises ``exc`` again when it is no error of a request (a fault of ours: 500)."""
        if isinstance(exc, BufferFull):
            return exc.http_status, str(exc), [("retry-after", str(exc.retry_after))]
        if isinstance(exc, IngestError | QueryError | InvalidArgument | WireError):
            return exc.http_status, str(exc), None
        if isinstance(exc, StoreUnavailable | NotRunning):
            log.warning("cannot take the request now: %s", exc)
            return 503, str(exc), [("retry-after", str(RETRY_AFTER_SECONDS))]
        if isinstance(exc, StoreError):
            what = "commit the write" if writes else "answer"
            log.error("the store could not %s on %s: %s", what, path, exc)
            status, retry = 500, None
            if path in OTLP_PATHS:  # OTLP senders retry 503, never 500
                status, retry = 503, [("retry-after", str(RETRY_AFTER_SECONDS))]
            # A read's error may quote the SQL the warehouse built: that stays in the log.
            shown = f": {exc}" if writes else " (see the receiver's log)"
            return status, f"the store could not {what}{shown}", retry
        raise exc

    async def _refuse(
        self,
        scope: Scope,
        send: Send,
        status: int,
        message: str,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """An error answer: plain text, or on OTLP paths the ``google.rpc.Status`` the
        OTLP specification asks for, in the request's encoding (protobuf when unknown)."""
        if scope["path"] not in OTLP_PATHS:
            await respond(send, status, f"{message}\n", headers or ())
            return
        kind, _ = media_type(header(scope, "content-type"))
        kind = kind if kind == otlp_wire.JSON else otlp_wire.PROTOBUF
        body = otlp_wire.status(message, kind, status)
        await respond(send, status, body, headers or (), content_type=kind)

    def tenant_of(self, scope: Scope) -> str | None:
        """In multi-tenant mode, the one tenant the request names, which its credential
        must hold; None otherwise (the `tenant` setting then scopes reads, when set)."""
        grant = scope.get("llmwh.grant", EVERYTHING)
        return self.writes.tenants.of_request(header_values(scope, self._tenant_header), grant)

    async def body_of(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body, held against the buffer as it arrives, under a timeout,
        and counted among the bytes received on its path."""
        held = scope.get("llmwh.held")
        body = await read_body(
            scope,
            receive,
            self.config.max_body_bytes,
            charge=None if held is None else held.grow,
            timeout=self.config.body_timeout_seconds,
        )
        self.metrics.labelled(self.metrics.bytes_received, scope["path"]).inc(len(body))
        return body
