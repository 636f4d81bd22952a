"""SLA maths: intervals for rates, differences of rates and quantiles, and drift alarms.

Pure numpy and the standard library (normal quantiles from :class:`statistics.NormalDist`).

- :func:`wilson_interval`: Wilson score interval of one proportion (Wilson 1927).
- :func:`proportion_difference`: difference of two proportions with Newcombe's hybrid score
  interval (Newcombe 1998, method 10) and the pooled two-proportion z-test.
- :func:`quantile_difference`: difference of a quantile between two samples with a
  percentile bootstrap interval (Efron & Tibshirani 1993, ch. 13).
- :func:`drift`: per-window z-score against a trailing baseline plus an EWMA control chart
  (Roberts 1959; NIST/SEMATECH e-Handbook 6.3.2.4), with a consecutive-breach alert.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from warehouse.errors import InvalidArgument

__all__ = [
    "DIRECTIONS",
    "FLOATS",
    "Arithmetic",
    "Difference",
    "DriftResult",
    "critical_value",
    "drift",
    "newcombe_bounds",
    "proportion_difference",
    "quantile_difference",
    "wilson_bounds",
    "wilson_interval",
]

DIRECTIONS = ("up", "down", "both")

_NAN = float("nan")
_BOOTSTRAP_BATCH_ELEMENTS = 4_000_000  # resampled indices held at once (int32: 16 MB)


@dataclass(frozen=True)
class Difference:
    """An estimated difference ``b - a`` with its confidence interval and two-sided p-value."""

    estimate: float
    low: float
    high: float
    level: float
    p_value: float
    method: str


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise InvalidArgument(f"level must be in (0, 1), got {level!r}")


def critical_value(level: float) -> float:
    """The two-sided standard normal critical value for confidence ``level``."""
    _check_level(level)
    return NormalDist().inv_cdf(0.5 + level / 2.0)


@dataclass(frozen=True)
class Arithmetic:
    """What a formula needs beyond ``+ - * /``, for the kind of numbers it runs on: floats
    here, SQL expressions for a dashboard (the formula is then written once for both)."""

    sqrt: Callable[[Any], Any]
    hypot: Callable[[Any, Any], Any]
    least: Callable[[Any, Any], Any]
    greatest: Callable[[Any, Any], Any]


FLOATS = Arithmetic(math.sqrt, math.hypot, min, max)


def wilson_bounds(p: Any, n: Any, z: float, math_: Arithmetic = FLOATS) -> tuple[Any, Any]:
    """The Wilson score interval of a proportion ``p`` of ``n > 0`` (see
    :func:`wilson_interval`), on numbers of any kind ``math_`` computes with."""
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math_.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denominator
    return math_.greatest(0.0, centre - half), math_.least(1.0, centre + half)


def newcombe_bounds(
    p_a: Any,
    wilson_a: tuple[Any, Any],
    p_b: Any,
    wilson_b: tuple[Any, Any],
    math_: Arithmetic = FLOATS,
) -> tuple[Any, Any]:
    """Newcombe's hybrid score interval of ``p_b - p_a`` from the arms' Wilson intervals
    (see :func:`proportion_difference`), on numbers of any kind ``math_`` computes with."""
    (low_a, high_a), (low_b, high_b) = wilson_a, wilson_b
    d = p_b - p_a
    return d - math_.hypot(p_b - low_b, high_a - p_a), d + math_.hypot(high_b - p_b, p_a - low_a)


def _check_count(successes: int, n: int) -> None:
    if n < 0 or not 0 <= successes <= n:
        raise InvalidArgument(f"need 0 <= successes <= n, got successes={successes}, n={n}")


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for the proportion ``successes / n``.

    The bounds are the two roots of ``|p - pi| = z * sqrt(pi (1 - pi) / n)`` (Wilson 1927;
    Newcombe 1998a, method 3). ``n == 0`` gives ``(nan, nan)``.
    """
    z = critical_value(level)
    _check_count(successes, n)
    if n == 0:
        return (_NAN, _NAN)
    low, high = wilson_bounds(successes / n, n, z)
    # Exact at the edges, where the roots are 0 and 1 up to rounding.
    return (0.0 if successes == 0 else low, 1.0 if successes == n else high)


