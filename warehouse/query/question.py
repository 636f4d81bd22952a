"""A question to the warehouse, as the user asks it, and the checks of what it names.

The builder (:mod:`warehouse.query.builder`) turns a :class:`Question` into SQL; here
are the question itself and the checks that need nothing but it: names asked twice,
filter values of the right type, thresholds, row limits and spans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from warehouse.errors import QueryError
from warehouse.query.registry import Dimension, Measure, dimension
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Capabilities

__all__ = [
    "MAX_LIMIT",
    "FilterValue",
    "Question",
    "check_limit",
    "check_names",
    "check_spans",
    "filter_values",
    "threshold_ms",
]

FilterValue = str | int | bool | Sequence[str | int | bool]


@dataclass(frozen=True)
class Question:
    """What the user asks, before it becomes SQL."""

    measures: Sequence[str]
    range: TimeRange
    by: Sequence[str] = ()
    filters: Mapping[str, FilterValue] = field(default_factory=dict)
    interval: timedelta | None = None
    """Time buckets for a time series (a ``time`` column first); None for one row per group."""
    thresholds: Mapping[str, float] = field(default_factory=dict)
    """Per-request latency limits in ms, for ``attainment`` and ``goodput_rps``; without
    any, a good request is one that succeeded."""
    exact: bool | None = None
    """True: exact percentiles from raw rows. False: approximate percentiles. None: the
    fastest source that covers the question (a rollup's are approximate)."""
    include_probes: bool = False
    order_by: str | None = None
    """A dimension or measure to sort by; a leading ``-`` sorts descending."""
    limit: int | None = None
    keep: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Per grouped dimension, the values to keep; every other value is grouped as
    ``other`` (to bound the cardinality of exported labels)."""
    checks: Sequence[tuple[str, float]] = ()
    """(latency column, limit) pairs whose position counts to return, for exact tests of
    percentile objectives (see :func:`warehouse.aggregates.position_columns`);
    only a rollup that keeps them (an SLO's) returns them."""
    spans: Sequence[TimeRange] = ()
    """Parts of ``range`` answered by the same query (an SLA report's burn windows): the
    result gains a ``span`` column first, 0 for ``range`` and ``k`` for ``spans[k - 1]``;
    a group without requests in a span has no row for it. ClickHouse only, and not with
    ``interval``. From a rollup's pieces or from raw rows, never the built-in rollups."""


def check_names(dims: list[Dimension], measures: list[Measure], timeseries: bool) -> None:
    names = [d.name for d in dims] + [m.name for m in measures] + ["time"] * timeseries
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise QueryError(f"result column {repeated[0]!r} asked twice")


def check_spans(question: Question, capabilities: Capabilities) -> None:
    if not question.spans:
        return
    if not capabilities.array_join:
        raise QueryError("spans are answered on ClickHouse only: ask one question per span")
    if question.interval is not None:
        raise QueryError("spans and interval: ask a time series for one range at a time")
    outer = question.range
    for s in question.spans:
        if not (outer.since <= s.since < s.until <= outer.until):
            raise QueryError(f"span [{s.since}, {s.until}) is not inside the range asked")


def filter_values(name: str, value: FilterValue, param_type: str | None = None) -> list[Any]:
    values = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
    if not values:
        raise QueryError(f"filter {name}: empty list of values")
    param_type = param_type or dimension(name).param_type
    checked: list[bool | int | str] = []
    for v in values:
        if param_type == "Bool" and isinstance(v, bool):
            checked.append(v)
        elif param_type == "Bool" and str(v).lower() in ("true", "false", "1", "0"):
            checked.append(str(v).lower() in ("true", "1"))
        elif param_type.startswith("UInt") and not isinstance(v, bool) and str(v).isdigit():
            checked.append(int(str(v)))
        elif param_type == "String" and isinstance(v, str | int) and not isinstance(v, bool):
            checked.append(str(v))
        else:
            raise QueryError(f"filter {name}: bad value {v!r}")
    return checked


def threshold_ms(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf") or isinstance(value, bool):
        raise QueryError(
            f"threshold {name}: expected a positive number of milliseconds, got {value!r}"
        )
    return number


MAX_LIMIT = 2**63 - 1
"""The largest row limit: what a signed 64-bit LIMIT holds."""


def check_limit(limit: int | None) -> None:
    """Refuse a row limit that is not a whole number from 1 to :data:`MAX_LIMIT`."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"bad limit {limit!r}: expected a whole number from 1 to {MAX_LIMIT}")
