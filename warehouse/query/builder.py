"""From a question (dimensions, measures, filters, time range) to SQL.

The builder composes a question as a sqlglot tree (:mod:`warehouse.query.trees`) from
the registry's dimensions and measures and the plan's pieces (:mod:`.planner`), with
every value a ``{name:Type}`` placeholder; each target renders the tree (ClickHouse,
DuckDB, and the Grafana target, which transforms it).

A tree is built and rendered once per *shape* of question: the names it asks (measures,
dimensions, filters and how many values each, thresholds, buckets, order, limit) and
its plan's pieces, never its values. Building and rendering a tree costs a few
microseconds a node, a few milliseconds a question (docs/benchmarks.md, "Compiling a
question"); the dashboards, the exporter and the SLO report ask the same few shapes
again and again, so a question of a known shape costs only binding its values.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast

from sqlglot import exp

from warehouse import dialects
from warehouse.aggregates import position_columns
from warehouse.errors import QueryError
from warehouse.model import LATENCY_COLUMNS
from warehouse.query import local_merge, order_statistics, trees
from warehouse.query.planner import (
    HISTOGRAM_ERROR,
    HISTOGRAM_PERCENTILE_ERROR,
    TDIGEST_ERROR,
    Plan,
    RollupSource,
    plan,
)
from warehouse.query.question import (
    FilterValue,
    Question,
    check_limit,
    check_names,
    check_spans,
    filter_values,
    threshold_ms,
)
from warehouse.query.registry import Dimension, Measure, dimension, good_count, measure
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Capabilities, quote_identifier

__all__ = [
    "HISTOGRAM_ERROR",
    "HISTOGRAM_PERCENTILE_ERROR",
    "TDIGEST_ERROR",
    "Compiled",
    "FilterValue",
    "Plan",
    "Question",
    "RollupSource",
    "Statement",
    "check_limit",
    "compile_question",
    "compile_values",
    "forget_shapes",
    "quote_identifier",
]

Filters = list[tuple[Dimension, list[Any]]]
T = TypeVar("T")


@dataclass(eq=False)
class Statement:
    """A question's SQL as a tree, and its text for each target, rendered once when first
    asked for (a client merge's fallback is seldom run)."""

    tree: exp.Expr
    _texts: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, tree: exp.Expr) -> Statement:
        return cls(tree)

    @functools.cached_property
    def placeholders(self) -> frozenset[str]:
        """The names of the values it binds."""
        return trees.placeholders(self.tree)

    @property
    def sql(self) -> str:
        """ClickHouse SQL, the source dialect."""
        return self.render(dialects.SOURCE)

    def render(self, dialect: str) -> str:
        if dialect not in self._texts:
            self._texts[dialect] = dialects.render(self.tree, dialect)
        return self._texts[dialect]


@dataclass(frozen=True)
class Compiled:
    """A question as ClickHouse SQL with its parameters, and the plan behind it."""

    text: str | None
    """The SQL, when given as text (else :attr:`statement` renders it)."""
    parameters: dict[str, Any]
    plan: Plan
    columns: tuple[str, ...]
    """The result's columns."""
    sql_columns: tuple[str, ...] = ()
    """The columns the SQL returns, when they differ from :attr:`columns`."""
    histograms: tuple[tuple[str, str, float], ...] = ()
    """Percentiles to read from histogram columns of the SQL: (measure, column, level)."""
    sort_after: tuple[str, int | None] | None = None
    """``(order_by, limit)`` to apply after the histograms are read."""
    merge: local_merge.LocalMerge | None = None
    """When set, the SQL returns rollup rows, which this merges into the answer
    (:mod:`warehouse.query.local_merge`)."""
    fallback: Callable[[], Compiled] | None = None
    """With :attr:`merge`: the same question merged by ClickHouse (built when called),
    for when the ragged ends hold more requests than
    :data:`~warehouse.query.local_merge.MAX_REQUESTS`."""
    statement: Statement | None = None
    """The SQL as a tree; None for SQL given as text."""

    @property
    def sql(self) -> str:
        """The ClickHouse SQL."""
        if self.statement is not None:
            return self.statement.sql
        assert self.text is not None  # a Compiled holds text or a statement
        return self.text

    @property
    def tree(self) -> exp.Expr:
        """The SQL as a tree (shared: copy it before changing it)."""
        return self.statement.tree if self.statement else dialects.parse(self.sql)

    @property
    def placeholders(self) -> frozenset[str]:
        """The names of the parameters the SQL binds."""
        return self.statement.placeholders if self.statement else trees.placeholders(self.tree)

    def render(self, dialect: str) -> str:
        """The SQL for a store of ``dialect``."""
        if self.statement is not None:
            return self.statement.render(dialect)
        return dialects.transpile(self.sql, dialect)


