"""Synthetic requests written to a file that ``llmwh ingest`` reads: Parquet or NDJSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.errors import ConfigError
from warehouse.ingest.events import encode_ndjson
from warehouse.model import REQUESTS_SCHEMA

__all__ = ["FILE_FORMATS", "write_requests"]

FILE_FORMATS = {".ndjson": "ndjson", ".jsonl": "ndjson", ".json": "ndjson", ".parquet": "parquet"}
"""The format of a file by its name's ending."""


def write_requests(
    path: Path, batches: Iterable[pa.Table], advance: Callable[[int], None] = lambda rows: None
) -> int:
    """Write ``batches`` (REQUESTS_SCHEMA tables) to ``path`` in the format its name ends
    in (:data:`FILE_FORMATS`); ``advance`` is told the rows of each. The rows written."""
    kind = FILE_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(f"--out {path}: name it .ndjson, .jsonl or .parquet")
    rows = 0
    if kind == "parquet":
        with pq.ParquetWriter(path, REQUESTS_SCHEMA, compression="zstd") as writer:
            for table in batches:
                writer.write_table(table)
                rows += table.num_rows
                advance(table.num_rows)
        return rows
    with path.open("wb") as sink:
        for table in batches:
            sink.write(encode_ndjson(table) if table.num_rows else b"")
            rows += table.num_rows
            advance(table.num_rows)
    return rows
