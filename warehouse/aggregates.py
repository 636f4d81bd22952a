"""The aggregates of requests: each defined once, as what it holds of one request and how
it combines, from which every place that computes it is derived.

An :class:`Aggregate` is a mergeable summary of a group of requests (a count, a sum, a
map of counts, a minimum or a maximum), defined by the aggregate function, the value one
request contributes and the condition that picks the requests it holds. From that one
definition come:

* its column in a rollup: the type in ``CREATE TABLE`` (a ``SimpleAggregateFunction``,
  so that merges of parts combine rows of one key), the aggregate that fills it from
  `requests` rows (a materialized view or a backfill), the aggregate that merges rollup
  rows into coarser ones, and the row one request alone would make (how the query layer
  reads a range's ragged ends);
* its reading in a question: over `requests` rows and over rollup rows.

The query layer's measures are formulas over aggregates named here
(:mod:`warehouse.query.registry`); the store renders them into the built-in rollups
(migration 0012, through the ``${rollup:...}`` macro) and the SLO rollups
(docs/slo-rollups.md). A :class:`HistogramCount` is a count no column keeps of its own:
a latency histogram answers it.

Each latency keeps one histogram whose key says both the bucket and whether the request
succeeded (``bucket * 2 + ok``; see :func:`warehouse.model.fold_histogram`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from warehouse.errors import InvalidArgument
from warehouse.model import (
    BUCKET_GROWTH,
    BUCKET_MIN_MS,
    LATENCY_COLUMNS,
    ROLLUP_LATENCIES,
    TOKEN_COLUMNS,
)

__all__ = [
    "BUILT_IN",
    "DECODING",
    "Aggregate",
    "HistogramCount",
    "Read",
    "aggregate",
    "check_prefix",
    "clickhouse_bucket",
    "good",
    "good_condition",
    "good_from_histograms",
    "histogram_quantile_sql",
    "position_columns",
    "read",
    "rollup_columns",
]

DECODING = "output_tokens > 1 AND e2e_ms > ttft_ms"
"""Requests whose decode speed is defined (more than one output token, time after it)."""

Function = Literal["count", "sum", "sumMap", "max", "min"]

_CASTS = {"UInt64": "toUInt64", "Float64": "toFloat64"}

_MERGED_BY: dict[str, str] = {"count": "sum", "sum": "sum", "sumMap": "sumMap"}
"""How each function's values merge (a count's by summing; the others by themselves)."""


@dataclass(frozen=True)
class Aggregate:
    """A mergeable aggregate of requests, and the rollup column that keeps it.

    ``function`` over ``value`` (ClickHouse SQL of what one request contributes; none for
    a count) of the requests ``where`` picks (all, when None). ``nullable`` says the
    condition can be NULL (it reads a Nullable column), which counts as false.
    """

    name: str
    function: Function
    value: str | None = None
    where: str | None = None
    value_type: str = "UInt64"
    """The type of the merged value (Float64, Map(String, UInt64) ...)."""
    nullable: bool = False
    column: str | None = None
    """For the sum of a column, NULL as 0: that column (``value`` is then one request's
    part). Rows read whole sum the column and cast the sum once, not each row."""

    @property
    def merged_by(self) -> str:
        return _MERGED_BY.get(self.function, self.function)

    @property
    def type(self) -> str:
        """Its type in CREATE TABLE."""
        return f"SimpleAggregateFunction({self.merged_by}, {self.value_type})"

    def definition(self) -> str:
        return f"{self.name} {self.type}"

    @property
    def over_requests(self) -> str:
        """The aggregate over a group of `requests` rows."""
        where, value = self.where, self.value
        if self.function == "count":
            return "count()" if where is None else f"countIf({where})"
        if where is None and self.column is not None:
            return f"{_CASTS[self.value_type]}(ifNull(sum({self.column}), 0))"
        if where is None:
            return f"{self.function}({value})"
        if self.function == "min":
            # minIf over no rows is the type's default (0), not the neutral +inf.
            return f"if(countIf({where}) = 0, inf, minIf({value}, {where}))"
        return f"{self.function}If({value}, {where})"

    @property
    def over_rollup(self) -> str:
        """The aggregate over a group of rollup rows."""
        return f"{self.merged_by}({self.name})"

    @property
    def filling(self) -> str:
        """The aggregate a view or a backfill fills the rollup column with from `requests`
        rows: :attr:`over_requests`, or a cheaper way to the same value over many rows
        (a column's sum fills as migration 0012 wrote it: the same value)."""
        if self.column is not None:
            return f"sum({self.value})"
        return self.over_requests

    @property
    def from_requests(self) -> str:
        """The rollup column's fill from `requests` rows (``... AS name``)."""
        return f"{self.filling} AS {self.name}"

    @property
    def merge(self) -> str:
        """The rollup column's merge of rollup rows (``... AS name``)."""
        return f"{self.over_rollup} AS {self.name}"

    @property
    def per_request(self) -> str:
        """Its value for one request: the row a single request would make, which merges
        with rollup rows like any other."""
        condition = self.where
        if condition is not None and self.nullable:
            condition = f"ifNull({condition}, 0)"
        if self.function == "count":
            return "toUInt64(1)" if condition is None else f"toUInt64({condition})"
        assert self.value is not None  # every other function sums, maps or compares a value
        if condition is None:
            return self.value
        return f"if({condition}, {self.value}, {self._neutral})"

    @property
    def _neutral(self) -> str:
        """What a request outside ``where`` contributes."""
        if self.function == "sumMap":
            return "map()"
        if self.function == "min":
            return "inf"
        return "toUInt64(0)" if self.value_type == "UInt64" else "0."


@dataclass(frozen=True)
class Histogram(Aggregate):
    """The ``bucket * 2 + ok`` histogram of a latency, as a map of counts.

    A question reads it as ``sumMapIf`` of one-entry maps (a few rows: a range's ragged
    ends); a view fills it by sorting its keys (:func:`_histogram_of`), five times
    cheaper per row and a far larger tree to build."""

    column: str = ""

    @property
    def filling(self) -> str:
        return _histogram_of(self.column)


@dataclass(frozen=True)
class HistogramCount:
    """How many requests have a latency (at most ``limit``, when given; successful ones
    only with ``ok_only``): a count read from the latency's histogram in a rollup, the
    limit's own bucket counted in proportion to where the limit falls in it (as
    :func:`warehouse.model.histogram_share_below` does). ``limit`` is SQL: a number or a
    bound value."""

    name: str
    column: str
    limit: str | None = None
    ok_only: bool = False

    @property
    def over_requests(self) -> str:
        terms = [f"{self.column} <= {self.limit}" if self.limit else f"{self.column} IS NOT NULL"]
        if self.ok_only:
            terms.insert(0, "status = 'ok'")
        if self.limit is None and not self.ok_only:
            return f"count({self.column})"
        return f"countIf({' AND '.join(terms)})"

    @property
    def kept_in(self) -> str:
        return f"{self.column}_hist"

    @property
    def over_rollup(self) -> str:
        # Histogram keys are bucket * 2 + ok: odd keys are successful requests' buckets.
        weight = "c * (k % 2)" if self.ok_only else "c"
        if self.limit is not None:
            low = f"if(k < 2, 0., {BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, intDiv(k, 2) - 1))"
            high = f"{BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, intDiv(k, 2))"
            weight += f" * least(1., greatest(0., ({self.limit} - {low}) / ({high} - {low})))"
        elif not self.ok_only:
            return f"sum(arraySum(mapValues({self.kept_in})))"
        merged = f"sumMap({self.kept_in})"
        return f"arraySum(arrayMap((k, c) -> {weight}, mapKeys({merged}), mapValues({merged})))"


Read = Aggregate | HistogramCount
"""What a measure's formula names: an aggregate, or a count a histogram answers."""


def clickhouse_bucket(column: str) -> str:
    """ClickHouse SQL of the latency histogram bucket of ``column`` (see model.latency_bucket)."""
    return (
        f"if(assumeNotNull({column}) < {BUCKET_MIN_MS}, toUInt16(0), "
        f"toUInt16(least(floor(log(assumeNotNull({column}) / {BUCKET_MIN_MS}) "
        f"/ log({BUCKET_GROWTH})) + 1, 65535)))"
    )


_TOKENS = ("prompt_tokens", "output_tokens", "cached_prompt_tokens")
_ERRORS_BY_CLASS = "map(toString(error_class), toUInt64(1))"
_STATUS_COUNTS = {"errors": "error", "rejections": "rejected"}
_AT_MOST = re.compile(r"^(\w+?)_le_(\d{1,7})$")


def aggregate(name: str) -> Aggregate:
    """The aggregate called ``name`` (``requests``, ``ttft_ms_hist``, ...), which is also
    the name of the rollup column that keeps it."""
    found = read(name)
    if not isinstance(found, Aggregate):
        raise InvalidArgument(f"{name} is read from {found.kept_in}: no column of its own")
    return found


@functools.lru_cache(maxsize=1024)
def read(name: str) -> Read:
    """The aggregate, or the count a histogram answers, called ``name``:

    ``requests``, ``errors``, ``rejections``, ``errors_by_class``; ``<token>_sum`` and
    ``<token>_count`` (requests with a value); ``decode_tokens_sum`` and
    ``decode_ms_sum`` (over requests whose decode speed is defined); ``<latency>_sum``,
    ``<latency>_hist``, ``<latency>_count`` and ``<latency>_le_<ms>`` (read from the
    histogram).
    """
    if name == "requests":
        return Aggregate(name, "count")
    if name in _STATUS_COUNTS:
        return Aggregate(name, "count", where=f"status = '{_STATUS_COUNTS[name]}'")
    if name == "errors_by_class":
        return Aggregate(
            name, "sumMap", _ERRORS_BY_CLASS, "error_class != ''", "Map(String, UInt64)"
        )
    column, _, kind = name.rpartition("_")
    if column in TOKEN_COLUMNS and kind == "sum":
        return Aggregate(name, "sum", f"toUInt64(ifNull({column}, 0))", column=column)
    if column in TOKEN_COLUMNS and kind == "count":
        return Aggregate(name, "count", where=f"{column} IS NOT NULL")
    if name == "decode_tokens_sum":
        return Aggregate(name, "sum", "toUInt64(assumeNotNull(output_tokens) - 1)", DECODING)
    if name == "decode_ms_sum":
        value = "toFloat64(assumeNotNull(e2e_ms)) - assumeNotNull(ttft_ms)"
        return Aggregate(name, "sum", value, DECODING, "Float64")
    if column in LATENCY_COLUMNS and kind == "sum":
        value = f"toFloat64(ifNull({column}, 0))"
        return Aggregate(name, "sum", value, value_type="Float64", column=column)
    if column in LATENCY_COLUMNS and kind == "hist":
        key = f"map({_histogram_key(column)}, toUInt64(1))"
        return Histogram(
            name, "sumMap", key, f"{column} IS NOT NULL", "Map(UInt16, UInt64)", column=column
        )
    if column in LATENCY_COLUMNS and kind == "count":
        return HistogramCount(name, column)
    match = _AT_MOST.match(name)
    if match and match[1] in LATENCY_COLUMNS:
        return HistogramCount(name, match[1], match[2])
    raise InvalidArgument(f"no aggregate {name!r}")


def _histogram_key(column: str) -> str:
    """A request's key in the histogram of ``column``: its bucket, and whether it succeeded."""
    return f"toUInt16(least({clickhouse_bucket(column)}, 32767) * 2 + (status = 'ok'))"


def _histogram_of(column: str) -> str:
    """The ``bucket * 2 + ok`` histogram of ``column`` over a group's rows, as a map.

    ``sumMap`` over a one-entry map per row says the same at five times the cost: its
    state is an ordered tree of generic values, updated once per row, and the four
    histograms were 85% of a rollup view's aggregation (docs/benchmarks.md, "Rollup
    costs"). Instead each group gathers its keys in an array (a push per row), sorts
    them once, and counts each run of equal keys: ``first`` marks where a new key
    begins, and a run's count is the distance from its start to the next. The map's
    keys come out sorted, as ``sumMap`` writes them. Every array reaches a lambda as an
    argument, never captured from outside it: a server that copies a captured column
    once per element would do a group's work squared. Identical expressions are
    computed once, so ``keys`` and ``first`` are not evaluated for each place they
    appear in.
    """
    keys = f"arraySort(groupArrayIf({_histogram_key(column)}, {column} IS NOT NULL))"
    first = f"arrayMap((d, i) -> i = 1 OR d != 0, arrayDifference({keys}), arrayEnumerate({keys}))"
    values = f"arrayFilter((k, f) -> f, {keys}, {first})"
    starts = f"arrayFilter((i, f) -> f, arrayEnumerate({keys}), {first})"
    counts = f"arrayPopFront(arrayDifference(arrayPushBack({starts}, length({keys}) + 1)))"
    return f"mapFromArrays({values}, arrayMap(n -> toUInt64(n), {counts}))"


def rollup_columns(names: list[str]) -> list[Aggregate]:
    return [aggregate(name) for name in names]


BUILT_IN = [
    "requests",
    "errors",
    "rejections",
    "errors_by_class",
    *(f"{c}_sum" for c in _TOKENS),
    "decode_tokens_sum",
    "decode_ms_sum",
    *(f"{c}_{kind}" for c in ROLLUP_LATENCIES for kind in ("sum", "hist")),
]
"""The columns of the built-in rollups (0012), in their order."""


def check_prefix(column: str, limit: float) -> str:
    """The column-name prefix of the position counts of ``column`` around ``limit``."""
    text = format(float(limit), "g").replace(".", "_").replace("-", "m").replace("+", "")
    return f"{column}_at_{text}"


def position_columns(column: str, limit: float) -> list[Aggregate]:
    """Where ``limit`` falls among the values of ``column``, in mergeable counts.

    ``n`` values in all, ``lt`` below the limit, ``le`` at most the limit, ``lo`` the
    largest below it and ``hi`` the smallest above it. From these any interpolated
    percentile of the merged values can be compared with the limit exactly (see
    :func:`warehouse.query.slo_rollup.percentile_verdicts`): the order statistics next to
    the limit are ``lo``, the limit itself, or ``hi``. Latencies are never negative, so
    0 is the neutral ``lo`` of a group without values below the limit. A NULL latency is
    counted by none of them, as countIf does not count it.
    """
    p, c, t = check_prefix(column, limit), column, repr(float(limit))
    value = f"toFloat64(assumeNotNull({c}))"
    return [
        Aggregate(f"{p}_n", "count", where=f"{c} IS NOT NULL", nullable=True),
        Aggregate(f"{p}_lt", "count", where=f"{c} < {t}", nullable=True),
        Aggregate(f"{p}_le", "count", where=f"{c} <= {t}", nullable=True),
        Aggregate(f"{p}_lo", "max", value, f"{c} < {t}", "Float64", nullable=True),
        Aggregate(f"{p}_hi", "min", value, f"{c} > {t}", "Float64", nullable=True),
    ]


def good(thresholds: Mapping[str, str], name: str = "good") -> Aggregate:
    """The count of good requests: ok, and within every threshold (if any).

    ``thresholds`` maps latency columns to the SQL of their limit (a number or a bound
    value). As in vLLM's serving benchmark, a request whose TPOT is undefined (one output
    token) meets a TPOT threshold; any other missing latency fails its threshold.
    """
    return Aggregate(name, "count", where=good_condition(thresholds))


def good_from_histograms(thresholds: Mapping[str, str]) -> str | None:
    """ClickHouse SQL of :func:`good`'s count over rollup rows; None when they cannot say.

    Only for a single threshold on a latency the built-in rollups keep (several need the
    joint distribution): the count comes from the histogram of successful requests'
    latencies, with the threshold's own bucket counted in proportion to where the
    threshold falls in it, as :func:`warehouse.model.histogram_share_below` does.
    """
    ok = f"({' - '.join(aggregate(n).over_rollup for n in ('requests', 'errors', 'rejections'))})"
    if not thresholds:
        return ok
    if len(thresholds) != 1 or next(iter(thresholds)) not in ROLLUP_LATENCIES:
        return None
    [(column, limit)] = thresholds.items()
    below = HistogramCount("good", column, limit, ok_only=True).over_rollup
    if column != "tpot_ms":
        return below
    with_one = HistogramCount("timed", column, ok_only=True).over_rollup
    return f"({ok} - {with_one} + {below})"


def good_condition(thresholds: Mapping[str, str]) -> str:
    """ClickHouse SQL of whether one request is good (see :func:`good`)."""
    terms = ["status = 'ok'"]
    for column, limit in thresholds.items():
        default = "true" if column == "tpot_ms" else "false"
        terms.append(f"coalesce({column} <= {limit}, {default})")
    return " AND ".join(terms)


def histogram_quantile_sql(column: str, level: str) -> str:
    """ClickHouse SQL of the ``level`` quantile of a latency over a group of rollup rows,
    read from their histograms as :func:`warehouse.model.histogram_quantiles` reads them
    (the same bucket, the same interpolation inside it), for SQL the query layer does not
    run (the Grafana dashboards); NULL for no latency. ``level`` is SQL: a number or a
    variable."""
    merged = (
        f"sumMap(arrayMap(k -> intDiv(k, 2), mapKeys({column}_hist)), mapValues({column}_hist))"
    )
    bucket, count = "h.1[i]", "h.2[i]"
    low = f"if({bucket} = 0, 0., {BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, {bucket} - 1))"
    high = f"{BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, {bucket})"
    within = f"least(1., greatest(0., (rank - (cum[i] - {count}) + 0.5) / {count}))"
    value = f"if(i = 0, NULL, {low} + {within} * ({high} - {low}))"
    at = f"arrayMap(i -> {value}, [arrayFirstIndex(c -> c > floor(rank), cum)])[1]"
    ranked = (
        f"arrayMap((cum, rank) -> {at}, [arrayCumSum(h.2)], [({level}) * (arraySum(h.2) - 1)])[1]"
    )
    return f"arrayMap(h -> {ranked}, [{merged}])[1]"