def compile_question(
    question: Question,
    capabilities: Capabilities,
    database: str,
    sources: Sequence[RollupSource] = (),
) -> Compiled:
    """The SQL answering ``question`` on a store with ``capabilities``; ``sources`` are
    further rollups (an SLO's) to answer from where they cover the question."""
    dims = [dimension(name) for name in question.by]
    measures = [measure(name) for name in dict.fromkeys(question.measures)]
    if not measures:
        raise QueryError("no measures asked: name at least one, such as count or p95_ttft_ms")
    filters = [(dimension(name), filter_values(name, v)) for name, v in question.filters.items()]
    check_names(dims, measures, question.interval is not None)
    check_spans(question, capabilities)
    found, source = plan(question, dims, filters, measures, capabilities, sources)
    if any(m.counts_below for m in measures):
        found = replace(found, latency_counts="histogram" if found.rollup else "exact")
    thresholds = {column: threshold_ms(column, v) for column, v in question.thresholds.items()}
    unknown = set(question.keep) - {d.name for d in dims}
    if unknown:
        raise QueryError(f"keep names {', '.join(sorted(unknown))}: not a grouped dimension")
    kept = {
        index: filter_values(dim.name, list(question.keep[dim.name]), dim.param_type)
        for index, dim in enumerate(dims)
        if dim.name in question.keep
    }
    check_limit(question.limit)
    if source is not None:
        # An SLO's rollup holds only its scope: filters it implies are dropped.
        filters = [
            (d, v)
            for d, v in filters
            if d.name in source.dimensions and not source.within_scope(d.name, v)
        ]
    composite = source is not None and (len(found.pieces) > 1 or bool(question.spans))
    local = (
        composite
        and source is not None
        and source.request_rows is not None
        and capabilities.materialized_views  # the pieces are stored rollup rows
        and not question.keep
        and question.order_by is None
        and question.limit is None
    )
    listed = _listed(found, source) if local and source is not None else {}
    key = (
        "question",
        database,
        capabilities,
        _source_key(source),
        found.source,
        found.percentiles,
        found.attainment,
        tuple(table for table, _ in found.pieces),
        tuple(question.measures),
        tuple(question.by),
        tuple(question.filters),
        tuple((d.name, len(v)) for d, v in filters),
        question.interval,
        tuple(thresholds),
        question.include_probes,
        question.order_by,
        question.limit,
        tuple((index, len(values)) for index, values in kept.items()),
        tuple(question.checks),
        len(question.spans),
        local,
        tuple(sorted(table for table, starts in listed.items() if starts is not None)),
    )
    parameters = _parameters(question, found, filters, kept, thresholds, composite, listed)

    def sql_path() -> Compiled:
        shape = _SHAPES.get(
            key,
            lambda: _build(question, database, source, found, dims, measures, filters, composite),
        )
        return Compiled(
            None,
            parameters,
            found,
            shape.columns,
            shape.sql_columns,
            shape.histograms,
            (question.order_by, question.limit)
            if question.order_by is not None and shape.sorted_later
            else None,
            statement=shape.statement,
        )

    merged = None
    if local and source is not None:
        merged = _MERGED.get(
            key,
            lambda: _merged_here(
                question, source, found, dims, measures, filters, database, listed
            ),
        )
    if merged is None:  # no rollup, or measures the client cannot merge
        return sql_path()
    # The SQL path stays the fallback of the client merge, for ragged ends too busy to
    # ship request by request: built only then (most questions never need it).
    span = question.interval or timedelta(seconds=question.range.seconds)
    merge = local_merge.LocalMerge(
        columns=merged.columns,
        dimensions=merged.dimensions,
        aggregates=merged.aggregates,
        percentiles=merged.percentiles,
        spans=tuple((s.since_ms, s.until_ms) for s in question.spans),
        interval_ms=int(question.interval.total_seconds() * 1000) if question.interval else None,
        seconds=span.total_seconds(),
    )
    return Compiled(
        None,
        parameters,
        found,
        merge.columns,
        merge=merge,
        fallback=sql_path,
        statement=merged.statement,
    )


