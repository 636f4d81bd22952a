"""Stores for tests: a fresh database per backend, dropped afterwards (the fixtures in
conftest.py use these; a module that needs several stores at once calls them itself)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from polling import poll_until

from warehouse.errors import StoreError
from warehouse.store import Store, open_store
from warehouse.store.embedded import ServerInfo
from warehouse.store.migrations import MIGRATIONS_TABLE, Migrator

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
            _drop(opened)
        opened.close()


def _drop(store: Store) -> None:
    store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
    _taken.discard(store.database)


class MigratedPool:
    """Migrated ClickHouse databases, handed back empty and reused.

    A migration costs about a second on the embedded server and on chdb; about 400 tests
    start from a migrated, empty store. A database a test gave back is reused only when
    it is exactly as the migrations left it once what the test added (an SLO rollup's
    tables and views) is dropped and every table emptied: the same tables with the same
    definitions (so a test that altered a view, changed a TTL or ran a migration down
    hands back a database that is dropped instead), the same migrations recorded and no
    rows left after ``TRUNCATE``. ``TRUNCATE`` also clears a table's deduplication log,
    so a retried insert in the next test is not taken for a duplicate of this one's. Its
    refreshable views wait stopped in the pool (each refresh costs the server CPU) and
    are scheduled again when it is taken.
    """

    def __init__(self) -> None:
        self._free: dict[str, list[str]] = {}
        self._as_migrated: dict[str, _Definition] = {}
        self._stopped: dict[str, list[str]] = {}
        """The refreshable views of a free database, stopped while it waits."""

    @contextmanager
    def take(self, url: str) -> Iterator[Store]:
        """A migrated, empty store: a free one like ``url``'s (same server, other
        database), or ``url``'s database migrated now."""
        place = _without_database(url)
        free = self._free.setdefault(place, [])
        if free:
            _taken.discard(_database(url))
            url = free.pop()
        opened = open_store(url)
        try:
            for view in self._stopped.pop(url, []):
                opened.command(f"SYSTEM START VIEW {opened.database}.{view}")
            if url not in self._as_migrated:
                Migrator(opened).up()
                self._as_migrated[url] = _definition(opened)
            yield opened
        finally:
            migrated = self._as_migrated.get(url)  # None when the migration failed
            stopped = self._emptied(opened, migrated) if migrated else None
            if stopped is not None:
                self._stopped[url] = stopped
                free.append(url)
            else:
                self._as_migrated.pop(url, None)
                _drop(opened)
            opened.close()

    def _emptied(self, store: Store, migrated: _Definition) -> list[str] | None:
        """Empty the database: its refreshable views, stopped (started again when the
        database is next taken), or None when it cannot be reused."""
        try:
            if not _only_added_to(store, migrated):
                return None
            db = store.database
            refreshes = f"SELECT view FROM system.view_refreshes WHERE database = '{db}'"
            views = _column(store, refreshes)
            for view in views:
                store.command(f"SYSTEM STOP VIEW {db}.{view}")
                store.command(f"SYSTEM CANCEL VIEW {db}.{view}")
            running = f"{refreshes} AND status = 'Running'"
            poll_until(lambda: _column(store, running), "no refresh running", until=_empty,
                       timeout=10, every=0.02)  # fmt: skip
            filled = (
                f"SELECT DISTINCT table FROM system.parts WHERE database = '{db}' AND active "
                f"AND table != '{MIGRATIONS_TABLE}'"
            )
            for table in _column(store, filled):
                store.command(f"TRUNCATE TABLE {db}.`{table}`")
            return None if _column(store, filled) else views
        except (StoreError, AssertionError):  # AssertionError: a refresh would not stop
            return None


@dataclass(frozen=True)
class _Definition:
    """What a database holds apart from its rows: its tables and views (name, engine,
    definition) and the migrations it records."""

    tables: tuple[tuple[str, str, str], ...]
    applied: tuple[tuple[int, str], ...]

    @property
    def names(self) -> set[str]:
        return {name for name, _, _ in self.tables}


def _definition(store: Store) -> _Definition:
    db = store.database
    tables = store.query_arrow(
        "SELECT name, engine, create_table_query FROM system.tables "
        f"WHERE database = '{db}' ORDER BY name"
    )
    applied = store.query_arrow(
        f"SELECT version, checksum FROM {db}.{MIGRATIONS_TABLE} ORDER BY version"
    )
    return _Definition(_rows(tables), _rows(applied))


def _only_added_to(store: Store, migrated: _Definition) -> bool:
    """Drop what a test added beside the migrations' tables (an SLO rollup's tables and
    views); False when it changed what the migrations made."""
    now = _definition(store)
    added = [(name, engine) for name, engine, _ in now.tables if name not in migrated.names]
    if not added:
        return now == migrated
    # Views first: a materialized view would otherwise write into a dropped table.
    for name, _ in sorted(added, key=lambda table: "View" not in table[1]):
        store.command(f"DROP TABLE IF EXISTS {store.database}.`{name}` SYNC")
    return _definition(store) == migrated


_DATABASE = re.compile(r"(?:database=|/)([a-z0-9_]+)$")


def _database(url: str) -> str:
    found = _DATABASE.search(url)
    assert found, url
    return found.group(1)


def _without_database(url: str) -> str:
    return url[: -len(_database(url))]


def _rows(table: pa.Table) -> tuple:
    return tuple(zip(*(column.to_pylist() for column in table.columns), strict=True))


def _column(store: Store, sql: str) -> list:
    table = store.query_arrow(sql)
    return table.column(0).to_pylist() if table.num_columns else []


def _empty(values: list) -> bool:
    return not values
