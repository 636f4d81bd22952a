"""Evaluating an SLO: objectives, attainment, window compliance, budget and burn rates.

For each group of the ``by`` dimensions, over ``[since, until)``:

- each objective's measure over the whole range, and whether it holds (``<measure>_ok``);
- ``attainment`` (share of valid requests that are good: ok and within every per-request
  threshold) and ``goodput_rps`` (good requests per second);
- ``compliance``: the share of the SLO's windows (5 min by default) with traffic in which
  every objective holds, and ``windows``, how many windows had traffic; a window in
  which a measure has no value (no TPOT in it, say) does not count against it;
- ``score``: the objectives' window compliance averaged with the SLO's weights;
- ``budget_remaining``: ``1 - (1 - attainment) / (1 - target)`` over the range, below 0
  once the budget is spent;
- ``burn_rate_<w>`` for each burn window, ending at ``until``: ``(1 - attainment over the
  window) / (1 - target)``; 1 spends the budget exactly over the SLO period.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from warehouse.errors import QueryError
from warehouse.query.builder import FilterValue, Question
from warehouse.query.result import Result
from warehouse.query.run import ask
from warehouse.query.slo import OPERATORS, SLO
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Store

__all__ = ["evaluate", "scoped_filters"]


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
    by = list(by)
    scope = scoped_filters(slo, filters)
    common = {"by": by, "filters": scope, "thresholds": slo.thresholds, "exact": exact}
    objectives = list(slo.measures)
    period = ask(
        store,
        Question(
            measures=["count", "attainment", "goodput_rps", *objectives],
            range=time_range,
            **common,
        ),
    )
    frame = pl.DataFrame(period)
    parts = {"period": period.plan}
    for name, column in _ok_columns(slo).items():
        objective = slo.objectives[column]
        holds = _holds(pl.col(objective.measure), objective.op, objective.value)
        frame = frame.with_columns(holds.alias(name))

    if objectives:
        windows = ask(
            store,
            Question(
                measures=["count", *objectives], range=time_range, interval=slo.window, **common
            ),
        )
        frame = _join(frame, _compliance(slo, pl.DataFrame(windows), by), by)
        parts["windows"] = windows.plan
    budget = slo.error_budget
    frame = frame.with_columns((1 - (1 - pl.col("attainment")) / budget).alias("budget_remaining"))
    elapsed = period.elapsed_ms
    for label, length in slo.burn_windows:
        window = TimeRange(max(time_range.until - length, time_range.since), time_range.until)
        burn = ask(store, Question(measures=["attainment"], range=window, **common))
        elapsed += burn.elapsed_ms
        parts[f"burn {label}"] = burn.plan
        rate = pl.DataFrame(burn).select(
            *by, ((1 - pl.col("attainment")) / budget).alias(f"burn_rate_{label}")
        )
        frame = _join(frame, rate, by)
    return Result.of(frame, period.plan, elapsed, parts)


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


def _ok_columns(slo: SLO) -> dict[str, int]:
    names: dict[str, int] = {}
    for index, objective in enumerate(slo.objectives):
        name = f"{objective.measure}_ok"
        suffix = 2
        while name in names:
            name, suffix = f"{objective.measure}_ok_{suffix}", suffix + 1
        names[name] = index
    return names


def _holds(value: pl.Expr, op: str, limit: float) -> pl.Expr:
    return OPERATORS[op](value, limit)


def _compliance(slo: SLO, windows: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    windows = windows.filter(pl.col("count") > 0)
    # No value in a window (no TPOT at all, say) is no evidence against the objective.
    held = [
        _holds(pl.col(o.measure), o.op, o.value).fill_null(True).alias(f"_held_{i}")
        for i, o in enumerate(slo.objectives)
    ]
    windows = windows.with_columns(held)
    flags = [f"_held_{i}" for i in range(len(slo.objectives))]
    weights = [o.weight for o in slo.objectives]
    aggregates = [
        pl.len().alias("windows"),
        pl.all_horizontal(flags).mean().alias("compliance"),
        (
            pl.sum_horizontal([pl.col(f).mean() * w for f, w in zip(flags, weights, strict=True)])
            / sum(weights)
        ).alias("score"),
    ]
    if by:
        return windows.group_by(by).agg(aggregates)
    return windows.select(aggregates)


def _join(left: pl.DataFrame, right: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    if by:
        return left.join(right, on=by, how="left", nulls_equal=True)
    if right.height == 0:
        return left.with_columns(pl.lit(None).alias(c) for c in right.columns)
    return left.join(right, how="cross")
