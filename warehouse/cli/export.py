"""What feeds Prometheus and Grafana: ``llmwh export`` (the SLA exporter),
``llmwh alert-rules`` and ``llmwh exporters write``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from warehouse.cli.options import (
    ByOption,
    ConfigOption,
    DataOption,
    OutputOption,
    StoreOption,
    comma_list,
    open_warehouse,
)
from warehouse.config import parse_listen
from warehouse.errors import InvalidArgument

__all__ = ["app", "exporters_app"]

app = typer.Typer(rich_markup_mode="markdown")

exporters_app = typer.Typer(
    help="The files the warehouse hands to Grafana and Prometheus (the repository's exporters/).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@app.command("export")
def export(
    slo: Annotated[
        list[str] | None,
        typer.Option(
            "--slo",
            help="SLOs to export: shipped names or TOML paths (repeat; default: the slos "
            "setting, else every shipped SLO)",
        ),
    ] = None,
    by: ByOption = None,
    listen: Annotated[
        str, typer.Option("--listen", help="Serve /metrics on HOST:PORT")
    ] = "127.0.0.1:9202",
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between computations")
    ] = 30.0,
    top: Annotated[
        int, typer.Option("--top", help="Label values kept per dimension; the rest are 'other'")
    ] = 10,
    window: Annotated[
        list[str] | None,
        typer.Option("--window", help="Windows besides the SLOs' burn windows (repeat)"),
    ] = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Serve SLA figures (attainment, burn rates, budget, objectives) for Prometheus."""
    from warehouse.exporters.run import run_exporter
    from warehouse.exporters.sla import DEFAULT_WINDOWS, SLAExporter
    from warehouse.query import registry
    from warehouse.query.slo import load_slo

    if not math.isfinite(interval) or interval < 1:
        raise InvalidArgument(f"--interval must be at least 1 second, got {interval}")
    parse_listen(listen)  # a bad address is refused before the store is opened
    with open_warehouse(store, data, config_file) as wh:
        names = comma_list(slo) or wh.configured_slos()
        slos = [load_slo(name, validate_measure=registry.measure) for name in names]
        exporter = SLAExporter(wh, slos, comma_list(by), comma_list(window) or DEFAULT_WINDOWS, top)
        token, basic = wh.config.auth_token, wh.config.basic_auth
        run_exporter(exporter, listen, interval, token=token, basic=basic, say=typer.echo)


@app.command("alert-rules")
def alert_rules(
    output: OutputOption = None,
) -> None:
    """Print the Prometheus alerting rules on `llmwh export`'s figures (multi-window burn
    rates, spent budget, failing exporter); exporters/prometheus/alerts.yml is this."""
    from warehouse.exporters.alerts import render_rules

    if output is None:
        typer.echo(render_rules(), nl=False)
    else:
        output.write_text(render_rules())


@exporters_app.command("write")
def exporters_write(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="Where to write them (run from the repository: its exporters/)"
        ),
    ] = Path("exporters"),
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 naming each file that differs"),
    ] = False,
) -> None:
    """Write the Grafana dashboards and provisioning files and the Prometheus alerting
    rules, as the code builds them (only files whose text changed are rewritten)."""
    from warehouse.exporters.shipped import differences, write_files

    if not check:
        for path in write_files(folder):
            typer.echo(f"wrote {folder / path}")
        return
    wrong = differences(folder)
    for path, why in wrong.items():
        typer.echo(f"{folder / path}: {why}", err=True)
    if wrong:
        typer.echo(
            f"run `llmwh exporters write {folder}` (and remove what it does not build)", err=True
        )
        raise typer.Exit(1)
    typer.echo(f"{folder}: every file is as the code builds it")
