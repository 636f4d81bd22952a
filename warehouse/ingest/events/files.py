"""Files of records in: NDJSON, Parquet and Arrow IPC, chosen by the name's ending."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from warehouse.errors import IngestError
from warehouse.ingest.events.arrow import decode_arrow_stream, decode_arrow_table
from warehouse.ingest.events.ndjson import decode_ndjson

FILE_SUFFIXES = (".ndjson", ".jsonl", ".parquet", ".arrow", ".arrows", ".feather")
"""File name endings :func:`read_file` takes."""


def read_file(path: str | PathLike[str]) -> pa.Table:
    """A file of records -> a checked REQUESTS_SCHEMA table, by its name's ending.

    ``.ndjson``/``.jsonl`` (NDJSON), ``.parquet``, ``.arrow``/``.feather`` (Arrow IPC
    file, or stream), ``.arrows`` (Arrow IPC stream). Errors begin with the path.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise IngestError(f"{path}: unknown file type; use one of {', '.join(FILE_SUFFIXES)}")
    try:
        if suffix in (".ndjson", ".jsonl"):
            return decode_ndjson(path.read_bytes())
        if suffix == ".arrows":
            return decode_arrow_stream(path.read_bytes())
        return decode_arrow_table(_read_table(path, suffix))
    except IngestError as exc:
        raise IngestError(f"{path}: {exc}") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_table(path: Path, suffix: str) -> pa.Table:
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix == ".feather":
            return feather.read_table(path)
        try:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_stream(source).read_all()
    except pa.ArrowException as exc:
        raise IngestError(f"not a valid {suffix} file: {exc}") from None
