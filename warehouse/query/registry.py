"""The registry: every dimension and measure of the query layer, defined once.

A dimension or a measure is a piece of ClickHouse SQL over `requests` (and, where the
rollups can answer it, over `requests_1m`/`requests_1h`); the builder puts the pieces
together and :mod:`warehouse.query.dialects` renders them for the store. Names asked for
by users are looked up here and nowhere else, so no user string becomes an identifier:
an unknown name is an error listing the known ones.

Measure names are result column names everywhere (API, CLI, exporter, dashboards; see
docs/querying.md, "Dimensions and measures"):
``count``, ``error_rate``, ``rejection_rate``, ``p<q>_<latency>`` (q in 50, 75, 90, 95,
99, 99.9 written ``p999``), ``avg_<column>``, ``sum_<token column>``, ``kv_hit_ratio``,
``decode_tps``, ``attainment``, ``goodput_rps``, ``count_<latency>`` and
``count_<latency>_le_<ms>``, plus ``error_count``, ``rejection_count`` and ``rps``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from sqlglot import exp

from warehouse.errors import QueryError
from warehouse.model import (
    BUCKET_GROWTH,
    BUCKET_MIN_MS,
    DIMENSIONS,
    LATENCY_COLUMNS,
    REQUESTS_SCHEMA,
    ROLLUP_DIMENSIONS,
    ROLLUP_LATENCIES,
    TOKEN_COLUMNS,
)
from warehouse.query import trees

__all__ = [
    "MEASURES",
    "PERCENTILES",
    "Dimension",
    "Measure",
    "dimension",
    "dimension_names",
    "good_count",
    "histogram_quantile_sql",
    "measure",
    "measure_names",
    "measures_of_every_family",
]

PERCENTILES = {"50": 0.5, "75": 0.75, "90": 0.9, "95": 0.95, "99": 0.99, "999": 0.999}
"""Percentile levels by the digits of their measure names (p999 is the 99.9th)."""


@dataclass(frozen=True)
class Dimension:
    """A column results can be grouped and filtered by."""

    name: str
    """Result column name."""
    sql: str
    """ClickHouse SQL of its value over `requests`."""
    param_type: str
    """ClickHouse type of its filter values."""
    in_rollup: bool
    """Whether the rollups keep it (all keep the SLA dimensions, only some the others)."""

    @property
    def tree(self) -> exp.Expr:
        """Its SQL as a fresh tree to compose."""
        return trees.expression(self.sql)


_OTHER_DIMENSIONS = {"is_probe": "Bool", "http_status": "UInt16"}
_REQUEST_COLUMNS = frozenset(REQUESTS_SCHEMA.names) | {"time"}
_ATTR_KEY = re.compile(
    r"^attrs\[['\"]([A-Za-z_][A-Za-z0-9_.:/-]{0,63})['\"]\]$|^attrs\.([A-Za-z_][A-Za-z0-9_]{0,63})$"
)


def dimension(name: str) -> Dimension:
    """The dimension called ``name``: a `requests` column, or ``attrs['key']``."""
    if name in DIMENSIONS:
        return Dimension(name, name, "String", name in ROLLUP_DIMENSIONS)
    if name in _OTHER_DIMENSIONS:
        return Dimension(name, name, _OTHER_DIMENSIONS[name], name in ROLLUP_DIMENSIONS)
    match = _ATTR_KEY.match(name) if isinstance(name, str) else None
    if match:
        key = match[1] or match[2]
        # Named as a column of `requests`, its alias would stand for that column in the
        # query's filters (ClickHouse prefers an alias to a column): attrs['tenant']
        # would unbind the tenant filter. Such a key is named attr_<key>.
        shown = f"attr_{key}" if key in _REQUEST_COLUMNS else key
        # A missing key is '' in ClickHouse and NULL in DuckDB: '' on both.
        return Dimension(shown, f"coalesce(attrs['{key}'], '')", "String", False)
    raise QueryError(
        f"unknown dimension {name!r}; known: {', '.join(dimension_names())}, "
        "or attrs['key'] for a further label"
    )


def dimension_names() -> list[str]:
    return [*DIMENSIONS, *_OTHER_DIMENSIONS]


@dataclass(frozen=True)
class Measure:
    """An aggregate figure, as raw SQL and (where the rollups hold it) rollup SQL.

    ``{seconds:Float64}`` in the SQL is the length of the group's time span, and
    ``{good_count}`` the count of requests within the thresholds (see :func:`good_count`).
    """

    name: str
    raw: str
    rollup: str | None
    column: str | None = None
    """The latency of a percentile measure (percentiles of one column share one pass)."""
    level: float | None = None
    """The quantile level of a percentile measure."""
    needs_thresholds: bool = False
    counts_below: bool = False
    """Counts requests under a latency: from a rollup, in proportion within one bucket."""

    @property
    def is_percentile(self) -> bool:
        return self.level is not None

    def tree(self, rollup: bool) -> exp.Expr:
        """Its SQL over raw rows, or over rollup rows, as a fresh tree to compose."""
        sql = self.rollup if rollup else self.raw
        if not sql:
            raise QueryError(
                f"{self.name} has no single expression over {'rollup' if rollup else 'raw'} rows"
            )
        return trees.expression(sql)

    @functools.cached_property
    def rollup_columns(self) -> tuple[str, ...] | None:
        """The rollup columns it reads, in the order its rollup SQL names them; None when
        no rollup answers it. A percentile reads its latency's histogram."""
        if self.is_percentile:
            return (f"{self.column}_hist",) if self.rollup is not None else None
        if self.rollup is None:
            return None
        found = self.tree(rollup=True).find_all(exp.Column, bfs=False)
        return tuple(dict.fromkeys(c.name for c in found))


