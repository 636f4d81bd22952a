"""Column rules: any accepted Arrow type -> the REQUESTS_SCHEMA type, plus checks.

Strings, integers, numbers and booleans are here; ``ts`` is in :mod:`.timestamps` and
``attrs`` in :mod:`.attrs`. A rule takes ``(name, column, n)`` and returns the column as
stored and its row-level checks, or raises :class:`_ColumnTypeError` when the whole
column's type cannot become its field's.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events.fields import _KINDS, _UINT_MAX, REQUIRED, _problem
from warehouse.ingest.events.violations import _Check
from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA, STATUSES


class _ColumnTypeError(Exception):
    """A whole column has a type that cannot become its field's (Arrow input)."""


def _is_text(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_text(type_.value_type)
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or _is_view(type_)


def _is_view(type_: pa.DataType) -> bool:
    is_string_view = getattr(pa.types, "is_string_view", None)
    return bool(is_string_view and is_string_view(type_))


def _is_numeric(type_: pa.DataType) -> bool:
    return pa.types.is_integer(type_) or pa.types.is_floating(type_)


def _required(name: str, column: Any) -> list[_Check]:
    if name not in REQUIRED:
        return []
    return [_Check(name, pc.is_null(column), "is required", None)]


def _string_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        column = pa.nulls(n, pa.string())
    elif not _is_text(column.type):
        raise _ColumnTypeError(f"{column.type} cannot be read as a string")
    column = pc.cast(column, pa.string())
    checks = _required(name, column)
    if name == "request_id":
        checks.append(_Check(name, pc.equal(column, ""), "must not be empty", column))
    elif name == "status":
        checks.append(
            _Check(name, _not_in(column, STATUSES), f"must be one of {', '.join(STATUSES)}", column)
        )
    elif name == "error_class":
        problem = f"must be empty or one of {', '.join(ERROR_CLASSES)}"
        checks.append(_Check(name, _not_in(column, ("", *ERROR_CLASSES)), problem, column))
    return pc.fill_null(column, ""), checks


def _not_in(column: Any, allowed: tuple[str, ...]) -> Any:
    known = pc.is_in(column, value_set=pa.array(allowed, pa.string()))
    return pc.and_(pc.is_valid(column), pc.invert(known))


def _uint_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    limit = _UINT_MAX[name]
    target = REQUESTS_SCHEMA.field(name).type
    type_ = column.type
    if pa.types.is_null(type_):
        values = pa.nulls(n, target)
        return (pc.fill_null(values, 0) if name == "http_status" else values), []
    if type_ == pa.uint64():
        bad = pc.greater(column, pa.scalar(limit, pa.uint64()))
        wide = pc.cast(pc.if_else(bad, pa.scalar(None, pa.uint64()), column), pa.int64())
    elif pa.types.is_integer(type_):
        wide = pc.cast(column, pa.int64())
        bad = pc.or_(pc.less(wide, 0), pc.greater(wide, limit))
    elif pa.types.is_floating(type_):
        wide = pc.cast(column, pa.float64())
        ok = pc.and_(pc.is_finite(wide), pc.equal(pc.floor(wide), wide))
        bad = pc.invert(pc.and_(ok, pc.and_(pc.greater_equal(wide, 0), pc.less_equal(wide, limit))))
    else:
        raise _ColumnTypeError(f"{type_} cannot be read as an integer")
    bad = pc.fill_null(bad, False)
    clean = pc.if_else(bad, pa.scalar(None, wide.type), wide)
    values = pc.cast(clean, target, safe=False)
    if name == "http_status":
        values = pc.fill_null(values, 0)
    return values, [_Check(name, bad, _problem(name), column)]


def _float_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        return pa.nulls(n, pa.float32()), []
    if not (_is_numeric(column.type) or pa.types.is_decimal(column.type)):
        raise _ColumnTypeError(f"{column.type} cannot be read as a number")
    wide = pc.cast(column, pa.float64())
    narrow = pc.cast(wide, pa.float32(), safe=False)
    ok = pc.is_finite(narrow)  # false for NaN, infinities and Float32 overflow alike
    if _KINDS[name] == "latency":
        ok = pc.and_(ok, pc.greater_equal(wide, 0))
    bad = pc.fill_null(pc.invert(ok), False)
    values = pc.if_else(bad, pa.scalar(None, pa.float32()), narrow)
    return values, [_Check(name, bad, _problem(name), column)]


def _bool_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        column = pa.nulls(n, pa.bool_())
    elif not pa.types.is_boolean(column.type):
        raise _ColumnTypeError(f"{column.type} cannot be read as true or false")
    return pc.fill_null(column, False), []
