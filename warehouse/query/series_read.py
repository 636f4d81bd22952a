"""Reading Prometheus series back: label matchers and a time range to SQL over `series`
and `samples`, the store side of remote read (docs/remote-read.md).

One query per selection: the series the matchers pick, joined to their samples in the
range, one row per series with its samples' times and values as arrays. Every label
name, value and pattern is a bound parameter. Matchers follow Prometheus: a label a
series lacks has the value ``""``; ``=~`` and ``!~`` are fully anchored RE2 patterns,
which ClickHouse's ``match`` and DuckDB's ``regexp_matches`` both are.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import re2
from sqlglot import exp

from warehouse import dialects
from warehouse.errors import QueryError, SeriesLimitExceeded
from warehouse.query import trees
from warehouse.store.base import Store

__all__ = [
    "OPERATORS",
    "Matcher",
    "Selection",
    "SeriesLimitExceeded",
    "SeriesRead",
    "read_series",
]

OPERATORS = ("=", "!=", "=~", "!~")
_NAME = "__name__"
_QUIET = re2.Options()
_QUIET.log_errors = False
# The times a store can hold (ClickHouse's DateTime64 spans 1900 to 2299): a range past
# them, as Prometheus's open-ended MinTime and MaxTime are, is read up to them.
_EARLIEST_MS, _LATEST_MS = -2_208_988_800_000, 10_413_792_000_000


@dataclass(frozen=True)
class Matcher:
    """``name op value``, as in a PromQL selector."""

    name: str
    op: str
    value: str

    def check(self) -> None:
        if self.op not in OPERATORS:
            raise QueryError(f"bad matcher operator {self.op!r}: one of {', '.join(OPERATORS)}")
        if not self.name:
            raise QueryError("a matcher without a label name")
        if self.op in ("=~", "!~"):
            try:  # RE2's own parser: the stores' and Prometheus's syntax
                re2.compile(self.value, _QUIET)
            except re2.error as exc:
                reason = exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc
                raise QueryError(
                    f"bad regular expression {self.value!r} for {self.name}: {reason}"
                ) from None


@dataclass(frozen=True)
class Selection:
    """The series matching every matcher, and their samples in ``[start_ms, end_ms]``
    (both ends included, as a remote-read query's)."""

    matchers: Sequence[Matcher]
    start_ms: int
    end_ms: int


@dataclass(frozen=True)
class SeriesRead:
    """The series of a selection, sorted as Prometheus sorts label sets, and their
    samples series after series in time order."""

    labels: list[list[tuple[str, str]]]
    """Each series' labels, ``__name__`` among them, sorted by name."""
    values: np.ndarray
    timestamps: np.ndarray
    """Float samples: values and times (ms), series after series."""
    offsets: np.ndarray
    """Series ``i``'s float samples are ``[offsets[i], offsets[i + 1])``."""
    histograms: list[list[dict[str, Any]]]
    """Each series' native histogram samples, in time order: the columns of
    `histogram_samples`, times as ms (``start_timestamp`` 0 when none)."""


# The columns of a native histogram sample as a read returns them, with their types.
_HISTOGRAM = {
    "timestamp": ("toUnixTimestamp64Milli(timestamp)", "Int64"),
    "start_timestamp": ("ifNull(toUnixTimestamp64Milli(start_timestamp), 0)", "Int64"),
    "count": ("count", "Float64"),
    "sum": ("sum", "Float64"),
    "schema": ("schema", "Int32"),
    "zero_threshold": ("zero_threshold", "Float64"),
    "zero_count": ("zero_count", "Float64"),
    "positive_span_offsets": ("positive_span_offsets", "Array(Int32)"),
    "positive_span_lengths": ("positive_span_lengths", "Array(UInt32)"),
    "positive_counts": ("positive_counts", "Array(Float64)"),
    "negative_span_offsets": ("negative_span_offsets", "Array(Int32)"),
    "negative_span_lengths": ("negative_span_lengths", "Array(UInt32)"),
    "negative_counts": ("negative_counts", "Array(Float64)"),
    "reset_hint": ("reset_hint", "String"),
    "custom_values": ("custom_values", "Array(Float64)"),
}


def read_series(
    store: Store, selection: Selection, max_samples: int, max_series: int
) -> SeriesRead:
    """The series of ``selection`` and their samples, float and native histogram."""
    for matcher in selection.matchers:
        matcher.check()
    start = max(selection.start_ms, _EARLIEST_MS)
    end = min(selection.end_ms, _LATEST_MS)
    if start > end:  # as Prometheus answers such a range: with nothing
        return SeriesRead([], np.array([]), np.array([], np.int64), np.zeros(1, np.int64), [])
    clamped = Selection(selection.matchers, start, end)
    sql, parameters = _sql(store, clamped, max_samples + 1, max_series + 1)
    table = store.query_arrow(sql, parameters)
    return _series(table, max_samples, max_series)


def _sql(
    store: Store, selection: Selection, cap: int, series_cap: int
) -> tuple[str, dict[str, Any]]:
    """One query: per series id, its float samples (one branch of a UNION ALL) and its
    histogram samples (the other) as arrays, joined to its labels. ``cap`` bounds the
    samples of each branch, ``series_cap`` the series (a series has at most two rows)."""
    parameters: dict[str, Any] = {
        "start_ms": selection.start_ms,
        "end_ms": selection.end_ms,
        "cap": cap,
        "rows": 2 * series_cap,
    }
    shape = []
    for k, matcher in enumerate(selection.matchers):
        if matcher.name != _NAME:
            parameters[f"n{k}"] = matcher.name
        # Anchored as Prometheus anchors a label regex; `.` stops at a newline, as in
        # Prometheus 2 and RE2, where ClickHouse's `match` would let it through.
        regex = matcher.op in ("=~", "!~")
        parameters[f"v{k}"] = f"(?-s)^(?:{matcher.value})$" if regex else matcher.value
        shape.append((matcher.name == _NAME, matcher.op))
    capabilities = store.capabilities
    text = _text(
        store.database, capabilities.dialect, capabilities.collapsing_engines, tuple(shape)
    )
    return text, parameters


@functools.lru_cache(maxsize=256)
def _text(
    database: str, dialect: str, collapsing: bool, matchers: tuple[tuple[bool, str], ...]
) -> str:
    """The SQL of every selection of one shape (which matchers name the metric, their
    operators), its values bound: built and rendered once, as a tree costs milliseconds."""
    conditions: list[exp.Expr] = []
    for k, (is_name, op) in enumerate(matchers):
        if is_name:
            value: exp.Expr = trees.column("metric_name")
        else:
            value = trees.fill("coalesce(labels[name], '')", name=_bound(f"n{k}"))
        conditions.append(trees.fill(_MATCHERS[op], value=value, bound=_bound(f"v{k}")))
    picked = trees.and_(conditions) if conditions else exp.true()
    within = trees.fill(_WITHIN, series=trees.table("series", database), picked=picked)
    floats = _rows(database, collapsing, "samples", within, {"value": "value"})
    columns = {f"h_{n}": e for n, (e, _) in _HISTOGRAM.items()}
    histograms = _rows(database, collapsing, "histogram_samples", within, columns)

    empty = {name: _empty(kind) for name, (_, kind) in _HISTOGRAM.items()}
    times = trees.expression("groupArray(toUnixTimestamp64Milli(timestamp))")
    float_items = [
        trees.alias(times, "timestamps"),
        trees.alias(trees.expression("groupArray(value)"), "sample_values"),
        *(trees.alias(e, f"h_{name}") for name, e in empty.items()),
    ]
    histogram_items = [
        trees.alias(_empty("Int64"), "timestamps"),
        trees.alias(_empty("Float64"), "sample_values"),
        *(
            trees.alias(exp.AnonymousAggFunc(this="groupArray", expressions=[trees.column(n)]), n)
            for n in columns
        ),
    ]
    branches = [
        trees.select(
            [trees.column("id"), *items], rows.limit(_bound("cap", "UInt64"), copy=False)
        ).group_by(trees.column("id"), copy=False)
        for items, rows in ((float_items, floats), (histogram_items, histograms))
    ]
    read = trees.fill(
        _READ,
        samples=trees.union_all(branches),
        series=trees.fill(_SERIES, series=trees.table("series", database), picked=picked),
    )
    return dialects.render(read, dialect)


_MATCHERS = {
    "=": "value = bound",
    "!=": "value != bound",
    "=~": "match(value, bound)",
    "!~": "NOT match(value, bound)",
}
_WITHIN = (
    "timestamp >= fromUnixTimestamp64Milli({start_ms:Int64}, 'UTC') "
    "AND timestamp <= fromUnixTimestamp64Milli({end_ms:Int64}, 'UTC') "
    "AND id GLOBAL IN (SELECT id FROM series WHERE picked)"
)
_SERIES = (
    # Aliases apart from the columns: ClickHouse would read the WHERE's names as them.
    "SELECT id, any(metric_name) AS series_name, any(labels) AS series_labels "
    "FROM series WHERE picked GROUP BY id"
)
_READ = (
    "SELECT se.series_name AS metric_name, se.series_labels AS labels, sa.* "
    "FROM samples AS sa GLOBAL INNER JOIN series AS se ON se.id = sa.id LIMIT {rows:UInt64}"
)


def _bound(name: str, kind: str = "String") -> exp.Placeholder:
    return trees.placeholder(name, kind)


def _empty(kind: str) -> exp.Expr:
    """``CAST([] AS Array(kind))``: the other branch's column, of its type."""
    return exp.cast(exp.Array(expressions=[]), _array_of(kind))


@functools.lru_cache(maxsize=32)
def _array_of(kind: str) -> exp.DataType:
    return exp.DataType.build(f"Array({kind})", dialect=dialects.WarehouseClickHouse)


def _rows(
    database: str, collapsing: bool, table: str, within: exp.Expr, columns: dict[str, str]
) -> exp.Select:
    """The rows of ``table`` in the selection, one per (id, timestamp): a retried write's
    repeats collapse (FINAL where the engine collapses them, a grouping where not)."""
    read = trees.table(table, database)
    keys = [trees.column("id"), trees.column("timestamp")]
    if collapsing:
        items = [trees.alias(trees.expression(e), n) for n, e in columns.items()]
        return trees.select([*keys, *items], exp.Final(this=read)).where(
            dialects.copy(within), copy=False
        )
    items = [trees.alias(exp.AnyValue(this=trees.expression(e)), n) for n, e in columns.items()]
    rows = trees.select([*keys, *items], read).where(dialects.copy(within), copy=False)
    return rows.group_by(*(dialects.copy(k) for k in keys), copy=False)


def _series(table: pa.Table, max_samples: int, max_series: int) -> SeriesRead:
    floats = pc.list_value_length(table.column("timestamps")).to_numpy(zero_copy_only=False)
    kept = pc.list_value_length(table.column("h_timestamp")).to_numpy(zero_copy_only=False)
    if int(floats.sum()) + int(kept.sum()) > max_samples:
        raise SeriesLimitExceeded(
            f"the query selects more than {max_samples:,} samples "
            "(remote_read_max_samples): narrow its matchers or its range"
        )
    # A series that held floats and histograms in the range has a row of each.
    rows: dict[tuple[tuple[str, str], ...], list[int]] = {}
    names = table.column("metric_name").to_pylist()
    for row, (name, pairs) in enumerate(
        zip(names, table.column("labels").to_pylist(), strict=True)
    ):
        every = dict(pairs or ())
        every[_NAME] = name
        rows.setdefault(tuple(sorted((k, v) for k, v in every.items() if v != "")), []).append(row)
    if len(rows) > max_series:
        raise SeriesLimitExceeded(
            f"the query selects {len(rows):,} series, more than {max_series:,} "
            "(remote_read_max_series): narrow its matchers"
        )
    labels = sorted(rows)  # as Prometheus sorts label sets
    series_of_row = np.empty(table.num_rows, np.int64)
    for index, key in enumerate(labels):
        series_of_row[rows[key]] = index
    stamps = _flat(table.column("timestamps"), np.int64)
    values = _flat(table.column("sample_values"), np.float64)
    owner = np.repeat(series_of_row, floats)
    by = _time_order(stamps, owner)
    offsets = np.zeros(len(labels) + 1, np.int64)
    np.cumsum(np.bincount(owner, minlength=len(labels)), out=offsets[1:])
    histograms: list[list[dict[str, Any]]] = [[] for _ in labels]
    if kept.any():
        columns = {n: table.column(f"h_{n}").to_pylist() for n in _HISTOGRAM}
        for at in np.flatnonzero(kept):
            for k in range(int(kept[at])):
                sample = {n: columns[n][at][k] for n in _HISTOGRAM}
                histograms[series_of_row[at]].append(sample)
        for samples in histograms:
            samples.sort(key=lambda h: h["timestamp"])
    return SeriesRead([list(k) for k in labels], values[by], stamps[by], offsets, histograms)


def _time_order(stamps: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The order of the samples, series after series in time order. A row's samples come
    in a few runs already in time order (one per part the store read), which a stable
    sort of one integer key (timsort) merges in about linear time."""
    if not len(stamps):
        return np.arange(0, dtype=np.int64)
    low = int(stamps.min())
    span = int(stamps.max()) - low + 1
    if span * (int(owner.max()) + 1) >= 2**63:  # no room for one key: sort by two
        return np.lexsort((stamps, owner))
    key = owner * np.int64(span) + (stamps - np.int64(low))
    return np.argsort(key, kind="stable")


def _flat(column: pa.ChunkedArray, dtype: type) -> np.ndarray:
    flat = pc.list_flatten(column)
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype)
