"""From a question (dimensions, measures, filters, time range) to SQL and a plan.

The builder writes ClickHouse SQL from registry pieces only, with every value as a
``{name:Type}`` placeholder, then renders it for the store's dialect. It also decides
where the answer comes from: a rollup when the question allows it (every dimension,
filter and measure kept by the rollup, the range aligned to its grain), raw rows
otherwise, and records the choice and the reason in a :class:`Plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from warehouse.errors import QueryError
from warehouse.model import LATENCY_COLUMNS, ROLLUP_DIMENSIONS, SLA_ROLLUP_DIMENSIONS
from warehouse.query import dialects, local_merge
from warehouse.query.registry import GOOD_COUNT, Dimension, Measure, dimension, good_count, measure
from warehouse.query.timerange import TimeRange
from warehouse.rollup_measures import BUILT_IN, check_prefix, position_columns, rollup_columns
from warehouse.store.base import Capabilities, quote_identifier
from warehouse.store.rollup_columns import bucket_rows

__all__ = [
    "HISTOGRAM_ERROR",
    "HISTOGRAM_PERCENTILE_ERROR",
    "TDIGEST_ERROR",
    "Compiled",
    "Plan",
    "Question",
    "RollupSource",
    "compile_question",
    "compile_values",
    "quote_identifier",
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
    percentile objectives (see :func:`warehouse.rollup_measures.position_columns`);
    only a rollup that keeps them (an SLO's) returns them."""
    spans: Sequence[TimeRange] = ()
    """Parts of ``range`` answered by the same query (an SLA report's burn windows): the
    result gains a ``span`` column first, 0 for ``range`` and ``k`` for ``spans[k - 1]``;
    a group without requests in a span has no row for it. ClickHouse only, and not with
    ``interval``. From a rollup's pieces or from raw rows, never the built-in rollups."""


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
    rows: Callable[..., str]
    """``rows(database, condition, columns, keys)``: ClickHouse SQL of its rows (``ts``,
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
    request_rows: Callable[..., str] | None = None
    """``request_rows(database, condition, columns, dimensions)``: ClickHouse SQL of the
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
    buckets) or ``none`` (no percentile asked)."""
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


@dataclass(frozen=True)
class Compiled:
    """A question as ClickHouse SQL with its parameters, and the plan behind it."""

    sql: str
    parameters: dict[str, Any]
    plan: Plan
    columns: tuple[str, ...]
    """The result's columns."""
    sql_columns: tuple[str, ...] = ()
    """The columns the SQL returns, when they differ from :attr:`columns`."""
    histograms: tuple[tuple[str, str, float], ...] = ()
    """Percentiles to read from histogram columns of the SQL: (measure, column, level)."""
    sort_after: tuple[str, int | None] | None = None
    """``(order_by, limit)`` to apply after the histograms are read."""
    merge: local_merge.LocalMerge | None = None
    """When set, the SQL returns rollup rows, which this merges into the answer
    (:mod:`warehouse.query.local_merge`)."""
    fallback: Compiled | None = None
    """With :attr:`merge`: the same question merged by ClickHouse, for when the ragged
    ends hold more requests than :data:`~warehouse.query.local_merge.MAX_REQUESTS`."""

    def render(self, dialect: str) -> str:
        """The SQL for a store of ``dialect``."""
        return dialects.transpile(self.sql, dialect)


