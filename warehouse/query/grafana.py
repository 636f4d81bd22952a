"""The Grafana target of the query builder: a question as SQL for a dashboard panel.

Elsewhere the builder binds every value as a ``{name:Type}`` parameter. A panel's SQL is
written before any value is known: the time range, the bucket and the filters come from
Grafana each time it asks, through the grafana-clickhouse-datasource plugin's macros and
the dashboard's variables (docs/exporters.md). So a panel's question is compiled by the
ordinary builder for a template range, read as a sqlglot tree, and the tree is
transformed, node by node, where the builder bound a value (a placeholder) or bucketed
time (no text is searched or edited):

- the ends of the range and of each piece the planner cut it into become names defined
  in a leading ``WITH``, computed from ``$__fromTime_ms`` and ``$__toTime_ms``;
- a filter ``dim IN (...)`` becomes ``$__conditionalAll(dim IN (${dim}), $dim)``, which
  the plugin drops when the variable is All;
- a threshold becomes its dashboard variable (``${ttft_ms}``);
- the time bucket becomes ``$__timeInterval(ts)``, and a rate's seconds ``$__interval_s``
  (or the range's length for a panel without buckets).

The plan is the builder's own for a range that aligns to no minute (any range a dashboard
shows): where a rollup covers the question, its whole hours and minutes from the rollups
and its ragged ends from raw rows; raw rows where none does. The cuts between the pieces
are SQL of the range's ends, clamped so that a range shorter than an hour (or a minute)
leaves the coarser pieces empty rather than counting a row twice.

A range is ``[from, to)``, as everywhere in this product (the plugin's own
``$__timeFilter`` keeps its end; a row stamped at exactly ``to`` is left out here).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from sqlglot import exp

from warehouse import dialects
from warehouse.aggregates import histogram_quantile_sql
from warehouse.errors import QueryError
from warehouse.query import trees
from warehouse.query.builder import Compiled, Plan, Question, compile_question
from warehouse.query.registry import dimension
from warehouse.query.stats import Arithmetic
from warehouse.query.timerange import TimeRange, ceil_to, floor_to
from warehouse.store.clickhouse import SERVER

__all__ = ["INTERVAL", "SQL", "PanelQuestion", "Rendered", "forget_panels", "render"]

INTERVAL = timedelta(minutes=1)
"""The finest bucket of a panel read from a rollup: its minimum interval in Grafana."""

SQL = Arithmetic(
    sqrt=lambda x: exp.func("sqrt", x),
    hypot=lambda x, y: exp.func("hypot", x, y),
    least=lambda a, b: exp.func("least", exp.convert(a), exp.convert(b)),
    greatest=lambda a, b: exp.func("greatest", exp.convert(a), exp.convert(b)),
)
"""The functions of :mod:`warehouse.query.stats`' formulas, on sqlglot expressions."""

Derived = Callable[[Callable[[str], Any], Callable[[str], Any]], Any]
"""A column computed from a result's columns and the dashboard's numeric variables:
``lambda col, var: (1 - col("attainment")) / (1 - var("slo_target"))``. Written once, it
runs on sqlglot expressions (the panel's SQL) and on polars ones (the Python answer)."""


