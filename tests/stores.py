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


def store_url(backend: str, server: ServerInfo, chdb_path: Path, tmp_path: Path) -> str:
    database = f"test_{uuid.uuid4().hex[:12]}"
    if backend == "clickhouse":
        return server.store_url(database)
    if backend == "chdb":
        return f"chdb://{chdb_path}?database={database}"
    return f"duckdb://{tmp_path / 'warehouse.duckdb'}?database={database}"


@contextmanager
def fresh_store(url: str) -> Iterator[Store]:
    """A store at ``url``, its database dropped afterwards."""
    opened = open_store(url)
    try:
        yield opened
    finally:
        if opened.capabilities.dialect == "clickhouse":
            opened.command(f"DROP DATABASE IF EXISTS {opened.database} SYNC")
        opened.close()