def compile_values(
    column: str,
    time_range: TimeRange,
    filters: Mapping[str, FilterValue],
    database: str,
    include_probes: bool = False,
) -> Compiled:
    """SQL of the raw values of one latency column (NULLs left out), for bootstraps."""
    if column not in LATENCY_COLUMNS:
        raise QueryError(f"bad latency column {column!r}: one of {', '.join(LATENCY_COLUMNS)}")
    checked = [(dimension(name), filter_values(name, value)) for name, value in filters.items()]
    with_probes = include_probes or "is_probe" in filters
    key = ("values", column, database, tuple((d.name, len(v)) for d, v in checked), with_probes)

    def build() -> Statement:
        value = trees.alias(trees.call("toFloat64", trees.column(column)), "value")
        select = trees.select([value], trees.table("requests", database))
        prewhere, where = _conditions(checked, with_probes)
        present = exp.Not(this=exp.Is(this=trees.column(column), expression=exp.Null()))
        return Statement.of(_filtered(select, prewhere, trees.and_([where, present])))

    statement = _VALUES.get(key, build)
    parameters = {"since_ms": time_range.since_ms, "until_ms": time_range.until_ms}
    for index, (_, values) in enumerate(checked):
        parameters.update(zip(_filter_names(index, len(values)), values, strict=True))
    plan_of = Plan("requests", "raw values", "none")
    return Compiled(None, parameters, plan_of, ("value",), ("value",), statement=statement)


# -- a shape of question, built once ----------------------------------------------------


@dataclass(frozen=True)
class _Merged:
    """The client merge of a question's pieces (see :func:`_merged_here`)."""

    statement: Statement
    columns: tuple[str, ...]
    dimensions: tuple[str, ...]
    aggregates: tuple[tuple[str, exp.Expr], ...]
    percentiles: tuple[tuple[str, str, float], ...]


@dataclass(frozen=True)
class _Shape:
    statement: Statement
    columns: tuple[str, ...]
    sql_columns: tuple[str, ...]
    histograms: tuple[tuple[str, str, float], ...]
    sorted_later: bool


_ABSENT = object()