@dataclass(frozen=True)
class PanelQuestion:
    """What a panel asks, in the builder's names, with Grafana supplying the values."""

    measures: Sequence[str]
    by: Sequence[str] = ()
    filters: Sequence[str] = ()
    """Dimensions filtered by the dashboard variable of the same name (multi-value, All)."""
    fixed: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Filters whose values are part of the panel (``status: ['error']``)."""
    thresholds: Mapping[str, str] = field(default_factory=dict)
    """Latency column -> the dashboard variable holding its limit in ms."""
    timeseries: bool = False
    """One row per ``$__timeInterval`` bucket (a ``time`` column first)."""
    window: timedelta | None = None
    """Ask the last ``window`` before the end of the dashboard's range, not the range."""
    by_variable: str | None = None
    """A dashboard variable naming the dimension to group by (``$group_by``), in place of
    ``by``; every option must be a plain column, and the plan must not depend on it."""
    exact: bool | None = None
    include_probes: bool = False
    order_by: str | None = None
    limit: int | None = None
    derived: Mapping[str, Derived] = field(default_factory=dict)
    """Columns computed from the measures; the panel then shows the keys and these only."""

    def question(
        self, time_range: TimeRange, interval: timedelta, variables: Mapping[str, Any]
    ) -> Question:
        """The same question for the Python API: ``time_range`` is the dashboard's, ``interval``
        Grafana's bucket, ``variables`` the values of the dashboard's variables (a list or
        None, meaning All, for a filter)."""
        if self.window is not None:
            time_range = TimeRange(time_range.until - self.window, time_range.until)
        by = list(self.by)
        if self.by_variable:
            by = [str(variables[self.by_variable])]
        filters: dict[str, Any] = {k: list(v) for k, v in self.fixed.items()}
        for name in self.filters:
            if variables.get(name) is not None:
                filters[name] = list(variables[name])
        return Question(
            measures=list(self.measures),
            range=time_range,
            by=by,
            filters=filters,
            interval=interval if self.timeseries else None,
            thresholds={c: float(variables[v]) for c, v in self.thresholds.items()},
            exact=self.exact,
            include_probes=self.include_probes,
            order_by=self.order_by,
            limit=self.limit,
        )

    def finish(self, frame: pl.DataFrame, variables: Mapping[str, Any]) -> pl.DataFrame:
        """A Python answer to :meth:`question` as the panel shows it (its derived columns)."""
        if not self.derived:
            return frame
        keys = [c for c in frame.columns if c == "time" or c not in self.measures]
        numbers = {name: float(value) for name, value in variables.items() if _number(value)}
        columns = [
            formula(pl.col, numbers.__getitem__).alias(name)
            for name, formula in self.derived.items()
        ]
        return frame.select(*keys, *columns)


@dataclass(frozen=True)
class Rendered:
    """A panel's SQL and the plan the builder chose for it."""

    sql: str
    plan: Plan


# -- the range's ends and cuts ----------------------------------------------------------

_FROM = datetime(2001, 1, 1, 0, 0, 30, 500000, tzinfo=UTC)
_TO = datetime(2001, 1, 1, 3, 10, 30, 500000, tzinfo=UTC)
"""The template range: whole hours, whole minutes and ragged ends, every cut distinct."""

_MINUTE, _HOUR = timedelta(minutes=1), timedelta(hours=1)
_MINUTE_MS, _HOUR_MS = 60_000, 3_600_000


def _moments(
    since: datetime, until: datetime, window: timedelta | None
) -> list[tuple[str, datetime, exp.Expr]]:
    """(name, template value, its SQL in ms) of every moment a plan of the template range
    can cut at, each referring only to those before it. ``least`` and ``greatest`` keep
    the cuts in order for a range too short for a whole minute or hour; the template
    values are clamped alike. The trees are shared: copy one to use it."""
    minutes_from = min(ceil_to(since, _MINUTE), until)
    minutes_to = max(floor_to(until, _MINUTE), minutes_from)
    hours_from = min(ceil_to(since, _HOUR), minutes_to)
    values = [
        until,
        since,
        floor_to(since, _MINUTE),
        ceil_to(until, _MINUTE),
        minutes_from,
        minutes_to,
        hours_from,
        max(floor_to(until, _HOUR), hours_from),
    ]
    window_ms = None if window is None else int(window.total_seconds() * 1000)
    return [
        (name, value, tree)
        for (name, tree), value in zip(_moment_trees(window_ms), values, strict=True)
    ]


