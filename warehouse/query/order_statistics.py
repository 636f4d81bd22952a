"""Exact percentiles answered as the order statistics around them.

An exact percentile at level ``q`` interpolates linearly between the order statistics
``x_k`` and ``x_(k+1)`` (zero-based, ascending) around the rank ``h = q (n - 1)``,
``k = floor(h)`` (ClickHouse's ``quantileExactInclusive``, DuckDB's ``quantile_cont``,
numpy's default). Where those two lie far apart, the interpolated value may lie far from
both, while an estimate read from 2%-wide buckets lies next to ``x_k``: checking one
against the other needs the interval. Within :func:`order_statistics`, percentiles
read from raw rows are ``x_k`` (``low``) or ``x_(k+1)`` (``high``; ``x_k`` itself
where ``h`` is whole, as the interpolation then is); ``llmwh compare`` asks its
reference backend so.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from sqlglot import exp

from warehouse.errors import QueryError
from warehouse.query import trees

__all__ = ["SIDES", "asked", "order_statistic", "order_statistics"]

SIDES = ("low", "high")

_SIDE: ContextVar[str | None] = ContextVar("order_statistic", default=None)

# floor or ceil of h, plus one: arrays count from 1. h is computed in Float64 as both
# engines compute it for the interpolation, so that k is theirs; NULLs are left out,
# as the quantile functions leave them out, and a group with no values gets NULL (in
# ClickHouse `count(x) - 1` would wrap around and the element be 0).
_TEMPLATE = (
    "if(count(x) = 0, NULL, arrayElement(arraySort(groupArrayIf(toFloat64(x), x IS NOT NULL)),"
    " toInt64({rounding}(toFloat64({level}) * (count(x) - 1))) + 1))"
)


@contextmanager
def order_statistics(side: str) -> Iterator[None]:
    """Within: questions compiled in this context answer exact percentiles as the order
    statistic on ``side`` (``low`` or ``high``) of the exact value."""
    if side not in SIDES:
        raise QueryError(f"order statistic side {side!r}: one of {', '.join(SIDES)}")
    token = _SIDE.set(side)
    try:
        yield
    finally:
        _SIDE.reset(token)


def asked() -> str | None:
    """The side :func:`order_statistics` asks for here, or None (percentiles as such)."""
    return _SIDE.get()


def order_statistic(column: str, level: float, side: str) -> exp.Expr:
    """The tree of the order statistic on ``side`` of the ``level`` percentile of
    ``column`` over a group of raw rows."""
    rounding = "floor" if side == "low" else "ceil"
    template = _TEMPLATE.format(rounding=rounding, level=repr(float(level)))
    return trees.fill(template, x=trees.column(column))
