"""Putting SLO rollups on a store (one node or every shard of a cluster): apply, status,
and finding the one that answers. This module decides (which SLO needs a rollup, which
is complete, what to report) and renders the SQL; the store runs it and reads its
catalogue (:mod:`warehouse.store.slo_rollups`).

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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl
from sqlglot import exp

from warehouse import dialects
from warehouse.config import Config
from warehouse.query import trees
from warehouse.query.slo import SLO
from warehouse.query.slo_rollup import GRAIN, SloRollup, scope_terms
from warehouse.store import slo_rollups
from warehouse.store.base import Parameters, Store
from warehouse.store.schema import on_cluster
from warehouse.store.slo_rollups import Listed

__all__ = ["Applied", "apply", "find", "found_before", "status", "still_complete"]


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
            if _complete(store, rollup):
                done.append(Applied(slo.name, rollup.table, "up to date"))
            elif not store.capabilities.materialized_views:  # the rollup is a view
                slo_rollups.build_view(
                    store,
                    rollup.table,
                    rollup.view_select(store.database, store.capabilities.dialect),
                    rollup.comment,
                )
                done.append(Applied(slo.name, rollup.table, "built", _drop_older([store], rollup)))
            else:
                layout = rollup.layout(store.database, config.requests_ttl_days)
                slo_rollups.build(store, cluster, layout)
                dropped = _drop_older(cluster.shards if cluster else [store], rollup)
                done.append(Applied(slo.name, rollup.table, "built", dropped))
    return done


def find(store: Store, slo: SLO) -> SloRollup | None:
    """The SLO's complete rollup of its current version on ``store``, if there is one."""
    rollup = SloRollup(slo)
    return rollup if still_complete(store, rollup) else None


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
        listings = [
            slo_rollups.listing(node, _PREFIX) for node in (cluster.shards if cluster else [store])
        ]
    tables, every = listings[0], [t for listing in listings for t in listing]
    names = {t.name for t in tables}
    rows = []
    for table in tables:
        if not _BASE.match(table.name):
            continue
        name = table.name
        meta = _comment(table.comment)
        newest, count = _newest(store, name)
        rows.append(
            {
                "slo": meta.get("slo", "?"),
                "version": name.rsplit("_", 1)[-1],
                "table": name,
                "state": _state(table, names),
                "rows": count,  # of the minute table, over every shard of a cluster
                "bytes": sum(t.bytes for t in every if _part_of(t, name)),
                "newest_minute": newest,
                "lag_seconds": _lag(store, newest, meta.get("scope", {})),
            }
        )
    return pl.DataFrame(rows) if rows else pl.DataFrame(schema=dict.fromkeys(columns, pl.String))


_NEWEST = trees.alias(exp.Max(this=trees.column("ts")), "newest")
_COUNT = trees.alias(exp.Count(this=exp.Star()), "n")


def _newest(
    store: Store, table: str, where: Sequence[exp.Expr] = (), parameters: Parameters | None = None
) -> tuple[datetime | None, int]:
    """The newest ``ts`` of the rows of ``table`` (in the store's database) that every
    condition of ``where`` picks (None for none), and how many."""
    read = trees.select(
        [dialects.copy(_NEWEST), dialects.copy(_COUNT)], trees.table(table, store.database)
    )
    if where:
        read = read.where(trees.and_(list(where)), copy=False)
    sql = dialects.render(read, store.capabilities.dialect)
    found = store.query_arrow(sql, parameters).to_pylist()[0]
    # Of no rows, ClickHouse's max(ts) is the epoch: the count tells them apart.
    return (found["newest"] if found["n"] else None), int(found["n"])


def _lag(store: Store, newest: datetime | None, scope: dict[str, list[str]]) -> float | None:
    """Seconds from the rollup's newest minute to that of the newest request in its scope
    (reading only the requests after that minute); a view is never behind."""
    if not store.capabilities.materialized_views:
        return 0.0
    if newest is None:
        return None
    after = newest + GRAIN
    terms = [
        exp.GTE(this=trees.column("ts"), expression=trees.time_at("after")),
        exp.Not(this=trees.column("is_probe")),
    ]
    where = [*terms, *scope_terms(scope)]
    later, _ = _newest(store, "requests", where, {"after": int(after.timestamp() * 1000)})
    if later is None or later < after:
        return 0.0
    return (later.replace(second=0, microsecond=0) - newest).total_seconds()


def _drop_older(nodes: Sequence[Store], rollup: SloRollup) -> tuple[str, ...]:
    """Drop the older versions of the rollup's SLO on every node (on a cluster the
    Distributed and the local tables)."""
    older: list[str] = []
    for node in nodes:
        found = [
            t.name
            for t in slo_rollups.listing(node, _PREFIX)
            if _BASE.match(t.name)
            and _comment(t.comment).get("slo") == rollup.slo.name
            and t.name != rollup.table
        ]
        slo_rollups.drop(node, found)
        older.extend(b for b in found if b not in older)
    return tuple(older)


def _state(table: Listed, names: set[str]) -> str:
    if table.kind == "view":
        return "view"
    return "complete" if f"{table.name}_mv" in names else "building"


def _part_of(table: Listed, base: str) -> bool:
    name = table.name
    return table.kind != "materialized view" and (name == base or name.startswith(f"{base}_"))


_PREFIX = "slo_"
_BASE = re.compile(r"^slo_[a-z0-9_]*_[0-9a-f]{10}$")


def _complete(store: Store, rollup: SloRollup) -> bool:
    """Where rollups are tables: its minute table's view, made last, exists; elsewhere
    the rollup, a view."""
    if not store.capabilities.materialized_views:
        return slo_rollups.exists(store, rollup.table)
    return slo_rollups.exists(store, rollup.view)


def _comment(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
