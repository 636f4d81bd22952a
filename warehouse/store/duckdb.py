"""DuckDB local mode: the warehouse in one file, for laptops and comparisons.

The store's ``database`` becomes a DuckDB schema, so ``llmwh.requests`` names the
same table on every backend.
"""

from __future__ import annotations

import threading

import duckdb
import pyarrow as pa

from warehouse.errors import StoreError
from warehouse.store.base import Capabilities, Parameters, Settings
from warehouse.store.url import StoreURL

__all__ = ["DuckDBStore", "open_duckdb"]

CAPABILITIES = Capabilities(
    dialect="duckdb",
    materialized_views=False,
    aggregate_states=False,
    concurrent_writers=False,
    query_settings=False,
    ttl=False,
)


class DuckDBStore:
    """A :class:`~warehouse.store.base.Store` on one DuckDB connection."""

    def __init__(self, connection: duckdb.DuckDBPyConnection, url: StoreURL, read_only: bool):
        self._connection = connection
        self._lock = threading.Lock()
        self.url = url.redacted()
        self.database = url.database
        self.read_only = read_only
        self.capabilities = CAPABILITIES

    def command(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> None:
        self._run(sql, parameters, settings)

    def query_arrow(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> pa.Table:
        return self._run(sql, parameters, settings, fetch=True)

    def insert_arrow(self, table: str, data: pa.Table, settings: Settings | None = None) -> None:
        with self._lock, _translated_errors():
            cursor = self._connection.cursor()
            try:
                cursor.register("_llmwh_insert", data)
                cursor.execute(
                    f'INSERT INTO "{self.database}"."{table}" BY NAME SELECT * FROM _llmwh_insert'
                )
            finally:
                cursor.unregister("_llmwh_insert")
                cursor.close()

    def close(self) -> None:
        self._connection.close()

    def _run(
        self,
        sql: str,
        parameters: Parameters | None,
        settings: Settings | None,
        fetch: bool = False,
    ) -> pa.Table | None:
        with self._lock, _translated_errors():
            cursor = self._connection.cursor()
            try:
                for name, value in (settings or {}).items():
                    cursor.execute(f"SET {_identifier(name)} = ?", [value])
                if fetch:
                    return cursor.sql(sql, params=dict(parameters or {})).to_arrow_table()
                cursor.execute(sql, dict(parameters) if parameters else None)
                return None
            finally:
                for name in settings or {}:
                    cursor.execute(f"RESET {_identifier(name)}")
                cursor.close()


def open_duckdb(url: StoreURL, read_only: bool = False) -> DuckDBStore:
    """Open (or create) the DuckDB file ``url.path``; an empty path means in memory."""
    with _translated_errors():
        connection = duckdb.connect(url.path or ":memory:", read_only=read_only)
        if not read_only:
            connection.execute(f'CREATE SCHEMA IF NOT EXISTS "{url.database}"')
        connection.execute(f"SET schema = '{url.database}'")
        connection.execute("SET TimeZone = 'UTC'")
    return DuckDBStore(connection, url, read_only)


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StoreError(f"invalid DuckDB setting name {name!r}")
    return name


class _translated_errors:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or not isinstance(exc, duckdb.Error):
            return False
        text = str(exc).strip()
        raise StoreError(f"DuckDB error: {text}", database_message=text) from exc
