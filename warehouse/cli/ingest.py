"""``llmwh ingest``: per-request records from files into the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pyarrow as pa
import typer

from warehouse.cli.options import ConfigOption, DataOption, StoreOption, store_for
from warehouse.config import load_config
from warehouse.errors import IngestError, StoreError

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
