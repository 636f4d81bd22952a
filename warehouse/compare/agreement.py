"""Do two answers to the same question agree? Row by row, column by column.

Rows are matched on the question's key columns (order-insensitive); a row on one side
only is a difference. Two rules:

- :data:`EXACT` (exact answers, every backend against the reference): integers,
  strings, booleans and times equal; floats within a relative 1e-9 or an absolute
  1e-12 (sums of floats in another order); null only against null.
- :data:`ROLLUP` (ClickHouse's default plan, read from rollups, against the
  reference's exact answer): counts equal; ratios of counts and sums (error and
  rejection rates, rps, averages, sums, KV hits, decode throughput, traffic shares)
  within 1e-9; percentiles within 2% relative of the interval between the two order
  statistics the exact value interpolates between (the reference answers them too:
  :mod:`warehouse.query.order_statistics`), where the row holds at least
  1,000 requests and at least 50 beyond the percentile (p99: 5,000; sparser rows are
  not checked, and counted as skipped); attainment within 0.01 absolute. Figures
  derived from those approximations (SLA compliance, score, budget, burn rates,
  objective verdicts, root-cause bad counts and lifts) are not checked: their largest
  difference is reported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

__all__ = [
    "EXACT",
    "ROLLUP",
    "Check",
    "Comparison",
    "Difference",
    "Rule",
    "compare",
    "rollup_percentile",
]

MISSING = "(missing)"


Interval = tuple[float, float]
"""The order statistics around an exact percentile: ``(x_k, x_(k+1))``."""


@dataclass(frozen=True)
class Check:
    """How one column must agree: exactly, or within ``rel`` / ``abs``."""

    rel: float = 0.0
    abs: float = 0.0
    min_count: int = 0
    """Only rows whose ``count`` is at least this are checked."""
    around: bool = False
    """Within the tolerance of the interval of the order statistics around the
    reference's value, where the reference gives them, rather than of the value."""

    def describe(self, interval: Interval | None = None) -> str:
        parts = []
        if self.rel:
            parts.append(f"rel {self.rel:g}")
        if self.abs:
            parts.append(f"abs {self.abs:g}")
        text = " or ".join(parts) if parts else "equal"
        if interval is not None:
            text += f" of [{interval[0]:.6g}, {interval[1]:.6g}]"
        return f"{text} (rows >= {self.min_count:,} requests)" if self.min_count else text

    def agrees(self, value: Any, reference: Any, interval: Interval | None = None) -> bool:
        """Whether ``value`` agrees with ``reference``, or with the nearest point of
        ``interval`` (which holds ``reference``) where given."""
        if value is None or reference is None:
            return value is None and reference is None
        if isinstance(value, float) or isinstance(reference, float):
            a, b = float(value), float(reference)
            if math.isnan(a) or math.isnan(b):
                return math.isnan(a) and math.isnan(b)
            b = _nearest(a, b, interval)
            if a == b:
                return True
            return abs(a - b) <= max(self.abs, self.rel * max(abs(a), abs(b)))
        return value == reference


def _nearest(value: float, reference: float, interval: Interval | None) -> float:
    """The point nearest ``value`` of the closed interval spanning ``reference`` and
    ``interval``: ``reference`` without one."""
    if interval is None:
        return reference
    low, high = min(reference, *interval), max(reference, *interval)
    return min(max(value, low), high)


@dataclass(frozen=True)
class Rule:
    """Which :class:`Check` applies to a column (None: reported, not checked)."""

    name: str
    checks: Callable[[str, pl.DataType], Check | None]
    text: str


