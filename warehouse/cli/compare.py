"""``llmwh compare``: the same dataset and questions on ClickHouse and DuckDB, side by side."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from warehouse.compare.questions import SUITE
from warehouse.errors import ConfigError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")

OUTPUT_FORMATS = ("table", "json")


@app.command("compare")
def compare(
    rows: Annotated[int, typer.Option("--rows", help="Requests in the data set")] = 200_000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic data set")] = 0,
    repeat: Annotated[
        int, typer.Option("--repeat", help="Timed runs of each question, after a warm-up")
    ] = 5,
    backends: Annotated[
        str, typer.Option("--backends", help="Comma-separated: clickhouse, chdb, duckdb")
    ] = "clickhouse,chdb,duckdb",
    questions: Annotated[
        str | None,
        typer.Option(
            "--questions",
            help=f"Comma-separated subset of the suite: {', '.join(q.name for q in SUITE)}",
        ),
    ] = None,
    batch_rows: Annotated[
        int, typer.Option("--batch-rows", help="Rows per insert while loading")
    ] = 100_000,
    fmt: Annotated[str, typer.Option("--format", "-f", help="Output format: table|json")] = "table",
    keep: Annotated[
        Path | None,
        typer.Option("--keep", help="Keep the data set and the stores in this (empty) directory"),
    ] = None,
    fault: Annotated[
        str | None,
        typer.Option("--fault", hidden=True, help="BACKEND:QUESTION:COLUMN: answer it wrongly"),
    ] = None,
) -> None:
    """Load the same synthetic requests into ClickHouse (server over HTTP, in-process)
    and DuckDB, ask each the same questions, and compare load rate, bytes on disk, query
    times and peak memory side by side.

    Exit code 1 when an answer disagrees with the reference; the differing rows are shown.
    """
    from rich.console import Console

    from warehouse.compare import Fault, Options, render_json, render_text, run_compare

    if fmt not in OUTPUT_FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}: use {', '.join(OUTPUT_FORMATS)}")
    try:
        options = Options(
            rows=rows,
            seed=seed,
            repeat=repeat,
            backends=tuple(_list(backends)),
            questions=tuple(_list(questions)),
            batch_rows=batch_rows,
            keep=keep,
            fault=Fault.parse(fault) if fault else None,
        )
        console = Console(stderr=True)
        if console.is_terminal:
            with console.status("starting") as status:
                report = run_compare(options, progress=lambda text: status.update(text))
        else:  # a log: one line per step, with the time
            report = run_compare(options, progress=lambda text: _log(console, text))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    text = render_json(report) if fmt == "json" else render_text(report)
    sys.stdout.write(text)
    sys.stdout.flush()
    if not report.agrees:
        typer.echo("llmwh: the backends' answers disagree (see above)", err=True)
        raise typer.Exit(1)


def _log(console: Console, text: str) -> None:
    console.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False, soft_wrap=True)


def _list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]
