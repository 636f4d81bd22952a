"""Where a question's answer comes from: raw rows, a built-in rollup, an SLO's rollup,
or pieces of them.

A rollup answers when the question allows it (every dimension, filter and measure kept
by the rollup, the range aligned to its grain); a range that does not align is read in
pieces (whole hours and minutes from rollups, its ragged ends from raw rows). The
choice and the reason are recorded in a :class:`Plan`, which the builder
(:mod:`warehouse.query.builder`) turns into SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from sqlglot import exp

from warehouse.aggregates import BUILT_IN, check_prefix, rollup_columns
from warehouse.model import ROLLUP_DIMENSIONS, SLA_ROLLUP_DIMENSIONS
from warehouse.query import order_statistics, trees
from warehouse.query.question import Question
from warehouse.query.registry import Dimension, Measure, good_count
from warehouse.query.rollup_rows import bucket_rows
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Capabilities

__all__ = [
    "HISTOGRAM_ERROR",
    "HISTOGRAM_PERCENTILE_ERROR",
    "SOURCE_GRAIN",
    "TDIGEST_ERROR",
    "Plan",
    "RollupSource",
    "plan",
]

TDIGEST_ERROR = (
    "t-digest: rank error within about 1% "
    "(the value lies between the exact q-0.01 and q+0.01 quantiles)"
)
"""The stated error of approximate percentiles (quantileTDigest; DuckDB approx_quantile)."""

HISTOGRAM_ERROR = (
    "from 2%-wide latency buckets: off by at most the share of requests in the threshold's bucket"
)
"""The stated error of attainment read from a rollup's histogram of ok latencies."""

HISTOGRAM_PERCENTILE_ERROR = (
    "from 2%-wide latency buckets: within the bucket of the order statistic next to the exact value"
)
"""The stated error of percentiles read from a rollup's latency histogram."""

_ROLLUPS = (
    ("requests_sla_1h", timedelta(hours=1), SLA_ROLLUP_DIMENSIONS),
    ("requests_1h", timedelta(hours=1), ROLLUP_DIMENSIONS),
    ("requests_1m", timedelta(minutes=1), SLA_ROLLUP_DIMENSIONS),
)
"""The rollups, narrowest first: a question is answered by the first that covers it."""


@dataclass(frozen=True)
class RollupSource:
    """A rollup beside the built-in ones that questions may be answered from (an SLO's).

    Its rows hold the valid requests (no probes) within ``scope``, per minute and group of
    ``dimensions``; its ``good`` column counts those within ``thresholds``.
    """

    table: str
    """Its finest table (per minute)."""
    label: str
    """How the plan names it, e.g. ``SLO chat-assistant``."""
    grains: tuple[tuple[timedelta, str], ...]
    """Its tables by grain, finest (a minute, :attr:`table`) first: coarser ones hold the
    same columns merged, for long ranges."""
    dimensions: tuple[str, ...]
    scope: Mapping[str, tuple[str, ...]]
    thresholds: Mapping[str, float]
    columns: tuple[str, ...]
    """Its measure columns, in the order of its rows."""
    rows: Callable[..., exp.Select]
    """``rows(database, condition, columns, keys)``: its rows (``ts``,
    the dimensions, those of its columns, grouped by the (name, expression) ``keys`` too)
    from the `requests` rows a condition picks."""
    good: str | None = "sum(good)"
    """SQL of its count of good requests; None when it keeps no such count, and the good
    count comes from the latency histograms (the built-in rollups, one threshold)."""
    probes: bool = False
    """Whether its rows hold probes too, under an ``is_probe`` dimension."""
    totals: tuple[tuple[timedelta, str], ...] = ()
    """Tables of its columns summed over the dimensions, by grain, finest first (it may
    start finer than :attr:`grains`, at a second): for questions of its whole scope (no
    grouping, no filter narrower than the scope)."""
    request_rows: Callable[..., exp.Select] | None = None
    """``request_rows(database, condition, columns, dimensions)``: the
    `requests` rows a condition picks, each as the rollup row it alone would make (``ts``,
    those ``dimensions``, those columns); None when its columns cannot say that."""
    raw_by_hour: bool = True
    """Whether its raw rows are read from a table keyed by the hour before the time
    (`requests`), so that a raw piece's condition names its hours too; an SLO's table
    of requests is ordered by time alone."""

    @property
    def tables(self) -> set[str]:
        return {table for _, table in (*self.grains, *self.totals)}

    def within_scope(self, name: str, values: Sequence[Any]) -> bool:
        """Whether a filter of ``name`` to ``values`` is the scope itself (its rows
        hold nothing else, so the filter changes nothing)."""
        return name in self.scope and {str(v) for v in values} == set(self.scope[name])


