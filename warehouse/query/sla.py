"""Evaluating an SLO: objectives, attainment, window compliance, budget and burn rates.

For each group of the ``by`` dimensions, over ``[since, until)``:

- each objective's measure over the whole range, and whether it holds (``<measure>_ok``);
- ``attainment`` (share of valid requests that are good: ok and within every per-request
  threshold) and ``goodput_rps`` (good requests per second);
- ``compliance``: the share of the SLO's windows (5 min by default) with traffic in which
  every objective holds, and ``windows``, how many windows had traffic; a window in
  which a measure has no value (no TPOT in it, say) does not count against it;
- ``score``: the objectives' window compliance averaged with the SLO's weights (null,
  as ``compliance`` is, when no window had traffic);
- ``budget_remaining``: ``1 - (1 - attainment) / (1 - target)`` over the range, below 0
  once the budget is spent;
- ``burn_rate_<w>`` for each burn window, ending at ``until``: ``(1 - attainment over the
  window) / (1 - target)``; 1 spends the budget exactly over the SLO period.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import reduce
from typing import Any, TypedDict

import numpy as np
import polars as pl

from warehouse.aggregates import check_prefix, position_columns
from warehouse.errors import QueryError
from warehouse.query import slo_apply
from warehouse.query.builder import (
    Compiled,
    FilterValue,
    Question,
    RollupSource,
    compile_question,
)
from warehouse.query.registry import dimension, measure
from warehouse.query.result import Result
from warehouse.query.run import execute, execute_all, submit
from warehouse.query.slo import OPERATORS, SLO, Objective
from warehouse.query.slo_rollup import SloRollup, percentile_verdicts
from warehouse.query.timerange import TimeRange, ceil_to, parse_duration
from warehouse.store.base import Store

__all__ = [
    "WORKBOOK_ALERTS",
    "BurnAlert",
    "alert_rates",
    "budget_remaining",
    "burn_rate",
    "evaluate",
    "firing",
    "held",
    "scoped_filters",
    "with_alert_windows",
]


def burn_rate(attainment: Any, budget: Any) -> Any:
    """``(1 - attainment) / budget``: 1 spends the error budget exactly over the SLO period.

    Plain arithmetic, so the one definition runs on numbers, on polars expressions (the
    report) and on sqlglot expressions (the dashboards' SQL).
    """
    return (1 - attainment) / budget


def budget_remaining(attainment: Any, budget: Any) -> Any:
    """``1 - burn_rate``: the share of the error budget left, below 0 once spent."""
    return 1 - burn_rate(attainment, budget)


@dataclass(frozen=True)
class BurnAlert:
    """A multiwindow burn-rate alert: it fires when the burn rate over ``long`` and over
    ``short`` both exceed ``rate`` (the short window lets it stop soon after the burning
    does)."""

    name: str
    """How fast it burns, for an alert's name: ``fast``, ``steady``, ``slow``."""
    severity: str
    """``page`` or ``ticket``."""
    rate: float
    long: str
    short: str

    def share(self, period: timedelta) -> float:
        """The share of a ``period``'s budget that burns in ``long`` at ``rate``."""
        return self.rate * (parse_duration(self.long) / period)

    def fires(self, rates: Mapping[str, float | None]) -> bool:
        """Whether it fires on ``rates``, burn rates by window label (``"1h"``); a
        window without a rate (no request in it) does not fire."""
        long, short = rates.get(self.long), rates.get(self.short)
        return long is not None and short is not None and long > self.rate and short > self.rate


WORKBOOK_ALERTS = (
    BurnAlert("fast", "page", 14.4, "1h", "5m"),
    BurnAlert("steady", "page", 6.0, "6h", "30m"),
    BurnAlert("slow", "ticket", 1.0, "3d", "6h"),
)
"""The SRE workbook's recommended multiwindow, multi-burn-rate alerts ("Alerting on
SLOs"), most severe first: 2% of a 30-day budget spent in an hour pages, 5% in six hours
pages, 10% in three days opens a ticket. The overview, the report and the exporter's
Prometheus rules all read these."""


def firing(
    rates: Mapping[str, float | None], alerts: Sequence[BurnAlert] = WORKBOOK_ALERTS
) -> BurnAlert | None:
    """The first of ``alerts`` (most severe first) that fires on ``rates``, or None."""
    return next((alert for alert in alerts if alert.fires(rates)), None)


def alert_rates(
    row: Mapping[str, Any], slo: SLO, alerts: Sequence[BurnAlert] = WORKBOOK_ALERTS
) -> dict[str, float | None]:
    """The burn rates the ``alerts`` read, by their window labels, from a row of
    :func:`evaluate` of :func:`with_alert_windows` (``slo``): a window the SLO already
    had under another label (``60m`` for ``1h``) is read from its column."""
    columns = {length: f"burn_rate_{label}" for label, length in slo.burn_windows}
    labels = dict.fromkeys(label for alert in alerts for label in (alert.long, alert.short))
    return {
        label: row.get(columns.get(parse_duration(label), f"burn_rate_{label}")) for label in labels
    }


def with_alert_windows(slo: SLO, alerts: Sequence[BurnAlert] = WORKBOOK_ALERTS) -> SLO:
    """``slo`` with the alerts' windows among its burn windows, so that :func:`evaluate`
    over its period gives ``burn_rate_<w>`` for each (``burn_rate_1h``, ...). Windows
    longer than its period are left out: they would be cut to the period anyway."""
    windows = dict(slo.burn_windows)
    lengths = set(windows.values())
    for alert in alerts:
        for label in (alert.long, alert.short):
            length = parse_duration(label)
            if label not in windows and length not in lengths and length <= slo.period:
                windows[label] = length
                lengths.add(length)
    ordered = tuple(sorted(windows.items(), key=lambda item: item[1]))
    return replace(slo, burn_windows=ordered)


def evaluate(
    store: Store,
    slo: SLO,
    time_range: TimeRange,
    by: Sequence[str] = (),
    filters: Mapping[str, FilterValue] | None = None,
    exact: bool | None = None,
) -> Result:
    """One row per group with the SLO's figures (see the module docstring).

    ``exact`` is passed to every question: True for exact figures from raw rows.
    """
    if exact is True:
        return _evaluated(store, slo, None, time_range, by, filters, exact)
    known = slo_apply.found_before(store, slo) if store.capabilities.concurrent_reads else None
    if known is None:
        return _evaluated(store, slo, slo_apply.find(store, slo), time_range, by, filters, exact)
    # Complete when last looked at: whether it still is, is asked beside the questions
    # rather than before them (a round trip saved), and they are asked again of raw rows
    # if it is not (a rebuild began, or the rollup was dropped).
    still = submit(slo_apply.still_complete, store, known)
    try:
        result = _evaluated(store, slo, known, time_range, by, filters, exact)
    except Exception:
        if still.result():
            raise
    else:
        if still.result():
            return result
    return _evaluated(store, slo, None, time_range, by, filters, exact)


class _Common(TypedDict):
    """What every question of an evaluation shares."""

    by: Sequence[str]
    filters: Mapping[str, FilterValue]
    thresholds: Mapping[str, float]
    exact: bool | None


def _evaluated(
    store: Store,
    slo: SLO,
    rollup: SloRollup | None,
    time_range: TimeRange,
    by: Sequence[str],
    filters: Mapping[str, FilterValue] | None,
    exact: bool | None,
) -> Result:
    """:func:`evaluate` from ``rollup`` where it answers, else from raw rows."""
    by = list(by)
    keys = [dimension(name).name for name in by]  # result columns: attrs['gpu'] is gpu
    scope = scoped_filters(slo, filters)
    sources = (rollup.source(store.capabilities),) if rollup is not None else ()
    checks = rollup.checks if rollup is not None else ()
    common: _Common = {"by": by, "filters": scope, "thresholds": slo.thresholds, "exact": exact}
    objectives = list(slo.measures)

    def compiled(question: Question, decided: Set[str] = frozenset()) -> Compiled:
        return _compiled(store, question, sources, decided)

    burns = {
        label: TimeRange(max(time_range.until - length, time_range.since), time_range.until)
        for label, length in slo.burn_windows
    }
    # From a rollup, where the store answers spans (ARRAY JOIN), the burn windows and the
    # partial windows at the range's ends are spans of the period's question: one read of
    # the pieces and the raw ends for all of them, and the windows' question reads whole
    # windows only.
    together = bool(sources) and store.capabilities.array_join
    whole: TimeRange | None = time_range
    ragged: list[TimeRange] = []
    if together and objectives:
        whole, ragged = _windows(time_range, slo.window)
    spans = [*burns.values(), *ragged]
    period_question = Question(
        measures=["count", "attainment", "goodput_rps", *objectives],
        range=time_range,
        checks=checks,
        spans=spans if together else (),
        **common,
    )
    # The questions are independent: compiled first, then run together.
    asked = {"period": compiled(period_question)}
    if objectives and whole is not None:
        windows = Question(
            measures=["count", *objectives],
            range=whole,
            interval=slo.window,
            checks=checks,
            **common,
        )
        asked["windows"] = compiled(windows, _decided(slo, checks))
    for label, window in burns.items():
        if not together:
            asked[f"burn {label}"] = compiled(
                Question(measures=["attainment"], range=window, **common)
            )
    started = time.perf_counter()
    answers = dict(zip(asked, execute_all(store, list(asked.values())), strict=True))
    elapsed = (time.perf_counter() - started) * 1000

    period = answers["period"]
    frame = pl.DataFrame(period)
    cut: list[pl.DataFrame] = []
    if together and spans:
        by_span = frame.partition_by("span", as_dict=True, include_key=False)
        empty = frame.clear().drop("span")
        frame, *cut = (by_span.get((k,), empty) for k in range(len(spans) + 1))
        if not by and frame.height == 0:  # no request at all: the one row of nothing
            alone = replace(period_question, spans=())
            frame = pl.DataFrame(execute(store, compiled(alone)))
    holds, known = _verdicts(frame, slo.objectives)
    frame = frame.with_columns(
        _nulled(pl.Series(name, holds[:, i]), ~known[:, i]) for i, name in enumerate(_ok_names(slo))
    )
    frame = _without_checks(frame, checks)
    if objectives:
        in_windows = [pl.DataFrame(answers["windows"])] if "windows" in answers else []
        in_windows += cut[len(burns) :]
        frame = _join(frame, _compliance(slo, in_windows, keys), keys)
    budget = slo.error_budget
    remaining = budget_remaining(pl.col("attainment"), budget)
    frame = frame.with_columns(remaining.alias("budget_remaining"))
    for k, label in enumerate(burns):
        burn = cut[k] if together else pl.DataFrame(answers[f"burn {label}"])
        rate = burn.select(
            *keys, burn_rate(pl.col("attainment"), budget).alias(f"burn_rate_{label}")
        )
        frame = _join(frame, rate, keys)
    parts = {name: answer.plan for name, answer in answers.items()}
    if ragged:
        parts["windows at the ends"] = period.plan
    if together:
        parts.update({f"burn {label}": period.plan for label in burns})
    return Result.of(frame, period.plan, elapsed, parts)


def _windows(time_range: TimeRange, window: timedelta) -> tuple[TimeRange | None, list[TimeRange]]:
    """The range's whole windows (None when there is none) and the partial ones at its
    ends, as the raw answer's time buckets cut them: ``[08:07:37, 09:56:48)`` in 5-minute
    windows is ``[08:10, 09:55)`` and ``[08:07:37, 08:10)``, ``[09:55, 09:56:48)``.

    As :meth:`TimeRange.split`, but a range across one window boundary with no whole
    window in it is two partial windows, not one end: ``[08:07:37, 08:12:30)`` is
    ``[08:07:37, 08:10)`` and ``[08:10, 08:12:30)``, each judged on its own."""
    whole, ends = time_range.split(window)
    boundary = ceil_to(time_range.since, window)
    if whole is None and time_range.since < boundary < time_range.until:
        ends = [TimeRange(time_range.since, boundary), TimeRange(boundary, time_range.until)]
    return whole, ends


def scoped_filters(slo: SLO, filters: Mapping[str, FilterValue] | None) -> dict[str, FilterValue]:
    """The SLO's scope narrowed by the caller's filters (both must hold)."""
    combined: dict[str, FilterValue] = dict(slo.filters())
    for key, value in (filters or {}).items():
        values = [value] if isinstance(value, str | int | bool) else list(value)
        if key in combined:
            scope = combined[key]
            allowed = {str(v) for v in (scope if isinstance(scope, list) else [scope])}
            values = [v for v in values if str(v) in allowed]
            if not values:
                raise QueryError(f"filter {key}: outside the SLO's scope ({', '.join(allowed)})")
        combined[key] = values
    return combined


def _ok_names(slo: SLO) -> list[str]:
    """``<measure>_ok`` for each objective, numbered from the second of one measure on."""
    names: list[str] = []
    for objective in slo.objectives:
        name = f"{objective.measure}_ok"
        suffix = 2
        while name in names:
            name, suffix = f"{objective.measure}_ok_{suffix}", suffix + 1
        names.append(name)
    return names


def _decided(slo: SLO, checks: Sequence[tuple[str, float]]) -> set[str]:
    """Percentile measures every objective of which the position counts decide."""
    decided = set()
    for name in slo.measures:
        m = measure(name)
        limits = [o.value for o in slo.objectives if o.measure == name]
        if m.is_percentile and all((m.column, limit) in checks for limit in limits):
            decided.add(name)
    return decided


def _compiled(
    store: Store, question: Question, sources: Sequence[RollupSource], decided: Set[str]
) -> Compiled:
    """``question`` compiled; from a rollup, without the percentile values that only
    decide objectives (their position counts decide them, and cost no histogram)."""
    if sources and decided:
        lean = replace(question, measures=[m for m in question.measures if m not in decided])
        compiled = compile_question(lean, store.capabilities, store.database, sources)
        if any(compiled.plan.source in source.tables for source in sources):
            return compiled
    return compile_question(question, store.capabilities, store.database, sources)


def held(frame: pl.DataFrame, objective: Objective) -> pl.Series:
    """Whether ``objective`` holds in each row: from the exact position counts of its
    limit where an SLO's rollup returned them, else from the measured value."""
    holds, known = _verdicts(frame, [objective])
    return _nulled(pl.Series(f"{objective.measure}_holds", holds[:, 0]), ~known[:, 0])


def _counted(frame: pl.DataFrame, objective: Objective) -> bool:
    """Whether the position counts of ``objective``'s limit are in ``frame``."""
    m = measure(objective.measure)
    counted = m.is_percentile and m.column is not None
    return counted and f"{check_prefix(m.column or '', objective.value)}_n" in frame.columns


def _verdicts(
    frame: pl.DataFrame, objectives: Sequence[Objective]
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`held` of every objective at once, as two ``rows x objectives`` arrays:
    whether it holds, and whether the row has a value to decide it."""
    holds = np.ones((frame.height, len(objectives)), dtype=bool)
    known = np.ones((frame.height, len(objectives)), dtype=bool)
    compared: dict[int, pl.Expr] = {}
    for i, objective in enumerate(objectives):
        if _counted(frame, objective):
            holds[:, i], known[:, i] = percentile_verdicts(frame, objective)
        else:
            compared[i] = OPERATORS[objective.op](pl.col(objective.measure), objective.value)
    if compared:  # one pass of polars for them all
        asked = [e.fill_null(False).alias(f"h{i}") for i, e in compared.items()]
        asked += [e.is_not_null().alias(f"k{i}") for i, e in compared.items()]
        found = frame.select(asked)
        for i in compared:
            known[:, i] = found.get_column(f"k{i}").to_numpy()
            holds[:, i] = found.get_column(f"h{i}").to_numpy()
    return holds, known


def _nulled(series: pl.Series, unknown: np.ndarray) -> pl.Series:
    """``series`` with nulls where ``unknown``."""
    return series.scatter(np.flatnonzero(unknown), None) if unknown.any() else series


def _without_checks(frame: pl.DataFrame, checks: Sequence[tuple[str, float]]) -> pl.DataFrame:
    names = {piece.name for column, limit in checks for piece in position_columns(column, limit)}
    return frame.drop([c for c in frame.columns if c in names])


def _compliance(slo: SLO, frames: Sequence[pl.DataFrame], by: list[str]) -> pl.DataFrame:
    """``windows``, ``compliance`` and ``score`` per group, from the rows of the windows
    in ``frames`` (one or more: whole windows, and the partial ones at the range's ends)."""
    weights = [float(o.weight) for o in slo.objectives]
    flags: list[np.ndarray] = []
    groups: list[pl.DataFrame] = []
    for frame in frames:
        traffic = frame.get_column("count").to_numpy() > 0
        holds, known = _verdicts(frame, slo.objectives)
        # No value in a window (no TPOT at all, say) is no evidence against the objective.
        flags.append((holds | ~known)[traffic])
        if by:
            groups.append(frame.select(by).filter(pl.Series(traffic)))
    held_in = np.concatenate(flags)
    names = [f"_held_{i}" for i in range(len(slo.objectives))]
    rows = pl.DataFrame([pl.Series(name, held_in[:, i]) for i, name in enumerate(names)])
    weighted = [pl.col(f).mean() * w for f, w in zip(names, weights, strict=True)]
    aggregates = [
        pl.len().alias("windows"),
        pl.all_horizontal(names).mean().alias("compliance"),
        # Added with `+`, which keeps the null of no window with traffic (as compliance
        # has it), where sum_horizontal would count it as 0.
        (reduce(operator.add, weighted) / sum(weights)).alias("score"),
    ]
    if not by:
        return rows.select(aggregates)
    keys = pl.concat(groups, how="vertical_relaxed")
    return pl.concat([keys, rows], how="horizontal").group_by(by).agg(aggregates)


def _join(left: pl.DataFrame, right: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    if by:
        return left.join(right, on=by, how="left", nulls_equal=True)
    # Nothing grouped: ``right`` has at most one row, its values the same on every row.
    assert right.height <= 1, right
    row = right.row(0) if right.height else (None,) * right.width
    return left.with_columns(
        pl.lit(value, dtype).alias(name)
        for value, (name, dtype) in zip(row, right.schema.items(), strict=True)
    )
