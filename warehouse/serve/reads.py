"""The read endpoints ``llmwh serve`` mounts on the receiver: remote read and the pages.

Each runs its work on the reads' own few threads: a burst of reads must not take the
threads that decode and commit writes. The receiver's checks come first (credential and
its rights, errors as status codes); each endpoint asks it for the request's tenant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import InvalidArgument, QueryError, UnsupportedMediaType
from warehouse.ingest.app import Receiver
from warehouse.ingest.http import Receive, Scope, Send, header, media_type, require_snappy, respond
from warehouse.query import remote_read
from warehouse.query.slo import load_slo
from warehouse.store.base import Store

if TYPE_CHECKING:
    from warehouse.exporters.report.live import Overview

__all__ = ["READ_CONCURRENCY", "READ_PATH", "SLO_PATH", "Pages", "RemoteRead", "slo_names"]

READ_PATH = "/api/v1/read"
READ_CONCURRENCY = 2
"""Reads answered at once; more wait their turn (Prometheus's default limit is 10)."""
SLO_PATH = "/slo/"
"""An SLO's page is ``/slo/<name>`` (its name, not its file)."""


def slo_names(store: Store, config: Config) -> list[str]:
    """The names of the SLOs the overview shows (the ``slos`` setting's, else the shipped
    ones): an SLO's page is mounted under each. One that does not load keeps the name it
    was configured by; the overview says what is wrong with it."""
    names = []
    for configured in Warehouse(store, config).configured_slos():
        try:
            names.append(load_slo(configured).name)
        except QueryError:
            names.append(configured)
    return names


class RemoteRead:
    """``POST /api/v1/read``: Prometheus remote read (docs/remote-read.md)."""

    def __init__(self, receiver: Receiver, threads: Executor):
        self.receiver = receiver
        self.threads = threads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> int:
        kind, _ = media_type(header(scope, "content-type"))
        if kind not in ("", remote_read.CONTENT_TYPE):
            raise UnsupportedMediaType(
                f"unsupported Content-Type {header(scope, 'content-type')!r}: remote read "
                f"takes {remote_read.CONTENT_TYPE}"
            )
        require_snappy(scope, "remote read")
        receiver, config = self.receiver, self.receiver.config
        tenant = receiver.tenant_of(scope)  # a read sees its tenant's series only
        body = await receiver.body_of(scope, receive)
        payload = await asyncio.get_running_loop().run_in_executor(
            self.threads,
            remote_read.answer,
            receiver.store,
            body,
            config.remote_read_max_samples,
            config.remote_read_max_series,
            tenant,
        )
        await respond(
            send,
            200,
            payload,
            [("content-encoding", "snappy")],
            content_type=remote_read.CONTENT_TYPE,
        )
        return 200


def slo_link(name: str) -> str:
    """The SLO ``name``'s page, relative to the overview at ``/``."""
    return SLO_PATH.lstrip("/") + quote(name, safe="")


class Pages:
    """``GET /`` (the live overview), ``GET /slo/<name>`` (an SLO's page) and
    ``GET /report`` (the SLA report), as HTML."""

    def __init__(self, receiver: Receiver, threads: Executor):
        self.receiver = receiver
        self.threads = threads
        self._overview: Overview | None = None

    async def overview(self, scope: Scope, receive: Receive, send: Send) -> int:
        tenant = self.receiver.tenant_of(scope)
        return await self._page(send, lambda overview: overview.page(tenant))

    def slo(self, name: str) -> Callable[[Scope, Receive, Send], Awaitable[int]]:
        """The endpoint of the SLO ``name``'s page."""

        async def page(scope: Scope, receive: Receive, send: Send) -> int:
            tenant = self.receiver.tenant_of(scope)
            return await self._page(send, lambda overview: overview.slo_page(name, tenant))

        return page

    async def report(self, scope: Scope, receive: Receive, send: Send) -> int:
        tenant = self.receiver.tenant_of(scope)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return await self._page(send, lambda overview: overview.report(query, tenant))

    def _drawer(self) -> Overview:
        from warehouse.exporters.report.live import Overview  # matplotlib: when asked

        receiver = self.receiver
        return Overview(
            receiver.store,
            receiver.config,
            receiver.metrics.registry,
            receiver.started,
            link=slo_link,
        )

    async def _page(self, send: Send, draw: Callable[[Overview], str]) -> int:
        """A page drawn off the event loop; a bad parameter is a 400 naming it."""
        loop = asyncio.get_running_loop()
        try:
            if self._overview is None:
                self._overview = await loop.run_in_executor(self.threads, self._drawer)
            text = await loop.run_in_executor(self.threads, draw, self._overview)
        except (QueryError, InvalidArgument) as exc:
            await respond(send, 400, f"llmwh: error: {exc}\n")
            return 400
        await respond(send, 200, text, content_type="text/html; charset=utf-8")
        return 200
