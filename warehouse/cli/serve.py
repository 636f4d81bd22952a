"""``llmwh serve``: the whole warehouse in the foreground (store, migrations, receiver)."""

from __future__ import annotations

import contextlib
import math
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from warehouse.auth import credentials, load_access
from warehouse.cli.options import (
    ConfigOption,
    DataOption,
    HttpPortOption,
    StoreOption,
    TcpPortOption,
)
from warehouse.cli.store import apply_configured_slos, say_update
from warehouse.config import Config, load_config, parse_listen, setting_help
from warehouse.errors import ConfigError
from warehouse.ingest.wal import usable_directory
from warehouse.serve.run import run_receiver
from warehouse.store import discovery, embedded, schema
from warehouse.store.base import Store

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
        say_update(target, schema.migrate(target, config))
        apply_configured_slos(target, config)
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
