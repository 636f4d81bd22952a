"""Remote write 1.0 below the ASGI cycle (warehouse/serve/fast_write.py) answers as the
ASGI path does, byte for byte: each request is sent twice to one `llmwh serve`, once as
it is (the protocol's own path) and once with ``Expect: 100-continue``, which that path
leaves to uvicorn's ASGI cycle, and the two answers compared (the Date header aside)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request

import cramjam
import pytest

from warehouse.wire.prometheus import V1

NOW_MS = (int(time.time()) - 600) * 1000


def _body(*series: dict[str, str], timestamp: int = NOW_MS, raw: bool = False) -> bytes:
    request = V1.WriteRequest()
    for labels in series:
        ts = request.timeseries.add()
        for name, value in sorted(labels.items()):
            ts.labels.add(name=name, value=value)
        ts.samples.add(value=1.5, timestamp=timestamp)
    data = request.SerializeToString()
    return data if raw else bytes(cramjam.snappy.compress_raw(data))


def _request(port: int, body: bytes, *, expect: bool = False, extra: str = "") -> bytes:
    head = (
        f"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\n"
        f"X-Prometheus-Remote-Write-Version: 0.1.0\r\n{extra}"
        f"Content-Length: {len(body)}\r\n"
    )
    if expect:
        head += "Expect: 100-continue\r\n"
    return head.encode() + b"\r\n" + body


def _answer(sock: socket.socket, pending: bytearray) -> bytes:
    """One whole response from ``sock`` (an interim 100 Continue dropped)."""
    while True:
        while b"\r\n\r\n" not in pending:
            chunk = sock.recv(65536)
            assert chunk, "the receiver closed the connection"
            pending += chunk
        end = pending.index(b"\r\n\r\n") + 4
        head = bytes(pending[:end])
        if head.startswith(b"HTTP/1.1 100 "):
            del pending[:end]
            continue
        match = re.search(rb"\r\ncontent-length: (\d+)\r\n", head)
        length = int(match.group(1)) if match else 0
        while len(pending) < end + length:
            chunk = sock.recv(65536)
            assert chunk, "the receiver closed the connection"
            pending += chunk
        response = bytes(pending[: end + length])
        del pending[: end + length]
        return re.sub(rb"\r\ndate: [^\r]*\r\n", b"\r\ndate: -\r\n", response)


def _both(port: int, body: bytes, extra: str = "") -> tuple[bytes, bytes]:
    """The answers to ``body`` on the protocol's path and on the ASGI path, in turn on
    one keep-alive connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        pending = bytearray()
        sock.sendall(_request(port, body, extra=extra))
        fast = _answer(sock, pending)
        sock.sendall(_request(port, body, expect=True, extra=extra))
        asgi = _answer(sock, pending)
        # The connection is still open and answering after both.
        sock.sendall(_request(port, _body({"__name__": "after", "job": "t"})))
        assert _answer(sock, pending).startswith(b"HTTP/1.1 204 ")
    return fast, asgi


def _port(module_receiver) -> int:
    return int(module_receiver[0].rsplit(":", 1)[1])


def test_a_write_is_answered_alike(module_receiver):
    fast, asgi = _both(_port(module_receiver), _body({"__name__": "up", "job": "a"}))
    assert fast.startswith(b"HTTP/1.1 204 No Content\r\n")
    assert fast == asgi


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"not snappy at all", b"snappy"),
        (_body({"job": "no-name"}), b"__name__"),
        (_body({"__name__": "old", "job": "a"}, timestamp=1_000), b"not written"),
        (b"", b""),
    ],
    ids=["corrupt", "no-metric-name", "too-old", "empty"],
)
def test_a_refusal_is_answered_alike(module_receiver, body, said):
    fast, asgi = _both(_port(module_receiver), body)
    assert fast.startswith(b"HTTP/1.1 400 Bad Request\r\n"), fast
    assert said in fast
    assert fast == asgi


def test_a_connection_close_is_answered_alike(module_receiver):
    port = _port(module_receiver)
    answers = []
    for expect in (False, True):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(
                _request(port, _body({"__name__": "up", "job": "c"}), expect=expect).replace(
                    b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1
                )
            )
            answers.append(_answer(sock, bytearray()))
            assert sock.recv(10) == b""  # and closed
    assert answers[0] == answers[1]


def test_a_sender_gone_mid_body_leaves_the_receiver_answering(module_receiver):
    port = _port(module_receiver)
    body = _body(*({"__name__": "up", "job": "gone", "i": str(i)} for i in range(50)))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(_request(port, body)[: -len(body) // 2])
    fast, asgi = _both(port, _body({"__name__": "up", "job": "still"}))
    assert fast.startswith(b"HTTP/1.1 204 ") and fast == asgi
    metrics = urllib.request.urlopen(f"{module_receiver[0]}/metrics", timeout=10).read()
    # Counted as the ASGI path counts it: a 400 no one hears.
    assert b'_http_requests_total{code="400",endpoint="/api/v1/write"}' in metrics
