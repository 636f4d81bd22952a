"""DuckDB as a target of ClickHouse SQL: the functions sqlglot leaves untranslated.

sqlglot reads ClickHouse-only functions as anonymous calls or parametric aggregates and
writes them back verbatim, which DuckDB then rejects. Each translation below keeps the
meaning exactly (types included); one that has no DuckDB equivalent is an error naming
the function, never a different answer.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB
from sqlglot.generators.duckdb import DuckDBGenerator

from warehouse.dialects.nodes import copy
from warehouse.errors import QueryError

__all__ = ["WarehouseDuckDB"]

Args = list[exp.Expr]


def _cast(type_name: str) -> Callable[[Args], exp.Expr]:
    return lambda args: exp.cast(args[0], exp.DataType.build(type_name, dialect="duckdb"))


def _cast_integer(type_name: str) -> Callable[[Args], exp.Expr]:
    # ClickHouse truncates a float toward zero where DuckDB's CAST rounds.
    return lambda args: exp.cast(
        _call("trunc", args[0]), exp.DataType.build(type_name, dialect="duckdb")
    )


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _start_of_interval(args: Args) -> exp.Expr:
    # ClickHouse counts seconds, minutes and days from the Unix epoch, hours from each
    # midnight and weeks from Mondays; DuckDB's time_bucket counts from 2000-01-03
    # unless told otherwise, which would shift buckets such as 7 minutes.
    ts, interval = args[0], args[1]
    unit = interval.text("unit").upper() if isinstance(interval, exp.Interval) else ""
    if unit in ("HOUR", "HOURS"):
        origin: exp.Expr = exp.func("date_trunc", exp.Literal.string("day"), copy(ts))
    elif unit in ("WEEK", "WEEKS"):
        origin = _timestamp("1970-01-05 00:00:00+00")  # a Monday
    else:
        origin = _timestamp("1970-01-01 00:00:00+00")
    return _call("time_bucket", interval, ts, origin)


def _timestamp(text: str) -> exp.Expr:
    return exp.cast(exp.Literal.string(text), "TIMESTAMPTZ")


def _from_unix_milli(args: Args) -> exp.Expr:
    # epoch_ms(BIGINT) is a naive TIMESTAMP in UTC; make it a TIMESTAMPTZ as ts is.
    return exp.AtTimeZone(this=_call("epoch_ms", args[0]), zone=exp.Literal.string("UTC"))


_FUNCTIONS: dict[str, Callable[[Args], exp.Expr]] = {
    "toFloat64": _cast("DOUBLE"),
    "toFloat32": _cast("REAL"),
    "toInt64": _cast_integer("BIGINT"),
    "toUInt64": _cast_integer("UBIGINT"),
    "toInt32": _cast_integer("INTEGER"),
    "toUInt32": _cast_integer("UINTEGER"),
    "toUInt16": _cast_integer("USMALLINT"),
    "toString": _cast("VARCHAR"),
    "toStartOfInterval": _start_of_interval,
    "fromUnixTimestamp64Milli": _from_unix_milli,
    "toUnixTimestamp64Milli": lambda args: _call("epoch_ms", args[0]),
    # toDateTime64(x, precision, 'UTC'): DuckDB timestamps carry microseconds anyway.
    "toDateTime64": lambda args: exp.cast(args[0], "TIMESTAMPTZ"),
    "arrayElement": lambda args: _call("list_extract", args[0], args[1]),
    "arraySort": lambda args: _call("list_sort", args[0]),
    # A NULL never reaches it where the warehouse writes it (inside an aggregate whose
    # condition is false for NULL), and DuckDB has no undefined value to give instead.
    "assumeNotNull": lambda args: args[0],
}

# ClickHouse's non-finite float literals, which sqlglot reads as column names.
_NON_FINITE = {"inf": "inf", "nan": "nan"}

# Quantile aggregates: ClickHouse `f(levels)(x)` → DuckDB `g(x, level)` or `g(x, [levels])`.
# quantileExactInclusive interpolates linearly between order statistics, as
# quantile_cont does; the unsuffixed/TDigest quantiles are approximate in both engines.
_QUANTILES: dict[str, tuple[str, bool]] = {
    "quantileExactInclusive": ("quantile_cont", False),
    "quantilesExactInclusive": ("quantile_cont", True),
    "quantileTDigest": ("approx_quantile", False),
    "quantilesTDigest": ("approx_quantile", True),
    "quantile": ("approx_quantile", False),
    "quantiles": ("approx_quantile", True),
}


def _counted_keys(args: Args) -> exp.Expr:
    """The key of ``sumMap(map(key, 1))``: what DuckDB's ``histogram`` counts."""
    one = args[0]
    if isinstance(one, exp.VarMap) and len(one.args["keys"].expressions) == 1:
        [count] = one.args["values"].expressions
        inner = count.expressions[0] if isinstance(count, exp.Anonymous) else count
        if isinstance(inner, exp.Literal) and inner.this == "1":
            return one.args["keys"].expressions[0]
    raise QueryError("ClickHouse sumMap(...) has a DuckDB translation for map(key, 1) only")