@functools.lru_cache(maxsize=16)
def _moment_trees(window_ms: int | None) -> tuple[tuple[str, exp.Expr], ...]:
    """The SQL of each moment :func:`_moments` names, in its order: the range's start is
    Grafana's, or ``window_ms`` before its end."""

    def floor(ms: exp.Expr, step: int) -> exp.Expr:
        return exp.func("intDiv", ms, exp.Literal.number(step)) * step

    def ceil(ms: str, step: int) -> exp.Expr:
        return floor(exp.column(ms) + (step - 1), step)

    to_ms = exp.func("toUnixTimestamp64Milli", exp.var("$__toTime_ms"))
    since_ms: exp.Expr = exp.func("toUnixTimestamp64Milli", exp.var("$__fromTime_ms"))
    if window_ms is not None:
        since_ms = exp.column("to_ms") - window_ms
    return (
        ("to_ms", to_ms),
        ("from_ms", since_ms),
        ("from_minute_ms", floor(exp.column("from_ms"), _MINUTE_MS)),
        ("to_minute_ms", ceil("to_ms", _MINUTE_MS)),
        ("minutes_from_ms", exp.func("least", ceil("from_ms", _MINUTE_MS), exp.column("to_ms"))),
        (
            "minutes_to_ms",
            exp.func(
                "greatest", floor(exp.column("to_ms"), _MINUTE_MS), exp.column("minutes_from_ms")
            ),
        ),
        (
            "hours_from_ms",
            exp.func("least", ceil("from_ms", _HOUR_MS), exp.column("minutes_to_ms")),
        ),
        (
            "hours_to_ms",
            exp.func("greatest", floor(exp.column("to_ms"), _HOUR_MS), exp.column("hours_from_ms")),
        ),
    )


class _Ambiguous(Exception):
    """Two cuts of the template fall on one moment: which one a piece ends at is unknown."""


# -- rendering --------------------------------------------------------------------------

_DATABASE = "grafana_default_database"
"""Compiled with this database, then unqualified: the datasource's default database
(``defaultDatabase``) picks it."""

_FILTER_MARK = "grafana variable "


def render(question: PanelQuestion) -> Rendered:
    """The panel SQL of ``question`` for grafana-clickhouse-datasource (v4).

    A panel binds no values (Grafana supplies them): its SQL is rendered once per
    panel question, as the builder renders a question once per shape."""
    key = _key(question)
    found = _RENDERED.get(key)
    if found is None:
        if len(_RENDERED) >= 512:
            _RENDERED.clear()
        found = _RENDERED[key] = _rendered(question)
    return found


_RENDERED: dict[tuple[Hashable, ...], Rendered] = {}


def forget_panels() -> None:
    """Forget every rendered panel (for measuring what a first rendering costs)."""
    _RENDERED.clear()


def _key(question: PanelQuestion) -> tuple[Hashable, ...]:
    """Everything of ``question`` its SQL depends on, hashable."""
    return (
        tuple(question.measures),
        tuple(question.by),
        tuple(question.filters),
        tuple(sorted((k, tuple(v)) for k, v in question.fixed.items())),
        tuple(sorted(question.thresholds.items())),
        question.timeseries,
        question.window,
        question.by_variable,
        question.exact,
        question.include_probes,
        question.order_by,
        question.limit,
        tuple(question.derived.items()),  # the formulas themselves, by identity
    )


def _rendered(question: PanelQuestion) -> Rendered:
    # A window's template range ends where its cuts are distinct (or where the plan
    # needs none of those that meet): tried minute by minute.
    for shift in range(60 if question.window is not None else 1):
        until = _TO + shift * _MINUTE
        since = _FROM if question.window is None else until - question.window
        try:
            return _render(question, since, until)
        except _Ambiguous:
            continue
    raise QueryError(f"cannot write the cuts of a {question.window} window for Grafana")


