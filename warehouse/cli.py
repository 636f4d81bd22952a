"""The ``llmwh`` command line. Each command is a thin shell over the package's functions."""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pyarrow as pa
import typer

from warehouse import cli_compare, cli_generate, cli_query
from warehouse.api import Warehouse
from warehouse.auth import credentials, load_access, new_credential
from warehouse.cli_shared import ConfigOption, DataOption, StoreOption, store_for
from warehouse.config import Config, load_config, parse_listen, setting_help
from warehouse.errors import (
    ConfigError,
    IngestError,
    StoreError,
    WarehouseError,
)
from warehouse.ingest.wal import usable_directory
from warehouse.serve.run import run_receiver
from warehouse.store import DEFAULT_DATABASE, discovery, embedded, local_cluster, open_store, schema
from warehouse.store.base import Store

app = typer.Typer(
    name="llmwh",
    help="LLM inference SLA warehouse on ClickHouse (and DuckDB).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Help texts are wrapped to the terminal, not where the docstrings break lines.
    rich_markup_mode="markdown",
)
clickhouse_app = typer.Typer(
    help="The embedded ClickHouse server.", no_args_is_help=True, rich_markup_mode="markdown"
)
migrate_app = typer.Typer(
    help="Schema migrations.", no_args_is_help=True, rich_markup_mode="markdown"
)
token_app = typer.Typer(
    help="Credentials that bind tenants (see docs/security.md).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(clickhouse_app, name="clickhouse")
app.add_typer(migrate_app, name="migrate")
app.add_typer(token_app, name="token")
app.add_typer(cli_query.app)
app.add_typer(cli_query.slo_app, name="slo")
app.add_typer(cli_query.query_app, name="query")
app.add_typer(cli_query.exporters_app, name="exporters")
app.add_typer(cli_generate.app)
app.add_typer(cli_compare.app)

HttpPortOption = Annotated[
    int, typer.Option("--http-port", help="HTTP port on 127.0.0.1 (0 picks a free one)")
]
TcpPortOption = Annotated[
    int, typer.Option("--tcp-port", help="Native TCP port on 127.0.0.1 (0 picks a free one)")
]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="Render the DDL for this ClickHouse cluster (ON CLUSTER, "
        "Replicated engines, Distributed tables)",
    ),
]


# typer exports BadParameter only; its bases are click's errors (which typer may vendor).
_CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def main(argv: list[str] | None = None) -> None:
    """Console entry point (see :func:`run`)."""
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run one ``llmwh`` command line and return its exit code.

    Bad input ends in one ``llmwh: error:`` line on stderr, never a traceback: a usage
    error (exit 2), an error from the warehouse's error tree or a file that cannot be
    read (exit 1).
    """
    # Drivers log what they then raise; the raised error is the one line said.
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
    try:
        code = app(args=argv, prog_name="llmwh", standalone_mode=False)
    except _CLICK_ERROR as exc:
        return _fail(exc.format_message(), getattr(exc, "exit_code", 2))
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except WarehouseError as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        return _fail(f"cannot use{name}: {exc.strerror or exc}", 1)
    except UnicodeDecodeError as exc:
        return _fail(f"not UTF-8 text: {exc}", 1)
    return code if isinstance(code, int) else 0


def _fail(message: str, code: int) -> int:
    typer.echo(f"llmwh: error: {' '.join(message.split())}", err=True)
    return code


# -- llmwh token ... --------------------------------------------------------------------


@token_app.command("new")
def token_new(
    name: Annotated[str, typer.Option("--name", help="What the credential is for (logs, 403s)")],
    tenants: Annotated[
        list[str], typer.Option("--tenant", help="A tenant it may use (repeat; '*': every one)")
    ],
    rights: Annotated[
        list[str], typer.Option("--right", help="write, read or admin (repeat for several)")
    ],
) -> None:
    """Make a random token: the token goes to stderr, once, and the entry to append to the
    `credentials_file` (which keeps only the token's SHA-256) to stdout."""
    token, entry = new_credential(name, tenants, rights)
    typer.echo(f"token (shown once): {token}", err=True)
    typer.echo(entry, nl=False)


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
                f"127.0.0.1:{info.tcp_port}, store URL {info.store_url()}"
            )
        typer.echo(f"store URL: {started.store_url()}")
        return
    info = embedded.start_server(
        config.data_dir,
        http_port,
        tcp_port,
        tenant_databases=tuple(databases or (DEFAULT_DATABASE,)),
    )
    typer.echo(
        f"ClickHouse {_version(info)} serving {info.data_dir} (pid {info.pid}): "
        f"HTTP 127.0.0.1:{info.http_port}, native TCP 127.0.0.1:{info.tcp_port}\n"
        f"store URL: {info.store_url()}"
    )


