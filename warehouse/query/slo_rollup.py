"""An SLO compiled into a rollup: exact counts per minute for its thresholds and objectives.

An SLO's rollup keeps, per minute and group of its dimensions, the valid requests (no
probes) within its scope: ``requests``, ``errors``, ``rejections`` and ``good`` (ok and
within every per-request threshold) as exact counts, and for each objective what it
needs: a latency histogram and the position counts of each percentile objective's limit
(:func:`warehouse.aggregates.position_columns`), so that whether
``p95(ttft_ms) <= 200`` holds over any set of minutes is decided exactly; sums for
averages, the KV-cache hit ratio and decode speed. Its name carries a version, a hash of
all that shapes its rows: changing a threshold makes a new rollup (docs/slo-rollups.md).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import polars as pl
from sqlglot import exp

from warehouse import dialects
from warehouse.aggregates import Aggregate, aggregate, check_prefix, good, position_columns
from warehouse.query import trees
from warehouse.query.builder import RollupSource
from warehouse.query.local_merge import columns_read
from warehouse.query.registry import dimension, measure
from warehouse.query.rollup_rows import bucket_rows, request_rows
from warehouse.query.slo import OPERATORS, SLO, Objective
from warehouse.store.base import Capabilities
from warehouse.store.rollup_columns import REQUEST_COLUMN_TYPES
from warehouse.store.slo_rollups import RollupTable, RollupTables, storage_definition

__all__ = [
    "DEFAULT_DIMENSIONS",
    "GRAIN",
    "SloRollup",
    "percentile_verdicts",
    "scope_terms",
]

GRAIN = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
HOUR = timedelta(hours=1)
DEFAULT_DIMENSIONS = ("tenant", "service", "model", "region")
"""What an SLO's rollup groups by unless its file says otherwise: what SLAs are written
against, and what `llmwh sla --by` and `root-cause` drill into."""

_COUNTS = ("requests", "errors", "rejections")
_PERCENTILE = re.compile(r"^p(\d+)_(\w+)$")


@dataclass(frozen=True)
class SloRollup:
    """The rollup an SLO compiles to: its columns, its SQL and its versioned name."""

    slo: SLO
    dimensions: tuple[str, ...] = DEFAULT_DIMENSIONS

    @property
    def checks(self) -> tuple[tuple[str, float], ...]:
        """(column, limit) of each percentile objective, each once."""
        found = []
        for objective in self.slo.objectives:
            percentile = _percentile(objective)
            if percentile is not None:
                found.append((percentile[0], objective.value))
        return tuple(dict.fromkeys(found))

    @functools.cached_property
    def columns(self) -> tuple[Aggregate, ...]:
        names = [*_COUNTS]
        for name in self.slo.measures:
            names += measure(name).rollup_columns
        pieces = [aggregate(name) for name in dict.fromkeys(names)]
        pieces.insert(3, self._good())
        for column, limit in self.checks:
            pieces += position_columns(column, limit)
        return tuple(pieces)

    @property
    def definition(self) -> dict[str, object]:
        """All that shapes its rows; its hash is the version."""
        return {
            "grains_seconds": [int(grain.total_seconds()) for grain in self._lengths()],
            "dimensions": list(self.dimensions),
            "order_by": ["ts", *self.dimensions],
            **storage_definition(self._total_lengths()),
            "totals_seconds": [int(g.total_seconds()) for g in self._total_lengths()],
            "scope": {k: sorted(v) for k, v in sorted(self.slo.scope.items())},
            "thresholds": {k: float(v) for k, v in sorted(self.slo.thresholds.items())},
            "columns": [c.definition() for c in self.columns],
            "requests_columns": [f"{c} {REQUEST_COLUMN_TYPES[c]}" for c in self.request_columns],
        }

    @functools.cached_property
    def version(self) -> str:
        """A hash of :attr:`definition` (computed once: every table name carries it)."""
        text = json.dumps(self.definition, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def table(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "_", self.slo.name.lower()).strip("_")[:40] or "slo"
        return f"slo_{slug}_{self.version}"

    @property
    def view(self) -> str:
        return f"{self.table}_mv"

    def rows(
        self,
        database: str,
        condition: exp.Expr | None = None,
        columns: Sequence[str] | None = None,
        keys: Sequence[tuple[str, exp.Expr]] = (),
        filling: bool = False,
    ) -> exp.Select:
        """Its rows from `requests` (those ``condition`` picks, if given; only the named
        ``columns``, if given; grouped by ``keys`` too, if given), as a question reads
        them or (``filling``) as its view and backfill write them."""
        where = self._scope()
        if condition is not None:
            where.append(exp.paren(condition))
        pieces = [c for c in self.columns if columns is None or c.name in columns]
        table = trees.table("requests", database)
        return bucket_rows(table, self.dimensions, pieces, where, keys, filling=filling)

    def _scope(self) -> list[exp.Expr]:
        """The conditions picking the `requests` rows it holds."""
        return [exp.Not(this=trees.column("is_probe")), *scope_terms(self.slo.scope)]

    def end_rows(
        self,
        database: str,
        condition: exp.Expr,
        columns: Sequence[str],
        keys: Sequence[tuple[str, exp.Expr]] = (),
    ) -> exp.Select:
        """:meth:`rows` read from its table of requests (:attr:`requests_table`), which
        holds its scope already: how the SQL path reads a range's ragged ends, from the
        same rows as :meth:`request_rows`."""
        pieces = [c for c in self.columns if c.name in columns]
        table = trees.table(self.requests_table, database)
        return bucket_rows(table, self.dimensions, pieces, [exp.paren(condition)], keys)

    def request_rows(
        self,
        database: str,
        condition: exp.Expr,
        columns: Sequence[str],
        dimensions: Sequence[str],
    ) -> exp.Select:
        """The requests within its scope that ``condition`` picks, each
        as the row of its rollup it alone would make (those ``columns`` and
        ``dimensions`` only), read from its table of requests (:attr:`requests_table`)."""
        pieces = [c for c in self.columns if c.name in columns]
        table = trees.table(self.requests_table, database)
        return request_rows(table, dimensions, pieces, [exp.paren(condition)])

    @property
    def requests_table(self) -> str:
        """Its table of requests: those within its scope, only the columns its rollup
        rows are computed from, ordered by time.

        It is how a range's ragged ends are read. `requests` is ordered by tenant,
        service and model before the hour, so the few seconds before a minute boundary
        cost a read of that hour of the scope; here they cost a read of those seconds
        (docs/slo-rollups.md, "The ragged ends").
        """
        return f"{self.table}_requests"

    @functools.cached_property
    def request_columns(self) -> tuple[str, ...]:
        """The columns of :attr:`requests_table`: ``ts``, its dimensions, and every `requests`
        column that a rollup column's per-request value reads."""
        read = {name for piece in self.columns for name in columns_read(piece.per_request)}
        others = [c for c in REQUEST_COLUMN_TYPES if c in read and c not in self.dimensions]
        return ("ts", *self.dimensions, *others)

    def request_select(self, database: str) -> exp.Select:
        """The rows of :attr:`requests_table` from `requests`."""
        read = trees.select(
            [trees.column(c) for c in self.request_columns], trees.table("requests", database)
        )
        return read.where(trees.and_(self._scope()), copy=False)

    @property
    def grains(self) -> tuple[tuple[timedelta, str], ...]:
        """Its tables by grain, finest first: per minute; per compliance window when that
        divides an hour; per hour. Coarser tables are filled from the minute table."""
        return tuple(
            (grain, self.table if grain == GRAIN else f"{self.table}_{_label(grain)}")
            for grain in self._lengths()
        )

    def _lengths(self) -> list[timedelta]:
        window = self.slo.window
        lengths = [GRAIN]
        if (
            GRAIN < window < HOUR
            and HOUR % window == timedelta(0)
            and window % GRAIN == timedelta(0)
        ):
            lengths.append(window)
        return [*lengths, HOUR]

    @property
    def tables(self) -> tuple[str, ...]:
        """All its tables: by grain, then totals, then its table of requests."""
        return (*(table for _, table in (*self.grains, *self.totals)), self.requests_table)

    @property
    def totals(self) -> tuple[tuple[timedelta, str], ...]:
        """Its tables of totals by grain, finest first: the same columns summed over the
        dimensions, one row per bucket, for the questions asked of the whole scope (the
        report and the exporter without ``--by``).

        The finest is per second, filled from its table of requests: a range's ragged
        ends are then whole seconds of totals, and only the part of a second at each end
        is read request by request, however busy the service (docs/slo-rollups.md, "The
        ragged ends"). The others are filled from the table of their grain.
        """
        tables = {SECOND: f"{self.table}_{_label(SECOND)}", **dict(self.grains)}
        return tuple((grain, f"{tables[grain]}_total") for grain in self._total_lengths())

    def _total_lengths(self) -> list[timedelta]:
        return [SECOND, *self._lengths()]

    def layout(self, database: str, ttl_days: int) -> RollupTables:
        """Its tables, as the store builds them (:func:`warehouse.store.slo_rollups.build`):
        the minute table and the table of requests filled from `requests` first, then
        those filled from them; the minute table's view, whose existence marks it
        complete, made last."""
        grains = (
            RollupTable(table, self.dimensions, self.columns, grain) for grain, table in self.grains
        )
        totals = (RollupTable(table, (), self.columns, grain) for grain, table in self.totals)
        requests = RollupTable(
            self.requests_table, self.dimensions, request_columns=self.request_columns
        )
        from_requests = (
            (self.table, _text(self.rows(database, filling=True))),
            (self.requests_table, _text(self.request_select(database))),
        )
        derived = [(table, _text(select)) for table, select in self.derived(database)]
        return RollupTables(
            label=f"SLO {self.slo.name}",
            database=database,
            comment=self.comment,
            ttl_days=ttl_days,
            layout=(*grains, *totals, requests),
            fills=(*from_requests, *derived),
            feeds=(*derived, *reversed(from_requests)),
        )

    @property
    def comment(self) -> str:
        """What the store's catalogue keeps beside its tables: its SLO and definition."""
        return json.dumps({"slo": self.slo.name, **self.definition}, sort_keys=True)

    def derived(self, database: str) -> list[tuple[str, exp.Select]]:
        """(table, SELECT filling it) of each table filled from another of its tables:
        the coarser grains from the minute table, then each table of totals from the
        table of its grain, and the totals per second from its table of requests. In
        that order, so a backfill fills each source first (the minute table and the
        table of requests before all)."""

        def merged(table: str, ts: exp.Expr, keys: Sequence[str]) -> exp.Select:
            items = [
                trees.alias(ts, "ts"),
                *(trees.column(k) for k in keys),
                *(trees.alias(trees.expression(c.over_rollup), c.name) for c in self.columns),
            ]
            read = trees.select(items, trees.table(table, database))
            return read.group_by(*(trees.column(k) for k in ["ts", *keys]), copy=False)

        found = []
        for grain, table in self.grains[1:]:
            length = exp.Interval(
                this=exp.Literal.string(str(int(grain.total_seconds()))), unit=exp.var("SECOND")
            )
            bucket = trees.call("toStartOfInterval", trees.column("ts"), length)
            found.append((table, merged(self.table, bucket, self.dimensions)))
        (_, seconds), *totals = self.totals
        for (_, table), (_, total) in zip(self.grains, totals, strict=True):
            found.append((total, merged(table, trees.column("ts"), ())))
        per_second = bucket_rows(
            trees.table(self.requests_table, database),
            (),
            self.columns,
            bucket=trees.expression("toStartOfSecond(ts)"),
            filling=True,
        )
        found.append((seconds, per_second))
        return found

    @property
    def view_columns(self) -> tuple[Aggregate, ...]:
        """What its DuckDB view holds: every column but the latency histograms, which
        only ClickHouse's map aggregates merge."""
        return tuple(c for c in self.columns if not c.name.endswith("_hist"))

    def view_select(self, database: str, dialect: str) -> str:
        """Its rows as a view of `requests` (the same rows, computed as they are read), in
        ``dialect``: how a store without materialized views keeps it."""
        rows = self.rows(database, columns=[c.name for c in self.view_columns])
        return dialects.render(rows, dialect)

    def source(self, capabilities: Capabilities | None = None) -> RollupSource:
        """How the query layer reads it on a store with ``capabilities``: its tables, or
        where rollups are views computed at query time (no materialized views), its view
        (minutes only, no histograms). None: a store with materialized views."""
        view = capabilities is not None and not capabilities.materialized_views
        return RollupSource(
            table=self.table,
            label=f"SLO {self.slo.name}" + (" (a view)" if view else ""),
            grains=((GRAIN, self.table),) if view else self.grains,
            dimensions=self.dimensions,
            scope=dict(self.slo.scope),
            thresholds={k: float(v) for k, v in self.slo.thresholds.items()},
            columns=tuple(c.name for c in (self.view_columns if view else self.columns)),
            rows=self.rows if view else self.end_rows,
            totals=() if view else self.totals,
            request_rows=None if view else self.request_rows,
            raw_by_hour=view,
        )

    def _good(self) -> Aggregate:
        limits = {column: repr(float(limit)) for column, limit in self.slo.thresholds.items()}
        return good(limits)