def _render(question: PanelQuestion, since: datetime, until: datetime) -> Rendered:
    by = list(question.by)
    if question.by_variable:
        if by:
            raise QueryError("a panel groups by its variable or by names, not both")
        by = ["model"]  # a stand-in: the plan is checked not to depend on it
    filters: dict[str, Any] = {k: list(v) for k, v in question.fixed.items()}
    for name in question.filters:
        found = dimension(name)
        if found.param_type != "String" or not isinstance(found.value, exp.Column):
            raise QueryError(f"a dashboard variable filters plain text columns only, not {name}")
        filters[name] = [_FILTER_MARK + name]
    asked = Question(
        measures=list(question.measures),
        range=TimeRange(since, until),
        by=by,
        filters=filters,
        interval=INTERVAL if question.timeseries else None,
        thresholds={column: 1.0 for column in question.thresholds},
        exact=question.exact,
        include_probes=question.include_probes,
        order_by=question.order_by,
        limit=question.limit,
    )
    compiled = compile_question(asked, SERVER, _DATABASE)
    if question.by_variable and compiled.plan.rollup:
        raise QueryError("a panel grouped by a variable must read raw rows: its plan would vary")
    moments = _moments(since, until, question.window)
    cuts = _cuts(compiled.parameters, moments)  # before any tree work: it may be ambiguous
    tree = _percentiles_in_sql(compiled, dialects.copy(compiled.tree))  # the builder's is shared
    # Every node change in one pass over the tree: each pass costs as much as a copy.
    steps: list[Callable[[exp.Expr], exp.Expr]] = [_unqualified]
    if question.timeseries:
        bucket, buckets = _bucket()
        steps.append(bucket)
    if question.by_variable:
        steps.append(_grouped_by(f"${{{question.by_variable}}}"))
    bind, defined = _binding(question, compiled, cuts, moments)
    steps.append(bind)

    def changed(node: exp.Expr) -> exp.Expr:
        for step in steps:
            node = step(node)
        return node

    query = _query(tree.transform(changed, copy=False))
    if question.timeseries and len(buckets) != 1:
        raise QueryError(f"a time series panel needs one time bucket, found {len(buckets)}")
    if compiled.sort_after is not None:  # sorted by a percentile: now in the SQL
        order_by, limit = compiled.sort_after
        column = exp.column(order_by.lstrip("-"), quoted=True)
        query = (
            exp.select("*")
            .from_(query.subquery(copy=False), copy=False)
            .order_by(exp.Ordered(this=column, desc=order_by.startswith("-")), copy=False)
        )
        query = query.limit(int(limit), copy=False) if limit is not None else query
    if question.derived:
        query = _with_derived(question, compiled, query)
    for name, value in defined():
        query = query.with_(name, as_=dialects.copy(value), scalar=True, copy=False)
    # The query is this call's own: rendered without the copy sqlglot makes by default.
    return Rendered(query.sql(dialect=dialects.WarehouseClickHouse, copy=False), compiled.plan)


def _query(tree: exp.Expr) -> exp.Query:
    if not isinstance(tree, exp.Query):
        raise QueryError(f"the builder's SQL is not a query: {type(tree).__name__}")
    return tree


def _unqualified(node: exp.Expr) -> exp.Expr:
    """Tables of the stand-in database without it: the datasource's default picks one."""
    if isinstance(node, exp.Table) and node.args.get("db") and node.db == _DATABASE:
        node.set("db", None)
    return node


def _bucket() -> tuple[Callable[[exp.Expr], exp.Expr], list[exp.Expr]]:
    """The builder's time bucket as ``$__timeInterval(ts)``, Grafana's interval; and the
    buckets replaced (a time series has one)."""
    found: list[exp.Expr] = []

    def bucket(node: exp.Expr) -> exp.Expr:
        inner = node.expressions[0] if isinstance(node, exp.Anonymous) else None
        if (
            node.name == "toDateTime64"
            and isinstance(inner, exp.Anonymous)
            and inner.name == "toStartOfInterval"
        ):
            found.append(node)
            return exp.Anonymous(this="$__timeInterval", expressions=[inner.expressions[0]])
        return node

    return bucket, found


def _grouped_by(variable: str) -> Callable[[exp.Expr], exp.Expr]:
    """The stand-in ``model`` grouped as the dashboard variable naming the dimension: its
    value the variable, its column (and what refers to it by name) the variable's name."""

    def grouped(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Alias) and node.alias == "model":
            return exp.alias_(exp.var(variable), variable, quoted=True)
        if isinstance(node, exp.Column) and node.name == "model" and node.this.quoted:
            return exp.column(variable, quoted=True)
        return node

    return grouped


def _percentiles_in_sql(compiled: Compiled, tree: exp.Expr) -> exp.Expr:
    """A rollup's percentiles in the SQL: the Python API reads them from the merged
    histograms after the query, a panel cannot."""
    by_alias: dict[str, list[exp.Expr]] = {}
    for name, alias, level in compiled.histograms:
        column = alias.removeprefix("_hist_")
        quantile = _histogram_quantile(column, level)
        by_alias.setdefault(alias, []).append(trees.alias(dialects.copy(quantile), name))
    if not by_alias:
        return tree
    for select in tree.find_all(exp.Select):
        listed = [item.alias_or_name for item in select.expressions]
        if set(by_alias) <= set(listed):
            select.set(
                "expressions",
                [
                    new
                    for item in select.expressions
                    for new in by_alias.get(item.alias_or_name, [item])
                ],
            )
            return tree
    raise QueryError(f"no histograms {', '.join(by_alias)} in the question's SQL")


