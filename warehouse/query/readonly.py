"""Read-only SQL from users: ClickHouse SQL, run on either backend, never a write.

Two locks, so that neither alone has to be perfect: the statement must parse as one
query (no INSERT, DDL, SET, COPY, ATTACH ...), and the database itself refuses writes
(ClickHouse's ``readonly`` setting; for DuckDB, the CLI opens the file read-only).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from warehouse import dialects
from warehouse.errors import QueryError, StoreError
from warehouse.query import trees
from warehouse.store import tenancy
from warehouse.store.base import Store

__all__ = ["TENANT_TABLES", "check_read_only", "run_read_only", "scope_to_tenant"]

_WRITES = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Into,
    exp.Copy,
    exp.Set,
    exp.Pragma,
    exp.Attach,
    exp.Detach,
    exp.Use,
    exp.Command,
    exp.Transaction,
)
# Statements sqlglot keeps as opaque commands that read only; ClickHouse's readonly
# setting stands behind them.
_CLICKHOUSE_READS = ("SHOW", "DESCRIBE", "DESC", "EXPLAIN", "EXISTS")


def _first_word(sql: str) -> str:
    """The statement's first token (``SELECT``, ``SHOW`` ...), comments skipped: a named
    query's header, say. Empty for no SQL; ``?`` for text that is not SQL at all."""
    try:
        tokens = dialects.WarehouseClickHouse().tokenize(sql)
    except sqlglot.errors.TokenError:
        return "?"
    return tokens[0].text.upper() if tokens else ""


def check_read_only(sql: str) -> exp.Expr | None:
    """The parsed query, or an error naming what is not a plain read.

    Returns None for ClickHouse-only read statements sqlglot cannot model (``SHOW``,
    ``EXPLAIN`` ...), which only a ClickHouse store may run.
    """
    first = _first_word(sql)
    if not first:
        raise QueryError("no SQL given")
    try:
        with _quiet_sqlglot():
            statements = [s for s in sqlglot.parse(sql, read=dialects.WarehouseClickHouse) if s]
    except sqlglot.errors.ParseError as error:
        if first in _CLICKHOUSE_READS:
            return None
        raise QueryError(f"cannot parse SQL: {str(error).strip().splitlines()[0]}") from None
    if len(statements) != 1:
        raise QueryError(f"one statement at a time, got {len(statements)}")
    [tree] = statements
    if isinstance(tree, exp.Command) and first in _CLICKHOUSE_READS:
        return None
    if isinstance(tree, exp.Describe | exp.Show):
        return tree
    for node in tree.walk():
        if isinstance(node, _WRITES):
            kind = first if node is tree else node.key.upper()
            raise QueryError(f"llmwh sql is read-only: {kind} is refused")
    if not isinstance(tree, exp.Query):
        raise QueryError(f"llmwh sql is read-only: {first} is refused; write a SELECT")
    return tree


def run_read_only(
    store: Store,
    sql: str,
    parameters: dict[str, Any] | None = None,
    tenant: str | None = None,
) -> pa.Table:
    """Run user SQL (ClickHouse dialect) read-only on ``store``; DuckDB gets it transpiled.

    With ``tenant``, the query runs under ClickHouse's row policies for that tenant
    (:meth:`Store.as_tenant`; refused where the store has none), after the second wall
    of :func:`scope_to_tenant`. See docs/security.md.
    """
    tree = check_read_only(sql)
    dialect = store.capabilities.dialect
    if tenant is not None:
        if tree is None:
            raise QueryError(f"{sql.split(None, 1)[0].upper()} is refused when reading as a tenant")
        tree = scope_to_tenant(tree, store.database)
        scoped = store.as_tenant(tenant)
        parameters = {**(parameters or {}), _TENANT_PARAMETER: tenant}
        rendered = dialects.render(tree, dialect)
        answer = scoped.query_arrow(rendered, parameters)
        if dialect == dialects.SOURCE:
            return _with_times(scoped, rendered, parameters, answer, settings=None)
        return answer
    if dialect == dialects.SOURCE:
        # The user's own text, so every ClickHouse feature works as written.
        answer = store.query_arrow(sql, parameters, settings={"readonly": 1})
        return _with_times(store, sql, parameters, answer, settings={"readonly": 1})
    if tree is None:
        raise QueryError(f"{sql.split(None, 1)[0].upper()} runs on ClickHouse stores only")
    return store.query_arrow(dialects.render(tree, dialect), parameters)


