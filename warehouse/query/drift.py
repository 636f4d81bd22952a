"""Drift: each window's measure against a trailing baseline of the windows before it.

The measure is computed per window of ``interval`` (and per group); missing windows are
gaps, not zeros. Per group, :func:`warehouse.query.stats.drift` scores each window with a
z-score and an EWMA chart against the trailing baseline of earlier windows that did not
breach, and counts consecutive breaching windows; ``alert`` is raised after
``alert_after`` of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

import numpy as np
import polars as pl

from warehouse.errors import QueryError
from warehouse.model import LATENCY_COLUMNS
from warehouse.query import stats
from warehouse.query.builder import FilterValue, Question
from warehouse.query.registry import Measure, measure
from warehouse.query.result import Result
from warehouse.query.run import ask
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Store

__all__ = ["default_min_change", "detect_drift", "worse_direction"]

# Measures for which a higher value is better; for every other one, higher is worse.
_HIGHER_IS_BETTER = ("attainment", "goodput_rps", "kv_hit_ratio", "decode_tps", "rps", "count")


def worse_direction(measure_name: str) -> str:
    """``down`` for measures where a fall is bad (attainment, KV hits ...), else ``up``."""
    return "down" if measure_name in _HIGHER_IS_BETTER else "up"


def default_min_change(m: Measure) -> float:
    """0.1 for a latency (a percentile or an average), 0 for anything else.

    A latency's percentiles follow the load through the day by a few percent, and over a
    few hundred requests a window's p95 swings as much: against a baseline of an hour,
    such a move is statistically clear and no incident (the demo's quiet zones alerted on
    6% rises before this floor). A proportion has no such floor: attainment one point
    down is news."""
    latency = m.is_percentile or (m.name.startswith("avg_") and m.name[4:] in LATENCY_COLUMNS)
    return 0.1 if latency else 0.0


MAX_BASELINE = 10_000
"""The most windows a baseline may span (each one is held for every group)."""


def detect_drift(
    store: Store,
    time_range: TimeRange,
    measure_name: str = "p95_ttft_ms",
    by: Sequence[str] = (),
    interval: timedelta = timedelta(minutes=5),
    filters: Mapping[str, FilterValue] | None = None,
    thresholds: Mapping[str, float] | None = None,
    baseline: int = 12,
    z_threshold: float = 3.0,
    ewma_alpha: float = 0.3,
    alert_after: int = 3,
    direction: str | None = None,
    exact: bool | None = None,
    min_change: float | None = None,
) -> Result:
    """Per window (and group): the value, its baseline, z, EWMA and limits, breach, alert.

    ``min_change``: the smallest change from the baseline mean, as a fraction of it, that
    may breach; by default :func:`default_min_change` of the measure."""
    m = measure(measure_name)
    if direction is not None and direction not in stats.DIRECTIONS:
        raise QueryError(f"bad direction {direction!r}: one of {', '.join(stats.DIRECTIONS)}")
    if baseline < 2 or alert_after < 1:
        raise QueryError("the baseline needs at least 2 windows and alerts at least 1")
    if baseline > MAX_BASELINE:
        raise QueryError(
            f"a baseline of {baseline:,} windows is past the {MAX_BASELINE:,} a drift "
            "takes; a longer interval covers more time with fewer windows"
        )
    by = list(by)
    series = ask(
        store,
        Question(
            measures=[measure_name],
            by=by,
            filters=dict(filters or {}),
            range=time_range,
            interval=interval,
            thresholds=dict(thresholds or {}),
            exact=exact,
        ),
    )
    grid = _time_grid(time_range, interval)
    frame = pl.DataFrame(series)
    groups = frame.partition_by(by, as_dict=True, maintain_order=True) if by else {(): frame}
    frames = []
    for key, rows in groups.items():
        full = grid.join(rows.select("time", measure_name), on="time", how="left")
        result = stats.drift(
            full[measure_name].to_numpy().astype(np.float64),
            baseline=baseline,
            z_threshold=z_threshold,
            ewma_alpha=ewma_alpha,
            alert_after=alert_after,
            direction=direction or worse_direction(measure_name),
            min_change=default_min_change(m) if min_change is None else min_change,
        )
        frames.append(
            full.select("time")
            .with_columns(pl.lit(v).alias(n) for n, v in zip(by, key, strict=True))
            .with_columns(
                pl.Series(measure_name, result.value),
                pl.Series("baseline_mean", result.baseline_mean),
                pl.Series("baseline_std", result.baseline_std),
                pl.Series("z", result.z),
                pl.Series("ewma", result.ewma),
                pl.Series("ewma_lower", result.ewma_lower),
                pl.Series("ewma_upper", result.ewma_upper),
                pl.Series("breach", result.breach),
                pl.Series("consecutive", result.consecutive),
                pl.Series("alert", result.alert),
            )
        )
    frame = pl.concat(frames) if frames else pl.DataFrame()
    floats = [c for c, t in frame.schema.items() if t == pl.Float64 and c != "z"]
    frame = frame.with_columns(pl.col(floats).fill_nan(None)) if floats else frame
    return Result.of(frame, series.plan, series.elapsed_ms)


def _time_grid(time_range: TimeRange, interval: timedelta) -> pl.DataFrame:
    step = int(interval.total_seconds() * 1000)
    first = time_range.since_ms // step * step
    starts = np.arange(first, time_range.until_ms, step, dtype=np.int64)
    return pl.DataFrame({"time": starts}).with_columns(
        pl.col("time").cast(pl.Datetime("ms", "UTC"))
    )
