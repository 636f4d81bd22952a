"""The measure columns rollups keep: what each holds, how it fills and how it merges.

A rollup row summarises the `requests` rows of one time bucket and one group. Each of
its measure columns has three pieces of SQL: its type in ``CREATE TABLE`` (a
``SimpleAggregateFunction``, so that merges of parts combine rows of one key), the
aggregate that fills it from `requests` rows (in a materialized view or a backfill), and
the aggregate that merges rollup rows into coarser ones, plus the row one request alone
would make. Defined once here, below both paths: the store renders them into the
built-in rollups (migration 0012, through the ``${rollup:...}`` macro) and the SLO
rollups, and the query layer's rollup measures read them (docs/slo-rollups.md).

Each latency keeps one histogram whose key says both the bucket and whether the request
succeeded (``bucket * 2 + ok``; see :func:`warehouse.model.fold_histogram`).
"""

from __future__ import annotations

from dataclasses import dataclass

from warehouse.errors import InvalidArgument
from warehouse.model import BUCKET_GROWTH, BUCKET_MIN_MS, LATENCY_COLUMNS, ROLLUP_LATENCIES

__all__ = [
    "BUILT_IN",
    "DECODING",
    "RollupColumn",
    "check_prefix",
    "clickhouse_bucket",
    "position_columns",
    "rollup_column",
    "rollup_columns",
]

DECODING = "output_tokens > 1 AND e2e_ms > ttft_ms"
"""Requests whose decode speed is defined (more than one output token, time after it)."""


@dataclass(frozen=True)
class RollupColumn:
    """One measure column of a rollup."""

    name: str
    type: str
    """Its type in CREATE TABLE."""
    from_requests: str
    """The aggregate over `requests` rows that fills it."""
    merge: str
    """The aggregate over rollup rows that merges it."""
    per_request: str
    """Its value for one request: the row a single request would make, which merges with
    rollup rows like any other (how the query layer reads a range's ragged ends)."""

    def definition(self) -> str:
        return f"{self.name} {self.type}"


def clickhouse_bucket(column: str) -> str:
    """ClickHouse SQL of the latency histogram bucket of ``column`` (see model.latency_bucket)."""
    return (
        f"if(assumeNotNull({column}) < {BUCKET_MIN_MS}, toUInt16(0), "
        f"toUInt16(least(floor(log(assumeNotNull({column}) / {BUCKET_MIN_MS}) "
        f"/ log({BUCKET_GROWTH})) + 1, 65535)))"
    )


_COUNT = "SimpleAggregateFunction(sum, UInt64)"
_FLOAT_SUM = "SimpleAggregateFunction(sum, Float64)"
_HISTOGRAM = "SimpleAggregateFunction(sumMap, Map(UInt16, UInt64))"
_TOKENS = ("prompt_tokens", "output_tokens", "cached_prompt_tokens")


