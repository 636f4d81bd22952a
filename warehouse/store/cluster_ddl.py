"""Render single-node ClickHouse migrations for a cluster.

For cluster ``c`` every MergeTree table ``db.t`` becomes

* ``db.t_local ON CLUSTER c`` with the Replicated variant of its engine (the table's
  ZooKeeper path ``/clickhouse/tables/{shard}/db/t_local``, replica ``{replica}``,
  then the engine's own parameters), holding this shard's rows, and
* ``db.t ON CLUSTER c AS db.t_local ENGINE = Distributed(c, db, t_local, key)``, which
  splits inserts between shards by the key named in the file's ``-- sharding_key:``
  line and answers queries over all of them.

A data statement (``INSERT ... SELECT``, a backfill) reads and writes the local tables:
each shard fills its own rows from its own, since every sharded table here is split by
a key that keeps what a backfill combines on one shard (a request and its parts by
request id; a rollup row and the requests it sums by tenant, service and model). One
marked ``-- reshard`` (a rewrite that changes the key its rows are sharded by, as 0023
changes series ids) reads the local tables and writes the Distributed table, so every
row lands on the shard of its new key; every shard must run it together.

``EXCHANGE TABLES db.a AND db.b`` of sharded tables swaps their local tables (each
Distributed table keeps naming its local one, so it then reads the other's rows). With
Keeper a Replicated table keeps its Keeper path through the swap, so ``b``, the copy
swapped in, is created with a path of its own (``{uuid}``), not one named after ``b``
that the table live under ``a`` would hold when ``b`` is created again.

A Null table (an insert target whose views do the work) becomes a Null ``t_local``
on every node behind the same Distributed ``t``: an insert reaches the shard that
owns each row, and that shard's views fill its local tables.

A view (not materialized) with a ``-- sharding_key:`` line reads tables sharded by
that key, so that what it joins is on one shard: it becomes ``db.v_local`` over the
local tables, on every node, and a Distributed ``db.v`` over those views; dropping
the view drops both.

Dropping a sharded table drops its Distributed and its local table on every node.
Materialized views read and write the local tables, so each shard rolls up its own
rows and the Distributed rollup tables merge the states across shards at query time.
The ``{shard}`` and ``{replica}`` macros come from each server's configuration.
"""

from __future__ import annotations

import re

from warehouse.errors import MigrationError

__all__ = [
    "LOCAL_SUFFIX",
    "is_insert_select",
    "is_per_node",
    "is_reshard",
    "render_for_cluster",
]

LOCAL_SUFFIX = "_local"

_DB = r'"?(\w+)"?'  # a database name, plain or quoted as the query layer quotes it
_CREATE_DATABASE = re.compile(r"^CREATE DATABASE IF NOT EXISTS (\w+)\s*$", re.I)
_CREATE_TABLE = re.compile(rf"^(CREATE TABLE IF NOT EXISTS) {_DB}\.(\w+)(.*)$", re.I | re.S)
_CREATE_VIEW = re.compile(
    rf"^(CREATE MATERIALIZED VIEW IF NOT EXISTS) {_DB}\.(\w+)(.*)$", re.I | re.S
)
_CREATE_PLAIN_VIEW = re.compile(rf"^(CREATE VIEW IF NOT EXISTS) {_DB}\.(\w+)(.*)$", re.I | re.S)
_SYSTEM_VIEW = re.compile(rf"^SYSTEM (STOP|START) VIEW {_DB}\.\w+\s*$", re.I)
_INSERT_SELECT = re.compile(rf"^INSERT INTO {_DB}\.\w+\s*(\(.*\))?\s*SELECT\b", re.I | re.S)
_ALTER_TABLE = re.compile(rf"^(ALTER TABLE) {_DB}\.(\w+)(.*)$", re.I | re.S)
_EXCHANGE = re.compile(rf"^(EXCHANGE TABLES) {_DB}\.(\w+) AND {_DB}\.(\w+)\s*$", re.I)
_INSERT_TARGET = re.compile(rf"^INSERT INTO {_DB}\.\w+\s*(\([^)]*\))?\s*", re.I)
_RESHARD = re.compile(r"^\s*--\s*reshard\s*$", re.M)
_DROP = re.compile(rf"^(DROP (?:TABLE|VIEW) IF EXISTS) {_DB}\.(\w+)(\s+SYNC)?\s*$", re.I)
_TRUNCATE = re.compile(rf"^(TRUNCATE TABLE(?: IF EXISTS)?) {_DB}\.(\w+)\s*$", re.I)
_ENGINE = re.compile(r"ENGINE\s*=\s*(\w*)MergeTree\b(?:\s*\(([^)]*)\))?", re.I)
_NULL_ENGINE = re.compile(r"ENGINE\s*=\s*Null\b", re.I)
_SHARDING_KEY = re.compile(r"^\s*--\s*sharding_key:\s*(.+?)\s*$", re.M)
_COLUMN_CHANGE = re.compile(r"^\s*(ADD|DROP|MODIFY|RENAME|COMMENT) COLUMN\b", re.I)


