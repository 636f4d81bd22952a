"""A warehouse's schema brought up to date: one operation, on one node or on a cluster.

``migrate`` applies the pending migrations and then the TTL settings. On a store URL
that names a cluster and its shards (``?cluster=NAME&shards=HOST:PORT,...``) it does
so on every shard, with ``ON CLUSTER`` statements and Replicated engines where
ClickHouse Keeper is there and shard by shard where it is not
(:mod:`warehouse.store.cluster_migrations`). The CLI (``llmwh migrate``, ``llmwh
serve``) and the Python API (``Warehouse.migrate``) both call it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from warehouse.config import Config
from warehouse.errors import ConfigError
from warehouse.store import open_store
from warehouse.store.base import Store
from warehouse.store.cluster_ddl import LOCAL_SUFFIX, render_for_cluster
from warehouse.store.cluster_migrations import ClusterMigrator
from warehouse.store.migrations import Migration, MigrationState, Migrator, iter_plan
from warehouse.store.retention import TtlChange, sync_ttls

__all__ = ["SchemaUpdate", "migrate", "on_cluster", "plan", "status"]


@dataclass(frozen=True)
class SchemaUpdate:
    """What :func:`migrate` did."""

    applied: list[Migration]
    ttl_changes: list[TtlChange] = field(default_factory=list)
    shards: int = 1
    mode: str = "single node"
    """How a cluster was migrated (with Keeper or shard by shard); else ``single node``."""


def migrate(store: Store, config: Config, cluster: str | None = None) -> SchemaUpdate:
    """Apply pending migrations in order (idempotent), then the TTL settings.

    ``cluster`` (``llmwh migrate up --cluster``) must agree with the cluster the store
    URL names; a cluster is migrated through its shards, which the URL lists.
    """
    name = _cluster(store, cluster)
    if name is None:
        applied = Migrator(store, config).up()
        return SchemaUpdate(applied, sync_ttls(store, config))
    with _shards(store, name) as shards:
        migrator = ClusterMigrator(shards, name, config)
        applied = migrator.up()
        changes = [
            change
            for shard in shards
            for change in sync_ttls(shard, config, local_suffix=LOCAL_SUFFIX)
        ]
    return SchemaUpdate(applied, changes, len(shards), migrator.mode)


def status(store: Store, config: Config) -> list[tuple[str, list[MigrationState]]]:
    """Each node's store URL (each shard's, on a cluster) and every migration's state."""
    if store.cluster is None or not store.shard_urls:
        return [(store.url, Migrator(store, config).status())]
    with _shards(store, store.cluster) as shards:
        return ClusterMigrator(shards, store.cluster, config).status()


def plan(
    store: Store, config: Config, cluster: str | None = None, every: bool = False
) -> list[tuple[Migration, list[str]]]:
    """The statements ``migrate`` would run, per migration: the pending ones, or ``every``
    one; on a cluster (named by ``cluster`` or the store URL) as ``ON CLUSTER`` DDL."""
    if cluster and store.cluster and cluster != store.cluster:
        raise ConfigError(f"--cluster {cluster} but the store URL names cluster {store.cluster}")
    name = cluster or store.cluster
    migrator = Migrator(store, config)
    chosen = migrator.migrations if every else migrator.pending()
    if name is None:
        statements: dict[Migration, list[str]] = {m: [] for m in chosen}
        for migration, statement in iter_plan(migrator, chosen):
            statements[migration].append(statement)
        return list(statements.items())
    if migrator.dialect != "clickhouse":
        raise ConfigError("--cluster applies to ClickHouse stores only")
    context = [statement for _, statement in iter_plan(migrator, migrator.migrations)]
    return [
        (
            migration,
            render_for_cluster(
                [s for _, s in iter_plan(migrator, [migration])],
                name,
                store.database,
                context=context,
            ),
        )
        for migration in chosen
    ]


@contextmanager
def on_cluster(store: Store, config: Config) -> Iterator[ClusterMigrator | None]:
    """The cluster the store URL names, with a connection to each of its shards, to run
    DDL beyond the migrations there (an SLO's rollup); None for a single node."""
    name = _cluster(store, None)
    if name is None:
        yield None
        return
    with _shards(store, name) as shards:
        yield ClusterMigrator(shards, name, config)


def _cluster(store: Store, named: str | None) -> str | None:
    """The cluster to migrate (``named`` or the URL's), checked to have its shards listed."""
    if named and store.cluster and named != store.cluster:
        raise ConfigError(f"--cluster {named} but the store URL names cluster {store.cluster}")
    name = named or store.cluster
    if name is not None and not store.shard_urls:
        raise ConfigError(
            "to migrate a cluster, the store URL names it and its shards: "
            "http://HOST:PORT/DB?cluster=NAME&shards=HOST1:PORT1,HOST2:PORT2 "
            "(`llmwh clickhouse start --shards N` prints one); "
            f"`llmwh migrate plan --cluster {name}` prints the ON CLUSTER DDL instead"
        )
    return name


@contextmanager
def _shards(store: Store, cluster: str) -> Iterator[list[Store]]:
    shards = [open_store(url) for url in store.shard_urls]
    try:
        yield shards
    finally:
        for shard in shards:
            shard.close()
