"""Named queries: the SQL files of `sql/`, each one question in plain ClickHouse SQL.

A named query is a file a person can read and run anywhere: ClickHouse SQL with
``{name:Type}`` parameters, as ``clickhouse-client --param_name=value`` takes them,
under a header of comments that names it, says what it answers and declares each
parameter with its type, a default and what it means::

    -- name: slowest_requests
    -- answers: The slowest requests of a window, with every dimension.
    -- param since DateTime64(3, 'UTC') = 1h: start of the window
    -- param limit UInt32 = 20: how many requests

``llmwh query run`` and :meth:`warehouse.Warehouse.named_query` fill the parameters
from ``name=value`` text (checked against the declared type, defaults filled in) and
run the file read-only, through the same path as ``llmwh sql`` (transpiled for DuckDB,
tenant-scoped when the warehouse reads as a tenant). See docs/named-queries.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlglot import exp

from warehouse import dialects
from warehouse.errors import QueryError
from warehouse.query.readonly import check_read_only
from warehouse.query.timerange import parse_instant
from warehouse.resources import shipped_dir

__all__ = [
    "NamedQuery",
    "Parameter",
    "bind",
    "for_grafana",
    "named_queries",
    "queries_dir",
    "read_query",
]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_PARAM = re.compile(r"^(\w+)\s+(.+?)(?:\s*=\s*(\S+))?:\s*(.+)$")

_INTEGERS = {
    "UInt8": (0, 2**8 - 1),
    "UInt16": (0, 2**16 - 1),
    "UInt32": (0, 2**32 - 1),
    "UInt64": (0, 2**64 - 1),
    "Int32": (-(2**31), 2**31 - 1),
    "Int64": (-(2**63), 2**63 - 1),
}
_TIME = "DateTime64(3, 'UTC')"
TYPES = (*_INTEGERS, "Float64", "String", _TIME)
"""The parameter types a named query may declare."""


@dataclass(frozen=True)
class Parameter:
    """One ``{name:Type}`` parameter of a named query."""

    name: str
    type: str
    default: str | None
    help: str


@dataclass(frozen=True)
class NamedQuery:
    """A named query: its header, read, and the file's whole text (what runs)."""

    name: str
    answers: str
    parameters: tuple[Parameter, ...]
    text: str
    path: Path


def queries_dir() -> Path:
    """The ``sql/`` folder: packaged inside the wheel, or in the source tree."""
    found = shipped_dir("sql")
    if found is None:
        raise QueryError("the sql/ folder of named queries is missing from this installation")
    return found


def named_queries(folder: Path | None = None) -> list[NamedQuery]:
    """Every named query of ``folder`` (default: the shipped ones), by name."""
    return [read_query(path) for path in sorted((folder or queries_dir()).glob("*.sql"))]


def read_query(name_or_path: str | Path) -> NamedQuery:
    """A shipped query by name, or a query file by path; its header checked against its
    SQL, and the SQL checked to read only."""
    path = Path(name_or_path)
    if not path.suffix and isinstance(name_or_path, str) and _NAME.match(name_or_path):
        path = queries_dir() / f"{name_or_path}.sql"
        if not path.is_file():
            known = ", ".join(q.name for q in named_queries())
            raise QueryError(f"no named query {name_or_path!r}; known: {known}")
    try:
        text = path.read_text()
    except OSError as exc:
        raise QueryError(f"cannot read query file {path}: {exc.strerror}") from None
    query = _parse(text, path)
    tree = check_read_only(text)  # a file that writes is refused before anything runs
    _check_placeholders(tree, query.parameters, path)
    return query