def render_for_cluster(
    statements: list[str],
    cluster: str,
    database: str,
    context: list[str] | None = None,
    *,
    keeper: bool = True,
) -> list[str]:
    """Turn single-node statements into ``ON CLUSTER`` statements with Replicated engines
    and Distributed tables.

    ``context`` is every statement of every migration (default: ``statements``), so
    that a later migration that refers to an earlier table knows it is sharded. Without
    ``keeper`` the statements are for each node to run itself: no ``ON CLUSTER`` and the
    engines as they are (one replica per shard). Raises :class:`MigrationError` on a
    statement it cannot render rather than passing it through unchanged.
    """
    if not re.fullmatch(r"[A-Za-z_][\w]*", cluster):
        raise MigrationError(f"invalid cluster name {cluster!r}")
    code = [_strip_comments(s) for s in statements]
    every = context if context is not None else statements
    sharded = {
        match.group(3)
        for statement in map(_strip_comments, every)
        if (match := _CREATE_TABLE.match(statement))
        and (_ENGINE.search(statement) or _NULL_ENGINE.search(statement))
    }
    # Views rendered as a view per shard under a Distributed table (a table to DROP).
    distributed_views = {
        match.group(3)
        for statement in every
        if (match := _CREATE_PLAIN_VIEW.match(_strip_comments(statement)))
        and _SHARDING_KEY.search(statement)
    }
    # Copies swapped in by EXCHANGE TABLES: their Keeper path is their table's UUID.
    swapped_in = {
        match.group(5) for match in map(_EXCHANGE.match, map(_strip_comments, every)) if match
    }
    rendered: list[str] = []
    for statement, body in zip(statements, code, strict=True):
        if (match := _DROP.match(body)) and match.group(3) in distributed_views:
            _, db, name, sync = match.groups()
            on = f" ON CLUSTER {cluster}" if keeper else ""
            rendered += [
                f"DROP TABLE IF EXISTS {db}.{name}{on}{sync or ''}",
                f"DROP VIEW IF EXISTS {db}.{name}{LOCAL_SUFFIX}{on}{sync or ''}",
            ]
            continue
        rendered.extend(_render(statement, body, cluster, database, sharded, keeper, swapped_in))
    return rendered


def is_per_node(statement: str) -> bool:
    """A statement every node must run itself even with Keeper (``SYSTEM STOP VIEW``)."""
    return bool(_SYSTEM_VIEW.match(_strip_comments(statement)))


def is_reshard(statement: str) -> bool:
    """A data statement that moves rows between shards (``-- reshard``): it writes the
    Distributed table, so every shard must run it, over its own rows, together."""
    return bool(_RESHARD.search(statement)) and is_insert_select(statement)


def is_insert_select(statement: str) -> bool:
    """A data statement (a backfill): rendered for the local tables, each shard runs it
    over its own rows."""
    return bool(_INSERT_SELECT.match(_strip_comments(statement)))


