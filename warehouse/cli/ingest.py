"""``llmwh ingest``: per-request records from files into the store."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from warehouse.cli.options import ConfigOption, DataOption, StoreOption, store_for
from warehouse.config import load_config

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")


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

    from warehouse.ingest.events.load import check_files, insert_files
    from warehouse.ingest.limits import WriteLimits

    config = load_config(config_file, store=store, data_dir=data)
    target = store_for(config)
    total = check_files(files, WriteLimits.from_config(config))
    with Progress(transient=True) as progress:
        task = progress.add_task("inserting requests", total=total)
        advance = partial(progress.advance, task)
        insert_files(target, files, total=total, batch_rows=batch_rows, advance=advance)
    typer.echo(f"ingested {total:,} requests from {len(files)} file(s) into {target.url}")
