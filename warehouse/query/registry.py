"""The registry: every dimension and measure of the query layer, defined once.

A dimension or a measure is a piece of ClickHouse SQL over `requests` (and, where the
rollups can answer it, over `requests_1m`/`requests_1h`); the builder puts the pieces
together and :mod:`warehouse.dialects` renders them for the store. Names asked for
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

from warehouse import dialects
from warehouse.aggregates import (
    HistogramCount,
    Read,
    good,
    good_from_histograms,
    read,
)
from warehouse.errors import InvalidArgument, QueryError
from warehouse.model import (
    DIMENSIONS,
    LATENCY_COLUMNS,
    REQUESTS_SCHEMA,
    ROLLUP_DIMENSIONS,
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
    value: exp.Expr
    """Its value over `requests`."""
    param_type: str
    """ClickHouse type of its filter values."""
    in_rollup: bool
    """Whether the rollups keep it (all keep the SLA dimensions, only some the others)."""

    @property
    def tree(self) -> exp.Expr:
        """Its value as a fresh tree to compose."""
        return dialects.copy(self.value)


_OTHER_DIMENSIONS = {"is_probe": "Bool", "http_status": "UInt16"}
_REQUEST_COLUMNS = frozenset(REQUESTS_SCHEMA.names) | {"time"}
_ATTR_KEY = re.compile(
    r"^attrs\[['\"]([A-Za-z_][A-Za-z0-9_.:/-]{0,63})['\"]\]$|^attrs\.([A-Za-z_][A-Za-z0-9_]{0,63})$"
)


def dimension(name: str) -> Dimension:
    """The dimension called ``name``: a `requests` column, or ``attrs['key']``."""
    if name in DIMENSIONS:
        return Dimension(name, trees.column(name), "String", name in ROLLUP_DIMENSIONS)
    if name in _OTHER_DIMENSIONS:
        kind = _OTHER_DIMENSIONS[name]
        return Dimension(name, trees.column(name), kind, name in ROLLUP_DIMENSIONS)
    match = _ATTR_KEY.match(name) if isinstance(name, str) else None
    if match:
        key = match[1] or match[2]
        # Named as a column of `requests`, its alias would stand for that column in the
        # query's filters (ClickHouse prefers an alias to a column): attrs['tenant']
        # would unbind the tenant filter. Such a key is named attr_<key>.
        shown = f"attr_{key}" if key in _REQUEST_COLUMNS else key
        # A missing key is '' in ClickHouse and NULL in DuckDB: '' on both.
        value = trees.fill("coalesce(attrs[key], '')", key=exp.Literal.string(key))
        return Dimension(shown, value, "String", False)
    raise QueryError(
        f"unknown dimension {name!r}; known: {', '.join(dimension_names())}, "
        "or attrs['key'] for a further label"
    )


def dimension_names() -> list[str]:
    return [*DIMENSIONS, *_OTHER_DIMENSIONS]


@dataclass(frozen=True)
class Measure:
    """An aggregate figure: a formula over aggregates of requests.

    The formula is ClickHouse SQL whose names are aggregates
    (:func:`warehouse.aggregates.read`: ``requests``, ``errors``, ``ttft_ms_sum`` ...);
    read over `requests` rows each becomes the aggregate itself, over rollup rows the
    merge of the rollup column that keeps it. ``{seconds:Float64}`` in it is the length
    of the group's time span, and ``{good_count:UInt64}`` the count of requests within
    the thresholds (see :func:`good_count`). A percentile has no formula: the builder
    computes all the levels asked of one latency in a single pass.
    """

    name: str
    formula: str | exp.Expr
    """ClickHouse SQL, or its tree."""
    column: str | None = None
    """The latency of a percentile measure (percentiles of one column share one pass)."""
    level: float | None = None
    """The quantile level of a percentile measure."""

    @property
    def is_percentile(self) -> bool:
        return self.level is not None

    @functools.cached_property
    def needs_thresholds(self) -> bool:
        return not self.is_percentile and "good_count" in trees.placeholders(self._formula)

    @functools.cached_property
    def counts_below(self) -> bool:
        """Counts requests under a latency: from a rollup, in proportion within one bucket."""
        return any(isinstance(r, HistogramCount) and r.limit for r in self._reads.values())

    def tree(self, rollup: bool) -> exp.Expr:
        """Its SQL over raw rows, or over rollup rows, as a fresh tree to compose."""
        if self.is_percentile:
            raise QueryError(f"{self.name} has no single expression: a percentile")
        reads = self._reads

        def substituted(node: exp.Expr) -> exp.Expr:
            if isinstance(node, exp.Column) and node.name in reads:
                found = reads[node.name]
                return trees.expression(found.over_rollup if rollup else found.over_requests)
            return node

        return dialects.copy(self._formula).transform(substituted, copy=False)

    @functools.cached_property
    def rollup_columns(self) -> tuple[str, ...]:
        """The rollup columns it reads, in the order its formula names them. A percentile
        reads its latency's histogram, as does a count a histogram answers."""
        if self.is_percentile:
            return (f"{self.column}_hist",)
        return tuple(
            dict.fromkeys(
                r.kept_in if isinstance(r, HistogramCount) else r.name for r in self._reads.values()
            )
        )

    @functools.cached_property
    def _formula(self) -> exp.Expr:
        if isinstance(self.formula, str):
            return trees.expression(self.formula)
        return self.formula

    @functools.cached_property
    def _reads(self) -> dict[str, Read]:
        """The aggregates its formula names, by name."""
        found: dict[str, Read] = {}
        if self.is_percentile:
            return found
        for node in self._formula.find_all(exp.Column):
            try:
                found[node.name] = read(node.name)
            except InvalidArgument as e:
                raise QueryError(f"measure {self.name}: {e}") from None
        return found


