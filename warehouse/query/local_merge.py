"""A range read in pieces, merged here rather than in ClickHouse.

A question that an SLO's rollup answers in pieces (whole hours, whole minutes, raw rows
for the ragged ends) is fetched as one ``UNION ALL`` of plain reads: the rollup rows of
each piece as they are stored, and each request of the ragged ends as the rollup row it
alone would make (:attr:`~warehouse.aggregates.Aggregate.per_request`).
The rows are then merged and the measures computed in the client, with polars and
numpy. ClickHouse plans every read of a union anew, and planning the report's twenty-odd
aggregates over each piece cost more than reading them (docs/benchmarks.md, "SLO
rollups"); plain reads plan in a few milliseconds, and merging a few thousand rows here
takes a few more.

The measures keep their one definition: each measure's rollup SQL from the registry and
each column's merge (``sum``, ``max``, ``min``, ``sumMap``) are translated into polars
expressions by :func:`aggregate`, which knows the handful of functions they use and
refuses anything else; a question with such a measure stays on the SQL path.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from warehouse.errors import Untranslatable
from warehouse.model import fold_histogram, histogram_quantiles

__all__ = [
    "MAX_REQUESTS",
    "LocalMerge",
    "Untranslatable",
    "aggregate",
    "columns_read",
    "merge_rows",
    "too_many_requests",
]


MAX_REQUESTS = 100_000
"""The most requests of ragged ends merged here. Up to 112k the client merge took no
longer than ClickHouse's (104 ms against 111 at 10M requests); beyond, shipping each
request costs more than the server's aggregate, and the question takes the SQL path."""


@dataclass(frozen=True)
class LocalMerge:
    """How the rows of a piecewise read become the answer."""

    columns: tuple[str, ...]
    """The result's columns, in order: the keys, then the measures and checks."""
    dimensions: tuple[str, ...]
    """The grouped dimensions (columns of the rows, named as in the result)."""
    aggregates: tuple[tuple[str, str | exp.Expr], ...]
    """(result column, ClickHouse SQL of its aggregate over rollup rows, as text or a tree)."""
    percentiles: tuple[tuple[str, str, float], ...] = ()
    """(result column, histogram column, level) read from merged histograms."""
    spans: tuple[tuple[int, int], ...] = ()
    """``[since_ms, until_ms)`` of each span: a ``span`` key, 0 for the whole range."""
    interval_ms: int | None = None
    """Time buckets: a ``time`` key, the start of each row's bucket."""
    seconds: float = 0.0
    """The range's length, for rates (each span's rates use its own length)."""

    @property
    def keys(self) -> list[str]:
        return ["span"] * bool(self.spans) + ["time"] * bool(self.interval_ms) + [*self.dimensions]


def too_many_requests(rows: pa.Table) -> bool:
    """Whether the rows hold more requests of ragged ends than :data:`MAX_REQUESTS`
    (rows with ``_request`` set)."""
    return int(pc.sum(rows.column("_request")).as_py() or 0) > MAX_REQUESTS


def merge_rows(rows: pa.Table, merge: LocalMerge) -> pl.DataFrame:
    """The answer from rollup rows (``ts``, the dimensions, rollup columns): one row per
    group of the keys, ordered by them; one row of nothing when nothing is grouped."""
    if "_request" in rows.column_names:
        rows = rows.drop_columns(["_request"])
    maps = {
        name: rows.column(name).combine_chunks()
        for name in rows.column_names
        if pa.types.is_map(rows.schema.field(name).type)
    }
    plain = rows.drop_columns(list(maps))
    frame = pl.from_arrow(plain)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
        pl.col("ts").dt.epoch("ms").alias("_ts_ms"),
        # Plain strings, so that groups sort as ClickHouse sorts them, not by dictionary.
        *(pl.col(name).cast(pl.Utf8) for name in merge.dimensions),
    )
    aggregates = [aggregate(sql).alias(name) for name, sql in merge.aggregates]
    read = {column for expr in aggregates for column in expr.meta.root_names()}
    for name, array in maps.items():  # a histogram's total, for counts and averages
        if f"_total_{name}" not in read:
            continue
        offsets = array.offsets.to_numpy().astype(np.int64)
        items = array.items.to_numpy(zero_copy_only=False).astype(np.int64)
        sums = np.concatenate([[0], np.cumsum(items)])
        frame = frame.with_columns(
            pl.Series(f"_total_{name}", sums[offsets[1:]] - sums[offsets[:-1]])
        )
    frame = _expanded(frame, merge)
    keys = merge.keys
    if keys == ["span"]:  # spans alone (an SLA report's): numbered here, with no join
        span = frame.get_column("span").to_numpy()
        present = np.unique(span)
        groups = pl.DataFrame(
            [pl.Series("_g", np.arange(len(present)), pl.UInt32), pl.Series("span", present)]
        )
        frame = frame.with_columns(pl.Series("_g", np.searchsorted(present, span), pl.UInt32))
    elif keys:
        groups = frame.select(keys).unique().sort(keys).with_row_index("_g")
        frame = frame.join(groups, on=keys, how="left", nulls_equal=True)
    else:
        groups = pl.DataFrame({"_g": [0]}, schema={"_g": pl.UInt32})
        frame = frame.with_columns(pl.lit(0, pl.UInt32).alias("_g"))
    rows_of = frame
    if not keys and frame.height == 0:
        # Aggregates of no rows as ClickHouse gives them: each the default of its type
        # (0; NULL only through nullIf), which is what one row of zeros aggregates to.
        rows_of = pl.DataFrame(
            [pl.Series(name, [0], dtype) for name, dtype in frame.schema.items()]
        )
        rows_of = rows_of.with_columns(pl.lit(merge.seconds, pl.Float64).alias("_seconds"))
    measured = rows_of.group_by("_g").agg(aggregates)
    answer = groups.join(measured, on="_g", how="left").sort("_g")
    for name, values in _percentiles(frame, maps, merge, answer.height).items():
        answer = answer.with_columns(pl.Series(name, values, pl.Float64))
    return answer.select(merge.columns)


