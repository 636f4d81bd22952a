"""What ``llmwh serve`` refuses before it starts anything (a store, migrations, a server).

The receiver would refuse the same at its start, but only after the embedded ClickHouse
started and the schema was migrated, and less clearly: an OTLP/gRPC address that cannot
be bound, a write-ahead log directory that cannot be used or that another receiver
holds, a log (of any worker) holding writes with series ids from before migration 0023
(which must be inserted before the migration rewrites every id), a credentials file that
does not load.
"""

from __future__ import annotations

import socket

from warehouse.auth import load_access
from warehouse.config import Config, parse_listen
from warehouse.errors import ConfigError
from warehouse.ingest.wal import check_old_series_ids, check_unlocked, usable_directory
from warehouse.serve.workers import orphan_logs

__all__ = ["check_bindable", "preflight"]


def preflight(config: Config) -> None:
    """Raise now what the receiver of ``config`` would refuse at its start."""
    if config.otlp_grpc_listen:
        check_bindable(config.otlp_grpc_listen, "--otlp-grpc-listen")
    wal_directory = config.wal_directory()
    if wal_directory is not None:
        usable_directory(wal_directory)
        check_unlocked(wal_directory)
        # Worker 0's log and every other worker's, started now or not (orphans of 0).
        for log in (wal_directory, *orphan_logs(wal_directory, 0)):
            check_old_series_ids(log)
    load_access(config)


def check_bindable(listen: str, option: str) -> None:
    """:class:`ConfigError` (naming ``option``) when ``listen``, ``HOST:PORT``, cannot be
    bound now."""
    host, port = parse_listen(listen, option)
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise ConfigError(f"{option} {listen}: cannot listen there ({exc})") from None
