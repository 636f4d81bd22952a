"""``llmwh query ...``: the named queries of ``sql/``, listed, shown and run read-only."""

from __future__ import annotations

from typing import Annotated

import polars as pl
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
    key_values,
    open_warehouse,
)
from warehouse.cli.output import write
from warehouse.query.named import bind, for_grafana, named_queries, read_query

__all__ = ["app"]

app = typer.Typer(
    help="Named queries of sql/: one question each, in SQL that clickhouse-client runs too.",
    rich_markup_mode="markdown",
)


@app.command("list")
def query_list(
    fmt: FormatOption = "table",
    output: OutputOption = None,
    column: ColumnsOption = None,
    wide: WideOption = False,
) -> None:
    """List the named queries: name, parameters (with defaults) and what each answers.

    The table shows the name and what each answers, wrapped; `--wide` adds the parameters."""
    rows = [
        {
            "name": q.name,
            "parameters": ", ".join(
                p.name + (f"={p.default}" if p.default is not None else "") for p in q.parameters
            ),
            "answers": q.answers,
        }
        for q in named_queries()
    ]
    shown = columns(column, wide, ["name", "answers"], wrap=["answers"])
    write(pl.DataFrame(rows), fmt, output, shown)


@app.command("show")
def query_show(
    name: Annotated[str, typer.Argument(help="A named query, or a .sql file")],
    grafana: Annotated[
        bool,
        typer.Option(
            "--grafana",
            help="For a Grafana panel: the dashboard's time range and variables in place of "
            "the parameters",
        ),
    ] = False,
) -> None:
    """Print a named query's file: its header and its SQL, as clickhouse-client runs it."""
    query = read_query(name)
    typer.echo(for_grafana(query) if grafana else query.text, nl=False)


@app.command("run")
def query_run(
    name: Annotated[str, typer.Argument(help="A named query (llmwh query list), or a .sql file")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="NAME=VALUE for a parameter of the query; repeat"),
    ] = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Run a named query read-only, its parameters checked and defaults filled in.

    The table shows the leftmost columns that fit 100 characters; `--wide` shows all."""
    given = dict(key_values(param, "--param", "NAME=VALUE", value=str))
    query = read_query(name)
    bind(query, given)  # a bad name or value is an error before any store is opened
    with open_warehouse(store, data, config_file, read_only=True) as wh:
        write(wh.named_query(query, **given), fmt, output, columns(column, wide, None))
