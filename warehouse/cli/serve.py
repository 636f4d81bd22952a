"""``llmwh serve``: the whole warehouse in the foreground (store, migrations, receiver)."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from warehouse.cli.options import (
    ConfigOption,
    DataOption,
    HttpPortOption,
    StoreOption,
    TcpPortOption,
)
from warehouse.cli.store import apply_configured_slos, say_update
from warehouse.config import load_config, parse_listen, setting_help
from warehouse.demo import demo_traffic
from warehouse.errors import ConfigError
from warehouse.serve.banner import banner
from warehouse.serve.preflight import check_bindable, preflight
from warehouse.serve.run import run_receiver
from warehouse.serve.workers import check_workers, replay_orphan_logs, run_workers
from warehouse.store import discovery, embedded, schema

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")

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
        str | None,
        typer.Option("--wal", metavar="DIR", help=setting_help("wal_dir"), show_default=False),
    ] = None,
    no_wal: Annotated[
        bool,
        typer.Option(
            "--no-wal",
            help="Keep no write-ahead log: acknowledge a write once it is committed in the "
            "store (slower with few senders; what was acknowledged is readable at once). "
            "The setting wal = false.",
        ),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option("--workers", metavar="N", help=setting_help("workers"), show_default=False),
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

    A write is acknowledged once it is synced to the write-ahead log, in DATA/wal unless
    --wal DIR names another place (--no-wal: once committed in the store); at start the
    receiver first inserts what the log holds from before.

    Runs in the foreground until Ctrl-C or SIGTERM; then it drains the receiver (every
    acknowledged write is committed) and stops the server it started.
    """
    if wal is not None and no_wal:
        raise ConfigError(
            "--wal DIR keeps the write-ahead log in DIR, --no-wal keeps none: pick one"
        )
    config = load_config(
        config_file,
        store=store,
        data_dir=data,
        listen=listen,
        # --wal DIR asks for the log (over `wal = false` in a file or LLMWH_WAL).
        wal=False if no_wal else (True if wal is not None else None),
        wal_dir=wal,
        otlp_grpc_listen=otlp_grpc_listen,
        workers=workers,
    )
    host, port = parse_listen(config.listen)
    if not math.isfinite(demo_rate) or demo_rate <= 0:
        raise ConfigError(f"--demo-rate must be > 0 requests/s, got {demo_rate}")
    preflight(config)
    several = config.receiver_processes() > 1
    if several:
        check_bindable(config.listen, "--listen")
        check_workers(config)
    _show_receiver_notices()
    with discovery.store_or_start(config, http_port, tcp_port, say=typer.echo) as (target, own):
        check_workers(config, target)
        say_update(target, schema.migrate(target, config))
        apply_configured_slos(target, config)
        replay_orphan_logs(target, config, typer.echo)
        typer.echo(banner(target.url, config, host, port, demo=demo, program=_program()))
        watch = own.data_dir if own else None
        with contextlib.ExitStack() as stack:
            if demo:
                stack.enter_context(demo_traffic(target, config, host, port, demo_rate, typer.echo))
            if several:
                run_workers(config, host, port, watch, say=typer.echo)
            else:
                run_receiver(target, config, host, port, watch=watch)


def _show_receiver_notices() -> None:
    """Print the receiver's notices (a replay of its log) and warnings on stderr, as they
    are, rather than warnings alone."""
    notices = logging.getLogger("llmwh")
    if not notices.handlers:
        notices.addHandler(logging.StreamHandler())
        notices.setLevel(logging.INFO)


def _program() -> str:
    """How the user ran us (``.venv/bin/llmwh`` from make), for hints they can paste."""
    invoked = Path(sys.argv[0])
    return str(invoked) if invoked.name == "llmwh" else "llmwh"