def _expanded(frame: pl.DataFrame, merge: LocalMerge) -> pl.DataFrame:
    """Each row once per span it falls in (with its span's length), and its time bucket."""
    if merge.spans:
        lengths = np.array([merge.seconds] + [(b - a) / 1000 for a, b in merge.spans])
        ts = frame.get_column("_ts_ms").to_numpy()
        picked = [np.arange(frame.height)]
        for since, until in merge.spans:
            picked.append(np.flatnonzero((ts >= since) & (ts < until)))
        span = np.repeat(np.arange(len(picked)), [len(p) for p in picked])
        frame = frame[np.concatenate(picked)].with_columns(
            pl.Series("span", span, pl.Int64), pl.Series("_seconds", lengths[span], pl.Float64)
        )
    else:
        frame = frame.with_columns(pl.lit(merge.seconds, pl.Float64).alias("_seconds"))
    if merge.interval_ms:
        step = merge.interval_ms
        start = (pl.col("_ts_ms") // step * step).cast(pl.Datetime("ms", "UTC"))
        frame = frame.with_columns(start.alias("time"))
    return frame


def _percentiles(
    frame: pl.DataFrame, maps: dict[str, pa.MapArray], merge: LocalMerge, groups: int
) -> dict[str, np.ndarray]:
    """Each percentile asked, per group, from the group's merged histogram."""
    found: dict[str, np.ndarray] = {}
    rows = frame.get_column("_row").to_numpy()
    owners = frame.get_column("_g").to_numpy().astype(np.int64)
    for column in dict.fromkeys(hist for _, hist, _ in merge.percentiles):
        asked = [(name, level) for name, hist, level in merge.percentiles if hist == column]
        offsets, keys, counts = _merged(maps[column], rows, owners, groups)
        folded = fold_histogram(offsets, keys, counts)
        values = histogram_quantiles(*folded, [level for _, level in asked])
        for index, (name, _) in enumerate(asked):
            found[name] = values[:, index]
    return found


def _merged(
    maps: pa.MapArray, rows: np.ndarray, owners: np.ndarray, groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The histograms of the rows ``rows`` (indices into ``maps``) summed per owner
    group, flattened as Arrow lays out maps: ``(offsets, keys, counts)``, keys sorted."""
    offsets = maps.offsets.to_numpy().astype(np.int64)
    keys = maps.keys.to_numpy(zero_copy_only=False)
    counts = maps.items.to_numpy(zero_copy_only=False).astype(np.float64)
    width = int(keys.max()) + 1 if len(keys) else 1
    if groups <= _FEW_GROUPS and groups * width <= _MAX_SLOTS:
        return _merged_by_group(offsets, keys, counts, rows, owners, groups, width)
    keys = keys.astype(np.int64)
    entries = _entries(offsets, rows)
    owner = np.repeat(owners, offsets[rows + 1] - offsets[rows])
    # Each (group, key) one slot: counted in one pass where the slots are few, else sorted.
    slot = owner * width + keys[entries]
    if groups * width <= _MAX_SLOTS:
        summed = np.bincount(slot, weights=counts[entries], minlength=groups * width)
        found = np.flatnonzero(summed)
        summed = summed[found]
    else:
        found, inverse = np.unique(slot, return_inverse=True)
        summed = np.bincount(inverse, weights=counts[entries])
    return _flattened(found, width, groups, summed)


def _merged_by_group(
    offsets: np.ndarray,
    keys: np.ndarray,
    counts: np.ndarray,
    rows: np.ndarray,
    owners: np.ndarray,
    groups: int,
    width: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_merged` for a few groups (a question's spans, a few groups of a dimension):
    one count per group, and a group of every row (the whole range, nothing grouped)
    counts the entries where they lie, with no copy of them."""
    dense = np.zeros((groups, width))
    everything = len(offsets) - 1
    for group in range(groups):
        chosen = rows[owners == group]
        if len(chosen) == everything and (everything < 2 or bool(np.all(np.diff(chosen) > 0))):
            dense[group] = np.bincount(keys, weights=counts, minlength=width)
        elif len(chosen):
            entries = _entries(offsets, chosen)
            dense[group] = np.bincount(keys[entries], weights=counts[entries], minlength=width)
    found = np.flatnonzero(dense)
    return _flattened(found, width, groups, dense.ravel()[found])


def _flattened(
    slots: np.ndarray, width: int, groups: int, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts of sorted ``group * width + key`` slots as Arrow lays out a column of maps:
    ``(offsets, keys, counts)``, one map per group."""
    offsets = np.zeros(groups + 1, np.int64)
    np.cumsum(np.bincount(slots // width, minlength=groups), out=offsets[1:])
    return offsets, slots % width, counts


def _entries(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The indices of the entries of each of ``rows``, in order."""
    lengths = offsets[rows + 1] - offsets[rows]
    # Each row's start, then one step per entry.
    firsts = np.repeat(offsets[rows] - np.cumsum(lengths) + lengths, lengths)
    return firsts + np.arange(int(lengths.sum()))


_FEW_GROUPS = 64
_MAX_SLOTS = 1 << 22


def aggregate(sql: str | exp.Expr) -> pl.Expr:
    """A polars aggregate computing ClickHouse ``sql`` (text or a tree) over a group of
    rollup rows.

    ``sql`` is a measure's or a merge's rollup SQL: sums, maxima and minima of columns,
    arithmetic, ``nullIf(x, 0)``, ``coalesce(x, 0)``, ``toFloat64``,
    ``arraySum(mapValues(histogram))``
    (read from the histogram's precomputed ``_total_`` column) and ``{seconds:Float64}``
    (the group's span length). Anything else raises :class:`Untranslatable`.
    """
    return _translate(_parsed(sql) if isinstance(sql, str) else sql)


@functools.lru_cache(maxsize=512)
def _parsed(sql: str) -> exp.Expr:
    try:
        return sqlglot.parse_one(sql, read="clickhouse")
    except sqlglot.errors.ParseError as error:
        raise Untranslatable(f"cannot parse {sql!r}") from error


_AGGREGATES: dict[type[exp.Expr], str] = {exp.Sum: "sum", exp.Max: "max", exp.Min: "min"}
_ARITHMETIC: dict[type[exp.Expr], Callable[[pl.Expr, pl.Expr], pl.Expr]] = {
    exp.Add: lambda a, b: a + b,
    exp.Sub: lambda a, b: a - b,
    exp.Mul: lambda a, b: a * b,
    exp.Div: lambda a, b: a / b,
}


def _translate(node: exp.Expr) -> pl.Expr:
    if isinstance(node, exp.Alias | exp.Paren):
        return _translate(node.this)
    if type(node) in _AGGREGATES:
        return getattr(_row_value(node.this), _AGGREGATES[type(node)])()
    if type(node) in _ARITHMETIC:
        return _ARITHMETIC[type(node)](_translate(node.this), _translate(node.expression))
    if isinstance(node, exp.Nullif) and _is_zero(node.expression):
        value = _translate(node.this)
        return pl.when(value != 0).then(value)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "tofloat64":
        [argument] = node.expressions
        return _translate(argument).cast(pl.Float64)
    if isinstance(node, exp.Coalesce) and [_is_zero(e) for e in node.expressions] == [True]:
        return _translate(node.this).fill_null(0)  # keeps the value's type, as ClickHouse
    if isinstance(node, exp.Literal) and not node.is_string:
        return pl.lit(float(node.this))
    if isinstance(node, exp.Placeholder) and node.name == "seconds":
        return pl.col("_seconds").first()
    raise Untranslatable(f"cannot compute {node.sql('clickhouse')!r} here")


def _row_value(node: exp.Expr) -> pl.Expr:
    """A column, or a function of one row, inside an aggregate."""
    if isinstance(node, exp.Column):
        return pl.col(node.name)
    if isinstance(node, exp.Anonymous) and node.name.lower() == "tofloat64":
        [argument] = node.expressions
        return _row_value(argument).cast(pl.Float64)
    if isinstance(node, exp.ArraySum) and isinstance(node.this, exp.Anonymous):
        inner = node.this
        if inner.name.lower() == "mapvalues" and isinstance(inner.expressions[0], exp.Column):
            return pl.col(f"_total_{inner.expressions[0].name}")
    raise Untranslatable(f"cannot compute {node.sql('clickhouse')!r} per row here")


def _is_zero(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string and float(node.this) == 0


@functools.lru_cache(maxsize=1024)
def columns_read(sql: str) -> frozenset[str]:
    """The names of the columns that ClickHouse ``sql`` reads."""
    return frozenset(c.name for c in _parsed(sql).find_all(exp.Column))