def _ratio(numerator: str, denominator: str) -> str:
    return f"{numerator} / nullIf({denominator}, 0)"


_DECODING = "output_tokens > 1 AND e2e_ms > ttft_ms"

MEASURES: dict[str, tuple[str, str | None]] = {
    "count": ("count()", "sum(requests)"),
    "error_count": ("countIf(status = 'error')", "sum(errors)"),
    "rejection_count": ("countIf(status = 'rejected')", "sum(rejections)"),
    "error_rate": (
        _ratio("countIf(status = 'error')", "count()"),
        _ratio("sum(errors)", "sum(requests)"),
    ),
    "rejection_rate": (
        _ratio("countIf(status = 'rejected')", "count()"),
        _ratio("sum(rejections)", "sum(requests)"),
    ),
    "rps": ("count() / {seconds:Float64}", "sum(requests) / {seconds:Float64}"),
    "kv_hit_ratio": (
        _ratio("sum(toFloat64(cached_prompt_tokens))", "sum(toFloat64(prompt_tokens))"),
        _ratio("sum(toFloat64(cached_prompt_tokens_sum))", "sum(toFloat64(prompt_tokens_sum))"),
    ),
    "decode_tps": (
        "1000 * "
        + _ratio(
            f"sumIf(toFloat64(output_tokens) - 1, {_DECODING})",
            f"sumIf(toFloat64(e2e_ms) - toFloat64(ttft_ms), {_DECODING})",
        ),
        "1000 * " + _ratio("sum(toFloat64(decode_tokens_sum))", "sum(decode_ms_sum)"),
    ),
}
"""The measures with a fixed name: (ClickHouse SQL over `requests` rows, SQL over rollup
rows, or None where no rollup keeps what it reads). One entry is all a measure over these
columns takes: the builder answers it from raw rows and from any rollup that keeps the
columns its rollup SQL reads, on every store, in Grafana panels and in the client merge
(tests/integration/query/test_a_new_measure.py adds one)."""

GOOD_COUNT = "{good_count:UInt64}"
"""Stands for the count of good requests in threshold measures (see :func:`good_count`):
a placeholder the builder replaces by the count of the source it reads."""

_THRESHOLD_MEASURES: dict[str, tuple[str, str]] = {
    "attainment": (_ratio(GOOD_COUNT, "count()"), _ratio(GOOD_COUNT, "sum(requests)")),
    "goodput_rps": (f"{GOOD_COUNT} / {{seconds:Float64}}", f"{GOOD_COUNT} / {{seconds:Float64}}"),
    "good_count": (GOOD_COUNT, GOOD_COUNT),
}

_PERCENTILE = re.compile(r"^p(50|75|90|95|99|999)_(\w+)$")
_COUNT_AT_MOST = re.compile(r"^count_(\w+?)_le_(\d{1,7})$")  # a name is a result column


def measure(name: str) -> Measure:
    """The measure called ``name``; an unknown name is an error listing the families."""
    if not isinstance(name, str):
        raise QueryError(f"bad measure {name!r}: expected a measure name such as p95_ttft_ms")
    if name in MEASURES:
        return _fixed(name, *MEASURES[name])
    return _measure(name)


@functools.lru_cache(maxsize=256)
def _fixed(name: str, raw: str, rollup: str | None) -> Measure:
    return Measure(name, raw, rollup)


