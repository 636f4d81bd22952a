"""Stores for tests: a fresh database per backend, dropped afterwards (the fixtures in
conftest.py use these; a module that needs several stores at once calls them itself)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from warehouse.store import Store, open_store
from warehouse.store.embedded import ServerInfo

BACKENDS = ("clickhouse", "chdb", "duckdb")
TENANCY_DATABASE = "llmwh_tenancy"
"""The database whose tables carry tenant row policies on the session's embedded server."""
POLICED_DATABASES = tuple(f"test_{i:03d}" for i in range(128))
"""Databases whose tables carry the tenants' row policies on the session's server, as
`llmwh`'s do on a user's: a test's store on the server takes one not in use, so that its
reads as a tenant run under the policies."""
_taken: set[str] = set()


def server_database() -> str:
    """A database name for a store on the session's server: one of
    :data:`POLICED_DATABASES` not in use (given back by :func:`fresh_store`), while any is."""
    for name in POLICED_DATABASES:
        if name not in _taken:
            _taken.add(name)
            return name
    return f"test_{uuid.uuid4().hex[:12]}"


def store_url(backend: str, server: ServerInfo, chdb_path: Path, tmp_path: Path) -> str:
    if backend == "clickhouse":
        return server.store_url(server_database())
    database = f"test_{uuid.uuid4().hex[:12]}"
    if backend == "chdb":
        return f"chdb://{chdb_path}?database={database}"
    return f"duckdb://{tmp_path / 'warehouse.duckdb'}?database={database}"


@contextmanager
def fresh_store(url: str) -> Iterator[Store]:
    """A store at ``url``, its database dropped afterwards (and its name given back)."""
    opened = open_store(url)
    try:
        yield opened
    finally:
        if opened.capabilities.dialect == "clickhouse":
            opened.command(f"DROP DATABASE IF EXISTS {opened.database} SYNC")
            _taken.discard(opened.database)
        opened.close()
