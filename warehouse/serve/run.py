"""The receiver served over HTTP in the foreground, as ``llmwh serve`` runs it.

uvicorn serves the app of :func:`~warehouse.serve.app.build_app` until SIGINT or SIGTERM and
then drains it: every acknowledged write is committed before :func:`run_receiver`
returns. When the receiver stands on an embedded ClickHouse that this process
started, a watchdog stops the receiver as soon as that server goes away, rather than
answering every write with 503.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.config import Config
from warehouse.errors import ConfigError, EmbeddedServerError
from warehouse.store import embedded
from warehouse.store.base import Store

if TYPE_CHECKING:
    from warehouse.ingest.app import Receiver

__all__ = ["run_receiver"]


def run_receiver(
    store: Store,
    config: Config,
    host: str,
    port: int,
    watch: str | Path | None = None,
    sockets: list[socket.socket] | None = None,
    on_app: Callable[[Receiver], None] | None = None,
) -> None:
    """Serve the receiver on ``host:port`` (or on ``sockets``, listening already) until
    SIGINT or SIGTERM, then drain it.

    ``watch``: the data directory of an embedded server to stop with; ``on_app`` sees
    the app before it is served. Raises
    :class:`ConfigError` when the address cannot be listened on and
    :class:`EmbeddedServerError` when the watched server went away.
    """
    import uvicorn

    from warehouse.serve.app import build_app
    from warehouse.serve.fast_write import protocol_for

    app = build_app(store, config)
    if on_app is not None:
        on_app(app)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="on",
            # uvicorn's httptools protocol, with remote write 1.0 answered below the ASGI
            # cycle (warehouse/serve/fast_write.py).
            http=protocol_for(app),
            log_level="warning",
            access_log=False,
            # The receiver reads no client address; uvicorn's middleware that rewrites
            # it from X-Forwarded-For would only cost every write a call.
            proxy_headers=False,
        )
    )
    died: list[str] = []
    if watch is not None:
        _watch_server(watch, server, died)
    # uvicorn handles SIGINT/SIGTERM itself (draining the receiver), then re-raises the
    # signal into the handlers it found: make those ours, so that the caller's cleanup
    # (stopping the embedded server) still runs.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        raise ConfigError(f"the receiver could not listen on {host}:{port} (in use?)")
    if died:
        raise EmbeddedServerError(died[0])


def _watch_server(data_dir: str | Path, server: object, died: list[str]) -> None:
    """Stop the receiver when the embedded ClickHouse under it goes away."""

    def watch() -> None:
        while not getattr(server, "should_exit", False):
            if embedded.server_status(data_dir) is None:
                died.append(f"the embedded ClickHouse stopped; see {data_dir}/server.log")
                server.should_exit = True  # type: ignore[attr-defined]
                return
            time.sleep(0.5)

    threading.Thread(target=watch, name="llmwh-server-watch", daemon=True).start()


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
