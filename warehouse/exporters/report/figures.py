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
from warehouse.query.sla import (
    WORKBOOK_ALERTS,
    BurnAlert,
    alert_rates,
    firing,
    held,
    with_alert_windows,
)
from warehouse.query.slo import SLO, load_slo
from warehouse.query.timerange import TimeRange, floor_to

__all__ = ["Miss", "SloFigures", "gather", "interval_for", "min_group_size", "misses"]

_INTERVALS = [timedelta(minutes=m) for m in (1, 5, 15, 60, 360, 1440)]
WORST_WINDOWS = 3
"""How many of the worst intervals (below the target) get a root cause."""
_POINTS = 150


@dataclass(frozen=True)
class Miss:
    """The target or an objective, missed over the range or in some of its intervals."""

    what: str
    """``"target"`` or the objective as written (``p95(ttft_ms) <= 200``)."""
    measure: str
    """The measure it is judged on (``attainment`` for the target)."""
    value: float | None
    """The measure over the whole range."""
    over_range: bool
    """Missed over the whole range (else only in ``intervals`` of its intervals)."""
    intervals: int
    first: datetime | None
    """The start of the first interval in which it was missed."""


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
    status: dict[str, Any]
    """`llmwh sla` over the SLO's period ending with the range, with the burn rates of
    the workbook's alert windows: what the overview's table shows."""
    rates: dict[str, float | None]
    """The burn rates the workbook's alerts read, by window (``1h``, ``5m``...)."""
    alert: BurnAlert | None
    """The most severe of the workbook's alerts that fires on them, if any."""
    misses: list[Miss]
    """What was missed, the target first, then each objective, in the SLO's order."""

    @property
    def empty(self) -> bool:
        return not self.summary.get("count")

    @property
    def trouble(self) -> tuple[int, float, float]:
        """A sort key, the SLO in most trouble first: the severity of the alert that
        fires, then how fast the budget burns (the highest, over the workbook's pairs,
        of the slower window's rate over the pair's rate: 1 is where it would fire),
        then how little budget is left."""
        rank = {"page": 2, "ticket": 1}.get(self.alert.severity, 0) if self.alert else 0
        fastest = 0.0
        for alert in WORKBOOK_ALERTS:
            long, short = self.rates.get(alert.long), self.rates.get(alert.short)
            if long is not None and short is not None:
                fastest = max(fastest, min(long, short) / alert.rate)
        left = self.status.get("budget_remaining")
        return -rank, -fastest, 1.0 if left is None else left


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
    alerted = with_alert_windows(objective)
    period = wh.sla(alerted, since=until - objective.period, until=until)
    status = period.row(0, named=True) if period.height else {"count": 0}
    sources["status over the period"] = period.plan.describe()
    rates = alert_rates(status, alerted)
    return SloFigures(
        objective, time_range, interval, row, over_time, worst, by, causes,
        drift, sources, status, rates, firing(rates), misses(objective, row, over_time),
    )  # fmt: skip


def misses(slo: SLO, summary: dict[str, Any], over_time: pl.DataFrame) -> list[Miss]:
    """The target and the objectives missed over the range (``summary``) or in some of
    its intervals (``over_time``), with the first interval each was missed in."""
    found = []
    traffic = over_time.filter(pl.col("count") > 0) if "count" in over_time.columns else over_time
    if traffic.height and "attainment" in traffic.columns:
        below = traffic.filter(pl.col("attainment") < slo.target)
        attainment = summary.get("attainment")
        over_range = attainment is not None and attainment < slo.target
        if over_range or below.height:
            first = below["time"].min() if below.height else None
            found.append(
                Miss("target", "attainment", attainment, over_range, below.height,
                     cast(datetime | None, first))
            )  # fmt: skip
    for objective in slo.objectives:
        if objective.measure not in traffic.columns:
            continue
        missed = traffic.filter(held(traffic, objective).not_())  # null (no value): not missed
        over_range = summary.get(f"{objective.measure}_ok") is False
        if over_range or missed.height:
            first = missed["time"].min() if missed.height else None
            found.append(
                Miss(str(objective), objective.measure, summary.get(objective.measure),
                     over_range, missed.height, cast(datetime | None, first))
            )  # fmt: skip
    return found


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