def compile_question(
    question: Question,
    capabilities: Capabilities,
    database: str,
    sources: Sequence[RollupSource] = (),
) -> Compiled:
    """The SQL answering ``question`` on a store with ``capabilities``; ``sources`` are
    further rollups (an SLO's) to answer from where they cover the question."""
    dims = [dimension(name) for name in question.by]
    measures = [measure(name) for name in dict.fromkeys(question.measures)]
    if not measures:
        raise QueryError("no measures asked: name at least one, such as count or p95_ttft_ms")
    filters = [(dimension(name), _values(name, value)) for name, value in question.filters.items()]
    _check_names(dims, measures, question.interval is not None)
    _check_spans(question, capabilities)
    plan, source = _plan(question, dims, filters, measures, capabilities, sources)
    if any(m.counts_below for m in measures):
        plan = replace(plan, latency_counts="histogram" if plan.rollup else "exact")
    parameters: dict[str, Any] = {
        "since_ms": question.range.since_ms,
        "until_ms": question.range.until_ms,
    }
    composite = source is not None and (len(plan.pieces) > 1 or bool(question.spans))
    if composite:
        # Raw rows of the ends are summarised per minute: the outer range takes their minutes.
        parameters["since_ms"] = question.range.since_ms // 60_000 * 60_000
        parameters["until_ms"] = -(-question.range.until_ms // 60_000) * 60_000
    span = question.interval or timedelta(seconds=question.range.seconds)
    thresholds = {}
    for column, limit in question.thresholds.items():
        name = f"limit_{column}"
        parameters[name] = _positive_number(column, limit)
        thresholds[column] = f"{{{name}:Float64}}"

    select: list[str] = []
    group: list[str] = []
    spans = _span_lists(question.spans, parameters)
    if spans:
        select.append("span")
        group.append("span")
    if question.interval is not None:
        step = int(question.interval.total_seconds())
        if step < 1 or step != question.interval.total_seconds():
            raise QueryError(f"bad interval {question.interval}: use whole seconds, at least 1s")
        # toStartOfInterval gives a DateTime, which Arrow would carry as bare seconds.
        select.append(
            f"toDateTime64(toStartOfInterval(ts, INTERVAL {step} SECOND), 3, 'UTC') AS time"
        )
        group.append("time")
    for index, dim in enumerate(dims):
        value = dim.sql
        if dim.name in question.keep:
            kept = _values(dim.name, list(question.keep[dim.name]), dim.param_type)
            names = [f"k{index}_{i}" for i in range(len(kept))]
            parameters.update(zip(names, kept, strict=True))
            listed = ", ".join(f"{{{name}:{dim.param_type}}}" for name in names)
            # Qualified, since the alias repeats the column's name: ClickHouse would read
            # a bare name as the alias, DuckDB as the column.
            column = dim.qualified("src")
            value = f"if({column} IN ({listed}), {column}, 'other')"
        select.append(f'{value} AS "{dim.name}"')
        group.append(value if dim.name in question.keep else f'"{dim.name}"')
    unknown = set(question.keep) - {d.name for d in dims}
    if unknown:
        raise QueryError(f"keep names {', '.join(sorted(unknown))}: not a grouped dimension")
    # From a rollup, percentiles are read from the merged latency histograms after the
    # query (see Compiled.histograms): the SQL returns one histogram per latency column.
    in_sql = [m for m in measures if not (plan.rollup and m.is_percentile)]
    select += [f"{_measure_sql(m, measures, plan)} AS {m.name}" for m in in_sql]
    histograms = {m.column: f"_hist_{m.column}" for m in measures if m not in in_sql}
    select += [f"sumMap({column}_hist) AS {alias}" for column, alias in histograms.items()]

    checks: list[str] = []
    if source is not None:
        # An SLO's rollup holds only its scope: filters it implies are dropped.
        filters = [
            (d, v)
            for d, v in filters
            if d.name in source.dimensions and not source.within_scope(d.name, v)
        ]
        for column, limit in question.checks:
            for piece in position_columns(column, limit):
                select.append(piece.merge)
                checks.append(piece.name)
    if any(GOOD_COUNT in item for item in select):
        good = source.good if source is not None else None
        good = good or good_count(thresholds, plan.rollup) or ""
        select = [item.replace(GOOD_COUNT, good) for item in select]
    with_probes = question.include_probes or "is_probe" in question.filters
    where = _conditions(
        filters,
        with_probes or (source is not None and not source.probes),
        parameters,
        prewhere=not composite,  # PREWHERE reads a table, not a union of pieces
    )

    local = None
    if (
        composite
        and source is not None
        and source.request_rows is not None
        and capabilities.materialized_views  # the pieces are stored rollup rows
        and not question.keep
        and question.order_by is None
        and question.limit is None
    ):
        local = _merged_here(question, source, plan, dims, measures, filters, database)
    table = f"{quote_identifier(database)}.{plan.source} AS src"
    if composite and source is not None:
        used = local_merge.used_columns(source.columns, select)
        table = f"{_composite(source, plan, database, parameters, used, spans)} AS src"
        spans = spans and "_spans"  # each piece lists the spans of its rows
    if spans:
        table += f" ARRAY JOIN {spans} AS span"
    sql = f"SELECT {', '.join(select)} FROM {table} {where}"
    if group:
        sql += f" GROUP BY {', '.join(group)}"
    keys = ["span"] * bool(question.spans) + ["time"] * (question.interval is not None)
    keys += [d.name for d in dims]
    columns = tuple(keys + [m.name for m in measures] + checks)
    sql_columns = tuple(keys + [m.name for m in in_sql] + list(histograms.values()) + checks)
    check_limit(question.limit)
    order = _order(question, columns, group)
    later = question.order_by
    sorted_later = later is not None and later.lstrip("-") not in sql_columns
    if sorted_later:
        order = f" ORDER BY {', '.join(group)}" if group else ""
    sql += order
    if question.limit is not None and not sorted_later:
        sql += f" LIMIT {int(question.limit)}"
    if "{seconds:Float64}" in sql:
        parameters["seconds"] = span.total_seconds()
        if question.spans:  # rates per second of each span's own length
            lengths = ", ".join(
                f"span = {k}, {s.seconds!r}" for k, s in enumerate(question.spans, start=1)
            )
            sql = sql.replace("{seconds:Float64}", f"multiIf({lengths}, {{seconds:Float64}})")
    percentiles = tuple(
        (m.name, histograms[m.column], m.level)
        for m in measures
        if m.column in histograms and m.level is not None
    )
    compiled = Compiled(
        sql,
        parameters,
        plan,
        columns,
        sql_columns,
        percentiles,
        (later, question.limit) if later is not None and sorted_later else None,
    )
    # The SQL path stays the fallback of the client merge, for ragged ends too busy to
    # ship request by request.
    return compiled if local is None else replace(local, fallback=compiled)


def compile_values(
    column: str,
    time_range: TimeRange,
    filters: Mapping[str, FilterValue],
    database: str,
    include_probes: bool = False,
) -> Compiled:
    """SQL of the raw values of one latency column (NULLs left out), for bootstraps."""
    if column not in LATENCY_COLUMNS:
        raise QueryError(f"bad latency column {column!r}: one of {', '.join(LATENCY_COLUMNS)}")
    checked = [(dimension(name), _values(name, value)) for name, value in filters.items()]
    parameters: dict[str, Any] = {"since_ms": time_range.since_ms, "until_ms": time_range.until_ms}
    where = _conditions(checked, include_probes or "is_probe" in filters, parameters)
    sql = (
        f"SELECT toFloat64({column}) AS value FROM {quote_identifier(database)}.requests "
        f"{where} AND {column} IS NOT NULL"
    )
    return Compiled(sql, parameters, Plan("requests", "raw values", "none"), ("value",), ("value",))


def _conditions(
    filters: list[tuple[Dimension, list[Any]]],
    include_probes: bool,
    parameters: dict[str, Any],
    prewhere: bool = True,
) -> str:
    """``PREWHERE ... WHERE ...`` of a question (the DuckDB rendering merges the two).

    Leaving probes out is the PREWHERE: a one-byte column read first. Left to itself,
    ClickHouse moves the time range there instead, which for ranges that cover whole
    parts costs a pass over the 8-byte timestamps and made the SLA report 9% slower.
    """
    where = [
        "ts >= fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC')",
        "ts < fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')",
    ]
    probes = "" if include_probes else "PREWHERE NOT is_probe "
    if not prewhere and not include_probes:
        where.append("NOT is_probe")
        probes = ""
    where += _filter_terms(filters, parameters)
    return f"{probes}WHERE {' AND '.join(where)}"


def _filter_terms(
    filters: list[tuple[Dimension, list[Any]]], parameters: dict[str, Any]
) -> list[str]:
    """A condition per filter, its values bound as parameters."""
    terms = []
    for index, (dim, values) in enumerate(filters):
        names = [f"f{index}_{i}" for i in range(len(values))]
        parameters.update(zip(names, values, strict=True))
        placeholders = ", ".join(f"{{{name}:{dim.param_type}}}" for name in names)
        terms.append(f"{dim.sql} IN ({placeholders})")
    return terms


def _check_names(dims: list[Dimension], measures: list[Measure], timeseries: bool) -> None:
    names = [d.name for d in dims] + [m.name for m in measures] + ["time"] * timeseries
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise QueryError(f"result column {repeated[0]!r} asked twice")


def _plan(
    question: Question,
    dims: list[Dimension],
    filters: list[tuple[Dimension, list[Any]]],
    measures: list[Measure],
    capabilities: Capabilities,
    sources: Sequence[RollupSource],
) -> tuple[Plan, RollupSource | None]:
    has_percentiles = any(m.is_percentile for m in measures)
    raw_percentiles = "exact" if question.exact is not False else "t-digest"
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
    database: str, condition: str, columns: Sequence[str], keys: Sequence[tuple[str, str]] = ()
) -> str:
    """Rows of the built-in minute rollup from the `requests` rows ``condition`` picks."""
    pieces = [c for c in rollup_columns(BUILT_IN) if c.name in columns]
    table = f"{quote_identifier(database)}.requests"
    return bucket_rows(table, SLA_ROLLUP_DIMENSIONS, pieces, [f"({condition})"], keys)


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