def _cuts(
    parameters: Mapping[str, Any], moments: list[tuple[str, datetime, exp.Expr]]
) -> dict[str, str]:
    """The moment each bound end of the range or of a piece is, by parameter name."""
    by_value: dict[int, list[str]] = {}
    for name, value, _ in moments:
        by_value.setdefault(int(value.timestamp() * 1000), []).append(name)
    cuts = {}
    for name, value in parameters.items():
        if name.endswith(("since_ms", "until_ms")):
            names = by_value.get(value, [])
            if len(names) != 1:
                raise _Ambiguous(name) if names else QueryError(f"no cut for {name}")
            cuts[name] = names[0]
    return cuts


@functools.lru_cache(maxsize=64)
def _histogram_quantile(column: str, level: float) -> exp.Expr:
    return dialects.parse(histogram_quantile_sql(column, repr(level)))


def _binding(
    question: PanelQuestion,
    compiled: Compiled,
    cuts: Mapping[str, str],
    moments: list[tuple[str, datetime, exp.Expr]],
) -> tuple[Callable[[exp.Expr], exp.Expr], Callable[[], list[tuple[str, exp.Expr]]]]:
    """A node with its bound value replaced; and, once every node is, the ``WITH``
    names the replaced ones need."""
    parameters = compiled.parameters
    used: set[str] = set()
    variables = {_FILTER_MARK + name: name for name in question.filters}

    def bound(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.In) and len(node.expressions) == 1:
            [only] = node.expressions
            value = parameters.get(only.name) if _is_placeholder(only) else None
            variable = variables.get(value) if isinstance(value, str) else None
            if variable is not None:
                listed = exp.In(this=node.this, expressions=[exp.var(f"${{{variable}}}")])
                return exp.Anonymous(
                    this="$__conditionalAll", expressions=[listed, exp.var(f"${variable}")]
                )
        if not _is_placeholder(node):
            return node
        name = node.name
        value = parameters[name]
        if name in cuts:
            used.add(cuts[name])
            return exp.column(cuts[name])
        if name.startswith("limit_"):
            return exp.var(f"${{{question.thresholds[name.removeprefix('limit_')]}}}")
        if name == "seconds":
            if question.timeseries:
                return exp.var("$__interval_s")
            used.update(("from_ms", "to_ms"))
            return trees.paren((exp.column("to_ms") - exp.column("from_ms")) / 1000)
        if isinstance(value, str) and not value.startswith(_FILTER_MARK):
            return exp.Literal.string(value)
        raise QueryError(f"cannot write the bound value {name} for Grafana")

    def defined() -> list[tuple[str, exp.Expr]]:
        # Each moment refers to earlier ones only: define those a used one needs too.
        needed = set(used)
        for name, _, moment in reversed(moments):
            if name in needed:
                needed.update(column.name for column in moment.find_all(exp.Column))
        return [(name, moment) for name, _, moment in moments if name in needed]

    return bound, defined


def _is_placeholder(node: exp.Expr) -> bool:
    return isinstance(node, exp.Placeholder) and node.args.get("kind") is not None


def _with_derived(question: PanelQuestion, compiled: Compiled, tree: exp.Query) -> exp.Select:
    """The panel's keys and derived columns over the builder's answer, in its order."""
    keys = [c for c in compiled.columns if c not in question.measures]
    if question.by_variable:
        keys = [f"${{{question.by_variable}}}" if c == "model" else c for c in keys]
    columns = [
        exp.alias_(formula(exp.column, lambda name: exp.var(f"${name}")), name, quoted=True)
        for name, formula in question.derived.items()
    ]
    derived = exp.select(*(exp.column(k, quoted=True) for k in keys), *columns).from_(
        tree.subquery(copy=False), copy=False
    )
    return derived.order_by("time", copy=False) if question.timeseries else derived


def _number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