@dataclass(frozen=True)
class Plan:
    """Where an answer came from, and how precise its percentiles are."""

    source: str
    """``requests`` (raw rows), ``requests_1m`` or ``requests_1h`` (rollups)."""
    reason: str
    percentiles: str
    """``exact``, ``t-digest`` (raw rows, approximate), ``histogram`` (a rollup's latency
    buckets), ``low`` or ``high`` (raw rows, the order statistics around the exact value:
    :mod:`warehouse.query.order_statistics`) or ``none`` (no percentile asked)."""
    attainment: str = "none"
    """``exact``, ``histogram`` (a rollup's latency buckets) or ``none`` (not asked)."""
    pieces: tuple[tuple[str, TimeRange], ...] = ()
    """A range read in pieces: each a table (``requests`` for raw rows) and the part of
    the range it answers, coarsest first (an SLO rollup's whole hours, then minutes,
    of totals then seconds, then the ragged ends from raw rows)."""
    latency_counts: str = "none"
    """Of counts under a latency (``count_<latency>_le_<ms>``): as :attr:`attainment`."""

    @property
    def rollup(self) -> bool:
        return self.source != "requests"

    def describe(self) -> str:
        kind = f"rollup {self.source}" if self.rollup else "raw requests"
        if len(self.pieces) > 1:
            tables = dict.fromkeys(table for table, _ in self.pieces)
            kind = " + ".join(
                ("raw requests" if table == "requests" else table)
                + " "
                + " and ".join(_span(span) for t, span in self.pieces if t == table)
                for table in tables
            )
        text = f"source: {kind} ({self.reason})"
        if self.percentiles == "t-digest":
            text += f"; percentiles {TDIGEST_ERROR}"
        if self.percentiles == "histogram":
            text += f"; percentiles {HISTOGRAM_PERCENTILE_ERROR}"
        if self.attainment == "histogram":
            text += f"; attainment {HISTOGRAM_ERROR}"
        if self.latency_counts == "histogram":
            text += f"; counts under a latency {HISTOGRAM_ERROR}"
        return text


def plan(
    question: Question,
    dims: list[Dimension],
    filters: list[tuple[Dimension, list[Any]]],
    measures: list[Measure],
    capabilities: Capabilities,
    sources: Sequence[RollupSource],
) -> tuple[Plan, RollupSource | None]:
    has_percentiles = any(m.is_percentile for m in measures)
    raw_percentiles = "t-digest" if question.exact is False else order_statistics.asked() or "exact"
    has_attainment = any(m.needs_thresholds for m in measures)

    def raw(reason: str) -> Plan:
        percentiles = raw_percentiles if has_percentiles else "none"
        return Plan("requests", reason, percentiles, "exact" if has_attainment else "none")

    if question.exact:
        return raw("exact percentiles asked"), None
    asked = (has_percentiles, has_attainment)
    for source in sources:  # an SLO's rollup: on DuckDB, a view
        pieces = _covering_pieces(source, question, dims, filters, measures)
        if pieces is not None:
            raw_rows = " and ragged ends from raw rows" if pieces[-1][0] == "requests" else ""
            reason = f"the rollup of {source.label}{raw_rows}"
            return _pieces_plan(source, pieces, reason, *asked), source
    if question.spans:  # one read for every span: the built-in rollups have no cuts
        return raw("several spans asked and no rollup of an SLO covers them"), None
    if not (capabilities.materialized_views and capabilities.aggregate_states):
        return raw("this store keeps no materialized rollups"), None
    built_in = _built_in_source()
    if not question.range.aligned_to(SOURCE_GRAIN):
        # The built-in minute rollup, in pieces: whole hours and minutes, raw ragged ends.
        pieces = _covering_pieces(built_in, question, dims, filters, measures)
        if pieces is not None:
            reason = (
                "the range does not align to whole minutes: "
                "its whole minutes from rollups, its ragged ends from raw rows"
            )
            return _pieces_plan(built_in, pieces, reason, *asked), built_in
    return _plan_built_in(question, dims, filters, measures, raw), None