def _check_spans(question: Question, capabilities: Capabilities) -> None:
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


def _span_lists(spans: Sequence[TimeRange], parameters: dict[str, Any]) -> str:
    """SQL of the spans a row's ``ts`` falls in: ``[0]`` (the whole range) and each
    ``k`` whose span holds it; empty without spans."""
    if not spans:
        return ""
    found = ["[0]"]
    for k, span in enumerate(spans, start=1):
        parameters[f"s{k}_since_ms"] = span.since_ms
        parameters[f"s{k}_until_ms"] = span.until_ms
        found.append(
            f"if(ts >= fromUnixTimestamp64Milli({{s{k}_since_ms:Int64}}, 'UTC') AND "
            f"ts < fromUnixTimestamp64Milli({{s{k}_until_ms:Int64}}, 'UTC'), [{k}], [])"
        )
    return f"arrayConcat({', '.join(found)})"


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
        needed = _needed_columns(m)
        if needed is None or not needed <= columns:
            return False
    return all(f"{check_prefix(c, limit)}_n" in columns for c, limit in question.checks)


def _needed_columns(m: Measure) -> set[str] | None:
    """The rollup columns ``m`` reads; None when no rollup can answer it. The count of
    good requests is left out: each rollup computes it from columns of its own."""
    if m.is_percentile:
        return {f"{m.column}_hist"}
    if m.rollup is None:
        return None
    return set(local_merge.columns_read(m.rollup.replace(GOOD_COUNT, "0")))


