"""ClickHouse as the warehouse writes it: sqlglot's dialect plus the aggregates it misses."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot.dialects.clickhouse import ClickHouse
from sqlglot.generators.clickhouse import ClickHouseGenerator
from sqlglot.parsers.clickhouse import ClickHouseParser

__all__ = ["WarehouseClickHouse"]

# Aggregates sqlglot does not know as parametric, so that `f(params)(args)` nested in
# another call fails to parse. Each maps to (function, combinator suffix).
_MORE_AGGREGATES: dict[str, tuple[str, str | None]] = {
    name + suffix: (name, suffix or None)
    for name in ("quantileExactInclusive", "quantilesExactInclusive")
    for suffix in ("", "If", "State", "Merge", "MergeState")
}


class WarehouseParser(ClickHouseParser):
    @classmethod
    def _resolve_clickhouse_agg(cls, name: str) -> tuple[str, Sequence[str]] | None:
        if name in _MORE_AGGREGATES:
            function, suffix = _MORE_AGGREGATES[name]
            return function, [suffix] if suffix else []
        return super()._resolve_clickhouse_agg(name)


class WarehouseClickHouse(ClickHouse):
    """ClickHouse SQL, read and written by the warehouse."""

    Parser = WarehouseParser
    Generator = ClickHouseGenerator
