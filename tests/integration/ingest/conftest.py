"""Drive the receiver's ASGI app in process: real HTTP semantics, no sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from warehouse.ingest.app import Receiver, ReceiverOptions


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
        self.loop.run_until_complete(app.committer.start())

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        chunk: int = 65536,
    ) -> Response:
        return self.loop.run_until_complete(self._request(method, path, body, headers or {}, chunk))

    def post(self, path: str, body: bytes, **headers: str) -> Response:
        return self.request(
            "POST", path, body, {k.replace("_", "-"): v for k, v in headers.items()}
        )

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    async def _request(self, method, path, body, headers, chunk) -> Response:
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
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
        self.loop.run_until_complete(self.app.committer.close())
        self.loop.close()


@pytest.fixture
def client_for() -> Iterator:
    """``client_for(store, **options)``: a receiver on ``store`` with these options."""
    clients = []

    def make(store, **options) -> Client:
        client = Client(Receiver(store, ReceiverOptions(**options)))
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