@clickhouse_app.command("stop")
def clickhouse_stop(data: DataOption = None, config_file: ConfigOption = None) -> None:
    """Stop the embedded server (SIGTERM; data stays on disk)."""
    config = load_config(config_file, data_dir=data)
    shards = local_cluster.stop_cluster(config.data_dir)
    for info in shards:
        typer.echo(f"stopped shard {info.data_dir} (pid {info.pid})")
    if shards:
        return
    info = embedded.stop_server(config.data_dir)
    if info is None:
        typer.echo(f"no embedded ClickHouse runs on {Path(config.data_dir).resolve()}")
    else:
        typer.echo(f"stopped the embedded ClickHouse (pid {info.pid}) on {info.data_dir}")


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
            typer.echo(f"  shard {k}: {state} ({path})")
        if down:
            raise typer.Exit(1)
        return
    info = embedded.server_status(config.data_dir)
    if info is None:
        typer.echo(f"not running: {Path(config.data_dir).resolve()}")
        raise typer.Exit(1)
    typer.echo(
        f"running: pid {info.pid}, HTTP 127.0.0.1:{info.http_port}, "
        f"TCP 127.0.0.1:{info.tcp_port}, data {info.data_dir}\nstore URL: {info.store_url()}"
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
            when = f"  {state.applied_at:%Y-%m-%d %H:%M:%S}" if state.applied_at else ""
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
    _say_update(target, schema.migrate(target, config, cluster), up_to_date=True)
    _apply_configured_slos(target, config)


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


def _say_update(target: Store, update: schema.SchemaUpdate, up_to_date: bool = False) -> None:
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


def _apply_configured_slos(target: Store, config: Config) -> None:
    """After migrations, before any writer starts: the rollups of the configured SLOs."""
    for applied in Warehouse(target, config).apply_configured_slos():  # caller closes target
        if applied.action != "up to date":
            typer.echo(f"SLO {applied.slo}: {applied.table}: {applied.action}")


# -- llmwh serve --------------------------------------------------------------------------


# -- llmwh ingest ---------------------------------------------------------------------


@app.command("ingest")
def ingest(
    files: Annotated[list[Path], typer.Argument(help="NDJSON, Parquet or Arrow files")],
    store: StoreOption = None,
    data: DataOption = None,
    batch_rows: Annotated[int, typer.Option("--batch-rows", help="Rows per insert")] = 100_000,
    config_file: ConfigOption = None,
) -> None:
    """Load per-request records from files, validated exactly as the receiver does.

    Every file is read and validated before anything is written, so a bad record in any
    of them writes nothing. Files are streamed in pieces, twice (to check, then to
    write), so that memory stays bounded whatever their size.
    """
    from rich.progress import Progress

    from warehouse.ingest.events import read_batches
    from warehouse.ingest.limits import WriteLimits

    config = load_config(config_file, store=store, data_dir=data)
    target = store_for(config)
    limits = WriteLimits.from_config(config)
    total = 0
    for path in files:
        for table in read_batches(path):  # its errors name the file, line or row, and field
            try:
                limits.check_requests(table)
            except IngestError as exc:
                raise IngestError(f"{path}: {exc}") from None
            total += table.num_rows
    done = 0
    with Progress(transient=True) as progress:
        task = progress.add_task("inserting requests", total=total)
        for path in files:
            for table in read_batches(path):
                for batch in table.to_batches(max_chunksize=batch_rows):
                    try:
                        target.insert_arrow("requests", pa.Table.from_batches([batch]))
                    except StoreError as exc:
                        raise StoreError(
                            f"{exc} (after {done:,} of {total:,} rows were committed)",
                            database_message=exc.database_message,
                            code=exc.code,
                        ) from None
                    done += batch.num_rows
                    progress.advance(task, batch.num_rows)
    typer.echo(f"ingested {total:,} requests from {len(files)} file(s) into {target.url}")


ListenOption = Annotated[
    str | None,
    typer.Option("--listen", help=setting_help("listen"), show_default=False),
]


@app.command("serve")
def serve(
    store: StoreOption = None,
    data: DataOption = None,
    listen: ListenOption = None,
    http_port: HttpPortOption = embedded.DEFAULT_HTTP_PORT,
    tcp_port: TcpPortOption = embedded.DEFAULT_TCP_PORT,
    config_file: ConfigOption = None,
    demo: Annotated[
        bool,
        typer.Option(
            "--demo",
            help="Also send synthetic traffic with an incident into the receiver: the last "
            "6 hours at once, then live",
        ),
    ] = False,
    demo_rate: Annotated[
        float, typer.Option("--demo-rate", help="With --demo: mean requests per second")
    ] = 20.0,
    wal: Annotated[
        str | None, typer.Option("--wal", help=setting_help("wal_dir"), show_default=False)
    ] = None,
    otlp_grpc_listen: Annotated[
        str | None,
        typer.Option(
            "--otlp-grpc-listen",
            metavar="HOST:PORT",
            help=setting_help("otlp_grpc_listen"),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the warehouse: the embedded ClickHouse (unless --store names one), migrated,
    and the receiver (remote write and per-request events) on --listen (and OTLP/gRPC on
    --otlp-grpc-listen).

    Runs in the foreground until Ctrl-C or SIGTERM; then it drains the receiver (every
    acknowledged write is committed) and stops the server it started.
    """
    config = load_config(
        config_file,
        store=store,
        data_dir=data,
        listen=listen,
        wal_dir=wal,
        otlp_grpc_listen=otlp_grpc_listen,
    )
    host, port = parse_listen(config.listen)
    if config.otlp_grpc_listen:
        _check_bindable(config.otlp_grpc_listen, "--otlp-grpc-listen")
    if not math.isfinite(demo_rate) or demo_rate <= 0:
        raise ConfigError(f"--demo-rate must be > 0 requests/s, got {demo_rate}")
    # What the receiver would refuse at start, refused before anything starts.
    if config.wal_dir:
        usable_directory(config.wal_dir)
    load_access(config)
    with discovery.store_or_start(config, http_port, tcp_port, say=typer.echo) as (target, own):
        _say_update(target, schema.migrate(target, config))
        _apply_configured_slos(target, config)
        typer.echo(
            f"warehouse ready: store {target.url}\n"
            f"  remote write:  http://{host}:{port}/api/v1/write\n"
            f"  events:        http://{host}:{port}/api/v1/requests\n"
            f"  remote read:   http://{host}:{port}/api/v1/read\n"
            + (f"  OTLP/gRPC:     {config.otlp_grpc_listen}\n" if config.otlp_grpc_listen else "")
            + f"  overview page: http://{host}:{port}/\n"
            + (_DEMO_HINTS if demo else f"  try: {_program()} migrate status\n")
            + "Ctrl-C stops it."
        )
        with _demo_traffic(demo, target, config, host, port, demo_rate):
            run_receiver(target, config, host, port, watch=own.data_dir if own else None)


def _check_bindable(listen: str, option: str) -> None:
    """:class:`ConfigError` now, before anything starts, when ``listen`` cannot be bound
    (the receiver would fail to start later, less clearly)."""
    host, port = parse_listen(listen, option)
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise ConfigError(f"{option} {listen}: cannot listen there ({exc})") from None


@contextlib.contextmanager
def _demo_traffic(
    on: bool, target: Store, config: Config, host: str, port: int, rate: float
) -> Iterator[None]:
    """With ``--demo``: synthetic traffic into the receiver while the block runs."""
    if not on:
        yield
        return
    from warehouse.demo import DemoTraffic

    loopback = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    traffic = DemoTraffic(
        f"http://{loopback}:{port}",
        target,
        rate=rate,
        headers=credentials(config.auth_token, config.basic_auth),
        say=typer.echo,
    )
    traffic.start()
    try:
        yield
    finally:
        traffic.stop()


_DEMO_HINTS = """\
  in another terminal, try (from this directory):
    llmwh sla --slo chat-assistant --since 6h --by zone   SLA report per zone
    llmwh drill --by zone -m count,p95_ttft_ms --since 1h
    llmwh root-cause --slo chat-assistant --since 1h      what carries the bad requests
    llmwh timeseries -m p95_ttft_ms --by zone --since 3h --interval 15m
  (llmwh is .venv/bin/llmwh after `make run`; the README's "Try it" has more)
"""


def _program() -> str:
    """How the user ran us (``.venv/bin/llmwh`` from make), for hints they can paste."""
    invoked = Path(sys.argv[0])
    return str(invoked) if invoked.name == "llmwh" else "llmwh"


if __name__ == "__main__":
    main()