def _composite(
    source: RollupSource,
    plan: Plan,
    database: str,
    parameters: dict[str, Any],
    used: Sequence[str],
    spans: str = "",
) -> str:
    """The pieces of a range, each from its table or from raw rows, as one row source of
    the ``used`` columns (raw rows cost only the aggregates asked); with ``spans`` (SQL
    of the spans a row's ``ts`` falls in), each row lists them in ``_spans``."""
    totals = {table for _, table in source.totals}
    whole = any(table in totals for table, _ in plan.pieces)
    listed = ", ".join(
        ["ts", *([] if whole else source.dimensions), *used] + ["_spans"] * bool(spans)
    )
    # One read per table, of all its pieces: ClickHouse plans each read of a union
    # anew, and planning, not reading, is most of what a rollup's answer costs.
    selects = []
    for table, condition in _piece_conditions(plan, parameters, source.raw_by_hour).items():
        if table == "requests":
            # A raw row's spans from its own time, not its minute's: a span may start
            # inside a minute.
            keys = [("_spans", spans)] if spans else []
            rows = source.rows(database, condition, used, keys)
            # In the order of the other reads: a union matches columns by position.
            selects.append(f"SELECT {listed} FROM ({rows})" if whole or spans else rows)
        else:
            name = f"{quote_identifier(database)}.{table}"
            computed = listed.replace("_spans", f"{spans} AS _spans") if spans else listed
            selects.append(f"SELECT {computed} FROM {name} WHERE {condition}")
    return f"({' UNION ALL '.join(selects)})"


