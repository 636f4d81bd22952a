"""Rollup rows and request columns as ClickHouse SQL, for the rollups' views and tables.

What each measure column holds, fills and merges is defined in
:mod:`warehouse.aggregates`; here those columns become the SQL of rollup rows
(per time bucket from `requests`, or one per request), and the `requests` columns an
SLO's own table keeps get their ClickHouse types.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from warehouse.aggregates import Aggregate
from warehouse.errors import InvalidArgument
from warehouse.model import REQUESTS_SCHEMA

__all__ = ["REQUEST_COLUMN_TYPES", "bucket_rows", "request_rows"]


def bucket_rows(
    source: str,
    dimensions: Sequence[str],
    columns: Sequence[Aggregate],
    where: Sequence[str] = (),
    keys: Sequence[tuple[str, str]] = (),
    bucket: str = "toStartOfMinute(ts)",
) -> str:
    """ClickHouse SQL of rollup rows per ``bucket`` (the SQL of a request's bucket: a
    minute by default, ``toStartOfSecond(ts)`` for seconds) from the `requests` rows at
    ``source`` (a table) that every condition of ``where`` picks, grouped by
    ``dimensions`` and by each of ``keys`` (name, expression of a request's columns).

    The conditions and keys apply to the requests themselves, in a subquery: there
    ``ts`` is the request's time, not the minute the row's ``ts`` is aliased over it.
    """
    if where or keys:
        computed = "".join(f", {expression} AS {name}" for name, expression in keys)
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        source = f"(SELECT *{computed} FROM {source}{condition}) AS requests"
    grouped = [*dimensions, *(name for name, _ in keys)]
    select = ",\n    ".join([f"{bucket} AS ts", *grouped, *(c.from_requests for c in columns)])
    return f"SELECT\n    {select}\nFROM {source}\nGROUP BY {', '.join(['ts', *grouped])}"


def request_rows(
    source: str,
    dimensions: Sequence[str],
    columns: Sequence[Aggregate],
    where: Sequence[str] = (),
) -> str:
    """ClickHouse SQL of the `requests` rows at ``source`` that every condition of
    ``where`` picks, each as the rollup row it alone would make: its own ``ts``, the
    ``dimensions``, and each column's :attr:`~Aggregate.per_request` value."""
    select = ", ".join(["ts", *dimensions, *(f"{c.per_request} AS {c.name}" for c in columns)])
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return f"SELECT {select} FROM {source}{condition}"


def _clickhouse_type(field: pa.Field) -> str:
    """A `requests` column's type and codec in ClickHouse, as migration 0001 makes it."""
    if field.name == "ts":
        return "DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))"
    if pa.types.is_string(field.type):
        return "String CODEC(ZSTD(3))" if field.name == "request_id" else "LowCardinality(String)"
    if pa.types.is_boolean(field.type):
        return "Bool"
    if field.type not in _NUMBERS:
        raise InvalidArgument(f"no ClickHouse type for requests column {field.name} ({field.type})")
    name, codec = _NUMBERS[field.type]
    return f"{f'Nullable({name})' if field.nullable else name} CODEC({codec})"


_NUMBERS = {
    pa.float32(): ("Float32", "ZSTD(1)"),
    pa.uint32(): ("UInt32", "T64, ZSTD(1)"),
    pa.uint16(): ("UInt16", "T64, ZSTD(1)"),
}
"""ClickHouse type and codec of each number type `requests` has."""


REQUEST_COLUMN_TYPES = {
    field.name: _clickhouse_type(field) for field in REQUESTS_SCHEMA if field.name != "attrs"
}
"""The ClickHouse type and codec of each `requests` column but ``attrs``, for tables
that keep some of its columns (an SLO's table of requests)."""
