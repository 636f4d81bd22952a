"""Every ClickHouse-to-DuckDB mapping of the query layer, proven by running it on both engines.

Each case is ClickHouse SQL over one small table, filled from the same Arrow table on real
ClickHouse (in-process, chdb) and on DuckDB. The SQL as written, run on ClickHouse, is the
expected answer; ``transpile(sql, "clickhouse")`` run on ClickHouse and ``transpile(sql,
"duckdb")`` run on DuckDB must give it back. Placeholders are bound by each store as the
product binds them (``{name:Type}`` on ClickHouse, ``$name`` on DuckDB).

Answers compare as the product reads them (see :func:`warehouse.query.result.normalize`):
floats to a relative 1e-9 (exact quantiles included), ClickHouse's NaN for an aggregate of
no values equal to DuckDB's NULL, integers of any width equal by value (DuckDB's
``count_if`` is a HUGEINT), timestamps as UTC instants. Approximate quantiles are checked
against the exact quantiles at q-0.01 and q+0.01, on each engine.

The one case marked xfail is a divergence no rendering can remove (it says why); it turns
into a failure (strict) if that ever changes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from warehouse.dialects import render, transpile
from warehouse.errors import QueryError
from warehouse.query.order_statistics import order_statistic
from warehouse.store import Store, open_store

DATABASE = "dialects"
ROWS = 10_000
START = datetime(2000, 1, 3, tzinfo=UTC)
"""A Monday, and DuckDB's default ``time_bucket`` origin: buckets that do not divide its
distance from the Unix epoch (7 minutes, 11 seconds, 1.1 s; not 13 seconds, which do)
only agree if the rendering counts them from the epoch, as ClickHouse does."""
START_MS = int(START.timestamp() * 1000)
SPAN_MS = 3 * 86_400_000
DAY_MS = 86_400_000

REL_TOL = 1e-9
"""Relative tolerance of every float, exact quantiles included."""
FLOAT32_TOL = 1e-6
"""Slack on the bounds of approximate quantiles, which ClickHouse returns as Float32."""


def _next_boundary(ms: int, step_ms: int) -> int:
    return (ms // step_ms + 1) * step_ms


SINCE_MS = _next_boundary(START_MS, 7 * 60_000)
"""The first 7-minute boundary (from the epoch) after START: a row sits exactly on it."""
UNTIL_MS = START_MS + DAY_MS
"""The next midnight: a row sits exactly on it too."""

CLICKHOUSE_DDL = f"""
CREATE TABLE {DATABASE}.t (
    n UInt32,
    ts DateTime64(3, 'UTC'),
    ttft Nullable(Float64),
    tpot Nullable(Float32),
    tokens Nullable(UInt32),
    status LowCardinality(String),
    is_probe Bool,
    http_status UInt16
) ENGINE = MergeTree ORDER BY tuple()
"""
DUCKDB_DDL = f"""
CREATE TABLE {DATABASE}.t (
    n UINTEGER NOT NULL,
    ts TIMESTAMPTZ NOT NULL,
    ttft DOUBLE,
    tpot REAL,
    tokens UINTEGER,
    status VARCHAR NOT NULL,
    is_probe BOOLEAN NOT NULL,
    http_status USMALLINT NOT NULL
)
"""


def _data() -> pa.Table:
    """10,000 requests over three days from START, with milliseconds and some NULLs.

    Besides random instants, rows sit on, just before and just after a boundary of every
    bucket size the cases use, so an off-by-one-bucket rendering moves a row.
    """
    rng = np.random.default_rng(20000103)
    edges = [
        edge
        for step_ms in (11_000, 13_000, 7 * 60_000, 3_600_000, DAY_MS)
        for boundary in [_next_boundary(START_MS, step_ms)]
        for edge in (boundary - 1, boundary, boundary + 1)
    ]
    instants = rng.integers(START_MS, START_MS + SPAN_MS, ROWS - len(edges))
    ms = np.sort(np.concatenate([instants, np.array(edges, dtype=np.int64)]))

    def missing(share: float) -> np.ndarray:
        return rng.random(ROWS) < share

    return pa.table(
        {
            "n": pa.array(np.arange(ROWS, dtype=np.uint32)),
            "ts": pa.array(ms, pa.timestamp("ms", tz="UTC")),
            "ttft": pa.array(rng.lognormal(5.0, 1.0, ROWS), mask=missing(0.05)),
            "tpot": pa.array(rng.lognormal(3.0, 0.5, ROWS).astype(np.float32), mask=missing(0.05)),
            "tokens": pa.array(rng.integers(0, 4000, ROWS).astype(np.uint32), mask=missing(0.05)),
            "status": pa.array(rng.choice(["ok", "error", "rejected"], ROWS, p=[0.9, 0.07, 0.03])),
            "is_probe": pa.array(rng.random(ROWS) < 0.1),
            "http_status": pa.array(rng.choice([200, 429, 500], ROWS).astype(np.uint16)),
        }
    )


DATA = _data()
FIRST_TPOT_ROW = next(n for n, tpot in enumerate(DATA["tpot"].to_pylist()) if tpot is not None)
FIRST_TPOT = np.float64(DATA["tpot"][FIRST_TPOT_ROW].as_py())


@dataclass(frozen=True)
class Engines:
    clickhouse: Store
    duckdb: Store
    data: pa.Table

    def renderings(self) -> Iterator[tuple[Store, str]]:
        """Each store with the dialect the product renders its SQL in."""
        yield self.clickhouse, "clickhouse"
        yield self.duckdb, "duckdb"


@pytest.fixture(scope="module")
def engines(chdb_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    data = DATA
    clickhouse = open_store(f"chdb://{chdb_path}?database={DATABASE}")
    duckdb = open_store(
        f"duckdb://{tmp_path_factory.mktemp('dialects')}/d.duckdb?database={DATABASE}"
    )
    clickhouse.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    clickhouse.command(CLICKHOUSE_DDL)
    duckdb.command(f"CREATE SCHEMA IF NOT EXISTS {DATABASE}")
    duckdb.command(DUCKDB_DDL)
    for store in (clickhouse, duckdb):
        store.insert_arrow("t", data)
    yield Engines(clickhouse, duckdb, data)
    clickhouse.command(f"DROP DATABASE IF EXISTS {DATABASE} SYNC")
    clickhouse.close()
    duckdb.close()


# --- Same answer on both engines -------------------------------------------------------


def case(sql: str, id: str, marks: Any = (), **parameters: Any) -> Any:
    return pytest.param(sql, parameters, id=id, marks=marks)


def diverges(reason: str, raises: type[Exception] | None = None) -> pytest.MarkDecorator:
    return pytest.mark.xfail(reason=reason, raises=raises, strict=True)


SAME_ANSWER = [
    # Casts (toX → CAST(x AS Y)).
    case(
        "SELECT toFloat64(tokens), toFloat64(tpot), toFloat32(ttft), toFloat32(tokens)"
        " FROM t ORDER BY n",
        "toFloat64-toFloat32",
    ),
    case(
        "SELECT toInt64(tokens), toUInt64(tokens), toInt32(http_status), toUInt32(n),"
        " toInt64(n) - toInt64(tokens) FROM t ORDER BY n",
        "toInt-toUInt-of-integers",
    ),
    case(
        "SELECT toInt64(ttft), toUInt64(ttft), toInt32(tpot), toUInt32(tpot) FROM t ORDER BY n",
        "toInt-toUInt-of-floats",
    ),
    # Time: bucketing from the Unix epoch, milliseconds, UTC.
    case(
        # A bare DateTime reaches Arrow as seconds; the builder widens buckets the same way.
        "SELECT toDateTime64(toStartOfMinute(ts), 3, 'UTC'),"
        " toDateTime64(toStartOfHour(ts), 3, 'UTC'), toDateTime64(toStartOfDay(ts), 3, 'UTC')"
        " FROM t ORDER BY n",
        "toStartOfMinute-Hour-Day",
    ),
    *[
        case(
            f"SELECT toDateTime64(toStartOfInterval(ts, INTERVAL {interval}), 3, 'UTC') AS time,"
            " count() AS requests, quantileExactInclusive(0.5)(toFloat64(ttft)) AS p50"
            " FROM t GROUP BY time ORDER BY time",
            f"toStartOfInterval-{interval.replace(' ', '-')}",
        )
        for interval in (
            "11 SECOND",
            "13 SECOND",
            "1100 MILLISECOND",
            "7 MINUTE",
            "90 MINUTE",
            "18000 SECOND",
            "86400 SECOND",
            "250 MILLISECOND",
            "1 DAY",
            "5 DAY",
            "2 MONTH",
        )
    ],
    case(
        # ClickHouse groups by the alias, which hides the column of the same name.
        "SELECT toDateTime64(toStartOfMinute(ts), 3, 'UTC') AS ts, count() AS n"
        " FROM (SELECT * FROM t WHERE n < 5000) AS t GROUP BY ts ORDER BY ts",
        "GROUP-BY-an-alias-over-a-column",
    ),
    case(
        # An SLO rollup's position counts: the largest value below a limit, the smallest
        # above it, and inf where there is none.
        "SELECT maxIf(toFloat64(assumeNotNull(ttft)), ttft < 200.0) AS lo,"
        " if(countIf(ttft > 200.0) = 0, inf, minIf(toFloat64(assumeNotNull(ttft)), ttft > 200.0))"
        " AS hi, if(countIf(ttft > 1e12) = 0, inf, 0) AS none_above FROM t",
        "assumeNotNull-and-inf",
    ),
    case(
        "SELECT toDateTime64(toStartOfInterval(ts, INTERVAL 5 HOUR), 3, 'UTC') AS time, count()"
        " FROM t GROUP BY time ORDER BY time",
        "toStartOfInterval-5-HOUR",
    ),
    case(
        "SELECT toDateTime64(toStartOfInterval(ts, INTERVAL 1 WEEK), 3, 'UTC') AS time, count()"
        " FROM t GROUP BY time ORDER BY time",
        "toStartOfInterval-1-WEEK",
    ),
    case(
        "SELECT ts, toDateTime64(ts, 3, 'UTC'), toUnixTimestamp64Milli(ts),"
        " fromUnixTimestamp64Milli(toUnixTimestamp64Milli(ts)),"
        " fromUnixTimestamp64Milli(toUnixTimestamp64Milli(ts) + 1, 'UTC') FROM t ORDER BY n",
        "milliseconds-round-trip",
    ),
    case(
        "SELECT fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC') AS since,"
        " toUnixTimestamp64Milli(fromUnixTimestamp64Milli({until_ms:Int64})) AS until",
        "fromUnixTimestamp64Milli-placeholder",
        since_ms=SINCE_MS + 7,
        until_ms=UNTIL_MS,
    ),
    case(
        "SELECT count(), min(ts), max(ts) FROM t"
        " WHERE ts >= fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC')"
        " AND ts < fromUnixTimestamp64Milli({until_ms:Int64}, 'UTC')",
        "range-on-exact-milliseconds",
        since_ms=SINCE_MS,
        until_ms=UNTIL_MS,
    ),
    case(
        "SELECT n FROM t WHERE ts = fromUnixTimestamp64Milli({ms:Int64}) ORDER BY n",
        "equal-to-the-millisecond",
        ms=SINCE_MS,
    ),
    # Placeholders of every type the builder binds.
    case(
        "SELECT count() / {seconds:Float64} AS rps,"
        " countIf(coalesce(tpot <= {limit_tpot:Float64}, true)) AS good FROM t"
        " WHERE NOT is_probe AND status IN ({f0_0:String}, {f0_1:String})"
        " AND http_status IN ({f1_0:UInt16}, {f1_1:UInt16}) AND is_probe IN ({f2_0:Bool})",
        "placeholders-String-UInt16-Bool-Float64",
        seconds=3 * 86400.0,
        limit_tpot=20.5,
        f0_0="ok",
        f0_1="rejected",
        f1_0=200,
        f1_1=429,
        f2_0=False,
    ),
    case(
        "SELECT countIf(tpot <= {below:Float64}),"
        " countIf(n = {row:UInt32} AND tpot <= {below:Float64}),"
        " countIf(n = {row:UInt32} AND tpot <= {at:Float64}) FROM t",
        "Float64-placeholder-against-Float32-column",
        # Just below one row's Float32 value: a rendering that rounded the bound to Float32
        # would count that row.
        row=FIRST_TPOT_ROW,
        below=float(np.nextafter(FIRST_TPOT, -np.inf)),
        at=float(FIRST_TPOT),
    ),
    # The If combinator → FILTER (WHERE ...), and sqlglot's countIf → count_if.
    case(
        "SELECT count(), count(ttft), countIf(status = 'error'), countIf(ttft, status = 'ok'),"
        " sumIf(ttft, status = 'ok'), sumIf(tpot, status = 'ok'), avgIf(ttft, status = 'ok'),"
        " avgIf(tpot, status = 'ok'), minIf(tpot, status = 'error'),"
        " maxIf(tokens, status = 'error'), uniqExactIf(tokens, status = 'ok') FROM t",
        "If-combinators",
    ),
    case(
        "SELECT status, count(), countIf(tokens < 100), sumIf(toFloat64(tokens), is_probe),"
        " uniqExactIf(http_status, ttft > 100), minIf(ts, tokens > 3900),"
        " maxIf(ts, tokens > 3900) FROM t GROUP BY status ORDER BY status",
        "If-combinators-by-group",
    ),
    case(
        "SELECT countIf(status = 'error') / nullIf(count(), 0) AS error_rate,"
        " 1000 * sumIf(toFloat64(tokens) - 1, tokens > 1 AND ttft > tpot)"
        " / nullIf(sumIf(toFloat64(ttft) - toFloat64(tpot), tokens > 1 AND ttft > tpot), 0)"
        " AS decode_tps, coalesce(sum(toUInt64(tokens)), 0) AS sum_tokens,"
        " avg(toFloat64(tpot)) AS avg_tpot FROM t",
        "registry-measures",
    ),
    case(
        "SELECT toFloat64(n) * (toFloat64(n) - 1), (toFloat64(n) - 1) * 2,"
        " toFloat64(n) - (toFloat64(n) - 1), toFloat64(n) * (ttft > 100) FROM t ORDER BY n",
        "arithmetic-keeps-parentheses",
    ),
    # The order statistics around an exact quantile (warehouse.query.order_statistics).
    case(
        "SELECT status,"
        " arrayElement(arraySort(groupArrayIf(toFloat64(tpot), tpot IS NOT NULL)), 3),"
        " arrayElement(arraySort(groupArrayIf(ttft, ttft IS NOT NULL)),"
        " toInt64(ceil(toFloat64(0.9) * (count(ttft) - 1))) + 1) FROM t GROUP BY status"
        " ORDER BY status",
        "arraySort-of-groupArrayIf",
    ),
    # ... and of a group with no values: NULL on both (ClickHouse's count(v) - 1 wraps).
    case(
        f"SELECT status, {render(order_statistic('v', 0.9, 'low'), 'clickhouse')},"
        f" {render(order_statistic('v', 0.9, 'high'), 'clickhouse')}"
        " FROM (SELECT status, if(status = 'error', NULL, tpot) AS v FROM t)"
        " GROUP BY status ORDER BY status",
        "order-statistics-of-a-group-without-values",
    ),
    # Exact quantiles → quantile_cont, equal to 1e-9.
    case(
        "SELECT quantileExactInclusive(0.5)(ttft), quantileExactInclusive(0.999)(ttft),"
        " quantilesExactInclusive(0.5, 0.9, 0.95, 0.99)(toFloat64(tpot)),"
        " quantileExactInclusive(0.25)(toFloat64(tokens)) FROM t",
        "quantileExactInclusive",
    ),
    case(
        "SELECT status, arrayElement(quantilesExactInclusive(0.5, 0.95)(toFloat64(tpot)), 2),"
        " arrayElement(quantilesExactInclusive(0.5, 0.95)(toFloat64(tpot)), 1),"
        " quantilesExactInclusive(0.9, 0.99)(ttft)[2] FROM t GROUP BY status ORDER BY status",
        "arrayElement-of-quantilesExactInclusive",
    ),
    case(
        "SELECT quantileExactInclusiveIf(0.9)(ttft, status = 'ok'),"
        " quantilesExactInclusiveIf(0.5, 0.99)(toFloat64(tpot), NOT is_probe) FROM t",
        "quantileExactInclusiveIf",
    ),
    case(
        "SELECT quantileExactInclusive(0.95)(tpot) FROM t",
        "quantileExactInclusive-of-Float32",
    ),
    # NULLs.
    case(
        "SELECT quantileExactInclusive(0.5)(ttft),"
        " quantilesExactInclusive(0.1, 0.9)(toFloat64(tpot)) FROM t WHERE ttft IS NULL OR n < 50",
        "quantiles-skip-NULLs",
    ),
    case(
        "SELECT sumIf(ttft, ttft IS NULL), sumIf(ttft, status = 'none'),"
        " maxIf(tpot, tpot IS NULL), ifNull(sumIf(ttft, ttft IS NULL), 0),"
        " coalesce(sumIf(ttft, ttft IS NULL), -1), avgIf(ttft, ttft IS NULL),"
        " countIf(ttft, ttft IS NULL), uniqExactIf(tokens, tokens IS NULL),"
        " quantileExactInclusiveIf(0.5)(ttft, ttft IS NULL),"
        " quantileExactInclusiveIf(0.5)(toFloat64(n), status = 'none') FROM t",
        "aggregates-of-all-NULL",
    ),
    case(
        "SELECT status, quantileExactInclusiveIf(0.5)(toFloat64(ttft), status != 'error') AS q"
        " FROM t GROUP BY status ORDER BY q DESC",
        "NULL-quantile-sorts-last",
    ),
    case(
        "SELECT countIf(status = 'ok') / nullIf(countIf(status = 'none'), 0),"
        " sum(ttft) / nullIf(sum(toFloat64(n) * 0), 0), 7 / nullIf(0, 0),"
        " countIf(status = 'ok') / nullIf(count(), 0) FROM t",
        "division-by-nullIf-0",
    ),
    case(
        "SELECT tokens / nullIf(n % 2, 0), ttft / nullIf(tokens, 0), tokens / 7 FROM t ORDER BY n",
        "row-division-by-nullIf-0",
    ),
    case(
        "SELECT ifNull(ttft, -1), coalesce(tpot, ttft, 0), coalesce(ttft <= 100, false),"
        " nullIf(status, 'ok'), nullIf(tokens, 0), ttft <= 100 FROM t ORDER BY n",
        "ifNull-coalesce-nullIf",
    ),
    case(
        "SELECT sumIf(n, status = 'none'), minIf(n, status = 'none') FROM t",
        "sumIf-minIf-of-no-rows-not-Nullable",
        diverges(
            "ClickHouse aggregates of no rows give the type's default (0) for a non-Nullable "
            "argument; DuckDB's SUM/MIN ... FILTER give NULL. SQL text does not say whether a "
            "column is Nullable, so no rendering can tell the cases apart: the registry's "
            "measures divide by nullIf(..., 0) or coalesce, so their answers agree"
        ),
    ),
    case(
        "SELECT uniqExact(tokens) FROM t",
        "uniqExact-without-If",
    ),
]


@pytest.mark.parametrize(("sql", "parameters"), SAME_ANSWER)
def test_same_answer(engines: Engines, sql: str, parameters: dict[str, Any]) -> None:
    expected = _answer(engines.clickhouse, sql, parameters)
    for store, dialect in engines.renderings():
        rendered = transpile(sql, dialect)
        _assert_same(expected, _answer(store, rendered, parameters), f"{dialect}: {rendered}")


# --- Approximate quantiles: within the exact q-0.01 .. q+0.01 ---------------------------

APPROXIMATE = [
    ("quantileTDigest(0.95)(ttft)", "ttft", [0.95], None),
    ("quantilesTDigest(0.5, 0.9, 0.99)(tpot)", "tpot", [0.5, 0.9, 0.99], None),
    ("quantile(0.5)(ttft)", "ttft", [0.5], None),
    ("quantiles(0.1, 0.75, 0.99)(ttft)", "ttft", [0.1, 0.75, 0.99], None),
    ("quantileTDigestIf(0.99)(ttft, status = 'ok')", "ttft", [0.99], "ok"),
    ("quantilesTDigestIf(0.5, 0.95)(tpot, status = 'ok')", "tpot", [0.5, 0.95], "ok"),
    ("quantileIf(0.9)(tpot, status = 'ok')", "tpot", [0.9], "ok"),
    ("quantilesIf(0.25, 0.9)(ttft, status = 'ok')", "ttft", [0.25, 0.9], "ok"),
    ("arrayElement(quantilesTDigest(0.5, 0.99)(toFloat64(tpot)), 2)", "tpot", [0.99], None),
]


@pytest.mark.parametrize(("expression", "column", "levels", "status"), APPROXIMATE)
def test_approximate_quantiles(
    engines: Engines, expression: str, column: str, levels: list[float], status: str | None
) -> None:
    data = engines.data
    if status is not None:
        data = data.filter(pc.equal(data["status"], status))
    values = data[column].drop_null().to_numpy().astype(np.float64)
    bounds = [np.quantile(values, [level - 0.01, level + 0.01]) for level in levels]
    sql = f"SELECT {expression} AS q FROM t"
    runs = [(engines.clickhouse, sql), *((s, transpile(sql, d)) for s, d in engines.renderings())]
    for store, rendered in runs:
        answer = store.query_arrow(rendered)["q"][0].as_py()
        answers = answer if isinstance(answer, list) else [answer]
        assert len(answers) == len(levels), rendered
        for level, value, (low, high) in zip(levels, answers, bounds, strict=True):
            assert low * (1 - FLOAT32_TOL) <= value <= high * (1 + FLOAT32_TOL), (
                f"{rendered}: q={level} gave {value}, not within [{low}, {high}]"
            )


# --- What DuckDB cannot answer is refused, never answered differently ---------------------

REFUSED = [
    "quantileExact(0.5)(ttft)",
    "quantilesExact(0.5, 0.9)(ttft)",
    "quantileTiming(0.5)(ttft)",
    "quantileExactIf(0.5)(ttft, status = 'ok')",
    "quantileDeterministic(0.5)(ttft, n)",
    "uniqIf(tokens, status = 'ok')",
    "anyIf(tokens, status = 'ok')",
]


@pytest.mark.parametrize("expression", REFUSED)
def test_refused_for_duckdb(engines: Engines, expression: str) -> None:
    sql = f"SELECT {expression} FROM t"
    engines.clickhouse.query_arrow(transpile(sql, "clickhouse"))  # valid ClickHouse SQL
    name = expression.split("(", 1)[0]
    with pytest.raises(QueryError, match=rf"{re.escape(name)}\(.*no DuckDB translation"):
        transpile(sql, "duckdb")


# --- Helpers ------------------------------------------------------------------------------

Answer = tuple[list[str], list[list[Any]]]


def _answer(store: Store, sql: str, parameters: dict[str, Any]) -> Answer:
    """Column kinds and rows, in the terms the product compares them."""
    table = store.query_arrow(sql, parameters)
    kinds = [_kind(field.type) for field in table.schema]
    rows = [[_plain(value) for value in row.values()] for row in table.to_pylist()]
    return kinds, rows


def _kind(type_: pa.DataType) -> str:
    if pa.types.is_dictionary(type_):  # LowCardinality
        return _kind(type_.value_type)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return f"list of {_kind(type_.value_type)}"
    # A comparison is UInt8 in ClickHouse and BOOLEAN in DuckDB; count_if is a HUGEINT.
    if (
        pa.types.is_integer(type_)
        or pa.types.is_boolean(type_)
        or (pa.types.is_decimal(type_) and type_.scale == 0)
    ):
        return "integer"
    if pa.types.is_floating(type_):
        return "float"
    if pa.types.is_timestamp(type_):
        return "timestamp"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "string"
    return str(type_)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None  # ClickHouse's NaN of an aggregate of nothing is DuckDB's NULL
    if isinstance(value, bool | Decimal):
        return int(value)
    if isinstance(value, datetime):
        assert value.tzinfo is not None, f"a timestamp without time zone: {value}"
        return value.astimezone(UTC)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=REL_TOL)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_close, a, b))
    return a == b


def _assert_same(expected: Answer, got: Answer, label: str) -> None:
    (expected_kinds, expected_rows), (kinds, rows) = expected, got
    assert kinds == expected_kinds, f"{label}\ncolumn kinds {kinds}, expected {expected_kinds}"
    assert len(rows) == len(expected_rows), (
        f"{label}\n{len(rows)} rows, expected {len(expected_rows)}"
    )
    for index, (row, expected_row) in enumerate(zip(rows, expected_rows, strict=True)):
        assert all(map(_close, row, expected_row)), (
            f"{label}\nrow {index}: {row}\nexpected:   {expected_row}"
        )
