"""SQL dialects of the warehouse: ClickHouse SQL is the source, each backend a target.

Every query of the query layer is written once, in ClickHouse SQL, and rendered for
the store it runs on. sqlglot reads and writes both dialects; the subclasses here add
what the warehouse needs and sqlglot lacks (one module per dialect, as sqlglot keeps
them): :mod:`.clickhouse` parses every aggregate the warehouse writes, :mod:`.duckdb`
translates ClickHouse functions that DuckDB spells differently.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from warehouse.dialects.clickhouse import WarehouseClickHouse
from warehouse.dialects.duckdb import WarehouseDuckDB
from warehouse.dialects.nodes import copy
from warehouse.errors import QueryError

__all__ = [
    "SOURCE",
    "WarehouseClickHouse",
    "WarehouseDuckDB",
    "copy",
    "dialect_for",
    "parse",
    "render",
    "transpile",
]

_DIALECTS = {"clickhouse": WarehouseClickHouse, "duckdb": WarehouseDuckDB}
SOURCE = "clickhouse"
"""The dialect the query layer writes: a store that speaks it takes the text as written."""


def dialect_for(name: str) -> type[sqlglot.Dialect]:
    """The warehouse's dialect class for a store's ``capabilities.dialect``."""
    try:
        return _DIALECTS[name]
    except KeyError:
        raise QueryError(f"no SQL dialect {name!r}; known: {', '.join(_DIALECTS)}") from None


def parse(sql: str) -> exp.Expr:
    """Parse one ClickHouse SQL expression or statement."""
    try:
        return sqlglot.parse_one(sql, read=WarehouseClickHouse)
    except sqlglot.errors.ParseError as error:
        raise QueryError(f"cannot parse SQL: {_first_line(str(error))}") from None


def render(tree: exp.Expr, dialect: str) -> str:
    """SQL text of ``tree`` for a store of ``dialect`` (``tree`` is left as it is)."""
    # A generator may change the tree it renders, so sqlglot's renders a copy by
    # default. ClickHouse's, reading the trees it parses, changes nothing that is
    # written as ClickHouse parses it (tests/unit/test_tree_copy.py): it renders the
    # tree itself; every other dialect gets a copy, ours (under half of sqlglot's cost).
    source = tree if dialect == SOURCE else copy(tree)
    try:
        return source.sql(
            dialect=dialect_for(dialect), unsupported_level=sqlglot.ErrorLevel.RAISE, copy=False
        )
    except sqlglot.errors.UnsupportedError as error:
        raise QueryError(f"cannot run this on {dialect}: {error}") from None


def transpile(sql: str, dialect: str) -> str:
    """ClickHouse SQL rendered for ``dialect``; for :data:`SOURCE` itself, ``sql`` as it
    is (a round trip through sqlglot costs about 15 ms a query, more than a rollup's
    answer)."""
    return sql if dialect == SOURCE else render(parse(sql), dialect)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
