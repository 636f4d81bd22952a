"""Drive the receiver's ASGI app in process: real HTTP semantics, no sockets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from warehouse.ingest.app import Receiver


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
