"""Drive the receiver's ASGI app in process: real HTTP semantics, no sockets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from senders import free_port, wait_for

from warehouse.config import Config
from warehouse.ingest.app import Receiver
from warehouse.store import open_store


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


class Client:
    """Sends requests to a running :class:`Receiver` on its own event loop."""

    def __init__(self, app: Receiver):
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(app.start())

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | list[tuple[str, str]] | None = None,
        chunk: int = 65536,
    ) -> Response:
        """``headers`` as a list of pairs may repeat a header."""
        return self.loop.run_until_complete(self._request(method, path, body, headers or {}, chunk))

    def post(self, path: str, body: bytes, **headers: str) -> Response:
        return self.request(
            "POST", path, body, {k.replace("_", "-"): v for k, v in headers.items()}
        )

    def get(self, path: str, **headers: str) -> Response:
        return self.request(
            "GET", path, headers={k.replace("_", "-"): v for k, v in headers.items()}
        )

    async def _request(self, method, path, body, headers, chunk) -> Response:
        path, _, query = path.partition("?")
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": query.encode(),
            "headers": [
                (k.lower().encode(), v.encode())
                for k, v in (headers.items() if isinstance(headers, dict) else headers)
            ],
        }
        pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
        messages = [
            {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
            for i, piece in enumerate(pieces)
        ]

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        sent = []

        async def send(message):
            sent.append(message)

        await self.app(scope, receive, send)
        start = sent[0]
        return Response(
            status=start["status"],
            headers={k.decode(): v.decode() for k, v in start["headers"]},
            body=b"".join(m.get("body", b"") for m in sent[1:]),
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.app.stop())
        self.loop.close()


@pytest.fixture
def client_for() -> Iterator:
    """``client_for(store, **options)``: a receiver on ``store`` with these options."""
    clients = []

    def make(store, **options) -> Client:
        client = Client(Receiver(store, Config(**options)))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def make_client(migrated, client_for):
    """``make_client(**options)``: a receiver on the migrated store, with these options."""
    return lambda **options: client_for(migrated, **options)


@pytest.fixture
def client(make_client) -> Client:
    return make_client()


@pytest.fixture
def refusing_client(module_migrated, client_for) -> Client:
    """A receiver on a store shared by the module's tests whose writes are all refused:
    what they check is that nothing lands, which holds only while every one refuses."""
    return client_for(module_migrated)


@pytest.fixture
def receiver(embedded_server, tmp_path):
    """`llmwh serve` on the session's ClickHouse, in a database of its own."""
    url = embedded_server.store_url(f"prw_{uuid.uuid4().hex[:10]}")
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warehouse",
            "serve",
            "--store",
            url,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")},
    )
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", url
    finally:
        process.terminate()
        process.wait(timeout=30)
        store = open_store(url)
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()
