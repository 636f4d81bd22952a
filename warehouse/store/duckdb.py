"""DuckDB local mode: the warehouse in one file, for laptops and comparisons.

The store's ``database`` becomes a DuckDB schema, so ``llmwh.requests`` names the
same table on every backend.
"""

from __future__ import annotations

import threading
from typing import Any, Literal

import duckdb
import pyarrow as pa

from warehouse.errors import QueryError, StoreError
from warehouse.store.base import Capabilities, Parameters, Settings
from warehouse.store.url import StoreURL

__all__ = ["DuckDBStore", "open_duckdb"]

_TOKENS = "insert_tokens"
"""Bookkeeping table of the deduplication tokens already inserted (created on first use)."""
_TOKEN_DAYS = 1
"""How long a token is remembered."""

CAPABILITIES = Capabilities(
    dialect="duckdb",
    materialized_views=False,
    aggregate_states=False,
    concurrent_writers=False,
    query_settings=False,
    ttl=False,
    insert_deduplication=True,
    scheduled_views=False,
    collapsing_engines=False,
    array_join=False,
)


class DuckDBStore:
    """A :class:`~warehouse.store.base.Store` on one DuckDB connection.

    Calls run on the connection itself, one at a time: a DuckDB cursor would be a new
    session, without the connection's schema and time zone.
    """

    def __init__(self, connection: duckdb.DuckDBPyConnection, url: StoreURL):
        self._connection = connection
        self._lock = threading.Lock()
        self.url = url.redacted()
        self.database = url.database
        self.capabilities = CAPABILITIES
        self.cluster: str | None = None
        self.shard_urls: tuple[StoreURL, ...] = ()
        self._schema_found = False

    def command(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> None:
        self._run(sql, parameters, settings)

    def query_arrow(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> pa.Table:
        return self._run(sql, parameters, settings, fetch=True)

    def insert_arrow(
        self,
        table: str,
        data: pa.Table,
        settings: Settings | None = None,
        dedup_token: str | None = None,
    ) -> None:
        target = f'"{self.database}"."{table}"'
        with self._lock, _translated_errors():
            self._connection.register("_llmwh_insert", data)
            try:
                if dedup_token is None:
                    self._execute(f"INSERT INTO {target} BY NAME SELECT * FROM _llmwh_insert")
                else:
                    self._insert_once(target, f"{table}:{dedup_token}")
            finally:
                self._connection.unregister("_llmwh_insert")

    def _insert_once(self, target: str, token: str) -> None:
        """Insert unless ``token`` was inserted before: the token and the rows commit in
        one transaction, and the token's primary key refuses a second one."""
        tokens = f'"{self.database}"."{_TOKENS}"'
        self._execute(
            f"CREATE TABLE IF NOT EXISTS {tokens} "
            "(token VARCHAR PRIMARY KEY, inserted_at TIMESTAMPTZ NOT NULL)"
        )
        self._execute("BEGIN TRANSACTION")
        try:
            self._execute(f"INSERT INTO {tokens} VALUES (?, now())", [token])
        except duckdb.ConstraintException:
            self._execute("ROLLBACK")
            return  # inserted before: this is a retry
        try:
            self._execute(f"INSERT INTO {target} BY NAME SELECT * FROM _llmwh_insert")
        except BaseException:
            self._execute("ROLLBACK")
            raise
        self._execute("COMMIT")
        # A retry comes within minutes (senders give up after hours); a day of tokens is
        # plenty, and keeps the table from growing without bound.
        self._execute(
            f"DELETE FROM {tokens} WHERE inserted_at < now() - INTERVAL {_TOKEN_DAYS} DAY"
        )

    def as_tenant(self, tenant: str) -> DuckDBStore:
        raise QueryError(
            "DuckDB has no row policies, so it cannot hold tenants apart under arbitrary "
            "SQL: read as a tenant on a ClickHouse server (docs/security.md)"
        )

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
            self._find_schema()
            for name, value in (settings or {}).items():
                self._execute(f"SET {_identifier(name)} = ?", [value])
            try:
                if fetch:
                    relation = self._connection.sql(sql, params=dict(parameters or {}))
                    return relation.to_arrow_table()
                self._execute(sql, dict(parameters) if parameters else None)
                return None
            finally:
                for name in settings or {}:
                    self._execute(f"RESET {_identifier(name)}")

    def _execute(self, sql: str, parameters: object = None) -> list[tuple[Any, ...]]:
        # DuckDB keeps a statement's result open until it is read; read it.
        return self._connection.execute(sql, parameters).fetchall()

    def _find_schema(self) -> None:
        """Resolve unqualified names in the warehouse's schema once it exists."""
        if self._schema_found:
            return
        (found,) = self._execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?",
            [self.database],
        )
        if found[0]:
            self._execute(f"SET schema = '{self.database}'")
            self._schema_found = True


def open_duckdb(url: StoreURL) -> DuckDBStore:
    """Open (or create) the DuckDB file ``url.path``; an empty path means in memory."""
    with _translated_errors():
        read_only = dict(url.options).get("read_only", "").lower() in ("1", "true", "yes")
        connection = duckdb.connect(url.path or ":memory:", read_only=read_only)
        # Not a connect-time config option: ICU, which owns TimeZone, loads after it.
        connection.execute("SET TimeZone = 'UTC'").fetchall()
    return DuckDBStore(connection, url)


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise StoreError(f"invalid DuckDB setting name {name!r}")
    return name


class _translated_errors:
    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or not isinstance(exc, duckdb.Error):
            return False
        text = str(exc).strip()
        # DuckDB adds hints ("Did you mean ...") and context on further lines.
        first = text.splitlines()[0] if text else "no details"
        raise StoreError(f"DuckDB error: {first}", database_message=text) from exc
