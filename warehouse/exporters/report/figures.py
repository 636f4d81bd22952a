"""What an SLA report shows of one SLO over one range, asked of the query layer.

Every figure comes from the Python API (:class:`warehouse.api.Warehouse`), so the report
shows what `llmwh sla`, `root-cause` and `drift` say, from the same sources (an SLO
rollup where one covers the question) with the same stated errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import polars as pl

from warehouse.api import Warehouse
from warehouse.query.registry import dimension
from warehouse.query.slo import SLO, load_slo
from warehouse.query.timerange import TimeRange, floor_to

__all__ = ["SloFigures", "gather", "interval_for", "min_group_size"]

_INTERVALS = [timedelta(minutes=m) for m in (1, 5, 15, 60, 360, 1440)]
WORST_WINDOWS = 3
"""How many of the worst intervals (below the target) get a root cause."""
_POINTS = 150


@dataclass(frozen=True)
class SloFigures:
    """One SLO over one range."""

    slo: SLO
    range: TimeRange
    interval: timedelta
    summary: dict[str, Any]
    """The one row of `llmwh sla` over the range (attainment, compliance, budget...)."""
    over_time: pl.DataFrame
    """Per interval: ``time``, ``count``, ``good_count``, ``attainment``, each
    objective's measure, and ``budget_remaining`` as it stood at the interval's end."""
    worst: pl.DataFrame | None
    """`llmwh sla --by` its dimension, worst attainment first (None without ``by``)."""
    by: str | None
    causes: list[tuple[TimeRange, float, pl.DataFrame]]
    """The intervals with the lowest attainment (at most :data:`WORST_WINDOWS`), each
    with its attainment and `llmwh root-cause` over it."""
    drift: pl.DataFrame
    """Windows where the first objective's measure drifted (``alert`` set)."""
    sources: dict[str, str]
    """Per figure, the plan that answered it (source, stated errors)."""

    @property
    def empty(self) -> bool:
        return not self.summary.get("count")


def interval_for(span: timedelta) -> timedelta:
    """The finest bucket that draws ``span`` in at most about 150 points."""
    for interval in _INTERVALS:
        if span / interval <= _POINTS:
            return interval
    return _INTERVALS[-1]


def gather(wh: Warehouse, slo: str | SLO, time_range: TimeRange, by: str | None) -> SloFigures:
    """Ask the query layer everything the report shows of ``slo`` over ``time_range``."""
    objective = slo if isinstance(slo, SLO) else load_slo(slo)
    since, until = time_range.since, time_range.until
    summary = wh.sla(objective, since=since, until=until)
    row = summary.row(0, named=True) if summary.height else {"count": 0}
    interval = interval_for(until - since)
    minutes = f"{int(interval.total_seconds() // 60)}m"
    measures = list(dict.fromkeys(["count", "good_count", "attainment", *objective.measures]))
    series = wh.timeseries(
        measures,
        interval=minutes,
        filters=objective.filters(),
        since=since,
        until=until,
        thresholds=objective.thresholds,
    )
    over_time = _on_grid(
        _with_budget(pl.DataFrame(series), objective.error_budget), since, until, interval
    )
    sources = {"summary": summary.plan.describe(), "over time": series.plan.describe()}
    worst = None
    if by:
        grouped = wh.sla(objective, by=[by], since=since, until=until)
        key = dimension(by).name  # the column: attrs['gpu'] is gpu
        least = min_group_size(row.get("count") or 0)
        worst = (
            pl.DataFrame(grouped)
            .rename({key: by} if key != by else {})
            .filter(pl.col("count") >= least)
            .sort("attainment", nulls_last=True)
        )
        sources[f"by {by}"] = grouped.plan.describe()
    causes = []
    bad = over_time.filter((pl.col("count") > 0) & (pl.col("attainment") < objective.target))
    for start, attainment in (
        bad.sort("attainment").head(WORST_WINDOWS).select("time", "attainment").iter_rows()
    ):
        window = TimeRange(max(start, since), min(start + interval, until))
        found = wh.root_cause(objective, since=window.since, until=window.until, limit=8)
        causes.append((window, attainment, pl.DataFrame(found)))
        sources[f"root cause from {window.since:%Y-%m-%d %H:%M}"] = found.plan.describe()
    watched = objective.measures[0] if objective.measures else "attainment"
    drifted = wh.drift(
        measure=watched,
        interval=minutes,
        filters=objective.filters(),
        since=since,
        until=until,
        thresholds=objective.thresholds,
    )
    drift = pl.DataFrame(drifted).filter(pl.col("alert"))
    sources["drift"] = drifted.plan.describe()
    return SloFigures(
        objective, time_range, interval, row, over_time, worst, by, causes,
        drift, sources,
    )  # fmt: skip


def min_group_size(total: int) -> int:
    """The fewest requests a group needs to be ranked among the worst: a group of a
    handful of requests at 0% says nothing (a thousandth of the traffic, at least 10)."""
    return max(10, total // 1000)


def _on_grid(
    frame: pl.DataFrame, since: datetime, until: datetime, interval: timedelta
) -> pl.DataFrame:
    """Every interval of the range, those without requests as nulls (so that a chart
    breaks its line there) but for the budget, which stands where it was."""
    first = floor_to(since, interval)
    grid = pl.DataFrame(
        {"time": pl.datetime_range(first, until, interval, closed="left", time_unit="ms",
                                   time_zone="UTC", eager=True)}
    )  # fmt: skip
    if frame.is_empty():
        return grid.join(frame, on="time", how="left")
    joined = grid.join(frame.with_columns(pl.col("time").cast(grid["time"].dtype)), on="time",
                       how="left")  # fmt: skip
    return joined.with_columns(
        pl.col("budget_remaining").fill_null(strategy="forward").fill_null(1.0)
    )


def _with_budget(frame: pl.DataFrame, budget: float) -> pl.DataFrame:
    """The error budget left at the end of each interval: 1 - the bad requests so far
    over the bad requests the whole range allows, ending at `llmwh sla`'s figure."""
    if frame.is_empty():
        return frame.with_columns(pl.lit(None, pl.Float64).alias("budget_remaining"))
    total = cast(int, frame["count"].sum())  # a count column: its sum is an int
    bad = (pl.col("count") - pl.col("good_count")).cum_sum()
    allowed = budget * total if total else None
    remaining = (1 - bad / allowed) if allowed else pl.lit(None, pl.Float64)
    return frame.with_columns(remaining.alias("budget_remaining"))