def proportion_difference(
    successes_a: int,
    n_a: int,
    successes_b: int,
    n_b: int,
    level: float = 0.95,
) -> Difference:
    """Difference ``p_b - p_a`` of two independent proportions.

    Interval: Newcombe's hybrid score interval (Newcombe 1998, "Interval estimation for the
    difference between independent proportions", Stat Med 17:873, method 10), built from the
    two Wilson intervals ``(l_a, u_a)`` and ``(l_b, u_b)``::

        low  = d - sqrt((p_b - l_b)**2 + (u_a - p_a)**2)
        high = d + sqrt((u_b - p_b)**2 + (p_a - l_a)**2)

    p-value: the two-sided pooled two-proportion z-test. When both arms are all successes or
    all failures there is no variance and no difference: the p-value is 1.0. An empty arm
    makes everything NaN.
    """
    _check_count(successes_a, n_a)
    _check_count(successes_b, n_b)
    if n_a == 0 or n_b == 0:
        return Difference(_NAN, _NAN, _NAN, level, _NAN, "newcombe-wilson")
    p_a = successes_a / n_a
    p_b = successes_b / n_b
    d = p_b - p_a
    low, high = newcombe_bounds(
        p_a, wilson_interval(successes_a, n_a, level), p_b, wilson_interval(successes_b, n_b, level)
    )

    pooled = (successes_a + successes_b) / (n_a + n_b)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n_a + 1.0 / n_b))
    p_value = 1.0 if se == 0.0 else min(1.0, 2.0 * NormalDist().cdf(-abs(d) / se))
    return Difference(d, low, high, level, p_value, "newcombe-wilson")