EXACT_FLOAT = Check(rel=1e-9, abs=1e-12)
_EQUAL = Check()
_PERCENTILE = re.compile(r"^p(\d+)_")
_COUNTS = {"count", "error_count", "rejection_count", "requests", "errors", "windows"}
_RATIOS = re.compile(
    r"^(error_rate|rejection_rate|rps|kv_hit_ratio|decode_tps|traffic_share|avg_\w+|sum_\w+)$"
)
ROLLUP_PERCENTILE_REL = 0.02
ROLLUP_MIN_REQUESTS = 1000
ROLLUP_MIN_BEYOND = 50
"""Rows checked for a rollup percentile hold at least this many requests, and this many
beyond the percentile: in sparser tails neighbouring order statistics lie further apart
than a 2%-wide bucket."""


def rollup_percentile(digits: str) -> Check:
    """The rollup check of percentile ``p<digits>`` (``95``, ``99``, ``999`` = 99.9).

    The exact value interpolates between the order statistics ``x_k`` and ``x_(k+1)``
    around its rank; the estimate lies in the 2%-wide bucket of ``x_k``
    (:func:`warehouse.model.histogram_quantiles`). Where the two lie more than 2% apart
    the estimate may be far from the interpolated value, so it is held to within 2% of
    the interval ``[x_k, x_(k+1)]`` the reference gives.
    """
    q = int(digits) / 10 ** len(digits) if digits != "100" else 1.0
    beyond = math.ceil(ROLLUP_MIN_BEYOND / (1 - q)) if q < 1 else ROLLUP_MIN_REQUESTS
    return Check(rel=ROLLUP_PERCENTILE_REL, min_count=max(ROLLUP_MIN_REQUESTS, beyond), around=True)


ROLLUP_ATTAINMENT = Check(abs=0.01)


def _exact(column: str, dtype: pl.DataType) -> Check:
    return EXACT_FLOAT if dtype.is_float() else _EQUAL


def _rollup(column: str, dtype: pl.DataType) -> Check | None:
    if column in _COUNTS:
        return _EQUAL
    if _RATIOS.match(column):
        return EXACT_FLOAT
    level = _PERCENTILE.match(column)
    if level and not column.endswith("_ok"):
        return rollup_percentile(level.group(1))
    if column == "attainment":
        return ROLLUP_ATTAINMENT
    if not dtype.is_numeric() and dtype != pl.Boolean:
        return _EQUAL  # labels
    return None


EXACT = Rule(
    "exact",
    _exact,
    "integers, strings and booleans equal; floats within relative 1e-9 or absolute 1e-12",
)
ROLLUP = Rule(
    "rollup",
    _rollup,
    "counts equal; rates, averages, sums and ratios of sums within relative 1e-9; "
    "percentiles within 2% relative of the two order statistics the exact value lies "
    "between, in rows of at least 1,000 requests with at least 50 of them beyond the "
    "percentile (p99: 5,000 requests); attainment within 0.01; "
    "figures derived from approximate ones (compliance, score, budget, burn rates, "
    "objective verdicts, bad counts, lift) reported, not checked",
)


@dataclass(frozen=True)
class Difference:
    """One cell (or row) where an answer differs from the reference."""

    key: str
    column: str
    value: Any
    reference: Any
    check: str


@dataclass
class Comparison:
    """The outcome of comparing one answer with the reference answer."""

    differences: list[Difference] = field(default_factory=list)
    compared: int = 0
    """Cells checked."""
    skipped: int = 0
    """Cells a check left out (a row under its ``min_count``)."""
    unchecked: dict[str, float] = field(default_factory=dict)
    """Columns reported, not checked: their largest difference (relative for floats)."""
    worst: dict[str, float] = field(default_factory=dict)
    """Checked float columns: their largest relative difference (from the nearest point
    of the order statistics' interval, for percentiles checked against one)."""

    @property
    def agrees(self) -> bool:
        return not self.differences


