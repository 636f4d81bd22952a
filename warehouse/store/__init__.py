"""Storage: one :class:`Store` interface, three backends selected by URL.

==========================================  =====================================
URL                                         backend
==========================================  =====================================
``http://host:8123/db``, ``https://...``,   a ClickHouse server over HTTP
``clickhouse://user:pass@host:8123/db``
``chdb:///path``                            ClickHouse in this process (chdb)
``duckdb:///path.duckdb``                   DuckDB local mode
==========================================  =====================================
"""

from __future__ import annotations

from warehouse.store.base import Capabilities, Store
from warehouse.store.url import DEFAULT_DATABASE, StoreURL, parse_store_url

__all__ = [
    "DEFAULT_DATABASE",
    "Capabilities",
    "Store",
    "StoreURL",
    "open_store",
    "parse_store_url",
]


def open_store(url: str | StoreURL) -> Store:
    """Open the store a URL names. Backends are imported only when used."""
    parsed = url if isinstance(url, StoreURL) else parse_store_url(url)
    if parsed.backend == "clickhouse":
        from warehouse.store.clickhouse import open_http

        return open_http(parsed)
    if parsed.backend == "chdb":
        from warehouse.store.clickhouse import open_chdb

        return open_chdb(parsed)
    from warehouse.store.duckdb import open_duckdb

    return open_duckdb(parsed)