def _render(
    statement: str,
    body: str,
    cluster: str,
    database: str,
    sharded: set[str],
    keeper: bool,
    swapped_in: set[str],
) -> list[str]:
    on = f" ON CLUSTER {cluster}" if keeper else ""
    if match := _CREATE_DATABASE.match(body):
        return [f"{body}{on}"]
    if (match := _CREATE_TABLE.match(body)) and match.group(3) in sharded:
        verb, db, table, rest = match.groups()
        local = f"{table}{LOCAL_SUFFIX}"
        rest = _localize(rest, database, sharded)
        if keeper:
            rest = _replicated_engine(rest, db, local, by_uuid=table in swapped_in)
        key = _SHARDING_KEY.search(statement)
        if key is None:
            raise MigrationError(
                f"{db}.{table} has no '-- sharding_key:' line to render for a cluster"
            )
        return [
            f"{verb} {db}.{local}{on}{rest}",
            f"{verb} {db}.{table}{on} AS {db}.{local} "
            f"ENGINE = Distributed({cluster}, {db}, {local}, {key.group(1)})",
        ]
    if match := _CREATE_VIEW.match(body):
        verb, db, view, rest = match.groups()
        return [f"{verb} {db}.{view}{on}{_localize(rest, database, sharded)}"]
    if (match := _CREATE_PLAIN_VIEW.match(body)) and (key := _SHARDING_KEY.search(statement)):
        # A view over tables sharded by the same key: each shard's view reads its own
        # local tables (what it joins is on one shard), a Distributed table over them.
        verb, db, view, rest = match.groups()
        local = f"{view}{LOCAL_SUFFIX}"
        return [
            f"{verb} {db}.{local}{on}{_localize(rest, database, sharded)}",
            f"CREATE TABLE IF NOT EXISTS {db}.{view}{on} AS {db}.{local} "
            f"ENGINE = Distributed({cluster}, {db}, {local}, {key.group(1)})",
        ]
    if (match := _ALTER_TABLE.match(body)) and match.group(3) in sharded:
        verb, db, table, rest = match.groups()
        statements = [f"{verb} {db}.{table}{LOCAL_SUFFIX}{on}{rest}"]
        if _COLUMN_CHANGE.match(rest):
            statements.append(f"{verb} {db}.{table}{on}{rest}")
        return statements
    if match := _ALTER_TABLE.match(body):  # a view: MODIFY QUERY reads the local tables
        verb, db, view, rest = match.groups()
        return [f"{verb} {db}.{view}{on}{_localize(rest, database, sharded)}"]
    if match := _DROP.match(body):  # a sharded table: its Distributed and local tables
        verb, db, name, sync = match.groups()
        names = [name, f"{name}{LOCAL_SUFFIX}"] if name in sharded else [name]
        return [f"{verb} {db}.{n}{on}{sync or ''}" for n in names]
    if match := _TRUNCATE.match(body):  # the rows are in the local tables
        verb, db, name = match.groups()
        return [f"{verb} {db}.{name}{LOCAL_SUFFIX if name in sharded else ''}{on}"]
    if match := _SYSTEM_VIEW.match(body):  # takes no ON CLUSTER: each node stops its own
        return [body]
    if match := _EXCHANGE.match(body):
        verb, db, one, _, other = match.groups()
        if not {one, other} <= sharded:
            raise MigrationError(
                f"EXCHANGE TABLES of {one} and {other}: both must be sharded tables"
            )
        return [f"{verb} {db}.{one}{LOCAL_SUFFIX} AND {db}.{other}{LOCAL_SUFFIX}{on}"]
    if _INSERT_SELECT.match(body):
        if not _RESHARD.search(statement):  # a backfill: each shard of its own rows
            return [_localize(body, database, sharded)]
        # Each shard reads its own rows and writes them through the Distributed table.
        target = _INSERT_TARGET.match(body)
        assert target is not None  # _INSERT_SELECT matched
        return [body[: target.end()] + _localize(body[target.end() :], database, sharded)]
    head = " ".join(body.split()[:4])
    raise MigrationError(f"cannot render this statement for a cluster: {head} ...")


def _localize(sql: str, database: str, sharded: set[str]) -> str:
    """Point references to sharded tables at their local tables."""
    name = re.escape(database)
    return re.sub(
        rf'(?:\b{name}|"{name}")\.(\w+)\b',
        lambda m: f"{database}.{m.group(1)}{LOCAL_SUFFIX}" if m.group(1) in sharded else m.group(0),
        sql,
    )


def _replicated_engine(rest: str, db: str, local: str, by_uuid: bool = False) -> str:
    path = f"/clickhouse/tables/{{shard}}/{db}/{local}"
    if by_uuid:
        path = "/clickhouse/tables/{uuid}/{shard}"

    def replace(match: re.Match[str]) -> str:
        kind, parameters = match.group(1), (match.group(2) or "").strip()
        args = f"'{path}', '{{replica}}'"
        if parameters:
            args += f", {parameters}"
        return f"ENGINE = Replicated{kind}MergeTree({args})"

    return _ENGINE.sub(replace, rest, count=1)


def _strip_comments(statement: str) -> str:
    lines = [line for line in statement.splitlines() if not line.strip().startswith("--")]
    return "\n".join(lines).strip()
