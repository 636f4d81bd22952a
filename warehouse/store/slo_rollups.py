"""SLO rollups as the store keeps them: their DDL rendered, built, dropped and listed.

The query layer decides which SLO needs which rollup and defines it: its tables (grain,
dimensions, measure columns), the SELECTs that fill them and keep them filled
(:mod:`warehouse.query.slo_rollup`). This module renders that into the store's DDL
(engines, partitions, sort keys, TTL, part settings), runs it on a store, one node or
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
from datetime import timedelta
from typing import Literal

from warehouse.aggregates import Aggregate
from warehouse.errors import StoreError
from warehouse.store.base import Store, quote_identifier, quote_string
from warehouse.store.cluster_ddl import LOCAL_SUFFIX
from warehouse.store.cluster_migrations import ClusterMigrator
from warehouse.store.rollup_columns import REQUEST_COLUMN_TYPES

__all__ = [
    "SEAL_VIEW",
    "Listed",
    "RollupTable",
    "RollupTables",
    "build",
    "build_view",
    "drop",
    "exists",
    "listing",
    "paused_sealing",
    "storage_definition",
]

SEAL_VIEW = "request_parts_seal"
"""The refreshable view that seals request parts into `requests` (ClickHouse)."""


TOTALS_GRANULE = 64
"""Rows per granule of a rollup's tables of totals: a cut reads at most 59 rows of a
grain, and at high traffic a row of totals carries histograms of many buckets, so
ClickHouse's default 8,192 made each cut decompress thousands of rows it did not need
(at 100M requests: 176 ms a report, 104.6 ms with 64; docs/benchmarks.md)."""

TOTALS_PARTS = {
    "min_bytes_for_wide_part": 1 << 30,
    "min_age_to_force_merge_seconds": 60,
    "min_age_to_force_merge_on_partition_only": 1,
}
"""How its tables of totals keep their parts: compact (all columns in one file, where a
wide part opens a file per column) and, once a partition has had no write for a minute,
merged into one. Each cut of a report reads every part of the partitions it touches,
and a day of seconds otherwise stayed in three wide parts: the seconds' read at 100M
requests took 12-13 ms, 6-7 with one compact part a day (docs/benchmarks.md). A
partition still written to (today's seconds, this month's minutes) is left to ordinary
merges; a late request in a closed one costs one merge of that partition, a day of
seconds (about 20 MB at 100M requests a week)."""

_MINUTE = timedelta(minutes=1)
_HOUR = timedelta(hours=1)


def storage_definition(totals: Sequence[timedelta]) -> dict[str, object]:
    """How the store lays out a rollup's tables of totals (of grains ``totals``), for its
    definition: a rollup laid out otherwise is another version, built anew."""
    return {
        "totals_granule": TOTALS_GRANULE,
        "totals_parts": TOTALS_PARTS,
        "totals_partitions": [_partition(grain, totals=True) for grain in totals],
    }


def _partition(grain: timedelta, totals: bool) -> str:
    """A day to a partition below the hour (a day of seconds, 86,400 rows, for totals),
    else a month: a few parts for a report's week rather than a part a day."""
    return "toDate(ts)" if grain < (_MINUTE if totals else _HOUR) else "toYYYYMM(ts)"


@dataclass(frozen=True)
class RollupTable:
    """One table of a rollup, as the query layer defines it."""

    name: str
    dimensions: tuple[str, ...]
    """What its rows group by (and its sort key after ``ts``); none for totals."""
    columns: tuple[Aggregate, ...] = ()
    """Its measure columns, for a table of rows per time bucket."""
    grain: timedelta | None = None
    """Its time bucket; None for a table of requests, one row each."""
    request_columns: tuple[str, ...] = ()
    """For a table of requests: the `requests` columns it keeps, ``ts`` first."""