def compare(
    answer: pl.DataFrame,
    reference: pl.DataFrame,
    keys: tuple[str, ...],
    rule: Rule = EXACT,
    around: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> Comparison:
    """Compare ``answer`` with ``reference`` row by row (matched on ``keys``) under ``rule``.

    ``around``: the reference answer again with each percentile the order statistic
    below it, and above it, for the checks that take the interval
    (:attr:`Check.around`); without, they hold the value to the reference's.
    """
    outcome = Comparison()
    lows, highs = (_rows(f, keys, Comparison()) for f in around) if around else ({}, {})
    missing_columns = [c for c in reference.columns if c not in answer.columns]
    extra_columns = [c for c in answer.columns if c not in reference.columns]
    for column in missing_columns:
        outcome.differences.append(Difference("(all rows)", column, MISSING, "(column)", "columns"))
    for column in extra_columns:
        outcome.differences.append(Difference("(all rows)", column, "(column)", MISSING, "columns"))
    columns = [c for c in reference.columns if c in answer.columns and c not in keys]
    got, expected = _rows(answer, keys, outcome), _rows(reference, keys, outcome)
    for key in [k for k in expected if k not in got]:
        outcome.differences.append(
            Difference(_label(keys, key), "(row)", MISSING, "present", "rows")
        )
    for key in [k for k in got if k not in expected]:
        outcome.differences.append(
            Difference(_label(keys, key), "(row)", "present", MISSING, "rows")
        )
    for column in columns:
        check = rule.checks(column, reference.schema[column])
        for key, row in expected.items():
            if key not in got:
                continue
            value, wanted = got[key][column], row[column]
            if check is None:
                _track(outcome.unchecked, column, value, wanted)
                continue
            if check.min_count and (row.get("count") or 0) < check.min_count:
                outcome.skipped += 1
                continue
            outcome.compared += 1
            interval = _interval(lows, highs, key, column) if check.around else None
            if isinstance(wanted, float) or isinstance(value, float):
                _track(outcome.worst, column, value, wanted, interval)
            if not check.agrees(value, wanted, interval):
                outcome.differences.append(
                    Difference(_label(keys, key), column, value, wanted, check.describe(interval))
                )
    return outcome


def _rows(
    frame: pl.DataFrame, keys: tuple[str, ...], outcome: Comparison
) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    present = [k for k in keys if k in frame.columns]
    for row in frame.iter_rows(named=True):
        key = tuple(row[k] for k in present)
        if key in rows:
            outcome.differences.append(
                Difference(_label(keys, key), "(row)", "duplicate key", "unique", "rows")
            )
        rows[key] = row
    return rows


def _interval(
    lows: dict[tuple[Any, ...], dict[str, Any]],
    highs: dict[tuple[Any, ...], dict[str, Any]],
    key: tuple[Any, ...],
    column: str,
) -> Interval | None:
    """The order statistics of ``column`` in row ``key``, where both are numbers."""
    low, high = lows.get(key, {}).get(column), highs.get(key, {}).get(column)
    if not isinstance(low, float) or not isinstance(high, float):
        return None
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def _label(keys: tuple[str, ...], key: tuple[Any, ...]) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in zip(keys, key, strict=False)) or "(one row)"


def _show(value: Any) -> str:
    if hasattr(value, "isoformat"):
        return value.isoformat().replace("+00:00", "Z")
    return str(value)


def _track(
    worst: dict[str, float],
    column: str,
    value: Any,
    wanted: Any,
    interval: Interval | None = None,
) -> None:
    """Keep the largest difference seen in ``column``: relative for numbers (to the
    nearest point of ``interval`` where given), else 0/1."""
    if value is None and wanted is None:
        diff = 0.0
    elif value is None or wanted is None:
        diff = math.inf
    elif isinstance(value, bool | str) or isinstance(wanted, bool | str):
        diff = 0.0 if value == wanted else 1.0
    else:
        a = float(value)
        b = _nearest(a, float(wanted), interval)
        scale = max(abs(a), abs(b))
        diff = 0.0 if a == b else abs(a - b) / scale if scale else 0.0
    worst[column] = max(worst.get(column, 0.0), diff)
