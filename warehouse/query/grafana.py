"""The Grafana target of the query builder: a question as SQL for a dashboard panel.

Elsewhere the builder binds every value as a ``{name:Type}`` parameter. A panel's SQL is
written before any value is known: the time range, the bucket and the filters come from
Grafana each time it asks, through the grafana-clickhouse-datasource plugin's macros and
the dashboard's variables (docs/grafana.md). So a panel's question is compiled by the
ordinary builder for a template range, and the values it bound are then replaced:

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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from sqlglot import exp

from warehouse.errors import QueryError
from warehouse.query.builder import Compiled, Plan, Question, compile_question
from warehouse.query.registry import dimension, histogram_quantile_sql
from warehouse.query.stats import Arithmetic
from warehouse.query.timerange import TimeRange, ceil_to, floor_to
from warehouse.store.base import quote_string
from warehouse.store.clickhouse import SERVER

__all__ = ["INTERVAL", "SQL", "PanelQuestion", "Rendered", "render"]

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


def _moments(since: datetime, until: datetime, since_sql: str) -> list[tuple[str, datetime, str]]:
    """(name, template value, SQL in ms) of every moment a plan of the template range can
    cut at, each referring only to those before it. ``least`` and ``greatest`` keep the
    cuts in order for a range too short for a whole minute or hour; the template values
    are clamped alike."""
    minutes_from = min(ceil_to(since, _MINUTE), until)
    minutes_to = max(floor_to(until, _MINUTE), minutes_from)
    hours_from = min(ceil_to(since, _HOUR), minutes_to)
    minute, hour = _MINUTE_MS, _HOUR_MS
    return [
        ("to_ms", until, "toUnixTimestamp64Milli($__toTime_ms)"),
        ("from_ms", since, since_sql),
        ("from_minute_ms", floor_to(since, _MINUTE), f"intDiv(from_ms, {minute}) * {minute}"),
        (
            "to_minute_ms",
            ceil_to(until, _MINUTE),
            f"intDiv(to_ms + {minute - 1}, {minute}) * {minute}",
        ),
        (
            "minutes_from_ms",
            minutes_from,
            f"least(intDiv(from_ms + {minute - 1}, {minute}) * {minute}, to_ms)",
        ),
        (
            "minutes_to_ms",
            minutes_to,
            f"greatest(intDiv(to_ms, {minute}) * {minute}, minutes_from_ms)",
        ),
        (
            "hours_from_ms",
            hours_from,
            f"least(intDiv(from_ms + {hour - 1}, {hour}) * {hour}, minutes_to_ms)",
        ),
        (
            "hours_to_ms",
            max(floor_to(until, _HOUR), hours_from),
            f"greatest(intDiv(to_ms, {hour}) * {hour}, hours_from_ms)",
        ),
    ]


class _Ambiguous(Exception):
    """Two cuts of the template fall on one moment: which one a piece ends at is unknown."""


# -- rendering --------------------------------------------------------------------------

_DATABASE = "grafana_default_database"
"""Compiled with this database, then unqualified: the datasource's default database
(``defaultDatabase``) picks it."""

_PLACEHOLDER = re.compile(r"\{(\w+):(\w+)\}")
_BUCKET = re.compile(r"toDateTime64\(toStartOfInterval\(ts, INTERVAL \d+ SECOND\), 3, 'UTC'\)")
_FILTER_MARK = "grafana variable "


def render(question: PanelQuestion) -> Rendered:
    """The panel SQL of ``question`` for grafana-clickhouse-datasource (v4)."""
    # A window's template range ends where its cuts are distinct (or where the plan
    # needs none of those that meet): tried minute by minute.
    for shift in range(60 if question.window is not None else 1):
        until = _TO + shift * _MINUTE
        since, since_sql = _FROM, "toUnixTimestamp64Milli($__fromTime_ms)"
        if question.window is not None:
            since = until - question.window
            since_sql = f"to_ms - {int(question.window.total_seconds() * 1000)}"
        try:
            return _render(question, since, until, since_sql)
        except _Ambiguous:
            continue
    raise QueryError(f"cannot write the cuts of a {question.window} window for Grafana")


def _render(question: PanelQuestion, since: datetime, until: datetime, since_sql: str) -> Rendered:
    by = list(question.by)
    if question.by_variable:
        if by:
            raise QueryError("a panel groups by its variable or by names, not both")
        by = ["model"]  # a stand-in: the plan is checked not to depend on it
    filters: dict[str, Any] = {k: list(v) for k, v in question.fixed.items()}
    for name in question.filters:
        if dimension(name).param_type != "String" or dimension(name).sql != name:
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
    sql = compiled.sql.replace(f'"{_DATABASE}".', "")
    sql = _percentiles_in_sql(compiled, sql)
    if compiled.sort_after is not None:  # sorted by a percentile: now in the SQL
        order_by, limit = compiled.sort_after
        direction = "DESC" if order_by.startswith("-") else "ASC"
        sql = f'SELECT * FROM ({sql}) ORDER BY "{order_by.lstrip("-")}" {direction}'
        sql += f" LIMIT {int(limit)}" if limit is not None else ""
    if question.timeseries:
        sql, found = _BUCKET.subn("$__timeInterval(ts)", sql)
        _expect(found == 1, "the time bucket")
    if question.by_variable:
        variable = f"${{{question.by_variable}}}"
        sql = sql.replace('model AS "model"', f'{variable} AS "{variable}"')
        sql = sql.replace('"model"', f'"{variable}"')
    sql, defined = _bind(question, compiled, sql, _moments(since, until, since_sql))
    if question.derived:
        sql = _with_derived(question, compiled, sql)
    if defined:
        sql = "WITH " + ",\n  ".join(f"{value} AS {name}" for name, value in defined) + "\n" + sql
    return Rendered(sql, compiled.plan)


def _expect(found: bool, what: str) -> None:
    if not found:
        raise QueryError(f"the builder's SQL changed: {what} is not where the Grafana target looks")


def _percentiles_in_sql(compiled: Compiled, sql: str) -> str:
    """A rollup's percentiles in the SQL: the Python API reads them from the merged
    histograms after the query, a panel cannot."""
    by_column: dict[str, list[str]] = {}
    for name, alias, level in compiled.histograms:
        column = alias.removeprefix("_hist_")
        by_column.setdefault(column, []).append(
            f"{histogram_quantile_sql(column, repr(level))} AS {name}"
        )
    for column, items in by_column.items():
        merged = f"sumMap({column}_hist) AS _hist_{column}"
        _expect(merged in sql, f"the histogram of {column}")
        sql = sql.replace(merged, ", ".join(items))
    return sql


def _bind(
    question: PanelQuestion,
    compiled: Compiled,
    sql: str,
    moments: list[tuple[str, datetime, str]],
) -> tuple[str, list[tuple[str, str]]]:
    """``sql`` with every bound value replaced, and the ``WITH`` names it then needs."""
    parameters = compiled.parameters
    by_value: dict[int, list[str]] = {}
    for name, value, _ in moments:
        by_value.setdefault(int(value.timestamp() * 1000), []).append(name)
    used: set[str] = set()

    def bound(match: re.Match[str]) -> str:
        name = match[1]
        value = parameters[name]
        if name.endswith(("since_ms", "until_ms")):
            names = by_value.get(value, [])
            if len(names) != 1:
                raise _Ambiguous(name) if names else QueryError(f"no cut for {name}")
            used.add(names[0])
            return names[0]
        if name.startswith("limit_"):
            return f"${{{question.thresholds[name.removeprefix('limit_')]}}}"
        if name == "seconds":
            if question.timeseries:
                return "$__interval_s"
            used.update(("from_ms", "to_ms"))
            return "((to_ms - from_ms) / 1000)"
        if isinstance(value, str) and not value.startswith(_FILTER_MARK):
            return quote_string(value)
        raise QueryError(f"cannot write the bound value {name} for Grafana")

    for name in question.filters:
        placeholder = next(key for key, value in parameters.items() if value == _FILTER_MARK + name)
        condition = f"{name} IN ({{{placeholder}:String}})"
        _expect(sql.count(condition) == 1, f"the filter of {name}")
        sql = sql.replace(condition, f"$__conditionalAll({name} IN (${{{name}}}), ${name})")
    sql = _PLACEHOLDER.sub(bound, sql)
    # Each moment refers to earlier ones only: define those a used one needs too.
    needed = set(used)
    for name, _, text in reversed(moments):
        if name in needed:
            needed.update(re.findall(r"\b\w+_ms\b", text))
    return sql, [(name, text) for name, _, text in moments if name in needed]


def _with_derived(question: PanelQuestion, compiled: Compiled, sql: str) -> str:
    """The panel's keys and derived columns over the builder's answer, in its order."""
    keys = [c for c in compiled.columns if c not in question.measures]
    if question.by_variable:
        keys = [f"${{{question.by_variable}}}" if c == "model" else c for c in keys]
    columns = [
        formula(exp.column, lambda name: exp.var(f"${name}")).sql("clickhouse") + f' AS "{name}"'
        for name, formula in question.derived.items()
    ]
    listed = ", ".join([*(f'"{k}"' for k in keys), *columns])
    order = " ORDER BY time" if question.timeseries else ""
    return f"SELECT {listed} FROM ({sql}){order}"


def _number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