_DATETIME = re.compile(r"(?:(?:Nullable|LowCardinality)\()*DateTime(?:\('(?P<zone>[^']+)'\))?\)*")


def _with_times(
    store: Store,
    sql: str,
    parameters: dict[str, Any] | None,
    answer: pa.Table,
    settings: dict[str, Any] | None,
) -> pa.Table:
    """``answer`` with its DateTime columns as times. ClickHouse writes a DateTime as
    UInt32 seconds in Arrow (DateTime64 as a timestamp), which would print as integers;
    its result's types, from ``DESCRIBE``, say which columns they are. Asked only of an
    answer with a UInt32 column (a DESCRIBE evaluates scalar subqueries once more).
    ``settings``: none for a tenant's store, whose profile fixes ``readonly`` already."""
    if not any(pa.types.is_uint32(field.type) for field in answer.schema):
        return answer
    query = sql.rstrip().removesuffix(";")
    try:
        described = store.query_arrow(f"DESCRIBE (\n{query}\n)", parameters, settings=settings)
    except StoreError:
        return answer  # a statement DESCRIBE cannot take (SHOW ...): its columns as sent
    types = described.column("type").to_pylist()
    if len(types) != answer.num_columns:
        return answer
    columns = answer.columns
    for i, (field, kind) in enumerate(zip(answer.schema, types, strict=True)):
        found = _DATETIME.fullmatch(kind)
        if found and pa.types.is_uint32(field.type):
            zone = found["zone"] or "UTC"
            columns[i] = columns[i].cast(pa.int64()).cast(pa.timestamp("s", tz=zone))
    return pa.table(columns, names=answer.column_names)


TENANT_TABLES = (*tenancy.TENANT_TABLES, *tenancy.TENANT_VIEWS)
"""The only tables a tenant-scoped query may read, each under a row policy, and the views
over them (which ClickHouse reads as the tenant, under the same policies)."""
_TENANT_COLUMN = frozenset((*tenancy.TENANT_COLUMN_TABLES, *tenancy.TENANT_VIEWS))
"""The tables and views with a ``tenant`` column, each rewritten into its rows of one
tenant."""
_TENANT_PARAMETER = "llmwh_tenant"