def _percentile(objective: Objective) -> tuple[str, float] | None:
    m = measure(objective.measure)
    if not m.is_percentile or m.column is None or m.level is None:
        return None
    return m.column, m.level


def percentile_verdicts(frame: pl.DataFrame, objective: Objective) -> tuple[np.ndarray, np.ndarray]:
    """Whether a percentile objective holds in each row, from its position counts, and
    whether the row has values at all (where not, the first says nothing: a percentile
    of nothing is null).

    Exactly as comparing the exact percentile with the limit would decide it. The
    percentile interpolates linearly between the order statistics at ``h = q (n - 1)``
    (ClickHouse's ``quantileExactInclusive``, numpy's default); the statistics next to
    the limit are ``lo`` (the largest value below it), the limit itself, or ``hi``,
    so the interpolated value is either computed from them or known to lie on one side.
    """
    found = _percentile(objective)
    assert found is not None, objective
    column, level = found
    p = check_prefix(column, objective.value)
    # Counts of a row with no values are 0 from ClickHouse, null from DuckDB's view.
    n, lt, le = (
        frame[f"{p}_{name}"].fill_null(0).to_numpy().astype(np.int64) for name in ("n", "lt", "le")
    )
    lo = frame[f"{p}_lo"].to_numpy().astype(np.float64)
    hi = frame[f"{p}_hi"].to_numpy().astype(np.float64)
    limit = float(objective.value)
    with np.errstate(invalid="ignore"):
        h = level * (n - 1) + 1  # one-based rank, as ClickHouse computes it
        rank = np.floor(h).astype(np.int64)
        i = rank - 1  # the lower order statistic, zero-based
        fraction = h - rank
        x_i = np.where(i == lt - 1, lo, limit)  # where i is next to the limit
        x_j = np.where(i + 1 == le, hi, limit)
        value = np.where(fraction > 0, x_i + fraction * (x_j - x_i), x_i)
        value = np.where(i >= le, np.inf, value)  # the lower statistic is above the limit
        below = np.where(fraction > 0, i + 1 < lt, i < lt)
        value = np.where(below, -np.inf, value)
        holds = OPERATORS[objective.op](value, limit)
    return np.asarray(holds, dtype=bool), n > 0


def scope_terms(scope: Mapping[str, Sequence[str]]) -> list[exp.Expr]:
    """The conditions of an SLO's scope, its values as literals (a view's SQL cannot take
    bound parameters)."""
    return [
        exp.In(this=dimension(key).tree, expressions=[exp.Literal.string(str(v)) for v in values])
        for key, values in sorted(scope.items())
    ]


def _text(select: exp.Select) -> str:
    """A view's or a backfill's SELECT as the store runs it (ClickHouse SQL)."""
    return dialects.render(select, dialects.SOURCE)


def _label(grain: timedelta) -> str:
    seconds = int(grain.total_seconds())
    if seconds % 60:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds % 3600 else f"{seconds // 3600}h"