def _piece_conditions(
    plan: Plan,
    parameters: dict[str, Any],
    by_hour: bool,
    grains: Mapping[str, timedelta] | None = None,
) -> dict[str, str]:
    """Per table of ``plan``'s pieces, the condition picking its pieces' rows.

    ``by_hour``: raw rows are keyed by the hour (:attr:`RollupSource.raw_by_hour`).
    ``grains``: the grain of each rollup table whose pieces, when it has several, may be
    picked by listing their buckets, in ClickHouse SQL (:func:`_listed_buckets`).
    """
    spans: dict[str, list[tuple[int, TimeRange]]] = {}
    for index, (table, span) in enumerate(plan.pieces):
        spans.setdefault(table, []).append((index, span))
    found = {}
    for table, pieces in spans.items():
        grain = (grains or {}).get(table)
        # One piece is one range, which plans fastest of all.
        listed = None
        if grain is not None and len(pieces) > 1:
            listed = _listed_buckets(grain, [span for _, span in pieces])
        found[table] = listed or " OR ".join(
            f"({_within(index, span, parameters, table == 'requests' and by_hour)})"
            for index, span in pieces
        )
    return found


def _within(index: int, span: TimeRange, parameters: dict[str, Any], by_hour: bool) -> str:
    """The condition of piece ``index`` (``span``) as a range of ``ts``, its ends bound
    as parameters; ``by_hour``: its hours too, for a table keyed by the hour."""
    parameters[f"p{index}_since_ms"] = span.since_ms
    parameters[f"p{index}_until_ms"] = span.until_ms
    within = (
        f"ts >= fromUnixTimestamp64Milli({{p{index}_since_ms:Int64}}, 'UTC') "
        f"AND ts < fromUnixTimestamp64Milli({{p{index}_until_ms:Int64}}, 'UTC')"
    )
    if by_hour:
        # `requests` is keyed by the hour, the time itself comes later. Not for a table
        # ordered by time: there these terms only cost planning (3.5 ms of an SLO
        # report's 17 ms read of its ragged ends).
        within += (
            f" AND toStartOfHour(ts) >= toStartOfHour(fromUnixTimestamp64Milli("
            f"{{p{index}_since_ms:Int64}}, 'UTC')) AND toStartOfHour(ts) <= toStartOfHour("
            f"fromUnixTimestamp64Milli({{p{index}_until_ms:Int64}}, 'UTC'))"
        )
    return within


MAX_LISTED_BUCKETS = 2048
"""The most buckets of a rollup table that a read lists (a week in hours is 168)."""


def _listed_buckets(grain: timedelta, spans: Sequence[TimeRange]) -> str | None:
    """ClickHouse SQL picking the rows of a rollup table of ``grain`` within ``spans``
    (each whole buckets of it) by listing the buckets' starts; None above
    :data:`MAX_LISTED_BUCKETS`.

    A row's ``ts`` is its bucket's start, so this picks what the ranges pick, and the
    primary key still narrows the read; ClickHouse plans it in about half the time of
    OR'd ranges (3 ms against 7 for the eight cuts of a report's seconds of totals).
    """
    step = int(grain.total_seconds() * 1000)
    starts = [start for span in spans for start in range(span.since_ms, span.until_ms, step)]
    if len(starts) > MAX_LISTED_BUCKETS:
        return None
    return f"toUnixTimestamp64Milli(ts) IN [{', '.join(map(str, starts))}]"


