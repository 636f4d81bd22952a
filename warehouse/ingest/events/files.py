"""Files of records in: NDJSON, Parquet and Arrow IPC, chosen by the name's ending.

:func:`read_batches` streams a file in checked pieces of bounded size, so that a file of
any length (or one that never ends) is read in bounded memory; :func:`read_file` is the
whole file at once, for files known to be small.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from os import PathLike
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.errors import IngestError
from warehouse.ingest.events.arrow import decode_arrow_table
from warehouse.ingest.events.ndjson import decode_ndjson

FILE_SUFFIXES = (".ndjson", ".jsonl", ".parquet", ".arrow", ".arrows", ".feather")
"""File name endings :func:`read_file` takes."""

PIECE_BYTES = 32 << 20
"""About how much NDJSON one piece holds (and the longest line taken)."""
PIECE_ROWS = 100_000
"""Rows of one piece of a Parquet or Arrow file (at most)."""


def read_file(path: str | PathLike[str]) -> pa.Table:
    """A file of records -> a checked REQUESTS_SCHEMA table, by its name's ending.

    ``.ndjson``/``.jsonl`` (NDJSON), ``.parquet``, ``.arrow``/``.feather`` (Arrow IPC
    file, or stream), ``.arrows`` (Arrow IPC stream). Errors begin with the path.
    """
    return pa.concat_tables(read_batches(path))


def read_batches(
    path: str | PathLike[str], piece_bytes: int = PIECE_BYTES, piece_rows: int = PIECE_ROWS
) -> Iterator[pa.Table]:
    """A file of records as checked REQUESTS_SCHEMA tables of bounded size, in order.

    Errors begin with the path and name the line (NDJSON) or row (0-based) in the whole
    file. A file without a record is an error; so is an NDJSON line longer than
    ``piece_bytes``.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise IngestError(f"{path}: unknown file type; use one of {', '.join(FILE_SUFFIXES)}")
    pieces = (
        _ndjson_pieces(path, piece_bytes)
        if suffix in (".ndjson", ".jsonl")
        else _arrow_pieces(path, suffix, piece_rows)
    )
    found = False
    try:
        for table in pieces:
            found = found or table.num_rows > 0
            yield table
    except IngestError as exc:
        raise IngestError(f"{path}: {exc}") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except pa.ArrowException as exc:
        raise IngestError(f"{path}: not a valid {suffix} file: {exc}") from None
    if not found:
        raise IngestError(f"{path}: empty body: no records")


def _ndjson_pieces(path: Path, piece_bytes: int) -> Iterator[pa.Table]:
    lines_before = 0
    carry = b""
    with open(path, "rb") as source:
        while True:
            block = source.read(piece_bytes)
            data = carry + block
            if not block:  # the end: what is left is the last line
                if data.strip():
                    yield _shifted(decode_ndjson, data, "line", lines_before)
                return
            cut = data.rfind(b"\n") + 1
            if not cut:
                if len(data) > piece_bytes:
                    raise IngestError(
                        f"line {lines_before + 1} is longer than {piece_bytes:,} bytes"
                    )
                carry = data
                continue
            piece, carry = data[:cut], data[cut:]
            if piece.strip():
                yield _shifted(decode_ndjson, piece, "line", lines_before)
            lines_before += piece.count(b"\n")


def _arrow_pieces(path: Path, suffix: str, piece_rows: int) -> Iterator[pa.Table]:
    rows_before = 0
    for batch in _record_batches(path, suffix, piece_rows):
        table = pa.Table.from_batches([batch])
        yield _shifted(decode_arrow_table, table, "row", rows_before)
        rows_before += table.num_rows


def _record_batches(path: Path, suffix: str, piece_rows: int) -> Iterator[pa.RecordBatch]:
    if suffix == ".parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=piece_rows)
        return
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid:
            if suffix == ".feather":
                raise
            source.seek(0)
            for batch in pa.ipc.open_stream(source):
                yield from _sliced(batch, piece_rows)
            return
        for k in range(reader.num_record_batches):
            yield from _sliced(reader.get_batch(k), piece_rows)


def _sliced(batch: pa.RecordBatch, rows: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


_WHERE = re.compile(r"\A(line|row) (\d+)")
_Data = TypeVar("_Data", bytes, pa.Table)


def _shifted(decode: Callable[[_Data], pa.Table], data: _Data, unit: str, before: int) -> pa.Table:
    """``decode(data)``, its error naming the line or row in the whole file."""
    try:
        return decode(data)
    except IngestError as exc:
        text = str(exc)
        match = _WHERE.match(text)
        if match and match[1] == unit and before:
            text = f"{unit} {int(match[2]) + before}{text[match.end() :]}"
        raise IngestError(text) from None
