"""``llmwh clickhouse ...`` (the embedded server, or a local cluster of them) and
``llmwh migrate ...`` (the schema), and how a schema update is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warehouse.api import Warehouse
from warehouse.cli.options import (
    ConfigOption,
    DataOption,
    HttpPortOption,
    StoreOption,
    TcpPortOption,
    store_for,
)
from warehouse.config import Config, load_config
from warehouse.render import iso_time
from warehouse.store import DEFAULT_DATABASE, embedded, local_cluster, open_store, schema
from warehouse.store.base import Store

__all__ = ["apply_configured_slos", "clickhouse_app", "migrate_app", "say_update"]

clickhouse_app = typer.Typer(
    help="The embedded ClickHouse server.", no_args_is_help=True, rich_markup_mode="markdown"
)
migrate_app = typer.Typer(
    help="Schema migrations.", no_args_is_help=True, rich_markup_mode="markdown"
)

ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Render the DDL for this ClickHouse cluster (ON CLUSTER, "
        "Replicated engines, Distributed tables)",
    ),
]


# -- llmwh clickhouse ... ---------------------------------------------------------------


@clickhouse_app.command("start")
def clickhouse_start(
    data: DataOption = None,
    http_port: HttpPortOption = embedded.DEFAULT_HTTP_PORT,
    tcp_port: TcpPortOption = embedded.DEFAULT_TCP_PORT,
    shards: Annotated[
        int,
        typer.Option(
            "--shards",
            help="Start a local cluster of N embedded servers, one per shard "
            "(ports from --http-port and --tcp-port on)",
        ),
    ] = 0,
    cluster: Annotated[
        str, typer.Option("--cluster", help="With --shards: the cluster's name")
    ] = local_cluster.DEFAULT_CLUSTER,
    databases: Annotated[
        list[str] | None,
        typer.Option(
            "--database",
            help="A database whose tables carry the row policies tenants read under "
            "(repeat for several; default: llmwh). See docs/security.md",
        ),
    ] = None,
    config_file: ConfigOption = None,
) -> None:
    """Start the embedded ClickHouse server in the background (or a local cluster)."""
    config = load_config(config_file, data_dir=data)
    if shards:
        started = local_cluster.start_cluster(config.data_dir, shards, cluster, http_port, tcp_port)
        typer.echo(f"cluster {started.name}: {len(started.shards)} shards")
        for k, info in enumerate(started.shards, 1):
            typer.echo(
                f"  shard {k}: pid {info.pid}, HTTP 127.0.0.1:{info.http_port}, native TCP "
                f"127.0.0.1:{info.tcp_port}\n    store URL {info.store_url()}"
            )
        typer.echo(f"store URL: {started.store_url()}")
        return
    info = embedded.start_server(
        config.data_dir,
        http_port,
        tcp_port,
        tenant_databases=tuple(databases or (DEFAULT_DATABASE,)),
    )
    typer.echo(f"ClickHouse {_version(info)} serving {info.data_dir} (pid {info.pid})")
    typer.echo(_ports(info))


@clickhouse_app.command("stop")
def clickhouse_stop(data: DataOption = None, config_file: ConfigOption = None) -> None:
    """Stop the embedded server (SIGTERM; data stays on disk)."""
    config = load_config(config_file, data_dir=data)
    shards = local_cluster.stop_cluster(config.data_dir)
    for info in shards:
        typer.echo(f"stopped shard {info.data_dir} (pid {info.pid})")
    if shards:
        return
    stopped = embedded.stop_server(config.data_dir)
    if stopped is None:
        typer.echo(f"no embedded ClickHouse runs on {Path(config.data_dir).resolve()}")
    else:
        typer.echo(f"stopped the embedded ClickHouse (pid {stopped.pid}) on {stopped.data_dir}")


@clickhouse_app.command("status")
def clickhouse_status(data: DataOption = None, config_file: ConfigOption = None) -> None:
    """Say whether the embedded server runs, and where. Exit code 1 when it does not."""
    config = load_config(config_file, data_dir=data)
    name, shards = local_cluster.shard_states(config.data_dir)
    if shards:
        down = sum(info is None for _, info in shards)
        typer.echo(f"{'running' if not down else 'degraded'}: cluster {name}, {len(shards)} shards")
        for k, (path, info) in enumerate(shards, 1):
            state = f"pid {info.pid}, store URL {info.store_url()}" if info else "NOT RUNNING"
            typer.echo(f"  shard {k}: {state}\n    data {path}")
        if down:
            raise typer.Exit(1)
        return
    info = embedded.server_status(config.data_dir)
    if info is None:
        typer.echo(f"not running: {Path(config.data_dir).resolve()}")
        raise typer.Exit(1)
    typer.echo(f"running: pid {info.pid}, data {info.data_dir}")
    typer.echo(_ports(info))


def _ports(info: embedded.ServerInfo) -> str:
    """Where a server listens, on two lines: each could be long."""
    return (
        f"HTTP 127.0.0.1:{info.http_port}, native TCP 127.0.0.1:{info.tcp_port}\n"
        f"store URL: {info.store_url()}"
    )


def _version(info: embedded.ServerInfo) -> str:
    store = open_store(info.store_url())
    try:
        return store.query_arrow("SELECT version() AS v").column("v")[0].as_py()
    finally:
        store.close()


# -- llmwh migrate ... ------------------------------------------------------------------


@migrate_app.command("status")
def migrate_status(
    store: StoreOption = None, data: DataOption = None, config_file: ConfigOption = None
) -> None:
    """List migrations and whether each is applied, pending or changed since."""
    config = load_config(config_file, store=store, data_dir=data)
    target = store_for(config)
    report = schema.status(target, config)
    bad = False
    for k, (url, states) in enumerate(report, 1):
        typer.echo(f"shard {k}: {url}" if target.shard_urls else f"store: {url}")
        for state in states:
            when = f"  {iso_time(state.applied_at)}" if state.applied_at else ""
            typer.echo(f"  {state.version:04d}_{state.name:<24} {state.state}{when}")
        bad |= any(s.state in ("changed", "missing") for s in states)
    if bad:
        raise typer.Exit(1)


@migrate_app.command("up")
def migrate_up(
    store: StoreOption = None,
    data: DataOption = None,
    cluster: ClusterOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Apply pending migrations in order (idempotent), then the TTL settings."""
    config = load_config(config_file, store=store, data_dir=data)
    target = store_for(config)
    say_update(target, schema.migrate(target, config, cluster), up_to_date=True)
    apply_configured_slos(target, config)