def _merged_here(
    question: Question,
    source: RollupSource,
    plan: Plan,
    dims: list[Dimension],
    measures: list[Measure],
    filters: list[tuple[Dimension, list[Any]]],
    database: str,
) -> Compiled | None:
    """``question`` as plain reads of its pieces' rollup rows, merged in the client
    (:mod:`warehouse.query.local_merge`); None when a measure cannot be computed there."""
    assert source.request_rows is not None
    good = source.good or ""
    aggregates = [
        (m.name, (m.rollup or "").replace(GOOD_COUNT, good))
        for m in measures
        if not m.is_percentile
    ]
    checks = [piece for c, limit in question.checks for piece in position_columns(c, limit)]
    aggregates += [(piece.name, piece.merge) for piece in checks]
    try:
        for _, sql in aggregates:
            local_merge.aggregate(sql)
    except local_merge.Untranslatable:
        return None
    read = {f"{m.column}_hist" for m in measures if m.is_percentile}
    read |= set(local_merge.used_columns(source.columns, [sql for _, sql in aggregates]))
    used = [c for c in source.columns if c in read]
    parameters: dict[str, Any] = {}
    terms = _filter_terms(filters, parameters)
    totals = {table for _, table in source.totals}
    grouped = [d.name for d in dims]
    db = quote_identifier(database)
    selects = []
    grains = {table: grain for grain, table in (*source.grains, *source.totals)}
    pieces = _piece_conditions(plan, parameters, source.raw_by_hour, grains)
    for table, picked in pieces.items():
        condition = " AND ".join([f"({picked})", *terms])
        if table == "requests":
            rows = source.request_rows(database, condition, used, grouped)
            # One more than the most it merges: enough to know there are too many.
            limit = local_merge.MAX_REQUESTS + 1
            selects.append(f"SELECT *, toUInt8(1) AS _request FROM ({rows} LIMIT {limit})")
        else:
            listed = ", ".join(["ts", *([] if table in totals else grouped), *used])
            selects.append(
                f"SELECT {listed}, toUInt8(0) AS _request FROM {db}.{table} WHERE {condition}"
            )
    span = question.interval or timedelta(seconds=question.range.seconds)
    keys = ["span"] * bool(question.spans) + ["time"] * (question.interval is not None)
    merge = local_merge.LocalMerge(
        columns=(*keys, *grouped, *(m.name for m in measures), *(p.name for p in checks)),
        dimensions=tuple(grouped),
        aggregates=tuple(aggregates),
        percentiles=tuple(
            (m.name, f"{m.column}_hist", m.level) for m in measures if m.level is not None
        ),
        spans=tuple((s.since_ms, s.until_ms) for s in question.spans),
        interval_ms=int(question.interval.total_seconds() * 1000) if question.interval else None,
        seconds=span.total_seconds(),
    )
    sql = " UNION ALL ".join(selects)
    return Compiled(sql, parameters, plan, merge.columns, merge=merge)


def _span(span: TimeRange) -> str:
    dated = span.since.date() != span.until.date()
    return f"[{_moment(span.since, dated)}, {_moment(span.until, dated)})"


def _moment(moment: datetime, dated: bool) -> str:
    """``14:01:37``, ``14:02`` or ``14:01:37.250``; with the date when a span crosses days."""
    if moment.microsecond:
        text = moment.strftime("%H:%M:%S.%f")[:-3]
    else:
        text = moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
    return f"{moment:%Y-%m-%d} {text}" if dated else text


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
        if m.rollup is None:
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


def _measure_sql(m: Measure, measures: list[Measure], plan: Plan) -> str:
    if not m.is_percentile:
        return m.rollup if plan.rollup else m.raw  # type: ignore[return-value]
    assert m.level is not None  # a percentile's
    levels = sorted({x.level for x in measures if x.column == m.column and x.level is not None})
    listed = ", ".join(repr(level) for level in levels)
    if plan.percentiles == "exact":
        quantiles = f"quantilesExactInclusive({listed})({m.column})"
    else:
        quantiles = f"quantilesTDigest({listed})({m.column})"
    return f"arrayElement({quantiles}, {levels.index(m.level) + 1})"


def _values(name: str, value: FilterValue, param_type: str | None = None) -> list[Any]:
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


def _positive_number(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not number > 0 or number == float("inf") or isinstance(value, bool):
        raise QueryError(
            f"threshold {name}: expected a positive number of milliseconds, got {value!r}"
        )
    return number


def _order(question: Question, columns: tuple[str, ...], group: list[str]) -> str:
    if question.order_by is None:
        return f" ORDER BY {', '.join(group)}" if group else ""
    name = question.order_by.lstrip("-")
    if name not in columns:
        raise QueryError(
            f"cannot order by {name!r}: not a column of this result ({', '.join(columns)})"
        )
    direction = "DESC" if question.order_by.startswith("-") else "ASC"
    rest = [g for g in group if g.strip('"') != name]
    return f' ORDER BY "{name}" {direction}' + "".join(f", {g}" for g in rest)


def _grain_name(grain: timedelta) -> str:
    return "whole hours" if grain == timedelta(hours=1) else "whole minutes"


MAX_LIMIT = 2**63 - 1
"""The largest row limit: what a signed 64-bit LIMIT holds."""


def check_limit(limit: int | None) -> None:
    """Refuse a row limit that is not a whole number from 1 to :data:`MAX_LIMIT`."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"bad limit {limit!r}: expected a whole number from 1 to {MAX_LIMIT}")
