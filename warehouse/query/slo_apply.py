"""Putting SLO rollups on a store (one node or every shard of a cluster): apply, status,
and finding the one that answers.

``apply`` follows the backfill discipline of the rollup migrations: sealing is stopped,
the new rollup's table is filled from `requests`, its materialized view is created, and
sealing starts again, so that no sealed request is counted twice. The view is created
last, so a rollup is complete exactly when its view exists; a build that stopped half
way is emptied and redone by the next ``apply``. Older versions of the same SLO are
dropped only after the new one is complete (docs/slo-rollups.md).

A write of per-request events that lands between the backfill and the view's creation
is in `requests` but not in the rollup: apply SLOs before such writers start (``migrate
up`` does, for the SLOs the ``slos`` setting names) or while they are stopped.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from warehouse.config import Config
from warehouse.errors import StoreError
from warehouse.query.builder import quote_identifier
from warehouse.query.slo import SLO
from warehouse.query.slo_rollup import GRAIN, SloRollup, scope_terms
from warehouse.store.base import Store
from warehouse.store.cluster_ddl import LOCAL_SUFFIX
from warehouse.store.cluster_migrations import ClusterMigrator
from warehouse.store.schema import on_cluster

__all__ = ["Applied", "apply", "find", "found_before", "status", "still_complete"]

SEAL_VIEW = "request_parts_seal"


@dataclass(frozen=True)
class Applied:
    """What ``apply`` did for one SLO."""

    slo: str
    table: str
    action: str
    """``built``, ``up to date`` or why it was not built."""
    dropped: tuple[str, ...] = ()


def apply(store: Store, slos: Sequence[SLO], config: Config | None = None) -> list[Applied]:
    """Build the rollup of each SLO that lacks a complete one of its current version; on
    a cluster, on every shard, rendered as the migrations are (docs/slo-rollups.md)."""
    config = config or Config()
    done = []
    with on_cluster(store, config) as cluster:
        for slo in slos:
            rollup = SloRollup(slo)
            if not rollup.covered:
                done.append(
                    Applied(slo.name, rollup.table, "not built: an objective needs raw rows")
                )
            elif _complete(store, rollup):
                done.append(Applied(slo.name, rollup.table, "up to date"))
            elif _is_duckdb(store):
                for statement in rollup.create_view(store.database):
                    store.command(statement)
                done.append(Applied(slo.name, rollup.table, "built", _drop_older([store], rollup)))
            else:
                _build(store, cluster, rollup, config)
                dropped = _drop_older(cluster.shards if cluster else [store], rollup)
                done.append(Applied(slo.name, rollup.table, "built", dropped))
    return done


def find(store: Store, slo: SLO) -> SloRollup | None:
    """The SLO's complete rollup of its current version on ``store``, if there is one."""
    rollup = SloRollup(slo)
    return rollup if rollup.covered and still_complete(store, rollup) else None


def found_before(store: Store, slo: SLO) -> SloRollup | None:
    """The SLO's rollup if it was complete when last looked for on ``store`` (by
    :func:`find` or :func:`still_complete`), without asking the store."""
    rollup = SloRollup(slo)
    return rollup if rollup.table in _FOUND.get(store, ()) else None


def still_complete(store: Store, rollup: SloRollup) -> bool:
    """Whether ``rollup`` is complete on ``store``, remembered for :func:`found_before`."""
    complete = _complete(store, rollup)
    found = _FOUND.setdefault(store, set())
    if complete:
        found.add(rollup.table)
    else:
        found.discard(rollup.table)
    return complete


_FOUND: weakref.WeakKeyDictionary[Store, set[str]] = weakref.WeakKeyDictionary()
"""The SLO rollups each store (while it is open) was last seen to hold complete."""


def status(store: Store, config: Config | None = None) -> pl.DataFrame:
    """Every SLO rollup on the store: its SLO, version, state, size (over every shard of
    a cluster), newest minute, and its lag: how far the newest request in its scope is
    past its newest minute."""
    columns = ["slo", "version", "table", "state", "rows", "bytes", "newest_minute", "lag_seconds"]
    with on_cluster(store, config or Config()) as cluster:
        listings = [_tables(node) for node in (cluster.shards if cluster else [store])]
    tables, every = listings[0], [t for listing in listings for t in listing]
    names = {t["table"] for t in tables}
    rows = []
    for table in tables:
        if not _BASE.match(table["table"]):
            continue
        name = table["table"]
        meta = _comment(table["comment"])
        newest, count = _newest(
            store, f"{quote_identifier(store.database)}.{quote_identifier(name)}"
        )
        rows.append(
            {
                "slo": meta.get("slo", "?"),
                "version": name.rsplit("_", 1)[-1],
                "table": name,
                "state": _state(table, names),
                "rows": count,  # of the minute table, over every shard of a cluster
                "bytes": sum(int(t["bytes"]) for t in every if _part_of(t, name)),
                "newest_minute": newest,
                "lag_seconds": _lag(store, newest, meta.get("scope", {})),
            }
        )
    return pl.DataFrame(rows) if rows else pl.DataFrame(schema=dict.fromkeys(columns, pl.String))


def _newest(
    store: Store, table: str, where: str = "", parameters: dict | None = None
) -> tuple[datetime | None, int]:
    """The newest ``ts`` of the rows ``where`` picks (None for none), and how many."""
    found = store.query_arrow(
        f"SELECT max(ts) AS newest, count() AS n FROM {table} {where}", parameters
    ).to_pylist()[0]
    # Of no rows, ClickHouse's max(ts) is the epoch: the count tells them apart.
    return (found["newest"] if found["n"] else None), int(found["n"])