MEASURES: dict[str, str] = {
    "count": "requests",
    "error_count": "errors",
    "rejection_count": "rejections",
    "error_rate": "errors / nullIf(requests, 0)",
    "rejection_rate": "rejections / nullIf(requests, 0)",
    "rps": "requests / {seconds:Float64}",
    "kv_hit_ratio": (
        "toFloat64(cached_prompt_tokens_sum) / nullIf(toFloat64(prompt_tokens_sum), 0)"
    ),
    "decode_tps": "1000 * toFloat64(decode_tokens_sum) / nullIf(decode_ms_sum, 0)",
    "attainment": "{good_count:UInt64} / nullIf(requests, 0)",
    "goodput_rps": "{good_count:UInt64} / {seconds:Float64}",
    "good_count": "{good_count:UInt64}",
}
"""The measures with a fixed name, each a formula over aggregates of requests
(:func:`warehouse.aggregates.read`). One entry is all a measure takes: the builder
answers it from raw rows and from any rollup that keeps the aggregates it names, on every
store, in Grafana panels and in the client merge
(tests/integration/test_a_new_measure.py adds one)."""

_PERCENTILE = re.compile(r"^p(50|75|90|95|99|999)_(\w+)$")
_COUNT_AT_MOST = re.compile(r"^count_(\w+?)_le_(\d{1,7})$")  # a name is a result column


def measure(name: str) -> Measure:
    """The measure called ``name``; an unknown name is an error listing the families."""
    if not isinstance(name, str):
        raise QueryError(f"bad measure {name!r}: expected a measure name such as p95_ttft_ms")
    if name in MEASURES:
        return _fixed(name, MEASURES[name])
    return _measure(name)


@functools.lru_cache(maxsize=256)
def _fixed(name: str, formula: str) -> Measure:
    return Measure(name, formula)


@functools.lru_cache(maxsize=1024)
def _measure(name: str) -> Measure:
    match = _PERCENTILE.match(name)
    if match and match[2] in LATENCY_COLUMNS:
        return Measure(name, exp.null(), match[2], PERCENTILES[match[1]])
    column = name.partition("_")[2]
    total, count = trees.column(f"{column}_sum"), trees.column(f"{column}_count")
    if name.startswith("count_") and column in LATENCY_COLUMNS:
        return Measure(name, count)
    match = _COUNT_AT_MOST.match(name)
    if match and match[1] in LATENCY_COLUMNS:
        return Measure(name, trees.column(f"{match[1]}_le_{match[2]}"))
    if name.startswith("avg_") and column in LATENCY_COLUMNS:
        return Measure(name, trees.fill("total / nullIf(n, 0)", total=total, n=count))
    if name.startswith("avg_") and column in TOKEN_COLUMNS:
        return Measure(name, trees.fill("toFloat64(total) / nullIf(n, 0)", total=total, n=count))
    if name.startswith("sum_") and column in TOKEN_COLUMNS:
        # A sum over no rows is NULL in DuckDB, 0 in ClickHouse: 0 on both.
        return Measure(name, trees.fill("coalesce(total, 0)", total=total))
    raise QueryError(
        f"unknown measure {name!r}; known: {', '.join(measure_names())}, "
        f"p<q>_<latency> (q in {', '.join(PERCENTILES)}; latency in {', '.join(LATENCY_COLUMNS)}), "
        f"avg_<latency or token column>, sum_<token column> ({', '.join(TOKEN_COLUMNS)}), "
        "count_<latency> (requests with one), count_<latency>_le_<ms> (at most ms)"
    )


def measure_names() -> list[str]:
    return [*MEASURES]


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

    ``thresholds`` maps latency columns to the SQL of their bound limit. Over raw rows,
    the count of :func:`warehouse.aggregates.good`; over rollup rows, read from the
    latency histograms (:func:`warehouse.aggregates.good_from_histograms`); None when a
    rollup cannot say.
    """
    for column in thresholds:
        if column not in LATENCY_COLUMNS:
            raise QueryError(
                f"bad threshold {column!r}: thresholds apply to {', '.join(LATENCY_COLUMNS)}"
            )
    return good_from_histograms(thresholds) if rollup else good(thresholds).over_requests