SOURCE_GRAIN = timedelta(minutes=1)


def _built_in_source() -> RollupSource:
    """`requests_1m` and `requests_sla_1h` as a source read in pieces."""
    return RollupSource(
        table="requests_1m",
        label="requests_1m",
        grains=((SOURCE_GRAIN, "requests_1m"), (timedelta(hours=1), "requests_sla_1h")),
        dimensions=SLA_ROLLUP_DIMENSIONS,
        scope={},
        thresholds={},
        columns=tuple(BUILT_IN),
        rows=_built_in_rows,
        good=None,
        probes=True,
    )


def _built_in_rows(
    database: str,
    condition: exp.Expr,
    columns: Sequence[str],
    keys: Sequence[tuple[str, exp.Expr]] = (),
) -> exp.Select:
    """Rows of the built-in minute rollup from the `requests` rows ``condition`` picks."""
    pieces = [c for c in rollup_columns(BUILT_IN) if c.name in columns]
    table = trees.table("requests", database)
    return bucket_rows(table, SLA_ROLLUP_DIMENSIONS, pieces, [exp.paren(condition)], keys)


def _covering_pieces(
    source: RollupSource,
    question: Question,
    dims: list[Dimension],
    filters: list[tuple[Dimension, list[Any]]],
    measures: list[Measure],
) -> tuple[tuple[str, TimeRange], ...] | None:
    """The pieces ``source`` answers ``question`` in, or None when it cannot."""
    if not _covers(source, question, dims, filters, measures):
        return None
    whole = not dims and all(source.within_scope(d.name, v) for d, v in filters)
    if whole and source.totals:
        return _pieces(question, source.totals, totals=True)
    return _pieces(question, source.grains)


def _pieces_plan(
    source: RollupSource,
    pieces: tuple[tuple[str, TimeRange], ...],
    reason: str,
    has_percentiles: bool,
    has_attainment: bool,
) -> Plan:
    attainment = "exact" if source.good is not None else "histogram"
    return Plan(
        pieces[0][0],
        reason,
        "histogram" if has_percentiles else "none",
        attainment if has_attainment else "none",
        pieces,
    )


def _pieces(
    question: Question, grains: tuple[tuple[timedelta, str], ...], totals: bool = False
) -> tuple[tuple[str, TimeRange], ...] | None:
    """The range cut into the coarsest whole buckets of the tables ``grains`` lists
    (whole hours, then minutes; of totals, then seconds) and the ragged rest from raw
    rows; None when no bucket fits."""
    # Buckets of whole minutes at least: on the SQL path the ragged ends are rows per
    # minute (the source's ``rows``), which a bucket of seconds would misplace.
    usable = [
        (grain, table)
        for grain, table in grains
        if question.interval is None or question.interval % max(grain, SOURCE_GRAIN) == timedelta(0)
    ]
    if not usable:
        return None
    if totals:
        # Of totals (a row a bucket), a grain is read only where it is 60 times the
        # finer one read before it, or the coarsest usable: a grain of a few of those (a
        # 5-minute window's, of minutes) would save a few rows at each cut for one more read.
        kept = usable[:1]
        for grain, table in usable[1:]:
            if grain >= kept[-1][0] * 60 or grain == usable[-1][0]:
                kept.append((grain, table))
        usable = kept
    pieces: list[tuple[str, TimeRange]] = []
    rest = _cut(question.range, question.spans)
    for grain, table in reversed(usable):
        later = []
        for span in rest:
            middle, ends = span.split(grain)
            if middle is not None:
                # Cut at a span's end, in whole buckets either side: one piece.
                if pieces and pieces[-1][0] == table and pieces[-1][1].until == middle.since:
                    middle = TimeRange(pieces.pop()[1].since, middle.until)
                pieces.append((table, middle))
            later += ends
        rest = later
    if not pieces:
        return None
    raw: list[TimeRange] = []
    for span in sorted(rest, key=lambda r: r.since):
        if raw and raw[-1].until == span.since:  # cut at a span's end: one raw read
            span = TimeRange(raw.pop().since, span.until)
        raw.append(span)
    return (*pieces, *(("requests", span) for span in raw))


