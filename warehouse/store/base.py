"""The one interface every storage backend implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from warehouse.store.url import StoreURL

__all__ = ["Capabilities", "Parameters", "Settings", "Store", "quote_identifier", "quote_string"]

Parameters = Mapping[str, Any]
Settings = Mapping[str, Any]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, so callers never test for a backend by name."""

    dialect: str
    """SQL dialect of the backend, as sqlglot names it: ``clickhouse`` or ``duckdb``."""
    materialized_views: bool
    """Rollups are tables filled at insert time by materialized views (otherwise they
    are views computed at query time): an SLO's rollup is built, backfilled and marked
    complete by its views, and a question read in pieces of it may read its stored rows
    and merge them in the client."""
    aggregate_states: bool
    """Mergeable aggregate states (``-State``/``-Merge``) can be stored and merged."""
    concurrent_writers: bool
    """Several processes may write at once."""
    query_settings: bool
    """Per-query settings such as ``max_execution_time`` or ``readonly`` are honoured."""
    ttl: bool
    """Tables expire old rows by themselves (otherwise retention is the caller's job)."""
    insert_deduplication: bool
    """An insert repeated with the same ``dedup_token`` is dropped, rollups included."""
    scheduled_views: bool
    """Views refresh on a schedule inside the database (otherwise the receiver runs them)."""
    collapsing_engines: bool
    """Repeated series, samples and metadata rows collapse in the tables themselves
    (ReplacingMergeTree and kin), so writing them twice changes no figure."""
    concurrent_reads: bool = False
    """Queries from several threads of one process run at once (a server over HTTP),
    rather than one after another."""
    row_policies: bool = False
    """The database itself holds tenants apart: :meth:`Store.as_tenant` gives a store
    that reads under row policies (a ClickHouse server; see docs/security.md)."""
    array_join: bool = False
    """A row can be repeated once for each element of an array (``ARRAY JOIN``): a
    question with spans (an SLA report's burn windows and partial windows) is answered
    in one read, each row counted in every span it falls in; otherwise each span is a
    question of its own."""


@runtime_checkable
class Store(Protocol):
    """A database holding the warehouse's tables.

    Parameters are bound by the database itself, never formatted into SQL: ClickHouse
    stores take ``{name:Type}`` placeholders, DuckDB takes ``$name``.
    """

    url: str
    database: str
    capabilities: Capabilities
    cluster: str | None
    """The ClickHouse cluster the store URL names (``cluster=NAME``); None on one node."""

    @property
    def shard_urls(self) -> Sequence[StoreURL]:
        """With ``shards=HOST:PORT,...``: a store URL for each shard, for migrations."""
        ...

    def command(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> None:
        """Run a statement that returns no rows (DDL, INSERT ... SELECT, SET)."""

    def query_arrow(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> pa.Table:
        """Run a query and return its result as an Arrow table."""

    def insert_arrow(
        self,
        table: str,
        data: pa.Table,
        settings: Settings | None = None,
        dedup_token: str | None = None,
    ) -> None:
        """Append an Arrow table to ``table`` (unqualified, in this store's database).

        With ``dedup_token``, a second insert with the same token into the same table is
        a no-op where the backend can tell (``capabilities.insert_deduplication``).
        """

    def as_tenant(self, tenant: str) -> Store:
        """A read-only store on the same database that sees ``tenant``'s rows only,
        held so by the database (``capabilities.row_policies``); refused elsewhere."""

    def close(self) -> None:
        """Release connections."""


def quote_identifier(identifier: str) -> str:
    """``identifier`` quoted for ClickHouse SQL (and DuckDB's)."""
    return '"' + identifier.replace('"', '""') + '"'


def quote_string(text: str) -> str:
    """``text`` as a ClickHouse string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