def _histogram(keys: exp.Expr, condition: exp.Expr | None = None) -> exp.Expr:
    # sumMap of no rows is an empty map, DuckDB's histogram NULL.
    counted: exp.Expr = _call("histogram", keys)
    if condition is not None:
        counted = _filtered(counted, condition)
    empty = exp.VarMap(keys=exp.Array(), values=exp.Array())
    return exp.Coalesce(this=counted, expressions=[empty])


# Plain aggregates that take the `If` combinator: ClickHouse `fIf(x, cond)`.
_AGGREGATES: dict[str, Callable[[Args], exp.Expr]] = {
    "sum": lambda args: exp.Sum(this=args[0]),
    "avg": lambda args: exp.Avg(this=args[0]),
    "min": lambda args: exp.Min(this=args[0]),
    "max": lambda args: exp.Max(this=args[0]),
    "count": lambda args: exp.Count(this=args[0] if args else exp.Star()),
    "uniqExact": lambda args: exp.Count(this=exp.Distinct(expressions=list(args))),
    "groupArray": lambda args: exp.ArrayAgg(this=args[0]),
}


def _alias_name(expression: exp.Expr) -> str | None:
    """The name an unqualified column in GROUP BY may refer to as a SELECT alias."""
    if isinstance(expression, exp.Column) and not expression.table:
        return expression.name
    return None


def _filtered(aggregate: exp.Expr, condition: exp.Expr) -> exp.Expr:
    return exp.Filter(this=aggregate, expression=exp.Where(this=condition))


def _quantile(name: str, levels: Args, args: Args) -> exp.Expr:
    function, many = _QUANTILES[name]
    level = exp.Array(expressions=list(levels)) if many else levels[0]
    # ClickHouse interpolates in Float64 whatever the column; DuckDB in the column's type.
    return _call(function, exp.cast(args[0], "DOUBLE"), level)


def _as_number(operand: exp.Expr) -> exp.Expr:
    """A comparison as ClickHouse computes with it: a UInt8, 1 or 0 (DuckDB adds no
    BOOLEAN to a number)."""
    inner = operand.this if isinstance(operand, exp.Paren) else operand
    if isinstance(inner, exp.Predicate):
        return exp.cast(copy(inner), exp.DataType.build("UTINYINT", dialect="duckdb"))
    return operand  # its parentheses kept: a * (b - c) is not a * b - c