class _Cache(Generic[T]):
    """Built shapes by key, forgotten all at once when full (shapes are few)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._found: dict[Hashable, T] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The value kept for ``key``, or what ``build`` makes of it, kept (None too)."""
        found = self._found.get(key, _ABSENT)
        if found is not _ABSENT:
            return cast(T, found)
        value = build()
        with self._lock:
            if len(self._found) >= self._size:
                self._found.clear()
            self._found[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


_SHAPES: _Cache[_Shape] = _Cache(2048)
_MERGED: _Cache[_Merged | None] = _Cache(2048)
"""None for a shape whose measures the client cannot merge."""
_VALUES: _Cache[Statement] = _Cache(256)


def forget_shapes() -> None:
    """Forget every built shape: the next question of each is built anew (for measuring
    what a first question costs)."""
    _SHAPES.clear()
    _MERGED.clear()
    _VALUES.clear()


def _source_key(source: RollupSource | None) -> Hashable:
    """What of ``source`` its SQL depends on (an SLO's tables carry its version)."""
    if source is None:
        return None
    return (
        source.label,
        source.table,
        tuple(sorted((name, tuple(values)) for name, values in source.scope.items())),
        tuple(sorted(source.thresholds.items())),
        source.grains,
        source.totals,
        source.columns,
        source.dimensions,
        source.good,
        source.probes,
        source.raw_by_hour,
        source.request_rows is not None,
    )


def _build(
    question: Question,
    database: str,
    source: RollupSource | None,
    found: Plan,
    dims: list[Dimension],
    measures: list[Measure],
    filters: Filters,
    composite: bool,
) -> _Shape:
    """The tree of a question of this shape, and what reading its answer needs;
    ``composite``: the range is read in pieces (or spans) of ``source``."""
    select: list[exp.Expr] = []
    group: list[tuple[str, exp.Expr]] = []
    spans = _span_lists(len(question.spans))
    if spans is not None:
        select.append(trees.column("span"))
        group.append(("span", trees.column("span")))
    if question.interval is not None:
        step = int(question.interval.total_seconds())
        if step < 1 or step != question.interval.total_seconds():
            raise QueryError(f"bad interval {question.interval}: use whole seconds, at least 1s")
        # toStartOfInterval gives a DateTime, which Arrow would carry as bare seconds.
        select.append(trees.alias(_bucket(step), "time"))
        group.append(("time", trees.column("time")))
    for index, dim in enumerate(dims):
        value = dim.tree
        if dim.name in question.keep:
            # Qualified, since the alias repeats the column's name: ClickHouse would read
            # a bare name as the alias, DuckDB as the column.
            qualified = value.transform(_qualified("src"), copy=False)
            names = _keep_names(index, len(question.keep[dim.name]))
            value = exp.If(
                this=exp.In(
                    this=qualified,
                    expressions=[trees.placeholder(n, dim.param_type) for n in names],
                ),
                true=dialects.copy(qualified),
                false=exp.Literal.string("other"),
            )
            group.append((dim.name, dialects.copy(value)))
        else:
            group.append((dim.name, trees.column(dim.name, quoted=True)))
        select.append(trees.alias(value, dim.name, quoted=True))
    # From a rollup, percentiles are read from the merged latency histograms after the
    # query (see Compiled.histograms): the SQL returns one histogram per latency column.
    in_sql = [m for m in measures if not (found.rollup and m.is_percentile)]
    select += [trees.alias(_measure_tree(m, measures, found), m.name) for m in in_sql]
    histograms = {m.column: f"_hist_{m.column}" for m in measures if m not in in_sql}
    for column, name in histograms.items():
        summed = exp.AnonymousAggFunc(this="sumMap", expressions=[trees.column(f"{column}_hist")])
        select.append(trees.alias(summed, name))
    checks: list[str] = []
    if source is not None:
        for column, limit in question.checks:
            for piece in position_columns(column, limit):
                select.append(trees.expression(piece.merge))
                checks.append(piece.name)
    # A formula's stand-in for the count of good requests ({good_count:UInt64}), and
    # with spans, rates per second of each span's own length.
    good = _replace_placeholder("good_count", _good(source, question.thresholds, found.rollup))
    select = [item.transform(good, copy=False) for item in select]
    if question.spans:
        seconds = _replace_placeholder("seconds", _span_seconds(len(question.spans)))
        select = [item.transform(seconds, copy=False) for item in select]
    with_probes = question.include_probes or "is_probe" in question.filters
    prewhere, where = _conditions(
        filters,
        with_probes or (source is not None and not source.probes),
        prewhere=not composite,  # PREWHERE reads a table, not a union of pieces
    )

    if composite and source is not None:
        used = _used_columns(source.columns, select)
        pieces = _composite(source, found, database, used, spans)
        origin: exp.Expr = pieces.subquery("src", copy=False)
    else:
        origin = trees.table(found.source, database, as_="src")
    query = trees.select(select, origin)
    if spans is not None:
        # Each piece lists the spans of its rows; raw rows from the table list them here.
        listing = trees.column("_spans") if composite else spans
        query.set("joins", [exp.Join(this=trees.alias(listing, "span"), kind="ARRAY")])
    query = _filtered(query, prewhere, where)
    if group:
        query.set("group", exp.Group(expressions=[g for _, g in group]))
    keys = ["span"] * bool(question.spans) + ["time"] * (question.interval is not None)
    keys += [d.name for d in dims]
    columns = tuple(keys + [m.name for m in measures] + checks)
    sql_columns = tuple(keys + [m.name for m in in_sql] + list(histograms.values()) + checks)
    order = _order(question, columns, group)
    later = question.order_by
    sorted_later = later is not None and later.lstrip("-") not in sql_columns
    if sorted_later:
        order = [exp.Ordered(this=dialects.copy(g)) for _, g in group]
    if order:
        query.set("order", exp.Order(expressions=order))
    if question.limit is not None and not sorted_later:
        query.set("limit", exp.Limit(expression=exp.Literal.number(int(question.limit))))
    percentiles = tuple(
        (m.name, histograms[m.column], m.level)
        for m in measures
        if m.column in histograms and m.level is not None
    )
    return _Shape(Statement.of(query), columns, sql_columns, percentiles, sorted_later)


def _parameters(
    question: Question,
    found: Plan,
    filters: Filters,
    kept: Mapping[int, list[Any]],
    thresholds: Mapping[str, float],
    composite: bool,
    listed: Mapping[str, list[int] | None],
) -> dict[str, Any]:
    """Every value a question of this shape binds, by placeholder name."""
    parameters: dict[str, Any] = {
        "since_ms": question.range.since_ms,
        "until_ms": question.range.until_ms,
    }
    if composite:
        # Raw rows of the ends are summarised per minute: the outer range takes their minutes.
        parameters["since_ms"] = question.range.since_ms // 60_000 * 60_000
        parameters["until_ms"] = -(-question.range.until_ms // 60_000) * 60_000
    span = question.interval or timedelta(seconds=question.range.seconds)
    parameters["seconds"] = span.total_seconds()
    for column, limit in thresholds.items():
        parameters[f"limit_{column}"] = limit
    for index, values in kept.items():
        parameters.update(zip(_keep_names(index, len(values)), values, strict=True))
    for index, (_, values) in enumerate(filters):
        parameters.update(zip(_filter_names(index, len(values)), values, strict=True))
    for k, piece in enumerate(question.spans, start=1):
        parameters[f"s{k}_since_ms"] = piece.since_ms
        parameters[f"s{k}_until_ms"] = piece.until_ms
        parameters[f"s{k}_seconds"] = piece.seconds
    for index, (_, piece) in enumerate(found.pieces):
        parameters[f"p{index}_since_ms"] = piece.since_ms
        parameters[f"p{index}_until_ms"] = piece.until_ms
    for table, starts in listed.items():
        if starts is not None:
            parameters[f"buckets_{table}"] = starts
    return parameters


def _keep_names(index: int, count: int) -> list[str]:
    return [f"k{index}_{i}" for i in range(count)]


def _filter_names(index: int, count: int) -> list[str]:
    return [f"f{index}_{i}" for i in range(count)]


# -- the pieces of a question's tree ----------------------------------------------------


def _bucket(step: int) -> exp.Expr:
    """``toDateTime64(toStartOfInterval(ts, INTERVAL step SECOND), 3, 'UTC')``."""
    interval = exp.Interval(this=exp.Literal.string(str(step)), unit=exp.var("SECOND"))
    start = trees.call("toStartOfInterval", trees.column("ts"), interval)
    return trees.call("toDateTime64", start, exp.Literal.number(3), exp.Literal.string("UTC"))


def _qualified(table: str) -> Callable[[exp.Expr], exp.Expr]:
    def qualify(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table:
            return trees.column(node.name, table=table, quoted=node.this.quoted)
        return node

    return qualify


def _replace_placeholder(name: str, by: exp.Expr | None) -> Callable[[exp.Expr], exp.Expr]:
    """A transform putting ``by`` where the placeholder ``name`` stands."""

    def replaced(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Placeholder) and node.name == name:
            if by is None:
                raise QueryError(f"no {name} for this question")  # the plan ruled it out
            return dialects.copy(by)
        return node

    return replaced


def _good(
    source: RollupSource | None, thresholds: Mapping[str, float], rollup: bool
) -> exp.Expr | None:
    """The count of good requests of the rows read: the source's own, or from the
    thresholds (bound as ``limit_<column>``)."""
    if source is not None and source.good is not None:
        sql: str | None = source.good
    else:
        limits = {column: f"{{limit_{column}:Float64}}" for column in thresholds}
        sql = good_count(limits, rollup)
    if sql is None:
        return None
    # Put where a placeholder stood, inside arithmetic: whole, whatever it is.
    found = trees.expression(sql)
    return found if isinstance(found, exp.Func | exp.Column | exp.Paren) else trees.paren(found)


def _measure_tree(m: Measure, measures: list[Measure], found: Plan) -> exp.Expr:
    if not m.is_percentile:
        return m.tree(rollup=found.rollup)
    assert m.level is not None and m.column is not None  # a percentile's
    if found.percentiles in order_statistics.SIDES:
        return order_statistics.order_statistic(m.column, m.level, found.percentiles)
    levels = sorted({x.level for x in measures if x.column == m.column and x.level is not None})
    name = "quantilesExactInclusive" if found.percentiles == "exact" else "quantilesTDigest"
    quantiles = exp.ParameterizedAgg(
        this=name,
        expressions=[exp.Literal.number(level) for level in levels],
        params=[trees.column(m.column)],
    )
    return trees.call("arrayElement", quantiles, exp.Literal.number(levels.index(m.level) + 1))


def _span_lists(count: int) -> exp.Expr | None:
    """The spans a row's ``ts`` falls in: ``[0]`` (the whole range) and each ``k`` whose
    span holds it; None without spans."""
    if not count:
        return None
    found: list[exp.Expr] = [exp.Array(expressions=[exp.Literal.number(0)])]
    for k in range(1, count + 1):
        found.append(
            exp.If(
                this=_within(f"s{k}_since_ms", f"s{k}_until_ms"),
                true=exp.Array(expressions=[exp.Literal.number(k)]),
                false=exp.Array(expressions=[]),
            )
        )
    return exp.ArrayConcat(this=found[0], expressions=found[1:])


def _span_seconds(count: int) -> exp.Expr:
    """A row's span's length in seconds: ``multiIf(span = 1, {s1_seconds}, ..., {seconds})``."""
    arguments: list[exp.Expr] = []
    for k in range(1, count + 1):
        arguments.append(exp.EQ(this=trees.column("span"), expression=exp.Literal.number(k)))
        arguments.append(trees.placeholder(f"s{k}_seconds", "Float64"))
    arguments.append(trees.placeholder("seconds", "Float64"))
    return trees.call("multiIf", *arguments)


def _within(since: str, until: str) -> exp.Expr:
    """``ts`` within the bound moments ``[since, until)``."""
    return trees.and_(
        [
            exp.GTE(this=trees.column("ts"), expression=trees.time_at(since)),
            exp.LT(this=trees.column("ts"), expression=trees.time_at(until)),
        ]
    )


def _conditions(
    filters: Filters, include_probes: bool, prewhere: bool = True
) -> tuple[exp.Expr | None, exp.Expr]:
    """The PREWHERE (or None) and the WHERE of a question (the DuckDB rendering merges
    the two).

    Leaving probes out is the PREWHERE: a one-byte column read first. Left to itself,
    ClickHouse moves the time range there instead, which for ranges that cover whole
    parts costs a pass over the 8-byte timestamps and made the SLA report 9% slower.
    """
    terms = [_within("since_ms", "until_ms")]
    probes = None if include_probes else exp.Not(this=trees.column("is_probe"))
    if not prewhere and probes is not None:
        terms.append(probes)
        probes = None
    terms += _filter_terms(filters)
    return probes, trees.and_(terms)


def _filtered(query: exp.Select, prewhere: exp.Expr | None, where: exp.Expr) -> exp.Select:
    if prewhere is not None:
        query.set("prewhere", exp.PreWhere(this=prewhere))
    query.set("where", exp.Where(this=where))
    return query


def _filter_terms(filters: Filters) -> list[exp.Expr]:
    """A condition per filter, its values bound as parameters."""
    return [
        exp.In(
            this=dim.tree,
            expressions=[
                trees.placeholder(name, dim.param_type)
                for name in _filter_names(index, len(values))
            ],
        )
        for index, (dim, values) in enumerate(filters)
    ]


def _order(
    question: Question, columns: tuple[str, ...], group: list[tuple[str, exp.Expr]]
) -> list[exp.Ordered]:
    if question.order_by is None:
        return [exp.Ordered(this=dialects.copy(g)) for _, g in group]
    name = question.order_by.lstrip("-")
    if name not in columns:
        raise QueryError(
            f"cannot order by {name!r}: not a column of this result ({', '.join(columns)})"
        )
    first = exp.Ordered(
        this=trees.column(name, quoted=True), desc=question.order_by.startswith("-")
    )
    return [first, *(exp.Ordered(this=dialects.copy(g)) for n, g in group if n != name)]


def _used_columns(columns: Sequence[str], items: Sequence[exp.Expr]) -> list[str]:
    """The rollup ``columns`` that any of ``items`` reads, in their order."""
    read = {c.name for item in items for c in item.find_all(exp.Column)}
    return [c for c in columns if c in read]


def _composite(
    source: RollupSource,
    found: Plan,
    database: str,
    used: Sequence[str],
    spans: exp.Expr | None,
) -> exp.Query:
    """The pieces of a range, each from its table or from raw rows, as one row source of
    the ``used`` columns (raw rows cost only the aggregates asked); with ``spans`` (the
    spans a row's ``ts`` falls in), each row lists them in ``_spans``."""
    totals = {table for _, table in source.totals}
    whole = any(table in totals for table, _ in found.pieces)
    listed = ["ts", *([] if whole else source.dimensions), *used]
    # One read per table, of all its pieces: ClickHouse plans each read of a union
    # anew, and planning, not reading, is most of what a rollup's answer costs.
    selects: list[exp.Query] = []
    for table, condition in _piece_conditions(found, source.raw_by_hour).items():
        if table == "requests":
            # A raw row's spans from its own time, not its minute's: a span may start
            # inside a minute.
            keys = [("_spans", dialects.copy(spans))] if spans else []
            rows: exp.Query = source.rows(database, condition, used, keys)
            if whole or spans is not None:
                # In the order of the other reads: a union matches columns by position.
                named = [trees.column(c) for c in [*listed, *["_spans"] * bool(spans)]]
                rows = trees.select(named, rows)
            selects.append(rows)
        else:
            items: list[exp.Expr] = [trees.column(c) for c in listed]
            if spans is not None:
                items.append(trees.alias(dialects.copy(spans), "_spans"))
            read = trees.select(items, trees.table(table, database))
            selects.append(read.where(condition, copy=False))
    return trees.union_all(selects)


def _piece_conditions(
    found: Plan, by_hour: bool, listed: Mapping[str, list[int] | None] | None = None
) -> dict[str, exp.Expr]:
    """Per table of ``found``'s pieces, the condition picking its pieces' rows.

    ``by_hour``: raw rows are keyed by the hour (:attr:`RollupSource.raw_by_hour`).
    ``listed``: tables whose pieces are picked by listing their buckets' starts
    (:func:`_listed`), where there are not too many.
    """
    spans: dict[str, list[int]] = {}
    for index, (table, _) in enumerate(found.pieces):
        spans.setdefault(table, []).append(index)
    conditions: dict[str, exp.Expr] = {}
    for table, indices in spans.items():
        if (listed or {}).get(table) is not None:
            # A row's ``ts`` is its bucket's start, so listing the starts picks what the
            # ranges pick, the primary key still narrows the read, and ClickHouse plans
            # it in about half the time of OR'd ranges (3 ms against 7 for the eight
            # cuts of a report's seconds of totals).
            starts = trees.placeholder(f"buckets_{table}", "Array(Int64)")
            millis = trees.expression("toUnixTimestamp64Milli(ts)")
            conditions[table] = exp.In(this=millis, field=starts)
            continue
        conditions[table] = trees.or_(
            [_piece(index, table == "requests" and by_hour) for index in indices]
        )
    return conditions


def _piece(index: int, by_hour: bool) -> exp.Expr:
    """The condition of piece ``index`` as a range of ``ts``, its ends bound as
    parameters; ``by_hour``: its hours too, for a table keyed by the hour."""
    since, until = f"p{index}_since_ms", f"p{index}_until_ms"
    within = _within(since, until)
    if not by_hour:
        return within
    # `requests` is keyed by the hour, the time itself comes later. Not for a table
    # ordered by time: there these terms only cost planning (3.5 ms of an SLO report's
    # 17 ms read of its ragged ends).
    hour = trees.expression("toStartOfHour(ts)")
    return trees.and_(
        [
            within,
            exp.GTE(this=hour, expression=_hour_of(since)),
            exp.LTE(this=dialects.copy(hour), expression=_hour_of(until)),
        ]
    )


def _hour_of(name: str) -> exp.Expr:
    found = trees.expression("toStartOfHour(ts)")
    found.set("this", trees.time_at(name))
    return found


MAX_LISTED_BUCKETS = 2048
"""The most buckets of a rollup table that a read lists (a week in hours is 168)."""


def _listed(found: Plan, source: RollupSource) -> dict[str, list[int] | None]:
    """Per rollup table read in several pieces, the starts of their buckets (None above
    :data:`MAX_LISTED_BUCKETS`: those pieces are read as ranges)."""
    grains = {table: grain for grain, table in (*source.grains, *source.totals)}
    pieces: dict[str, list[TimeRange]] = {}
    for table, span in found.pieces:
        pieces.setdefault(table, []).append(span)
    listed: dict[str, list[int] | None] = {}
    for table, spans in pieces.items():
        if table not in grains or len(spans) < 2:
            continue
        step = int(grains[table].total_seconds() * 1000)
        starts = [start for span in spans for start in range(span.since_ms, span.until_ms, step)]
        listed[table] = starts if len(starts) <= MAX_LISTED_BUCKETS else None
    return listed


def _merged_here(
    question: Question,
    source: RollupSource,
    found: Plan,
    dims: list[Dimension],
    measures: list[Measure],
    filters: Filters,
    database: str,
    listed: Mapping[str, list[int] | None],
) -> _Merged | None:
    """``question`` as plain reads of its pieces' rollup rows, merged in the client
    (:mod:`warehouse.query.local_merge`); None when a measure cannot be computed there."""
    assert source.request_rows is not None
    good = _good(source, {}, rollup=True)
    aggregates = [
        (
            m.name,
            m.tree(rollup=True).transform(_replace_placeholder("good_count", good), copy=False),
        )
        for m in measures
        if not m.is_percentile
    ]
    checks = [piece for c, limit in question.checks for piece in position_columns(c, limit)]
    aggregates += [(piece.name, trees.expression(piece.merge)) for piece in checks]
    try:
        for _, tree in aggregates:
            local_merge.aggregate(tree)
    except local_merge.Untranslatable:
        return None
    read = {f"{m.column}_hist" for m in measures if m.is_percentile}
    read |= set(_used_columns(source.columns, [tree for _, tree in aggregates]))
    used = [c for c in source.columns if c in read]
    terms = _filter_terms(filters)
    totals = {table for _, table in source.totals}
    grouped = [d.name for d in dims]
    selects: list[exp.Query] = []
    for table, picked in _piece_conditions(found, source.raw_by_hour, listed).items():
        condition = trees.and_([exp.paren(picked), *(dialects.copy(term) for term in terms)])
        if table == "requests":
            rows = source.request_rows(database, condition, used, grouped)
            # One more than the most it merges: enough to know there are too many.
            most = exp.Literal.number(local_merge.MAX_REQUESTS + 1)
            rows.set("limit", exp.Limit(expression=most))
            request = trees.alias(trees.call("toUInt8", exp.Literal.number(1)), "_request")
            selects.append(trees.select([exp.Star(), request], rows))
        else:
            listing = ["ts", *([] if table in totals else grouped), *used]
            items: list[exp.Expr] = [trees.column(c) for c in listing]
            items.append(trees.alias(trees.call("toUInt8", exp.Literal.number(0)), "_request"))
            piece = trees.select(items, trees.table(table, database))
            selects.append(piece.where(condition, copy=False))
    keys = ["span"] * bool(question.spans) + ["time"] * (question.interval is not None)
    return _Merged(
        Statement.of(trees.union_all(selects)),
        columns=(*keys, *grouped, *(m.name for m in measures), *(p.name for p in checks)),
        dimensions=tuple(grouped),
        aggregates=tuple(aggregates),
        percentiles=tuple(
            (m.name, f"{m.column}_hist", m.level) for m in measures if m.level is not None
        ),
    )