def _clean(values: np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[~np.isnan(array)]


def _bootstrap_quantiles(
    ordered: np.ndarray, q: float, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """The q-quantile (numpy's linear method) of ``resamples`` bootstrap resamples.

    Resampling indices into the *sorted* sample makes the k-th smallest resampled index
    point at the k-th order statistic of the resample, so only integer indices are drawn and
    partitioned; no values are gathered or sorted per resample.
    """
    n = ordered.size
    h = q * (n - 1)
    k = math.floor(h)
    k_next = min(k + 1, n - 1)
    fraction = h - k
    dtype = np.int32 if n < 2**31 else np.int64
    batch = max(1, _BOOTSTRAP_BATCH_ELEMENTS // n)
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, batch):
        size = min(batch, resamples - start)
        index = rng.integers(0, n, size=(size, n), dtype=dtype)
        index.partition(sorted({k, k_next}), axis=1)
        below = ordered[index[:, k]]
        above = ordered[index[:, k_next]]
        out[start : start + size] = below + fraction * (above - below)
    return out


def quantile_difference(
    a: np.ndarray,
    b: np.ndarray,
    q: float,
    level: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    max_sample: int = 200_000,
) -> Difference:
    """Difference ``quantile(b, q) - quantile(a, q)`` with a percentile bootstrap interval.

    NaNs are dropped first. The estimate uses every remaining value and numpy's default
    (linear) quantile. The interval is the percentile bootstrap (Efron & Tibshirani 1993,
    ch. 13): each arm is resampled independently with replacement ``resamples`` times, and
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled differences
    are the bounds. An arm with more than ``max_sample`` values is first replaced, for the
    bootstrap only, by a uniform subsample of ``max_sample`` values drawn without
    replacement; the interval is then that of the smaller sample (wider, i.e. conservative).

    p-value: two-sided bootstrap, ``min(1, 2 * min(P*(diff <= 0), P*(diff >= 0)))``.
    Everything is deterministic for a given ``seed`` (``np.random.default_rng(seed)``).
    An arm empty after dropping NaNs makes everything NaN.
    """
    if not 0.0 < q < 1.0:
        raise InvalidArgument(f"q must be in (0, 1), got {q!r}")
    _check_level(level)
    if resamples < 1:
        raise InvalidArgument(f"resamples must be >= 1, got {resamples!r}")
    if max_sample < 1:
        raise InvalidArgument(f"max_sample must be >= 1, got {max_sample!r}")
    method = "bootstrap-percentile"
    arm_a, arm_b = _clean(a), _clean(b)
    if arm_a.size == 0 or arm_b.size == 0:
        return Difference(_NAN, _NAN, _NAN, level, _NAN, method)

    estimate = float(np.quantile(arm_b, q) - np.quantile(arm_a, q))
    rng = np.random.default_rng(seed)
    arms = []
    for arm in (arm_a, arm_b):
        if arm.size > max_sample:
            arm = rng.choice(arm, size=max_sample, replace=False)
        arms.append(np.sort(arm))
    boot_a = _bootstrap_quantiles(arms[0], q, resamples, rng)
    boot_b = _bootstrap_quantiles(arms[1], q, resamples, rng)
    diffs = boot_b - boot_a

    tail = (1.0 - level) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    p_value = min(1.0, 2.0 * min(np.mean(diffs <= 0.0), np.mean(diffs >= 0.0)))
    return Difference(estimate, float(low), float(high), level, float(p_value), method)


@dataclass(frozen=True)
class DriftResult:
    """Per-window drift statistics; every field is an array with one entry per window."""

    value: np.ndarray
    baseline_mean: np.ndarray
    baseline_std: np.ndarray
    z: np.ndarray
    ewma: np.ndarray
    ewma_upper: np.ndarray
    ewma_lower: np.ndarray
    breach: np.ndarray
    consecutive: np.ndarray
    alert: np.ndarray


def _zscore(value: float, mean: float, std: float) -> float:
    if np.isnan(value) or np.isnan(mean):
        return np.nan
    if std == 0.0:
        return 0.0 if value == mean else math.copysign(math.inf, value - mean)
    return (value - mean) / std


def drift(
    values: np.ndarray,
    baseline: int = 12,
    z_threshold: float = 3.0,
    ewma_alpha: float = 0.3,
    ewma_width: float = 3.0,
    alert_after: int = 3,
    direction: str = "up",
    min_baseline: int | None = None,
    min_change: float = 0.0,
) -> DriftResult:
    """Flag windows whose value drifts from a trailing baseline.

    For window ``i`` the baseline is the last ``baseline`` earlier windows that had a value
    and did not breach: a drift does not become its own baseline, so a sustained shift
    keeps alerting until it ends. Windows are scored once the baseline holds
    ``min_baseline`` values (default: all ``baseline``); before that its mean, sample
    standard deviation (``ddof=1``), ``z`` and the limits are NaN and nothing breaches. A
    baseline of two or three windows would be too tight a yardstick: its spread
    understates the real one, and every later window would breach.

    - ``z = (value - mean) / std``; with ``std == 0``, ``z`` is 0 when ``value == mean``,
      else +-inf.
    - EWMA ``e_i = alpha * x_i + (1 - alpha) * e_{i-1}``, started at the first non-NaN
      value; a NaN window carries the previous EWMA forward. Limits are the asymptotic EWMA
      chart limits ``mean +- width * std * sqrt(alpha / (2 - alpha))`` (Roberts 1959;
      NIST/SEMATECH e-Handbook of Statistical Methods, 6.3.2.4).
    - ``breach``: for ``direction="up"`` ``z > z_threshold`` or ``ewma > upper``; for
      ``"down"`` ``z < -z_threshold`` or ``ewma < lower``; ``"both"`` is either. Comparisons
      with NaN are not breaches (a NaN window can still breach on its carried EWMA).
    - ``min_change``: a breach must also be a change that matters: the value (for the
      z test) or the EWMA (for the chart) at least ``min_change`` times the baseline
      mean away from it, in the breaching direction. 0 (the default) asks only for
      statistical significance.
    - ``consecutive`` counts breaching windows in a row ending at ``i`` (0 on a non-breach);
      ``alert`` is ``consecutive >= alert_after``.
    """
    if direction not in DIRECTIONS:
        raise InvalidArgument(
            f"direction must be one of {', '.join(DIRECTIONS)}; got {direction!r}"
        )
    if baseline < 2:
        raise InvalidArgument(f"baseline must be >= 2 windows, got {baseline!r}")
    if not 0.0 < ewma_alpha <= 1.0:
        raise InvalidArgument(f"ewma_alpha must be in (0, 1], got {ewma_alpha!r}")
    if alert_after < 1:
        raise InvalidArgument(f"alert_after must be >= 1, got {alert_after!r}")
    if not min_change >= 0.0 or math.isinf(min_change):
        raise InvalidArgument(f"min_change must be a number >= 0, got {min_change!r}")

    needed = baseline if min_baseline is None else min_baseline
    if not 2 <= needed <= baseline:
        raise InvalidArgument(f"min_baseline must be between 2 and baseline, got {min_baseline!r}")
    x = np.asarray(values, dtype=np.float64).ravel().copy()
    n = x.size
    mean = np.full(n, np.nan)
    std = np.full(n, np.nan)
    z = np.full(n, np.nan)
    ewma = np.full(n, np.nan)
    upper = np.full(n, np.nan)
    lower = np.full(n, np.nan)
    breach = np.zeros(n, dtype=bool)
    clean: deque[float] = deque(maxlen=baseline)
    spread_factor = ewma_width * math.sqrt(ewma_alpha / (2.0 - ewma_alpha))
    current = np.nan
    for i in range(n):
        if len(clean) >= needed:
            mean[i] = np.mean(clean)
            std[i] = np.std(clean, ddof=1)
            upper[i] = mean[i] + spread_factor * std[i]
            lower[i] = mean[i] - spread_factor * std[i]
        if not np.isnan(x[i]):
            current = x[i] if np.isnan(current) else ewma_alpha * x[i] + (1 - ewma_alpha) * current
        ewma[i] = current
        z[i] = _zscore(x[i], mean[i], std[i])
        least = min_change * abs(mean[i])
        up = (z[i] > z_threshold and x[i] - mean[i] >= least) or (
            ewma[i] > upper[i] and ewma[i] - mean[i] >= least
        )
        down = (z[i] < -z_threshold and mean[i] - x[i] >= least) or (
            ewma[i] < lower[i] and mean[i] - ewma[i] >= least
        )
        breach[i] = {"up": up, "down": down, "both": up or down}[direction]
        if not breach[i] and not np.isnan(x[i]):
            clean.append(float(x[i]))

    consecutive = np.zeros(n, dtype=np.int64)
    run = 0
    for i in range(n):
        run = run + 1 if breach[i] else 0
        consecutive[i] = run
    return DriftResult(
        value=x,
        baseline_mean=mean,
        baseline_std=std,
        z=z,
        ewma=ewma,
        ewma_upper=upper,
        ewma_lower=lower,
        breach=breach,
        consecutive=consecutive,
        alert=consecutive >= alert_after,
    )
