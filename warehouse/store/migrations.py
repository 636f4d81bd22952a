"""Versioned DDL: ``migrations/<dialect>/NNNN_name.sql``, applied in order and recorded.

Migration files are templates. ``${name}`` is a variable (the database, TTLs,
histogram edges) and ``${macro:column}`` a dialect macro (the latency bucket
expression), so one definition in Python is rendered into every backend's SQL. The
checksum covers the file as written, not as rendered: changing a TTL setting is not an
edit of an applied migration.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from sqlglot import exp

from warehouse import dialects
from warehouse.aggregates import BUILT_IN, Aggregate, clickhouse_bucket, rollup_columns
from warehouse.config import Config
from warehouse.errors import ChecksumMismatch, MigrationError, StoreError
from warehouse.model import BUCKET_GROWTH, BUCKET_MIN_MS
from warehouse.resources import shipped_dir
from warehouse.store.base import Store

__all__ = [
    "Migration",
    "MigrationState",
    "Migrator",
    "discover",
    "migrations_dir",
    "render",
    "split_statements",
]

MIGRATIONS_TABLE = "schema_migrations"

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_PLACEHOLDER = re.compile(r"\$\{(\w+)(?::(\w+))?\}")


def _duckdb_bucket(column: str) -> str:
    return (
        f"(CASE WHEN {column} < {BUCKET_MIN_MS} THEN 0 "
        f"ELSE least(floor(ln({column} / {BUCKET_MIN_MS}) / ln({BUCKET_GROWTH})) + 1, 65535) "
        "END)::USMALLINT"
    )


def _clickhouse_rollup(source: str) -> str:
    """The measure columns of a rollup row (0012), from `requests` rows or from rollup rows
    (see :mod:`warehouse.aggregates`). What a migration already applied
    computes must not change: a new shape is a new migration with a new macro. A cheaper
    way to the same values may replace the rendering, with a migration that brings the
    existing views to it (0018 did so for the histograms)."""
    columns = rollup_columns(BUILT_IN)
    if source == "columns":  # their column definitions, for CREATE TABLE
        return ",\n    ".join(c.definition() for c in columns)
    if source == "rollup":
        return ",\n    ".join(c.merge for c in columns)
    if source != "requests":
        raise MigrationError(f"unknown rollup macro {source!r}: columns, requests or rollup")
    return ",\n    ".join(c.from_requests for c in columns)


def _duckdb_rollup(source: str) -> str:
    """DuckDB's rollup measures (views over `requests`): the columns of ClickHouse's, each
    its aggregate rendered for DuckDB, of the column's type and never NULL."""
    if source != "requests":
        raise MigrationError(f"DuckDB's rollups are views over requests, not {source!r}")
    return ",\n    ".join(
        dialects.render(_view_column(c), "duckdb") for c in rollup_columns(BUILT_IN)
    )


def _view_column(column: Aggregate) -> exp.Expr:
    value = dialects.parse(column.over_requests)
    if column.merged_by != "sumMap":  # a map's translation is never NULL already
        kind = exp.DataType.build(column.value_type, dialect=dialects.WarehouseClickHouse)
        value = exp.cast(exp.Coalesce(this=value, expressions=[exp.Literal.number(0)]), kind)
    return exp.alias_(value, column.name)


_MACROS: dict[str, dict[str, Callable[[str], str]]] = {
    "clickhouse": {"latency_bucket": clickhouse_bucket, "rollup": _clickhouse_rollup},
    "duckdb": {"latency_bucket": _duckdb_bucket, "rollup": _duckdb_rollup},
}

_BOOKKEEPING = {
    "clickhouse": (
        "CREATE DATABASE IF NOT EXISTS {db}",
        "CREATE TABLE IF NOT EXISTS {db}.{table} (version UInt32, name String, "
        "checksum String, applied_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY version",
    ),
    "duckdb": (
        "CREATE SCHEMA IF NOT EXISTS {db}",
        "CREATE TABLE IF NOT EXISTS {db}.{table} (version UINTEGER NOT NULL, name VARCHAR NOT "
        "NULL, checksum VARCHAR NOT NULL, applied_at TIMESTAMPTZ NOT NULL)",
    ),
}


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    path: Path
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def accepted_checksums(self) -> frozenset[str]:
        """Checksums that mean "this file, applied": its own, and those of earlier
        versions that differed in comments only (:data:`COMMENT_ONLY_EDITS`)."""
        earlier = COMMENT_ONLY_EDITS.get((self.path.parent.name, self.version), frozenset())
        return earlier | {self.checksum}


