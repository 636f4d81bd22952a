"""A/B comparison: the difference of a measure between arms, with a confidence interval.

Proportions (``attainment``, ``error_rate``, ``rejection_rate``) are compared with
Newcombe's hybrid score interval for a difference of proportions (1998, method 10) and
a pooled two-proportion z-test; percentiles (``p<q>_<latency>``) with a percentile
bootstrap over the arms' raw values (see :mod:`warehouse.query.stats`). Each arm is
compared against a control arm ``a``; ``difference = value_b - value_a``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from warehouse.errors import QueryError
from warehouse.query import stats
from warehouse.query.builder import FilterValue, Question, compile_values
from warehouse.query.registry import dimension, measure
from warehouse.query.result import Result
from warehouse.query.run import ask, fetch_values
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Store

__all__ = ["compare_groups"]

# measure -> (count of "successes" it is a share of, as a measure name)
_PROPORTIONS = {
    "attainment": "good_count",
    "error_rate": "error_count",
    "rejection_rate": "rejection_count",
}


def compare_groups(
    store: Store,
    time_range: TimeRange,
    measure_name: str = "attainment",
    dimension_name: str = "ab_group",
    a: str | None = None,
    b: Sequence[str] | str | None = None,
    filters: Mapping[str, FilterValue] | None = None,
    thresholds: Mapping[str, float] | None = None,
    level: float = 0.95,
    seed: int = 0,
) -> Result:
    """One row per compared arm: both values, the difference and its interval.

    ``a`` is the control arm; ``b`` one arm or several (default: every other value seen).
    With neither given, the dimension must have exactly two values in the range.
    """
    dim = dimension(dimension_name)
    m = measure(measure_name)
    if not 0 < level < 1:
        raise QueryError(f"bad confidence level {level!r}: expected a number between 0 and 1")
    filters = dict(filters or {})
    if dim.name in filters:
        raise QueryError(f"{dim.name} is the compared dimension: do not filter on it")
    thresholds = dict(thresholds or {})
    counts_of = _PROPORTIONS.get(m.name)
    if counts_of is None and not m.is_percentile:
        known = ", ".join([*_PROPORTIONS, "p<q>_<latency>"])
        raise QueryError(f"cannot compare {m.name} between groups; comparable: {known}")
    measures = ["count", counts_of] if counts_of else ["count", m.name]
    groups = ask(
        store,
        Question(
            measures=measures,
            by=[dimension_name],
            filters=filters,
            range=time_range,
            thresholds=thresholds,
            exact=True,
        ),
    )
    table = {str(row[dim.name]): row for row in groups.iter_rows(named=True)}
    control, arms = _arms(dim.name, table, a, b)

    database = store.database
    rows: list[dict[str, Any]] = []
    for arm in arms:
        if counts_of:
            ca, cb = table[control], table[arm]
            d = stats.proportion_difference(
                ca[counts_of], ca["count"], cb[counts_of], cb["count"], level
            )
            value_a, value_b = ca[counts_of] / ca["count"], cb[counts_of] / cb["count"]
            n_a, n_b = ca["count"], cb["count"]
        else:
            assert m.column is not None and m.level is not None
            values = {
                name: fetch_values(
                    store,
                    compile_values(m.column, time_range, {**filters, dim.name: name}, database),
                )
                for name in (control, arm)
            }
            d = stats.quantile_difference(values[control], values[arm], m.level, level, seed=seed)
            value_a = float(np.quantile(values[control], m.level)) if values[control].size else None
            value_b = float(np.quantile(values[arm], m.level)) if values[arm].size else None
            n_a, n_b = int(values[control].size), int(values[arm].size)
        rows.append(
            {
                "dimension": dim.name,
                "a": control,
                "b": arm,
                "measure": m.name,
                "n_a": n_a,
                "n_b": n_b,
                "value_a": value_a,
                "value_b": value_b,
                "difference": d.estimate,
                "low": d.low,
                "high": d.high,
                "level": d.level,
                "p_value": d.p_value,
                "significant": bool(d.low > 0 or d.high < 0),
                "method": d.method,
            }
        )
    frame = pl.DataFrame(rows, schema=_SCHEMA)
    return Result.of(
        frame.with_columns(pl.col(pl.Float64).fill_nan(None)), groups.plan, groups.elapsed_ms
    )


_SCHEMA = {
    "dimension": pl.Utf8,
    "a": pl.Utf8,
    "b": pl.Utf8,
    "measure": pl.Utf8,
    "n_a": pl.Int64,
    "n_b": pl.Int64,
    "value_a": pl.Float64,
    "value_b": pl.Float64,
    "difference": pl.Float64,
    "low": pl.Float64,
    "high": pl.Float64,
    "level": pl.Float64,
    "p_value": pl.Float64,
    "significant": pl.Boolean,
    "method": pl.Utf8,
}


def _arms(
    name: str, table: dict[str, Any], a: str | None, b: Sequence[str] | str | None
) -> tuple[str, list[str]]:
    seen = sorted(table)
    if a is None and b is None:
        if len(seen) != 2:
            raise QueryError(
                f"{name} has {len(seen)} values in this range ({', '.join(seen) or 'none'}): "
                "name the control arm a (and b)"
            )
        return seen[0], [seen[1]]
    if a is None:
        raise QueryError("name the control arm a as well as b")
    arms = [b] if isinstance(b, str) else list(b) if b is not None else [v for v in seen if v != a]
    for arm in [a, *arms]:
        if arm not in table:
            raise QueryError(
                f"{name} = {arm!r} has no requests in this range; seen: {', '.join(seen)}"
            )
    if not arms:
        raise QueryError(f"{name} has no arm besides {a!r} in this range")
    return a, arms