@functools.lru_cache(maxsize=1024)
def _measure(name: str) -> Measure:
    if name in _THRESHOLD_MEASURES:
        return Measure(name, *_THRESHOLD_MEASURES[name], needs_thresholds=True)
    rollup: str | None
    match = _PERCENTILE.match(name)
    if match and match[2] in LATENCY_COLUMNS:
        column = match[2]
        # The SQL of a percentile is filled in by the builder, which computes all the
        # levels asked of one column in a single quantiles(...) pass.
        return Measure(
            name, "", "" if column in ROLLUP_LATENCIES else None, column, PERCENTILES[match[1]]
        )
    if name.startswith("count_") and name[6:] in LATENCY_COLUMNS:
        column = name[6:]
        rollup = _histogram_count(column, None, False) if column in ROLLUP_LATENCIES else None
        return Measure(name, f"count({column})", rollup)
    match = _COUNT_AT_MOST.match(name)
    if match and match[1] in LATENCY_COLUMNS:
        column, limit = match[1], match[2]
        rollup = _histogram_count(column, limit, False) if column in ROLLUP_LATENCIES else None
        return Measure(name, f"countIf({column} <= {limit})", rollup, counts_below=True)
    if name.startswith("avg_") and name[4:] in LATENCY_COLUMNS:
        column = name[4:]
        rollup = (
            _ratio(f"sum({column}_sum)", f"sum(arraySum(mapValues({column}_hist)))")
            if column in ROLLUP_LATENCIES
            else None
        )
        return Measure(name, f"avg(toFloat64({column}))", rollup)
    if name.startswith("avg_") and name[4:] in TOKEN_COLUMNS:
        return Measure(name, f"avg(toFloat64({name[4:]}))", None)
    if name.startswith("sum_") and name[4:] in TOKEN_COLUMNS:
        column = name[4:]
        rollup = f"sum({column}_sum)" if column != "max_context_tokens" else None
        return Measure(name, f"coalesce(sum(toUInt64({column})), 0)", rollup)
    raise QueryError(
        f"unknown measure {name!r}; known: {', '.join(measure_names())}, "
        f"p<q>_<latency> (q in {', '.join(PERCENTILES)}; latency in {', '.join(LATENCY_COLUMNS)}), "
        f"avg_<latency or token column>, sum_<token column> ({', '.join(TOKEN_COLUMNS)}), "
        "count_<latency> (requests with one), count_<latency>_le_<ms> (at most ms)"
    )


def measure_names() -> list[str]:
    return [*MEASURES, *_THRESHOLD_MEASURES]


def measures_of_every_family(limit_ms: int = 150) -> list[Measure]:
    """Every measure the registry defines, each family spelled out over its columns
    (``count_<latency>_le_<ms>`` at ``limit_ms``): what a test of every target reads."""
    names = [*measure_names()]
    for column in LATENCY_COLUMNS:
        names += [f"p{digits}_{column}" for digits in PERCENTILES]
        names += [f"count_{column}", f"count_{column}_le_{limit_ms}", f"avg_{column}"]
    for column in TOKEN_COLUMNS:
        names += [f"avg_{column}", f"sum_{column}"]
    return [measure(name) for name in names]


def good_count(thresholds: dict[str, str], rollup: bool) -> str | None:
    """ClickHouse SQL counting good requests: ok, and within every threshold (if any).

    ``thresholds`` maps latency columns to the SQL of their bound limit. As in vLLM's
    serving benchmark, a request whose TPOT is undefined (one output token) meets a TPOT
    threshold; any other missing latency fails its threshold.

    From a rollup (only for a single threshold: several need the joint distribution)
    the count comes from the histogram of successful requests' latencies, with the
    threshold's own bucket counted in proportion to where the threshold falls in it, as
    :func:`warehouse.model.histogram_share_below` does; None when a rollup cannot say.
    """
    for column in thresholds:
        if column not in LATENCY_COLUMNS:
            raise QueryError(
                f"bad threshold {column!r}: thresholds apply to {', '.join(LATENCY_COLUMNS)}"
            )
    if not rollup:
        return f"countIf({good_condition(thresholds)})"
    ok = "(sum(requests) - sum(errors) - sum(rejections))"
    if not thresholds:
        return ok
    if len(thresholds) != 1 or next(iter(thresholds)) not in ROLLUP_LATENCIES:
        return None
    [(column, limit)] = thresholds.items()
    below = _histogram_count(column, limit, ok_only=True)
    if column != "tpot_ms":
        return below
    return f"({ok} - {_histogram_count(column, None, ok_only=True)} + {below})"


def good_condition(thresholds: dict[str, str]) -> str:
    """ClickHouse SQL of whether one request is good (see :func:`good_count`)."""
    terms = ["status = 'ok'"]
    for column, limit in thresholds.items():
        default = "true" if column == "tpot_ms" else "false"
        terms.append(f"coalesce({column} <= {limit}, {default})")
    return " AND ".join(terms)


def _histogram_count(column: str, limit: str | None, ok_only: bool) -> str:
    """ClickHouse SQL counting, from a group of rollup rows' histograms of ``column``, the
    requests with a value (at most ``limit`` when given, the limit's own bucket counted in
    proportion to where the limit falls in it); successful requests only with ``ok_only``.
    """
    # Histogram keys are bucket * 2 + ok: odd keys are successful requests' buckets.
    weight = "c * (k % 2)" if ok_only else "c"
    if limit is not None:
        low = f"if(k < 2, 0., {BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, intDiv(k, 2) - 1))"
        high = f"{BUCKET_MIN_MS} * pow({BUCKET_GROWTH}, intDiv(k, 2))"
        weight += f" * least(1., greatest(0., ({limit} - {low}) / ({high} - {low})))"
    elif not ok_only:
        return f"sum(arraySum(mapValues({column}_hist)))"
    histogram = f"sumMap({column}_hist)"
    return f"arraySum(arrayMap((k, c) -> {weight}, mapKeys({histogram}), mapValues({histogram})))"


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