class WarehouseDuckDBGenerator(DuckDBGenerator):
    def add_sql(self, expression: exp.Add) -> str:
        return self._arithmetic(expression) or super().add_sql(expression)

    def sub_sql(self, expression: exp.Sub) -> str:
        return self._arithmetic(expression) or super().sub_sql(expression)

    def mul_sql(self, expression: exp.Mul) -> str:
        return self._arithmetic(expression) or super().mul_sql(expression)

    def _arithmetic(self, expression: exp.Binary) -> str | None:
        left, right = _as_number(expression.this), _as_number(expression.expression)
        if left is expression.this and right is expression.expression:
            return None
        return self.sql(type(expression)(this=left, expression=right))

    def column_sql(self, expression: exp.Column) -> str:
        if not expression.table and expression.name.lower() in _NON_FINITE:
            literal = exp.Literal.string(_NON_FINITE[expression.name.lower()])
            return self.sql(exp.cast(literal, "DOUBLE"))
        return super().column_sql(expression)

    def group_sql(self, expression: exp.Group) -> str:
        # ClickHouse reads a name in GROUP BY as the SELECT's alias of that name first
        # (`toStartOfMinute(ts) AS ts ... GROUP BY ts` groups by the minute); DuckDB
        # reads it as the input column. Group by the aliased expression itself.
        select = expression.parent
        if isinstance(select, exp.Select):
            aliased = {
                e.alias: e.this
                for e in select.expressions
                if isinstance(e, exp.Alias)
                and not (isinstance(e.this, exp.Column) and e.this.name == e.alias)
            }
            if any(_alias_name(e) in aliased for e in expression.expressions):
                expression = copy(expression)
                expression.set(
                    "expressions",
                    [
                        aliased[name].copy() if (name := _alias_name(e)) in aliased else e
                        for e in expression.expressions
                    ],
                )
        return super().group_sql(expression)

    def select_sql(self, expression: exp.Select) -> str:
        # sqlglot drops ClickHouse's PREWHERE for DuckDB, and its condition with it.
        prewhere = expression.args.get("prewhere")
        if prewhere is not None:
            expression = copy(expression)
            expression.set("prewhere", None)
            where = expression.args.get("where")
            condition = prewhere.this if where is None else exp.and_(prewhere.this, where.this)
            expression.set("where", exp.Where(this=condition))
        return super().select_sql(expression)

    def in_sql(self, expression: exp.In) -> str:
        # GLOBAL IN ships a subquery's result to a cluster's shards; one DuckDB has none.
        if expression.args.get("is_global"):
            expression = copy(expression)
            expression.set("is_global", None)
        return super().in_sql(expression)

    def join_sql(self, expression: exp.Join, join_op: str | None = None) -> str:
        if expression.args.get("global_"):  # as GLOBAL IN
            expression = copy(expression)
            expression.set("global_", None)
        return super().join_sql(expression, join_op)

    def quantile_sql(self, expression: exp.Quantile) -> str:
        # sqlglot reads ClickHouse's quantile(q)(x), which is approximate, as the exact
        # discrete QUANTILE of DuckDB.
        return self.sql(_quantile("quantile", [expression.args["quantile"]], [expression.this]))

    def anonymousaggfunc_sql(self, expression: exp.AnonymousAggFunc) -> str:
        if expression.name == "sumMap":
            return self.sql(_histogram(_counted_keys(list(expression.expressions))))
        base = _AGGREGATES.get(expression.name)
        if base is None:
            raise QueryError(
                f"ClickHouse aggregate {expression.name}(...) has no DuckDB translation"
            )
        return self.sql(base(list(expression.expressions)))

    def anonymous_sql(self, expression: exp.Anonymous) -> str:
        translate = _FUNCTIONS.get(expression.name)
        if translate is None:
            return super().anonymous_sql(expression)
        return self.sql(translate(list(expression.expressions)))

    def parameterizedagg_sql(self, expression: exp.ParameterizedAgg) -> str:
        name = expression.name
        if name not in _QUANTILES:
            raise QueryError(f"ClickHouse aggregate {name}(...)(...) has no DuckDB translation")
        return self.sql(_quantile(name, expression.expressions, expression.args["params"]))

    def combinedparameterizedagg_sql(self, expression: exp.CombinedParameterizedAgg) -> str:
        name = expression.name
        if not name.endswith("If") or name[:-2] not in _QUANTILES:
            raise QueryError(f"ClickHouse aggregate {name}(...)(...) has no DuckDB translation")
        *args, condition = expression.args["params"]
        return self.sql(_filtered(_quantile(name[:-2], expression.expressions, args), condition))

    def combinedaggfunc_sql(self, expression: exp.CombinedAggFunc) -> str:
        name = expression.name
        if name == "sumMapIf":
            *args, condition = expression.expressions
            return self.sql(_histogram(_counted_keys(args), condition))
        base = _AGGREGATES.get(name[:-2]) if name.endswith("If") else None
        if base is None:
            raise QueryError(f"ClickHouse aggregate {name}(...) has no DuckDB translation")
        *args, condition = expression.expressions
        return self.sql(_filtered(base(args), condition))


class WarehouseDuckDB(DuckDB):
    """DuckDB, written from the warehouse's ClickHouse SQL."""

    Generator = WarehouseDuckDBGenerator
