"""Small ASGI helpers: read a bounded body, parse media types, send a response."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from warehouse.errors import IngestError, PayloadTooLarge, RequestTimeout, UnsupportedMediaType

__all__ = [
    "Receive",
    "Scope",
    "Send",
    "body_timeout",
    "content_encoding",
    "header",
    "header_values",
    "media_type",
    "read_body",
    "require_snappy",
    "respond",
    "response_parts",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def header(scope: Scope, name: str) -> str | None:
    """The first value of a request header (``name`` in lower case), or None."""
    wanted = name.encode()
    for key, value in scope.get("headers", ()):
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


def header_values(scope: Scope, name: str) -> list[str]:
    """Every value of a request header (``name`` in lower case), in order."""
    wanted = name.encode()
    return [
        value.decode("latin-1") for key, value in scope.get("headers", ()) if key.lower() == wanted
    ]


def media_type(value: str | None) -> tuple[str, dict[str, str]]:
    """Split ``type/subtype; a=b`` into the lower-cased type and its parameters."""
    if not value:
        return "", {}
    kind, *params = value.split(";")
    parsed = {}
    for param in params:
        key, _, val = param.strip().partition("=")
        if key:
            parsed[key.strip().lower()] = val.strip().strip('"')
    return kind.strip().lower(), parsed


async def read_body(
    scope: Scope,
    receive: Receive,
    limit: int,
    charge: Callable[[int], None] | None = None,
    timeout: float | None = None,
) -> bytes:
    """The whole request body; :class:`PayloadTooLarge` as soon as it passes ``limit``.

    ``charge`` is told each chunk's size as it arrives (the receiver's buffer holds
    bytes received, not bytes declared); :class:`RequestTimeout` when the whole body has
    not arrived within ``timeout`` seconds.
    """
    if timeout is None:
        return await _read_body(scope, receive, limit, charge)
    try:
        async with asyncio.timeout(timeout):
            return await _read_body(scope, receive, limit, charge)
    except TimeoutError:
        raise body_timeout(timeout) from None


def body_timeout(timeout: float) -> RequestTimeout:
    """The error of a body that did not arrive whole within ``timeout`` seconds."""
    return RequestTimeout(f"the body did not arrive within {timeout:g} s (body_timeout_seconds)")


async def _read_body(
    scope: Scope, receive: Receive, limit: int, charge: Callable[[int], None] | None
) -> bytes:
    declared = header(scope, "content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise PayloadTooLarge(
                    f"body of {int(declared):,} bytes is above the {limit:,} limit"
                )
        except ValueError:
            raise IngestError(f"invalid Content-Length {declared!r}") from None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise IngestError("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body is above the {limit:,}-byte limit")
        if charge is not None and chunk:
            charge(len(chunk))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes | str = b"",
    headers: Iterable[tuple[str, str]] = (),
    content_type: str | None = None,
) -> None:
    """Send a whole response (:func:`response_parts`)."""
    raw, payload = response_parts(status, body, headers, content_type)
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


def response_parts(
    status: int,
    body: bytes | str = b"",
    headers: Iterable[tuple[str, str]] = (),
    content_type: str | None = None,
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """A whole response's headers (as ASGI carries them) and body. A body without
    ``content_type`` is plain text; a 204 carries no Content-Length (RFC 9110, 8.6)."""
    payload = body.encode() if isinstance(body, str) else body
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if content_type is None and payload:
        content_type = "text/plain; charset=utf-8"
    if content_type is not None:  # an empty protobuf message is a body too (OTLP)
        raw.append((b"content-type", content_type.encode()))
    if status != 204:
        raw.append((b"content-length", str(len(payload)).encode()))
    return raw, payload


def content_encoding(scope: Scope, default: str) -> str:
    """The request's Content-Encoding, lower case; ``default`` when it names none."""
    return (header(scope, "content-encoding") or default).strip().lower()


def require_snappy(scope: Scope, what: str) -> None:
    """Remote write and read bodies are snappy (block format), the default when unsaid."""
    encoding = content_encoding(scope, "snappy")
    if encoding != "snappy":
        raise UnsupportedMediaType(
            f"unsupported Content-Encoding {encoding!r}: {what} bodies are snappy (block format)"
        )
