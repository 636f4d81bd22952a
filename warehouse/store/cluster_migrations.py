"""Migrations applied to every shard of a ClickHouse cluster, recorded on each.

The statements are the single-node ones rendered for the cluster
(:func:`warehouse.store.cluster_ddl.render_for_cluster`): local tables, Distributed tables
over them, materialized views on the local tables. Two modes:

- with ClickHouse Keeper: ``ON CLUSTER`` statements and Replicated engines, each run
  once (ClickHouse carries it to every node);
- without it (as here): each node runs the statements itself, one replica per shard.

Either way a data statement (``INSERT ... SELECT``, a backfill) runs on each shard that
lacks the migration, over that shard's own local tables: a shard that catches up later
backfills its own rows, and no shard's data is copied twice. A data statement that moves
rows between shards (``-- reshard``: 0023 rewrote every series id, and ids decide the
shard) is run by every shard over its own rows into the Distributed table, and needs
every shard to lack the migration. ``SYSTEM STOP/START VIEW``
runs on every node; every shard records the migration in its own
``schema_migrations``. As on one node, a migration that fails after its data statement
and before it is recorded would run that statement again: the data statements are
backfills of new tables, so look before re-running one.
"""

from __future__ import annotations

from collections.abc import Sequence

from warehouse.config import Config
from warehouse.errors import ConfigError, MigrationError, StoreError
from warehouse.store.base import Store
from warehouse.store.cluster_ddl import (
    is_insert_select,
    is_per_node,
    is_reshard,
    render_for_cluster,
)
from warehouse.store.migrations import Migration, MigrationState, Migrator

__all__ = ["ClusterMigrator", "has_keeper"]


def has_keeper(store: Store) -> bool:
    """Whether ``store``'s server is connected to ClickHouse Keeper (or ZooKeeper)."""
    try:
        store.query_arrow("SELECT count() AS n FROM system.zookeeper WHERE path = '/'")
    except StoreError:
        return False
    return True


class ClusterMigrator:
    """Applies the migrations to every shard of cluster ``cluster``; shard 1 first."""

    def __init__(
        self,
        shards: Sequence[Store],
        cluster: str,
        config: Config | None = None,
        keeper: bool | None = None,
    ):
        if not shards:
            raise ConfigError("a cluster needs at least one shard")
        if any(s.capabilities.dialect != "clickhouse" for s in shards):
            raise ConfigError("clusters are ClickHouse only")
        self.shards = list(shards)
        self.cluster = cluster
        self.migrators = [Migrator(store, config) for store in shards]
        self.keeper = has_keeper(shards[0]) if keeper is None else keeper
        first = self.migrators[0]
        # What every migration creates: a later one needs it to know what is sharded.
        self._every_statement = [s for m in first.migrations for s in first.statements(m)]

    @property
    def mode(self) -> str:
        if self.keeper:
            return "ON CLUSTER statements and Replicated engines (ClickHouse Keeper is there)"
        return (
            "each shard runs the statements itself, one replica per shard (no ClickHouse "
            "Keeper, which ON CLUSTER and Replicated engines need)"
        )

    def status(self) -> list[tuple[str, list[MigrationState]]]:
        """Each shard's store URL and the state of every migration there."""
        return [(m.store.url, m.status()) for m in self.migrators]

    def statements(self, migration: Migration) -> list[str]:
        first = self.migrators[0]
        return render_for_cluster(
            first.statements(migration),
            self.cluster,
            first.store.database,
            context=self._every_statement,
            keeper=self.keeper,
        )

    def up(self) -> list[Migration]:
        """Apply what any shard lacks, in order, on the shards that lack it."""
        for migrator in self.migrators:
            migrator.bootstrap()
        pending = [{m.version for m in migrator.pending()} for migrator in self.migrators]
        done = []
        for migration in self.migrators[0].migrations:
            where = [k for k, versions in enumerate(pending) if migration.version in versions]
            if not where:
                continue
            first = self.migrators[0]
            if len(where) < len(self.shards) and any(
                is_reshard(s) for s in first.statements(migration)
            ):
                raise MigrationError(
                    f"{migration.path.name} moves rows between shards, so every shard must "
                    f"take it together, but shard(s) "
                    f"{', '.join(str(k + 1) for k in range(len(self.shards)) if k not in where)} "
                    "applied it already: apply it on the others by hand (llmwh migrate plan "
                    "--cluster prints it)"
                )
            self._run(self.statements(migration), where, migration.path.name)
            for k in where:
                self.migrators[k].record(migration)
            done.append(migration)
        return done

    def run(self, statements: Sequence[str], label: str, creates: Sequence[str] = ()) -> None:
        """Run single-node statements beyond the migrations (an SLO's rollup) on every
        shard, rendered as the migrations are; ``creates`` are the CREATE TABLE statements
        of the tables they touch, so that those are known to be sharded."""
        first = self.migrators[0]
        rendered = render_for_cluster(
            list(statements),
            self.cluster,
            first.store.database,
            context=[*self._every_statement, *creates],
            keeper=self.keeper,
        )
        self._run(rendered, list(range(len(self.shards))), label)

    def _run(self, rendered: Sequence[str], where: list[int], label: str) -> None:
        """Each rendered statement on the shards (of ``where``) it must run on."""
        for number, statement in enumerate(rendered, start=1):
            if is_insert_select(statement):
                targets = where  # each shard backfills its own rows (local tables)
            elif self.keeper and not is_per_node(statement):
                targets = where[:1]  # ON CLUSTER carries it to every node
            else:
                targets = where
            for k in targets:
                try:
                    self.shards[k].command(statement)
                except StoreError as exc:
                    raise MigrationError(
                        f"{label}, statement {number}, shard {k + 1} ({self.shards[k].url}): {exc}",
                        database_message=exc.database_message,
                        code=exc.code,
                    ) from exc