COMMENT_ONLY_EDITS: Mapping[tuple[str, int], frozenset[str]] = {
    # Their comments cited documents that were not in the repository, and were
    # corrected. Less its comments, each file is byte for byte the one applied.
    ("clickhouse", 4): frozenset(
        {"e8ecd6226d143b2f38b45f4304b3c8cb3af37a772b96aec6954a88526667ee5a"}
    ),
    ("clickhouse", 9): frozenset(
        {"4727c68c9687cb7a4938bf91d7445a48d26fbe946f0bac6c62b8a187ec575380"}
    ),
    ("clickhouse", 11): frozenset(
        {"4656abe2b27a23cd651a98f2f8c31d658b9831dcf6d882965f166d5d98ba019f"}
    ),
}
"""Checksums of applied migration files whose later edits changed comments only, by
(dialect, version): a warehouse migrated before such an edit is not refused for it."""


@dataclass(frozen=True)
class MigrationState:
    """A migration as ``migrate status`` reports it."""

    version: int
    name: str
    state: str
    """``applied``, ``pending``, ``changed`` (file edited after it was applied) or ``missing``."""
    applied_at: datetime | None = None


def migrations_dir() -> Path:
    """The ``migrations/`` folder: packaged inside the wheel, or in the source tree."""
    found = shipped_dir("migrations")
    if found is None:
        raise MigrationError("the migrations folder is missing from this installation")
    return found


def discover(dialect: str, root: Path | None = None) -> list[Migration]:
    """The migrations of ``dialect`` in version order; file names are checked."""
    folder = (root or migrations_dir()) / dialect
    found: dict[int, Migration] = {}
    for path in sorted(folder.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path}: migration files are named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"{path}: version {version} is used twice")
        found[version] = Migration(version, match.group(2), path, path.read_text())
    return [found[v] for v in sorted(found)]


def template_variables(config: Config, database: str) -> dict[str, object]:
    """The values migration templates may use."""
    return {
        "db": database,
        "bucket_min_ms": BUCKET_MIN_MS,
        "bucket_growth": BUCKET_GROWTH,
        **config.template_variables(),
    }


def render(text: str, dialect: str, variables: Mapping[str, object]) -> list[str]:
    """Fill a migration template and split it into statements."""

    def substitute(match: re.Match[str]) -> str:
        name, argument = match.group(1), match.group(2)
        if argument is not None:
            macro = _MACROS[dialect].get(name)
            if macro is None:
                raise MigrationError(f"unknown macro ${{{name}:...}} for {dialect}")
            return macro(argument)
        if name not in variables:
            raise MigrationError(f"unknown template variable ${{{name}}}")
        return str(variables[name])

    return split_statements(_PLACEHOLDER.sub(substitute, text))


def split_statements(sql: str) -> list[str]:
    """Split SQL on semicolons outside quotes and comments; drop comment-only pieces.

    Comments stay with the statement they precede (``-- sharding_key:`` lines are read
    from there).
    """
    statements, current = [], []
    quote: str | None = None
    i = 0
    while i < len(sql):
        char = sql[i]
        if quote:
            current.append(char)
            if char == "\\" and i + 1 < len(sql):
                current.append(sql[i + 1])
                i += 1
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
            current.append(char)
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = len(sql) if end == -1 else end
            current.append(sql[i:end])
            i = end - 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = len(sql) if end == -1 else end + 2
            current.append(sql[i:end])
            i = end - 1
        elif char == ";":
            statements.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    statements.append("".join(current))
    return [s.strip() for s in statements if _has_code(s)]