def _cut(whole: TimeRange, spans: Sequence[TimeRange]) -> list[TimeRange]:
    """``whole`` cut at every end of ``spans`` inside it, so that no piece straddles one."""
    cuts = sorted(
        {whole.since, whole.until}
        | {
            moment
            for s in spans
            for moment in (s.since, s.until)
            if whole.since < moment < whole.until
        }
    )
    return [TimeRange(a, b) for a, b in pairwise(cuts)]


def _covers(
    source: RollupSource,
    question: Question,
    dims: list[Dimension],
    filters: list[tuple[Dimension, list[Any]]],
    measures: list[Measure],
) -> bool:
    """Whether ``source`` holds every row and column ``question`` needs."""
    if question.include_probes and not source.probes:
        return False
    if any(d.name not in source.dimensions for d in dims):
        return False
    asked = {d.name: {str(v) for v in values} for d, values in filters}
    for key, allowed in source.scope.items():
        if key not in asked or not asked[key] <= set(allowed):
            return False  # the question reaches beyond the rollup's scope
    for name, values in asked.items():
        if name not in source.dimensions and values != set(source.scope.get(name, ())):
            return False
    columns = set(source.columns)
    for m in measures:
        if m.needs_thresholds and source.good is None:
            limits = {column: "0" for column in question.thresholds}
            if good_count(limits, rollup=True) is None:
                return False
        elif m.needs_thresholds and (
            "good" not in columns
            or {k: float(v) for k, v in question.thresholds.items()} != dict(source.thresholds)
        ):
            return False
        if not set(m.rollup_columns) <= columns:
            return False
    return all(f"{check_prefix(c, limit)}_n" in columns for c, limit in question.checks)


def _span(span: TimeRange) -> str:
    dated = span.since.date() != span.until.date()
    return f"[{_moment(span.since, dated)}, {_moment(span.until, dated)})"


def _moment(moment: datetime, dated: bool) -> str:
    """``14:01:37``, ``14:02`` or ``14:01:37.250``; with the date when a span crosses
    days, in ISO 8601 (``2026-11-05T21:00Z``)."""
    if moment.microsecond:
        text = moment.strftime("%H:%M:%S.%f")[:-3]
    else:
        text = moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
    return f"{moment:%Y-%m-%d}T{text}Z" if dated else text


def _plan_built_in(
    question: Question,
    dims: list[Dimension],
    filters: list[tuple[Dimension, list[Any]]],
    measures: list[Measure],
    raw: Callable[[str], Plan],
) -> Plan:
    has_percentiles = any(m.is_percentile for m in measures)
    has_attainment = any(m.needs_thresholds for m in measures)
    for dim in dims + [d for d, _ in filters]:
        if not dim.in_rollup:
            return raw(f"the rollups do not keep {dim.name}")
    for m in measures:
        if not set(m.rollup_columns) <= set(BUILT_IN):
            return raw(f"the rollups cannot answer {m.name}")
    thresholds = {column: "0" for column in question.thresholds}
    if any(m.needs_thresholds for m in measures) and good_count(thresholds, rollup=True) is None:
        return raw("the rollups answer attainment for one threshold on queue, TTFT, TPOT or E2E")
    used = {d.name for d in dims} | {d.name for d, _ in filters}
    for table, grain, kept in _ROLLUPS:
        interval_fits = question.interval is None or question.interval % grain == timedelta(0)
        if question.range.aligned_to(grain) and interval_fits and used <= set(kept):
            return Plan(
                table,
                f"range and buckets align to {_grain_name(grain)}",
                "histogram" if has_percentiles else "none",
                "histogram" if has_attainment else "none",
            )
    if question.range.aligned_to(timedelta(minutes=1)) and not used <= set(SLA_ROLLUP_DIMENSIONS):
        hourly = ", ".join(sorted(used - set(SLA_ROLLUP_DIMENSIONS)))
        return raw(f"{hourly} is kept per hour only, and the range or buckets are not whole hours")
    return raw("the range or the buckets do not align to whole minutes")


def _grain_name(grain: timedelta) -> str:
    return "whole hours" if grain == timedelta(hours=1) else "whole minutes"
