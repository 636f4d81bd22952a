"""SLO rollups as the store keeps them: built, dropped and listed.

The query layer decides which SLO needs which rollup and renders its SQL
(:mod:`warehouse.query.slo_rollup`); this module runs that SQL on a store, one node or
every shard of a cluster, and reads the store's catalogue of what is there
(docs/slo-rollups.md). Where rollups are tables (``capabilities.materialized_views``)
:func:`build` follows the backfill discipline of the rollup migrations: sealing is
paused, the tables are emptied and filled from `requests`, the views that keep them
filled are created last, and sealing resumes, so that no sealed request is counted
twice. Elsewhere a rollup is a view, made by :func:`build_view`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from warehouse.errors import StoreError
from warehouse.store.base import Store, quote_identifier
from warehouse.store.cluster_ddl import LOCAL_SUFFIX
from warehouse.store.cluster_migrations import ClusterMigrator

__all__ = [
    "SEAL_VIEW",
    "Listed",
    "RollupTables",
    "build",
    "build_view",
    "drop",
    "exists",
    "listing",
    "paused_sealing",
]

SEAL_VIEW = "request_parts_seal"
"""The refreshable view that seals request parts into `requests` (ClickHouse)."""


@dataclass(frozen=True)
class RollupTables:
    """A rollup kept in tables by materialized views, as the SQL the query layer renders."""

    label: str
    """What it is, for errors (``SLO chat-assistant``)."""
    creates: tuple[str, ...]
    """CREATE TABLE of each of its tables (``IF NOT EXISTS``)."""
    tables: tuple[str, ...]
    """Its tables' names, emptied before a backfill."""
    views: tuple[str, ...]
    """Its views' names, dropped before a backfill."""
    fills: tuple[tuple[str, str], ...]
    """(table, SELECT) of each backfill, in the order they run: each source first."""
    create_views: tuple[str, ...]
    """CREATE MATERIALIZED VIEW of each of its views; the one whose existence marks the
    rollup complete last."""


Kind = Literal["table", "view", "materialized view"]


@dataclass(frozen=True)
class Listed:
    """A table or view of a rollup, as the store's catalogue lists it."""

    name: str
    comment: str
    kind: Kind
    bytes: int
    """On disk; on a cluster, the local table's on this node."""


def build(store: Store, cluster: ClusterMigrator | None, rollup: RollupTables) -> None:
    """Create ``rollup``'s tables, fill them from `requests` and create its views, with
    sealing paused; a half-done build is emptied and redone. On a cluster
    (:func:`warehouse.store.schema.on_cluster`) on every shard, rendered as the migrations
    are: local tables behind Distributed ones, each shard backfilling its own rows."""
    db = quote_identifier(store.database)

    def run(statements: Iterable[str]) -> None:
        if cluster is None:
            for statement in statements:
                store.command(statement)
        else:
            cluster.run(list(statements), rollup.label, rollup.creates)

    with paused_sealing(store, run):
        run(rollup.creates)
        # A half-done build starts again: views first, then the rows.
        run(f"DROP VIEW IF EXISTS {db}.{view} SYNC" for view in rollup.views)
        run(f"TRUNCATE TABLE {db}.{table}" for table in rollup.tables)
        run(f"INSERT INTO {db}.{table}\n{select}" for table, select in rollup.fills)
        run(rollup.create_views)


def build_view(store: Store, statements: Sequence[str]) -> None:
    """Make a rollup that is a view (where rollups are not tables): ``statements`` create
    it (or replace it) and comment it."""
    for statement in statements:
        store.command(statement)


@contextmanager
def paused_sealing(
    store: Store, run: Callable[[Iterable[str]], None] | None = None
) -> Iterator[None]:
    """Sealing stopped while the block runs, where a sealing view is there: a backfill
    from `requests` then counts no request that its views count too. ``run`` runs the
    statements (on every node of a cluster); by default, on ``store``."""

    def on_store(statements: Iterable[str]) -> None:
        for statement in statements:
            store.command(statement)

    run = run or on_store
    db = quote_identifier(store.database)
    sealing = exists(store, SEAL_VIEW)
    if sealing:
        run([f"SYSTEM STOP VIEW {db}.{SEAL_VIEW}"])
    try:
        yield
    finally:
        if sealing:
            run([f"SYSTEM START VIEW {db}.{SEAL_VIEW}"])


def drop(store: Store, bases: Iterable[str]) -> None:
    """Drop each rollup named in ``bases`` from ``store``: every table and view named so
    or so followed by ``_`` (on a cluster node, the Distributed and the local tables),
    views first."""
    db = quote_identifier(store.database)
    sync = "" if store.capabilities.dialect == "duckdb" else " SYNC"
    for base in bases:
        found = listing(store, base, fold=False)
        doomed = [t for t in found if t.name == base or t.name.startswith(f"{base}_")]
        for t in sorted(doomed, key=lambda t: t.kind == "table"):
            kind = "TABLE" if t.kind == "table" else "VIEW"
            store.command(f"DROP {kind} IF EXISTS {db}.{t.name}{sync}")


def listing(store: Store, prefix: str, fold: bool = True) -> list[Listed]:
    """The tables and views whose names start with ``prefix``, by name, with their
    comment and size; with ``fold``, a cluster's local table lends its comment and size
    to its Distributed one (and is left out). Where rollups are views, the views only."""
    if store.capabilities.dialect == "duckdb":
        views = store.query_arrow(
            "SELECT view_name AS name, comment FROM duckdb_views() "
            "WHERE schema_name = $db AND starts_with(view_name, $prefix) ORDER BY view_name",
            {"db": store.database, "prefix": prefix},
        ).to_pylist()
        return [Listed(v["name"], v["comment"], "view", 0) for v in views]
    rows = store.query_arrow(
        "SELECT name, comment, engine, coalesce(total_bytes, 0) AS bytes "
        "FROM system.tables "
        "WHERE database = {db:String} AND startsWith(name, {prefix:String}) ORDER BY name",
        {"db": store.database, "prefix": prefix},
    ).to_pylist()
    found = [Listed(r["name"], r["comment"], _kind(r["engine"]), int(r["bytes"])) for r in rows]
    return _folded(found) if fold else found


def _kind(engine: str) -> Kind:
    if engine == "MaterializedView":
        return "materialized view"
    return "view" if engine == "View" else "table"


def _folded(tables: list[Listed]) -> list[Listed]:
    local = {t.name.removesuffix(LOCAL_SUFFIX): t for t in tables if t.name.endswith(LOCAL_SUFFIX)}
    return [
        Listed(t.name, local[t.name].comment, t.kind, local[t.name].bytes) if t.name in local else t
        for t in tables
        if not t.name.endswith(LOCAL_SUFFIX)
    ]


def exists(store: Store, name: str) -> bool:
    """Whether table or view ``name`` is in the store's database; false where the store
    (a tenant's) may not read it."""
    if store.capabilities.dialect == "duckdb":
        found = store.query_arrow(
            "SELECT count(*) AS n FROM information_schema.tables "
            "WHERE table_schema = $db AND table_name = $name",
            {"db": store.database, "name": name},
        )
        return bool(found.column(0)[0].as_py())
    # EXISTS, not a read of system.tables: every report asks, and it answers in half the time.
    try:
        found = store.query_arrow(
            "EXISTS TABLE {db:Identifier}.{name:Identifier}", {"db": store.database, "name": name}
        )
    except StoreError as exc:
        if exc.code == _ACCESS_DENIED:
            return False  # a tenant's store, and a rollup it may not read: not there for it
        raise
    return bool(found.column(0)[0].as_py())


_ACCESS_DENIED = 497