def _has_code(statement: str) -> bool:
    without_blocks = re.sub(r"/\*.*?\*/", "", statement, flags=re.S)
    return any(
        line.strip() and not line.strip().startswith("--") for line in without_blocks.splitlines()
    )


class Migrator:
    """Applies a dialect's migrations to a store and records them."""

    def __init__(self, store: Store, config: Config | None = None, root: Path | None = None):
        self.store = store
        self.dialect = store.capabilities.dialect
        self.variables = template_variables(config or Config(), store.database)
        self.migrations = discover(self.dialect, root)

    def status(self) -> list[MigrationState]:
        applied = self._applied()
        states = []
        for migration in self.migrations:
            record = applied.pop(migration.version, None)
            if record is None:
                states.append(MigrationState(migration.version, migration.name, "pending"))
            else:
                applied_as_is = record["checksum"] in migration.accepted_checksums
                state = "applied" if applied_as_is else "changed"
                states.append(
                    MigrationState(migration.version, migration.name, state, record["applied_at"])
                )
        for version, record in sorted(applied.items()):
            states.append(MigrationState(version, record["name"], "missing", record["applied_at"]))
        return states

    def pending(self) -> list[Migration]:
        """Migrations not applied yet; refuses when an applied file was edited."""
        states = self.status()
        changed = [s for s in states if s.state == "changed"]
        if changed:
            names = ", ".join(f"{s.version:04d}_{s.name}.sql" for s in changed)
            raise ChecksumMismatch(
                f"applied migration(s) {names} were edited since they were applied; restore "
                "the files, or put the change in a new migration"
            )
        waiting = {s.version for s in states if s.state == "pending"}
        return [m for m in self.migrations if m.version in waiting]

    def statements(self, migration: Migration) -> list[str]:
        return render(migration.text, self.dialect, self.variables)

    def up(self, on_statement: Callable[[Migration, str], None] | None = None) -> list[Migration]:
        """Apply pending migrations in order; each is recorded once all its statements ran.

        Statements are idempotent (``IF NOT EXISTS``), so a migration interrupted half
        way is simply run again.
        """
        self.bootstrap()
        done = []
        for migration in self.pending():
            for number, statement in enumerate(self.statements(migration), start=1):
                if on_statement:
                    on_statement(migration, statement)
                try:
                    self.store.command(statement)
                except StoreError as exc:
                    raise MigrationError(
                        f"{migration.path.name}, statement {number}: {exc}",
                        database_message=exc.database_message,
                        code=exc.code,
                    ) from exc
            self.record(migration)
            done.append(migration)
        return done

    def _applied(self) -> dict[int, dict[str, Any]]:
        # Read-only on purpose: `plan` and `status` must not create anything.
        exists = self.store.query_arrow(
            "SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = "
            f"'{self.store.database}' AND table_name = '{MIGRATIONS_TABLE}'"
        )
        if exists.column("n")[0].as_py() == 0:
            return {}
        table = self.store.query_arrow(
            f"SELECT version, name, checksum, applied_at FROM {self._table} ORDER BY version"
        )
        return {row["version"]: row for row in table.to_pylist()}

    def record(self, migration: Migration) -> None:
        """Record ``migration`` as applied."""
        row = pa.table(
            {
                "version": pa.array([migration.version], pa.uint32()),
                "name": [migration.name],
                "checksum": [migration.checksum],
                "applied_at": pa.array([datetime.now(UTC)], pa.timestamp("ms", tz="UTC")),
            }
        )
        self.store.insert_arrow(MIGRATIONS_TABLE, row)

    @property
    def _table(self) -> str:
        return f"{self.store.database}.{MIGRATIONS_TABLE}"

    def bootstrap(self) -> None:
        """Create the database and the bookkeeping table where they are missing."""
        for statement in _BOOKKEEPING[self.dialect]:
            self.store.command(statement.format(db=self.store.database, table=MIGRATIONS_TABLE))


def iter_plan(migrator: Migrator, migrations: list[Migration]) -> Iterator[tuple[Migration, str]]:
    """Each statement of ``migrations``, rendered, in order."""
    for migration in migrations:
        for statement in migrator.statements(migration):
            yield migration, statement