def scope_to_tenant(tree: exp.Expr, database: str) -> exp.Expr:
    """The second wall behind the row policies: ``tree`` held to the tenant tables and
    views, each with a ``tenant`` column replaced by its rows of one tenant.

    ``requests`` becomes ``(SELECT * FROM requests WHERE tenant = {llmwh_tenant:String})``
    under the same alias, wherever it appears (joins, subqueries, CTEs). Any other
    table, a table function, another database, ``x IN table`` (and ``globalIn`` and kin),
    ``SAMPLE``, a ``WITH`` name that is also a table's, and functions that read outside
    the query (``file``, ``url``, ``dictGet`` ...) are refused.
    """
    tree = dialects.copy(tree)
    table_names = {table.name.lower() for table in tree.find_all(exp.Table)}
    for cte in tree.find_all(exp.CTE):
        name = cte.alias_or_name.lower()
        if name in _SHADOWED or (cte.args.get("scalar") and name in table_names):
            raise QueryError(
                f"reading as a tenant, WITH may not name {cte.alias_or_name}: it is a table's name"
            )
    try:
        with _quiet_sqlglot():
            scopes = list(traverse_scope(tree))
    except (sqlglot.errors.SqlglotError, ValueError, KeyError):
        raise QueryError(
            "reading as a tenant, this query is refused: its tables cannot be told apart"
        ) from None
    cte_references = {
        id(table)
        for scope in scopes
        for table in scope.tables
        if not table.db and table.name in scope.cte_sources
    }
    for node in tree.walk():
        if isinstance(node, exp.In) and node.args.get("field") is not None:
            raise QueryError("reading as a tenant, IN <table> is refused: write IN (SELECT ...)")
        if (
            isinstance(node, exp.Placeholder)
            and str(node.args.get("kind", "")).lower() == "identifier"
        ):
            raise QueryError("reading as a tenant, Identifier parameters are refused")
        if isinstance(node, exp.Func) and _reads_outside(name := _function_name(node)):
            raise QueryError(f"reading as a tenant, {name}() is refused")
        if isinstance(node, exp.Func) and _function_name(node).lower() in _IN_FUNCTIONS:
            raise QueryError(
                f"reading as a tenant, {_function_name(node)}() is refused: write IN (SELECT ...)"
            )
    for table in list(tree.find_all(exp.Table)):
        if id(table) in cte_references:
            continue
        name, db = table.name, table.db
        if not isinstance(table.this, exp.Identifier):
            raise QueryError("table functions are refused when reading as a tenant")
        if db not in ("", database) or name not in TENANT_TABLES:
            shown = f"{db}.{name}" if db else name
            raise QueryError(
                f"{shown} is not tenant-scoped: reading as a tenant, a query may read "
                f"{', '.join(TENANT_TABLES)} only"
            )
        if table.args.get("sample") is not None:
            raise QueryError("SAMPLE is refused when reading as a tenant")
        if name not in _TENANT_COLUMN:
            continue  # the series tables: their row policy alone holds them
        final = table.parent if isinstance(table.parent, exp.Final) else None
        read: exp.Expr = exp.Table(
            this=exp.to_identifier(name), db=exp.to_identifier(db) if db else None
        )
        own = exp.EQ(
            this=exp.column("tenant"), expression=trees.placeholder(_TENANT_PARAMETER, "String")
        )
        rows = exp.select(exp.Star()).from_(read if final is None else exp.Final(this=read))
        rows = rows.where(own, copy=False)
        alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name))
        (table if final is None else final).replace(exp.Subquery(this=rows, alias=alias))
    return tree


_OUTSIDE = frozenset(
    {
        "file", "url", "urlcluster", "s3", "s3cluster", "hdfs", "hdfscluster", "remote",
        "remotesecure", "cluster", "clusterallreplicas", "merge", "input", "mysql",
        "postgresql", "executable", "azureblobstorage", "gcs",
    }
)  # fmt: skip
"""Functions that read files, URLs, other servers or other tables, refused as a tenant
(lower case; ``dictGet*``, ``dictHas`` and ``joinGet*`` are refused too)."""


_IN_FUNCTIONS = frozenset(
    f"{g}{n}{null}in" for g in ("", "global") for n in ("", "not") for null in ("", "null")
)
"""``in`` as a function (``globalIn(x, table)``, ``notNullIn`` ...), which takes a table."""
_SHADOWED = frozenset(
    {*TENANT_TABLES, "metric_metadata", "remote_write_v1", "system", "numbers", "one"}
)
"""Names a ``WITH`` may not take as a tenant: ClickHouse reads ``WITH (SELECT 1) AS
requests ... FROM requests`` as a scalar and the real table, where a reader of the text
would see a CTE."""


def _function_name(node: exp.Func) -> str:
    return node.name if isinstance(node, exp.Anonymous) else node.sql_name()


def _reads_outside(name: str) -> bool:
    lowered = name.lower()
    return lowered in _OUTSIDE or lowered.startswith(("dictget", "dicthas", "joinget"))


@contextmanager
def _quiet_sqlglot() -> Iterator[None]:
    # sqlglot logs a warning for every statement it keeps as an opaque command; here
    # that is an answer, not a problem.
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