@dataclass(frozen=True)
class RollupTables:
    """A rollup kept in tables by materialized views, as the query layer defines it; the
    store renders its DDL (:attr:`creates`, :attr:`create_views`)."""

    label: str
    """What it is, for errors (``SLO chat-assistant``)."""
    database: str
    comment: str
    """What the catalogue lists beside each table: the rollup's definition, as JSON."""
    ttl_days: int
    layout: tuple[RollupTable, ...]
    fills: tuple[tuple[str, str], ...]
    """(table, SELECT) of each backfill, in the order they run: each source first."""
    feeds: tuple[tuple[str, str], ...]
    """(table, SELECT) of each materialized view that keeps a table filled, in the order
    they are created: the one whose existence marks the rollup complete last."""

    @property
    def tables(self) -> tuple[str, ...]:
        """Its tables' names, emptied before a backfill."""
        return tuple(table.name for table in self.layout)

    @property
    def views(self) -> tuple[str, ...]:
        """Its views' names, dropped before a backfill: the one whose existence marks
        the rollup complete (the minute table's) first."""
        return tuple(f"{table}_mv" for table in self.tables)

    @property
    def creates(self) -> tuple[str, ...]:
        """CREATE TABLE of each of its tables (``IF NOT EXISTS``)."""
        return tuple(self._create(table) for table in self.layout)

    @property
    def create_views(self) -> tuple[str, ...]:
        """CREATE MATERIALIZED VIEW of each of its views, in :attr:`feeds`' order."""
        db = quote_identifier(self.database)
        return tuple(
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {db}.{table}_mv TO {db}.{table} AS\n{select}"
            for table, select in self.feeds
        )

    def _create(self, table: RollupTable) -> str:
        """Rows per bucket aggregate as parts merge; a table of requests is plain and
        ordered by time. Tables of totals (no dimensions) keep small granules and few
        compact parts (:data:`TOTALS_GRANULE`, :data:`TOTALS_PARTS`)."""
        settings = {"ttl_only_drop_parts": 1}
        if table.grain is None:
            engine, partition, order = "MergeTree", "toDate(ts)", "ts"
            columns = [f"{c} {REQUEST_COLUMN_TYPES[c]}" for c in table.request_columns]
        else:
            engine, order = "AggregatingMergeTree", f"({', '.join(['ts', *table.dimensions])})"
            columns = [
                "ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))",
                *(f"{d} LowCardinality(String)" for d in table.dimensions),
                *(c.definition() for c in table.columns),
            ]
            partition = _partition(table.grain, totals=not table.dimensions)
            if not table.dimensions:
                settings |= {"index_granularity": TOTALS_GRANULE, **TOTALS_PARTS}
        listed = ",\n    ".join(columns)
        return (
            # On a cluster: where a row would go, were rows written to the Distributed
            # table (they are not: each shard's views fill its local tables, and queries
            # add the shards up).
            f"-- sharding_key: cityHash64({', '.join(table.dimensions) or 'ts'})\n"
            f"CREATE TABLE IF NOT EXISTS {quote_identifier(self.database)}.{table.name}\n"
            f"(\n    {listed}\n)\n"
            f"ENGINE = {engine}\nPARTITION BY {partition}\nORDER BY {order}\n"
            f"TTL toDateTime(ts) + INTERVAL {int(self.ttl_days)} DAY\n"
            f"SETTINGS {', '.join(f'{k} = {v}' for k, v in settings.items())}\n"
            f"COMMENT {quote_string(self.comment)}"
        )


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


def build_view(store: Store, name: str, select: str, comment: str) -> None:
    """Make a rollup that is a view (where rollups are not tables): ``select``, in the
    store's dialect, as view ``name`` (replacing one there), commented with ``comment``."""
    view = f"{quote_identifier(store.database)}.{quote_identifier(name)}"
    store.command(f"CREATE OR REPLACE VIEW {view} AS\n{select}")
    store.command(f"COMMENT ON VIEW {view} IS {_sql_string(comment)}")


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


def _sql_string(text: str) -> str:
    """A standard SQL string literal (quotes doubled, backslashes as they are)."""
    return "'" + text.replace("'", "''") + "'"