def rollup_column(name: str) -> RollupColumn:
    """The rollup column called ``name`` (``requests``, ``ttft_ms_hist``, ...)."""
    if name == "requests":
        return RollupColumn(
            name, _COUNT, "count() AS requests", "sum(requests) AS requests", "toUInt64(1)"
        )
    if name in ("errors", "rejections"):
        status = "status = 'error'" if name == "errors" else "status = 'rejected'"
        return RollupColumn(
            name, _COUNT, f"countIf({status}) AS {name}", _sum(name), f"toUInt64({status})"
        )
    if name == "errors_by_class":
        one = "map(toString(error_class), toUInt64(1))"
        return RollupColumn(
            name,
            "SimpleAggregateFunction(sumMap, Map(String, UInt64))",
            f"sumMapIf({one}, error_class != '') AS errors_by_class",
            "sumMap(errors_by_class) AS errors_by_class",
            f"if(error_class != '', {one}, map())",
        )
    if name.endswith("_sum") and name[:-4] in _TOKENS:
        value = f"toUInt64(ifNull({name[:-4]}, 0))"
        return RollupColumn(name, _COUNT, f"sum({value}) AS {name}", _sum(name), value)
    if name == "decode_tokens_sum":
        value = "toUInt64(assumeNotNull(output_tokens) - 1)"
        return RollupColumn(
            name,
            _COUNT,
            f"sumIf({value}, {DECODING}) AS {name}",
            _sum(name),
            f"if({DECODING}, {value}, toUInt64(0))",
        )
    if name == "decode_ms_sum":
        value = "toFloat64(assumeNotNull(e2e_ms)) - assumeNotNull(ttft_ms)"
        return RollupColumn(
            name,
            _FLOAT_SUM,
            f"sumIf({value}, {DECODING}) AS {name}",
            _sum(name),
            f"if({DECODING}, {value}, 0.)",
        )
    if name.endswith("_sum") and name[:-4] in LATENCY_COLUMNS:
        value = f"toFloat64(ifNull({name[:-4]}, 0))"
        return RollupColumn(name, _FLOAT_SUM, f"sum({value}) AS {name}", _sum(name), value)
    if name.endswith("_hist") and name[:-5] in LATENCY_COLUMNS:
        column = name[:-5]
        return RollupColumn(
            name,
            _HISTOGRAM,
            f"{_histogram_of(column)} AS {name}",
            f"sumMap({name}) AS {name}",
            f"if({column} IS NULL, map(), map({_histogram_key(column)}, toUInt64(1)))",
        )
    raise InvalidArgument(f"no rollup column {name!r}")


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


def rollup_columns(names: list[str]) -> list[RollupColumn]:
    return [rollup_column(name) for name in names]


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


def _sum(name: str) -> str:
    return f"sum({name}) AS {name}"


def check_prefix(column: str, limit: float) -> str:
    """The column-name prefix of the position counts of ``column`` around ``limit``."""
    text = format(float(limit), "g").replace(".", "_").replace("-", "m").replace("+", "")
    return f"{column}_at_{text}"


def position_columns(column: str, limit: float) -> list[RollupColumn]:
    """Where ``limit`` falls among the values of ``column``, in mergeable counts.

    ``n`` values in all, ``lt`` below the limit, ``le`` at most the limit, ``lo`` the
    largest below it and ``hi`` the smallest above it. From these any interpolated
    percentile of the merged values can be compared with the limit exactly (see
    :func:`warehouse.query.slo_rollup.percentile_verdicts`): the order statistics next to
    the limit are ``lo``, the limit itself, or ``hi``. Latencies are never negative, so
    0 is the neutral ``lo`` of a group without values below the limit.
    """
    p, c, t = check_prefix(column, limit), column, repr(float(limit))
    value = f"toFloat64(assumeNotNull({c}))"

    def count(name: str, condition: str) -> RollupColumn:
        # A NULL latency is counted by none of them, as countIf does not count it.
        per_request = f"toUInt64(ifNull({condition}, 0))"
        return RollupColumn(
            name, _COUNT, f"countIf({condition}) AS {name}", _sum(name), per_request
        )

    return [
        count(f"{p}_n", f"{c} IS NOT NULL"),
        count(f"{p}_lt", f"{c} < {t}"),
        count(f"{p}_le", f"{c} <= {t}"),
        RollupColumn(
            f"{p}_lo",
            "SimpleAggregateFunction(max, Float64)",
            f"maxIf({value}, {c} < {t}) AS {p}_lo",
            f"max({p}_lo) AS {p}_lo",
            f"if(ifNull({c} < {t}, 0), {value}, 0.)",
        ),
        RollupColumn(
            f"{p}_hi",
            "SimpleAggregateFunction(min, Float64)",
            f"if(countIf({c} > {t}) = 0, inf, minIf({value}, {c} > {t})) AS {p}_hi",
            f"min({p}_hi) AS {p}_hi",
            f"if(ifNull({c} > {t}, 0), {value}, inf)",
        ),
    ]