def bind(
    query: NamedQuery,
    given: Mapping[str, str],
    now: datetime | None = None,
) -> dict[str, Any]:
    """The values of ``query``'s parameters from ``name=value`` text, defaults filled
    in (a time to the millisecond, as ``DateTime64(3)`` holds it); a clear error naming
    the parameter for one unknown, missing or malformed."""
    declared = {p.name: p for p in query.parameters}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        takes = ", ".join(declared) or "no parameters"
        raise QueryError(f"{query.name} has no parameter {unknown[0]!r}; it takes {takes}")
    now = now or datetime.now(UTC)
    values = {}
    for parameter in query.parameters:
        text = given.get(parameter.name, parameter.default)
        if text is None:
            raise QueryError(
                f"{query.name} needs parameter {parameter.name} ({parameter.type}): "
                f"{parameter.help}"
            )
        value = _value(query.name, parameter, str(text), now)
        if isinstance(value, datetime):
            value = value.replace(microsecond=value.microsecond // 1000 * 1000)
        values[parameter.name] = value
    return values


def for_grafana(query: NamedQuery) -> str:
    """The query's text for a panel of Grafana's ClickHouse data source: the window's
    ends become the dashboard's time range (``since`` and ``until``: ``$__fromTime_ms``,
    ``$__toTime_ms``), every other parameter a dashboard variable of its name (text
    variables are inserted bare: quote a String one, ``'${tenant}'``)."""
    macros = {"since": "$__fromTime_ms", "until": "$__toTime_ms"}
    kinds = {p.name: p.type for p in query.parameters}

    def replaced(node: exp.Expr) -> exp.Expr:
        if not isinstance(node, exp.Placeholder) or node.name not in kinds:
            return node
        name, kind = node.name, kinds[node.name]
        if name in macros and kind == _TIME:
            return exp.var(macros[name])
        return exp.var(f"'${{{name}}}'" if kind == "String" else f"${{{name}}}")

    tree = check_read_only(query.text)
    if tree is None:  # SHOW and the like take no parameters
        return query.text
    header = "".join(f"{line}\n" for line in _header(query.text))
    body = tree.transform(replaced)
    body.comments = None  # the header's, which the parser hangs on the statement
    text = body.sql(dialect=dialects.WarehouseClickHouse, pretty=True)
    return f"{header}{text}\n"


def _value(query: str, parameter: Parameter, text: str, now: datetime) -> Any:
    kind = parameter.type
    bad = f"{query}: parameter {parameter.name} is a {kind}, not {text!r}"
    if kind in _INTEGERS:
        low, high = _INTEGERS[kind]
        try:
            value = int(text)
        except ValueError:
            raise QueryError(bad) from None
        if not low <= value <= high:
            raise QueryError(f"{bad} (from {low} to {high})")
        return value
    if kind == "Float64":
        try:
            number = float(text)
        except ValueError:
            raise QueryError(bad) from None
        if number != number or number in (float("inf"), float("-inf")):
            raise QueryError(f"{bad} (a finite number)")
        return number
    if kind == _TIME:
        try:
            return parse_instant(text, now)
        except QueryError as exc:
            raise QueryError(f"{query}: parameter {parameter.name}: {exc}") from None
    return text


def _header(text: str) -> list[str]:
    """The lines of the header: the comment lines the file starts with."""
    lines = text.splitlines()
    ends = next((i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return lines[:ends]


def _parse(text: str, path: Path) -> NamedQuery:
    fields: dict[str, str] = {}
    parameters: list[Parameter] = []
    for line in _header(text):
        body = line[2:]
        if body.startswith("  ") and body.strip() and "answers" in fields:
            fields["answers"] += " " + body.strip()  # an indented line continues it
            continue
        body = body.strip()
        if body.startswith("param "):
            parameters.append(_parameter(body.removeprefix("param ").strip(), path))
        else:
            key, sep, value = body.partition(":")
            if sep and key in ("name", "answers"):
                fields[key] = value.strip()
    name = fields.get("name", "")
    if name != path.stem or not _NAME.match(name):
        raise QueryError(
            f"{path}: the header's first line is '-- name: {path.stem}' "
            "(lower case, digits and _, as the file is named)"
        )
    if not fields.get("answers"):
        raise QueryError(f"{path}: the header says what {name} answers ('-- answers: ...')")
    return NamedQuery(name, fields["answers"], tuple(parameters), text, path)


def _parameter(text: str, path: Path) -> Parameter:
    match = _PARAM.match(text)
    if match is None:
        raise QueryError(
            f"{path}: bad parameter line {text!r}: '-- param NAME Type [= default]: what'"
        )
    name, kind, default, help_ = match.groups()
    if kind not in TYPES:
        raise QueryError(f"{path}: parameter {name} has type {kind}; use one of {', '.join(TYPES)}")
    return Parameter(name, kind, default, help_.strip())


def _check_placeholders(tree: exp.Expr | None, parameters: Sequence[Parameter], path: Path) -> None:
    declared = {p.name: _type(p.type) for p in parameters}
    used = {}
    found = [] if tree is None else tree.find_all(exp.Placeholder)
    for node in found:
        name, kind = node.name, _type(node.args["kind"]) if node.args.get("kind") else ""
        if declared.get(name) != kind:
            raise QueryError(
                f"{path}: {{{name}:{kind}}} is not declared as '-- param {name} {kind} ...'"
            )
        used[name] = kind
    unused = sorted(set(declared) - set(used))
    if unused:
        raise QueryError(f"{path}: parameter {unused[0]} is declared but not used")


def _type(kind: str | exp.DataType) -> str:
    """A parameter type as ClickHouse writes it (``DateTime64(3, 'UTC')``)."""
    if isinstance(kind, str):
        kind = exp.DataType.build(kind, dialect=dialects.WarehouseClickHouse)
    return kind.sql(dialect=dialects.WarehouseClickHouse)
