"""Stores for tests: a fresh database per backend, dropped afterwards (the fixtures in
conftest.py use these; a module that needs several stores at once calls them itself)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
            opened.command(f"DROP DATABASE IF EXISTS {opened.database} SYNC")
            _taken.discard(opened.database)
        opened.close()


class MigratedPool:
    """Migrated ClickHouse databases, handed back empty and reused.

    A migration costs about a second on the embedded server and on chdb; about 400 tests
    start from a migrated, empty store. A database a test gave back is reused only when
    it is exactly as the migrations left it once what the test added (an SLO rollup's
    tables and views) is dropped and every table emptied: the same tables with the same
    definitions (so a test that altered a view, changed a TTL or ran a migration down
    hands back a database that is dropped instead), the same migrations recorded and no
    rows left after ``TRUNCATE``. Its refreshable views wait
    stopped in the pool (each refresh costs the server CPU) and are scheduled again when
    it is taken. ``TRUNCATE`` also clears a table's deduplication log, so a retried
    insert in the next test is not taken for a duplicate of this one's.
    """

    def __init__(self) -> None:
        self._free: dict[str, list[str]] = {}
        self._as_migrated: dict[str, str] = {}
        self._made: dict[str, frozenset[str]] = {}
        """The names of the tables and views the migrations made, per database."""
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
                self._made[url] = frozenset(_column(opened, _names(opened)))
            yield opened
        finally:
            stopped = self._emptied(opened, url)
            if stopped is not None:
                self._stopped[url] = stopped
                free.append(url)
            else:
                self._as_migrated.pop(url, None)
                opened.command(f"DROP DATABASE IF EXISTS {opened.database} SYNC")
                _taken.discard(opened.database)
            opened.close()

    def _emptied(self, store: Store, url: str) -> list[str] | None:
        """Empty the database: its refreshable views, stopped (started again when the
        database is next taken), or None when it cannot be reused."""
        try:
            if not self._only_added_to(store, url):
                return None
            db = store.database
            refreshes = f"SELECT view FROM system.view_refreshes WHERE database = '{db}'"
            views = _column(store, refreshes)
            for view in views:
                store.command(f"SYSTEM STOP VIEW {db}.{view}")
                store.command(f"SYSTEM CANCEL VIEW {db}.{view}")
            running = f"{refreshes} AND status = 'Running'"
            deadline = time.monotonic() + 10
            while _column(store, running):
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.02)
            filled = (
                f"SELECT DISTINCT table FROM system.parts WHERE database = '{db}' AND active "
                f"AND table != '{MIGRATIONS_TABLE}'"
            )
            for table in _column(store, filled):
                store.command(f"TRUNCATE TABLE {db}.`{table}`")
            return None if _column(store, filled) else views
        except StoreError:
            return None

    def _only_added_to(self, store: Store, url: str) -> bool:
        """Drop what a test added beside the migrations' tables (an SLO rollup's tables
        and views); False when it changed what the migrations made."""
        migrated = self._as_migrated.get(url)
        if migrated is None:
            return False
        db = store.database
        listed = store.query_arrow(_names(store, "name, engine")).to_pylist()
        added = [row for row in listed if row["name"] not in self._made[url]]
        # Views first: a materialized view would otherwise write into a dropped table.
        for row in sorted(added, key=lambda row: "View" not in row["engine"]):
            store.command(f"DROP TABLE IF EXISTS {db}.`{row['name']}` SYNC")
        return _definition(store) == migrated


_DATABASE = re.compile(r"(?:database=|/)([a-z0-9_]+)$")


def _database(url: str) -> str:
    found = _DATABASE.search(url)
    assert found, url
    return found.group(1)


def _without_database(url: str) -> str:
    return url[: -len(_database(url))]


def _names(store: Store, columns: str = "name") -> str:
    return f"SELECT {columns} FROM system.tables WHERE database = '{store.database}'"


def _column(store: Store, sql: str) -> list:
    table = store.query_arrow(sql)
    return table.column(0).to_pylist() if table.num_columns else []


def _definition(store: Store) -> str:
    """What a database holds apart from its rows: tables, their definitions, migrations."""
    db = store.database
    tables = store.query_arrow(
        f"SELECT name, create_table_query FROM system.tables WHERE database = '{db}' ORDER BY name"
    ).to_pylist()
    applied = store.query_arrow(
        f"SELECT version, checksum FROM {db}.{MIGRATIONS_TABLE} ORDER BY version"
    ).to_pylist()
    return repr((tables, applied))