def _lag(store: Store, newest: datetime | None, scope: dict) -> float | None:
    """Seconds from the rollup's newest minute to that of the newest request in its scope
    (reading only the requests after that minute); a view is never behind."""
    if _is_duckdb(store):
        return 0.0
    if newest is None:
        return None
    after = newest + GRAIN
    terms = ["ts >= fromUnixTimestamp64Milli({after:Int64}, 'UTC')", "NOT is_probe"]
    where = f"WHERE {' AND '.join([*terms, *scope_terms(scope)])}"
    table = f"{quote_identifier(store.database)}.requests"
    later, _ = _newest(store, table, where, {"after": int(after.timestamp() * 1000)})
    if later is None or later < after:
        return 0.0
    return (later.replace(second=0, microsecond=0) - newest).total_seconds()


def _build(
    store: Store, cluster: ClusterMigrator | None, rollup: SloRollup, config: Config
) -> None:
    db = quote_identifier(store.database)
    creates = rollup.create_tables(store.database, config.requests_ttl_days)

    def run(statements: Iterable[str]) -> None:
        if cluster is None:
            for statement in statements:
                store.command(statement)
        else:  # local tables behind Distributed ones, each shard of its own rows
            cluster.run(list(statements), f"SLO {rollup.slo.name}", creates)

    sealing = _exists(store, SEAL_VIEW)
    if sealing:
        run([f"SYSTEM STOP VIEW {db}.{SEAL_VIEW}"])
    try:
        run(creates)
        # A half-done build starts again: views first, then the rows.
        run(f"DROP VIEW IF EXISTS {db}.{table}_mv SYNC" for table in rollup.tables)
        run(f"TRUNCATE TABLE {db}.{table}" for table in rollup.tables)
        run([f"INSERT INTO {db}.{rollup.table}\n{rollup.rows(store.database)}"])
        run([f"INSERT INTO {db}.{rollup.requests_table}\n{rollup.request_select(store.database)}"])
        run(f"INSERT INTO {db}.{t}\n{select}" for t, select in rollup.derived(store.database))
        run(rollup.create_views(store.database))
    finally:
        if sealing:
            run([f"SYSTEM START VIEW {db}.{SEAL_VIEW}"])


def _drop_older(nodes: Sequence[Store], rollup: SloRollup) -> tuple[str, ...]:
    """Drop the older versions of the rollup's SLO on every node (views first, then
    tables: on a cluster the Distributed and the local ones)."""
    older: list[str] = []
    for node in nodes:
        tables = _tables(node, fold=False)
        found = [
            t["table"]
            for t in _folded(tables)
            if _BASE.match(t["table"])
            and _comment(t["comment"]).get("slo") == rollup.slo.name
            and t["table"] != rollup.table
        ]
        for base in found:
            doomed = [t for t in tables if t["table"] == base or t["table"].startswith(f"{base}_")]
            sync = "" if _is_duckdb(node) else " SYNC"
            for t in sorted(doomed, key=lambda t: t["engine"] not in _VIEWS):
                kind = "VIEW" if t["engine"] in _VIEWS else "TABLE"
                name = f"{quote_identifier(node.database)}.{t['table']}"
                node.command(f"DROP {kind} IF EXISTS {name}{sync}")
        older.extend(b for b in found if b not in older)
    return tuple(older)


def _state(table: dict, names: set[str]) -> str:
    if table["engine"] == "View":
        return "view"
    return "complete" if f"{table['table']}_mv" in names else "building"


def _tables(store: Store, fold: bool = True) -> list[dict]:
    """The SLO rollups' tables and views on the store, with their comment and size; with
    ``fold``, a cluster's local table lends its comment and size to its Distributed one.
    On DuckDB, its views, which hold no bytes."""
    if _is_duckdb(store):
        return [{**view, "engine": "View", "bytes": 0} for view in _views(store)]
    tables = store.query_arrow(
        "SELECT name AS table, comment, engine, coalesce(total_bytes, 0) AS bytes "
        "FROM system.tables "
        "WHERE database = {db:String} AND name LIKE 'slo\\_%' ORDER BY name",
        {"db": store.database},
    ).to_pylist()
    return _folded(tables) if fold else tables


def _folded(tables: list[dict]) -> list[dict]:
    local = {
        t["table"].removesuffix(LOCAL_SUFFIX): t
        for t in tables
        if t["table"].endswith(LOCAL_SUFFIX)
    }
    return [
        {**t, **{k: local[t["table"]][k] for k in ("comment", "bytes")}}
        if t["table"] in local
        else t
        for t in tables
        if not t["table"].endswith(LOCAL_SUFFIX)
    ]


def _part_of(table: dict, base: str) -> bool:
    name = table["table"]
    is_data = table["engine"] != "MaterializedView"
    return is_data and (name == base or name.startswith(f"{base}_"))


_VIEWS = ("MaterializedView", "View")
_BASE = re.compile(r"^slo_[a-z0-9_]*_[0-9a-f]{10}$")


def _complete(store: Store, rollup: SloRollup) -> bool:
    """On ClickHouse: its minute table's view, made last, exists; on DuckDB: its view."""
    if _is_duckdb(store):
        return any(view["table"] == rollup.table for view in _views(store))
    return _exists(store, rollup.view)


def _views(store: Store) -> list[dict]:
    """The SLO rollups' views on a DuckDB store, with their comment."""
    return store.query_arrow(
        "SELECT view_name AS table, comment FROM duckdb_views() "
        "WHERE schema_name = $db AND starts_with(view_name, 'slo_') ORDER BY view_name",
        {"db": store.database},
    ).to_pylist()


def _is_duckdb(store: Store) -> bool:
    return store.capabilities.dialect == "duckdb"


def _exists(store: Store, name: str) -> bool:
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


def _comment(text: str) -> dict:
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
