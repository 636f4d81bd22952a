"""``llmwh slo ...``: SLOs compiled into rollups, and their state."""

from __future__ import annotations

from typing import Annotated

import typer

from warehouse.cli.options import (
    ColumnsOption,
    ConfigOption,
    DataOption,
    FormatOption,
    OutputOption,
    StoreOption,
    WideOption,
    columns,
    comma_list,
    open_warehouse,
)
from warehouse.cli.output import write
from warehouse.render import wrap_note

__all__ = ["app"]

STATUS_COLUMNS = ("slo", "version", "state", "rows", "newest_minute", "lag_seconds")

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
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """List each SLO rollup: its SLO, version, state, rows, bytes and newest minute.

    The table leaves out the rollup's table name and bytes; `--wide` shows them."""
    with open_warehouse(store, data, config_file) as wh:
        found = wh.slo_status()
        write(found, fmt, output, columns(column, wide, STATUS_COLUMNS))
    if found.is_empty():
        note = (
            "no SLO rollup here yet: `llmwh slo apply` builds one for every shipped SLO "
            "(or `--slo NAME`); until then `llmwh sla` reads raw rows"
        )
        typer.echo(wrap_note(note), err=True)
