"""The SLA exporter served in the foreground, as ``llmwh export`` runs it.

Its figures are computed once before ``/metrics`` opens (a first scrape finds them),
then every ``interval`` seconds on this thread, while the HTTP server answers scrapes
from its own threads, until Ctrl-C.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from warehouse.config import parse_listen
from warehouse.errors import ConfigError
from warehouse.exporters.http import serve_metrics
from warehouse.exporters.sla import SLAExporter

__all__ = ["run_exporter"]


def run_exporter(
    exporter: SLAExporter,
    listen: str,
    interval: float,
    *,
    token: str | None = None,
    basic: str | None = None,
    say: Callable[[str], None] = print,
) -> None:
    """Serve ``exporter`` on ``http://LISTEN/metrics`` (behind ``token`` or ``basic``
    credentials when set), refreshed every ``interval`` seconds, until Ctrl-C.

    Raises :class:`ConfigError` when ``listen`` cannot be listened on. Each refresh that
    fails is logged to stderr.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, port = parse_listen(listen)
    exporter.refresh()
    metrics = CollectorRegistry()
    metrics.register(exporter)
    try:
        server = serve_metrics(metrics, host, port, token, basic)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
    say(f"exporting {', '.join(s.name for s in exporter.slos)} on http://{listen}/metrics")
    stop = threading.Event()
    try:
        exporter.run(interval, stop)
    except KeyboardInterrupt:
        stop.set()
    finally:
        server.shutdown()
