"""ClickHouse as the warehouse writes it: sqlglot's dialect plus the aggregates it misses."""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp
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


_START_OF = {"MINUTE": "toStartOfMinute", "HOUR": "toStartOfHour", "DAY": "toStartOfDay"}


class WarehouseGenerator(ClickHouseGenerator):
    def timestamptrunc_sql(self, expression: exp.DateTrunc | exp.TimestampTrunc) -> str:
        # Written back as read: `requests` is ordered by toStartOfHour(ts), and the
        # index is used for a condition on the key's own expression, not on
        # dateTrunc('HOUR', ts), which sqlglot would write.
        unit = expression.text("unit").upper()
        if unit in _START_OF and not expression.args.get("zone"):
            return self.func(_START_OF[unit], expression.this)
        return super().timestamptrunc_sql(expression)


class WarehouseClickHouse(ClickHouse):
    """ClickHouse SQL, read and written by the warehouse."""

    Parser = WarehouseParser
    Generator = WarehouseGenerator
