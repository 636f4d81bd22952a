"""Pieces of the query layer's SQL as sqlglot trees, shaped as ClickHouse SQL parses.

The builder composes a question from these and from the registry's expressions; each
target renders the tree (:mod:`warehouse.dialects`). A node is built as the
ClickHouse parser would have built it from the same text, so that every dialect module
translates it as it translates parsed SQL. A piece written in SQL is parsed once
(:func:`expression`) and copied for each use.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from sqlglot import exp

from warehouse import dialects

__all__ = [
    "alias",
    "and_",
    "call",
    "column",
    "expression",
    "fill",
    "or_",
    "paren",
    "placeholder",
    "placeholders",
    "select",
    "table",
    "time_at",
    "union_all",
]


def expression(sql: str) -> exp.Expr:
    """A fresh tree of ClickHouse ``sql`` (parsed once, copied for each caller)."""
    return dialects.copy(_parsed(sql))


@functools.lru_cache(maxsize=4096)
def _parsed(sql: str) -> exp.Expr:
    return dialects.parse(sql)


def fill(template: str, **slots: exp.Expr) -> exp.Expr:
    """A fresh tree of the ClickHouse ``template`` whose columns and tables named as
    ``slots`` are those trees: a fixed shape written once as SQL, its variable parts
    composed as trees. A table slot keeps the template's alias (a query in its place
    becomes an aliased subquery)."""

    def filled(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table and node.name in slots:
            return dialects.copy(slots[node.name])
        if isinstance(node, exp.Table) and not node.db and node.name in slots:
            found = dialects.copy(slots[node.name])
            alias = node.alias
            if isinstance(found, exp.Query):
                return found.subquery(alias or None, copy=False)
            if alias:
                found.set("alias", exp.TableAlias(this=exp.to_identifier(alias)))
            return found
        return node

    return expression(template).transform(filled, copy=False)


def placeholder(name: str, type_name: str) -> exp.Placeholder:
    """``{name:Type}``: a value bound at query time, never SQL text."""
    return exp.Placeholder(this=exp.var(name), kind=dialects.copy(_type(type_name)))


@functools.lru_cache(maxsize=64)
def _type(name: str) -> exp.DataType:
    return exp.DataType.build(name, dialect=dialects.WarehouseClickHouse)


def placeholders(tree: exp.Expr) -> frozenset[str]:
    """The names of the values ``tree`` binds."""
    return frozenset(p.name for p in tree.find_all(exp.Placeholder) if p.args.get("kind"))


def time_at(name: str) -> exp.Expr:
    """``fromUnixTimestamp64Milli({name:Int64}, 'UTC')``: a bound moment in ms."""
    return call("fromUnixTimestamp64Milli", placeholder(name, "Int64"), exp.Literal.string("UTC"))


def call(name: str, *arguments: exp.Expr) -> exp.Anonymous:
    """A ClickHouse function the parser keeps by its name."""
    return exp.Anonymous(this=name, expressions=list(arguments))


def column(name: str, table: str | None = None, quoted: bool = False) -> exp.Column:
    return exp.column(name, table=table, quoted=quoted)


def alias(tree: exp.Expr, name: str, quoted: bool = False) -> exp.Alias:
    return exp.Alias(this=tree, alias=exp.to_identifier(name, quoted=quoted))


def table(name: str, database: str | None = None, as_: str | None = None) -> exp.Table:
    """``"database".name AS as_`` (the database quoted, as every identifier it names)."""
    found = exp.Table(
        this=exp.to_identifier(name),
        db=exp.to_identifier(database, quoted=True) if database else None,
    )
    if as_:
        found.set("alias", exp.TableAlias(this=exp.to_identifier(as_)))
    return found


def paren(tree: exp.Expr) -> exp.Paren:
    """``(tree)``, holding ``tree`` itself (sqlglot's ``exp.paren`` holds a copy)."""
    return exp.Paren(this=tree)


def and_(terms: Iterable[exp.Expr]) -> exp.Expr:
    """The terms joined by AND (each kept whole: an OR inside one is parenthesised)."""
    listed = [paren(t) if isinstance(t, exp.Or) else t for t in terms]
    found = listed[0]
    for term in listed[1:]:
        found = exp.And(this=found, expression=term)
    return found


def or_(terms: Sequence[exp.Expr]) -> exp.Expr:
    """Each term parenthesised, joined by OR."""
    found: exp.Expr = paren(terms[0])
    for term in terms[1:]:
        found = exp.Or(this=found, expression=paren(term))
    return found


def select(items: Sequence[exp.Expr], source: exp.Expr) -> exp.Select:
    """``SELECT items FROM source`` (a table, or a query read as a subquery)."""
    found = exp.Select(expressions=list(items))
    if isinstance(source, exp.Query) and not isinstance(source, exp.Subquery):
        source = source.subquery(copy=False)
    found.set("from_", exp.From(this=source))
    return found


def union_all(queries: Sequence[exp.Query]) -> exp.Query:
    """``q1 UNION ALL q2 ...`` (one query alone as it is)."""
    found = queries[0]
    for query in queries[1:]:
        found = exp.Union(this=found, expression=query, distinct=False)
    return found
