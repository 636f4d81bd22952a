"""Rollup rows as trees: per time bucket from `requests` rows, or one per request.

What each column holds is its aggregate's (:mod:`warehouse.aggregates`); here those
aggregates become the rows of a rollup: how its views fill it, how a range's ragged ends
are read from raw rows, and the row a single request would make (the client merge's
input). The trees are composed by the builder and rendered by the dialects like any
question.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from warehouse.aggregates import Aggregate
from warehouse.query import trees

__all__ = ["bucket_rows", "minute", "request_rows"]


def minute() -> exp.Expr:
    """``toStartOfMinute(ts)``: a request's minute, the finest bucket of a rollup."""
    return trees.expression("toStartOfMinute(ts)")  # as parsed: each dialect translates it


def bucket_rows(
    source: exp.Table,
    dimensions: Sequence[str],
    columns: Sequence[Aggregate],
    where: Sequence[exp.Expr] = (),
    keys: Sequence[tuple[str, exp.Expr]] = (),
    bucket: exp.Expr | None = None,
    filling: bool = False,
) -> exp.Select:
    """Rollup rows per ``bucket`` (a request's minute by default) from the `requests`
    rows at ``source`` that every condition of ``where`` picks, grouped by
    ``dimensions`` and by each of ``keys`` (name, expression of a request's columns).

    The conditions and keys apply to the requests themselves, in a subquery: there
    ``ts`` is the request's time, not the minute the row's ``ts`` is aliased over it.
    ``filling``: the rows a view or a backfill writes (each column's
    :attr:`~warehouse.aggregates.Aggregate.filling`), not those a question reads.
    """
    read: exp.Expr = source
    if where or keys:
        computed = [trees.alias(expression, name) for name, expression in keys]
        inner = exp.Select(expressions=[exp.Star(), *computed]).from_(source, copy=False)
        if where:
            inner = inner.where(trees.and_(list(where)), copy=False)
        read = inner.subquery("requests", copy=False)
    grouped = [*dimensions, *(name for name, _ in keys)]
    items = [
        trees.alias(bucket if bucket is not None else minute(), "ts"),
        *(trees.column(name) for name in grouped),
        *(
            trees.alias(trees.expression(c.filling if filling else c.over_requests), c.name)
            for c in columns
        ),
    ]
    rows = trees.select(items, read)
    return rows.group_by(*(trees.column(name) for name in ["ts", *grouped]), copy=False)


def request_rows(
    source: exp.Table,
    dimensions: Sequence[str],
    columns: Sequence[Aggregate],
    where: Sequence[exp.Expr] = (),
) -> exp.Select:
    """The `requests` rows at ``source`` that every condition of ``where`` picks, each
    as the rollup row it alone would make: its own ``ts``, the ``dimensions``, and each
    column's :attr:`~warehouse.aggregates.Aggregate.per_request` value."""
    items = [
        trees.column("ts"),
        *(trees.column(name) for name in dimensions),
        *(trees.alias(trees.expression(c.per_request), c.name) for c in columns),
    ]
    rows = trees.select(items, source)
    return rows.where(trees.and_(list(where)), copy=False) if where else rows
