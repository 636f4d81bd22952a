"""Which store a command works on: the one the settings name, else the embedded one.

In order: the ``store`` setting (``--store``, ``$LLMWH_STORE``); the local cluster whose
shards run on the data directory (``llmwh clickhouse start --shards N``); the embedded
ClickHouse server running on it. ``llmwh serve`` starts that server when none runs;
every other command says how to start one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from warehouse.config import Config
from warehouse.errors import ConfigError
from warehouse.store import embedded, local_cluster, open_store
from warehouse.store.base import Store
from warehouse.store.url import StoreURL, parse_store_url

__all__ = ["find_store", "find_store_url", "store_or_start"]


def find_store_url(config: Config, read_only: bool = False) -> StoreURL | None:
    """The URL of the store ``config`` names or that runs on its data directory, or None.

    ``read_only`` opens DuckDB files read-only (ClickHouse enforces it per query).
    """
    if config.store:
        url = parse_store_url(config.store)
        if read_only and url.backend == "duckdb":
            url = replace(url, options=(*url.options, ("read_only", "true")))
        return url
    cluster = local_cluster.cluster_status(config.data_dir)
    if cluster is not None:
        return parse_store_url(cluster.store_url())
    info = embedded.server_status(config.data_dir)
    return None if info is None else parse_store_url(info.store_url())


def find_store(config: Config, read_only: bool = False) -> Store:
    """The store :func:`find_store_url` finds, opened; a clear error when there is none."""
    url = find_store_url(config, read_only)
    if url is None:
        raise ConfigError(
            f"no --store given and no embedded ClickHouse runs on {config.data_dir}: start one "
            "with `llmwh clickhouse start` (or `llmwh serve`), or pass --store URL"
        )
    return open_store(url)


@contextmanager
def store_or_start(
    config: Config, http_port: int, tcp_port: int, say: Callable[[str], None] = lambda _: None
) -> Iterator[tuple[Store, embedded.ServerInfo | None]]:
    """The store :func:`find_store` finds, else an embedded server started for the block
    on the data directory (stopped when the block ends, if still running). Yields the
    store and the server it started (None when it found one); ``say`` hears both."""
    url = find_store_url(config)
    started = None
    if url is None:
        started = embedded.start_server(config.data_dir, http_port, tcp_port)
        say(f"started the embedded ClickHouse on {started.data_dir} (pid {started.pid})")
        url = parse_store_url(started.store_url())
    store = None
    try:
        store = open_store(url)
        yield store, started
    finally:
        if store is not None:
            store.close()
        if started is not None and embedded.server_status(config.data_dir) is not None:
            embedded.stop_server(started.data_dir)
            say("stopped the embedded ClickHouse")