@migrate_app.command("plan")
def migrate_plan(
    store: StoreOption = None,
    data: DataOption = None,
    cluster: ClusterOption = None,
    all_migrations: Annotated[
        bool, typer.Option("--all", help="Print every migration, not only pending ones")
    ] = False,
    config_file: ConfigOption = None,
) -> None:
    """Print the SQL that `migrate up` would run, without running it."""
    config = load_config(config_file, store=store, data_dir=data)
    for migration, statements in schema.plan(store_for(config), config, cluster, all_migrations):
        typer.echo(f"-- {migration.version:04d}_{migration.name}.sql")
        for statement in statements:
            typer.echo(f"{statement};\n")


def say_update(target: Store, update: schema.SchemaUpdate, up_to_date: bool = False) -> None:
    """What a schema update did, a line each (``up_to_date``: say so when nothing)."""
    where = " on every shard" if target.cluster else ""
    if target.cluster:
        typer.echo(f"cluster {target.cluster}, {update.shards} shards: {update.mode}")
    if up_to_date and not update.applied and not update.ttl_changes:
        typer.echo(f"{target.url}: up to date{where}")
    for migration in update.applied:
        typer.echo(f"applied {migration.version:04d}_{migration.name}{where}")
    for change in update.ttl_changes:
        typer.echo(f"TTL of {change.table}: {change.old_days} -> {change.new_days} days")


def apply_configured_slos(target: Store, config: Config) -> None:
    """After migrations, before any writer starts: the rollups of the configured SLOs."""
    for applied in Warehouse(target, config).apply_configured_slos():  # caller closes target
        if applied.action != "up to date":
            typer.echo(f"SLO {applied.slo}: {applied.table}: {applied.action}")
