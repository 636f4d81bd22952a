"""``llmwh slo ...``: SLOs compiled into rollups, and their state."""

from __future__ import annotations

from typing import Annotated

import typer

from warehouse.cli.options import (
    ConfigOption,
    DataOption,
    FormatOption,
    OutputOption,
    StoreOption,
    comma_list,
    open_warehouse,
)
from warehouse.cli.output import write

__all__ = ["app"]

app = typer.Typer(
    help="SLOs compiled into rollups: `llmwh sla` reads them.", rich_markup_mode="markdown"
)


@app.command("apply")
def slo_apply(
    slo: Annotated[
        list[str] | None,
        typer.Option(
            "--slo",
            help="SLOs to compile: shipped names or TOML paths (repeat; default: the slos "
            "setting, else every shipped SLO)",
        ),
    ] = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Compile SLOs into rollups, backfilled from requests; older versions are dropped."""
    with open_warehouse(store, data, config_file) as wh:
        for applied in wh.slo_apply(comma_list(slo) or None):
            dropped = f" (dropped {', '.join(applied.dropped)})" if applied.dropped else ""
            typer.echo(f"{applied.slo}: {applied.table}: {applied.action}{dropped}")


@app.command("status")
def slo_status(
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """List each SLO rollup: its SLO, version, state, rows, bytes and newest minute."""
    with open_warehouse(store, data, config_file) as wh:
        found = wh.slo_status()
        write(found, fmt, output)
    if found.is_empty():
        typer.echo(
            "no SLO rollup here yet: `llmwh slo apply` builds one for every shipped SLO "
            "(or `--slo NAME`); until then `llmwh sla` reads raw rows",
            err=True,
        )
