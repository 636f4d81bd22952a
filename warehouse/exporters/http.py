"""The exporter's HTTP endpoint: ``/metrics`` for Prometheus, behind the configured credentials.

prometheus-client's own server takes no credentials; this one serves the same WSGI app
and answers 401 without them (see :mod:`warehouse.auth`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse

from prometheus_client import CollectorRegistry, make_wsgi_app

from warehouse.auth import authorized, challenge

__all__ = ["serve_metrics"]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_metrics(
    registry: CollectorRegistry,
    host: str,
    port: int,
    token: str | None = None,
    basic: str | None = None,
) -> WSGIServer:
    """Serve ``registry`` on ``host:port`` in a thread; ``shutdown()`` the result to stop."""
    metrics = make_wsgi_app(registry)

    def guarded(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not authorized(environ.get("HTTP_AUTHORIZATION"), token, basic):
            start_response(
                "401 Unauthorized",
                [("Content-Type", "text/plain"), ("WWW-Authenticate", challenge(token))],
            )
            return [b"missing or wrong credentials\n"]
        return metrics(environ, start_response)

    server = make_server(host, port, guarded, _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="llmwh-exporter-http", daemon=True).start()
    return server
