"""NDJSON in: the vectorized fast path, with the per-line pass as its fallback.

The happy path is vectorized end to end: ``pyarrow.json`` parses with an explicit schema
(pieces of the body in parallel), ``pyarrow.compute`` checks every rule over whole
columns, and a bad value's line comes from a vectorized scan of line starts. Only a body
the fast reader cannot take (a JSON type error, invalid JSON, an unknown field, records
mixing integer and text ``ts``) goes through the per-line Python pass
(:mod:`.ndjson_lines`), which names the first offending line, or decodes the body if
nothing was wrong after all.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

from warehouse.errors import IngestError
from warehouse.ingest.events.fields import _FIELDS, _KINDS
from warehouse.ingest.events.ndjson_lines import _decode_lines
from warehouse.ingest.events.pipeline import _finish
from warehouse.ingest.time_window import TimeWindow
from warehouse.model import REQUESTS_SCHEMA


def decode_ndjson(data: bytes, window: TimeWindow | None = None) -> pa.Table:
    """Newline-delimited JSON records -> a checked REQUESTS_SCHEMA table.

    One JSON object per line; blank lines are ignored. Errors name the line (1-based)
    and the field: ``line 3, field ttft_ms: must be a finite number >= 0, got -4``.
    With ``window``, a ``ts`` outside it is such an error.
    """
    data = bytes(data)
    lines = _record_lines(data)
    if lines is None:
        return _decode_lines(data, window)
    if len(lines) == 0:
        raise IngestError("empty body: no records")
    table = _read_json(data, len(lines))
    if table is None:
        return _decode_lines(data, window)
    return _finish(table, lambda row: f"line {lines[row]}", window=window)


def _record_lines(data: bytes) -> np.ndarray | None:
    """1-based numbers of the lines that hold a record, or None if one holds a non-object.

    Vectorized over the bytes; only lines that do not begin with ``{`` (blank or
    indented ones) are looked at one by one. pyarrow's JSON reader must not see a line
    that is not an object: a top-level ``null`` crashes it (pyarrow 26).
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    step = 1 << 22  # in slices that stay in cache, rather than one body-sized mask
    newlines = [
        np.flatnonzero(buffer[at : at + step] == 0x0A) + (at + 1)
        for at in range(0, len(buffer), step)
    ]
    starts = np.concatenate([np.zeros(1, dtype=np.int64), *newlines])
    numbers = np.arange(1, len(starts) + 1)
    ends = np.append(starts[1:] - 1, len(buffer))
    keep = np.zeros(len(starts), dtype=bool)
    inside = starts < len(buffer)
    keep[inside] = buffer[starts[inside]] == ord("{")
    for index in np.flatnonzero(~keep):
        text = data[starts[index] : ends[index]].strip(b" \t\r")
        if text[:1] == b"{":
            keep[index] = True
        elif text:
            return None
    return numbers[keep]


def _json_schema(ts_type: pa.DataType) -> pa.Schema:
    """What pyarrow's reader parses each field as (``attrs`` is inferred: any keys)."""
    wide = {"string": pa.string(), "uint": pa.int64(), "bool": pa.bool_()}
    fields = []
    for field in REQUESTS_SCHEMA:
        kind = _KINDS[field.name]
        if kind == "ts":
            fields.append(pa.field(field.name, ts_type))
        elif kind in ("latency", "number"):
            fields.append(pa.field(field.name, pa.float64()))
        elif kind != "attrs":
            fields.append(pa.field(field.name, wide[kind]))
    return pa.schema(fields)


def _read_json(data: bytes, records: int) -> pa.Table | None:
    """The fast path: pyarrow's reader, or None when it cannot take this body.

    The body is cut at line ends into pieces of about ``PIECE_BYTES``, each read
    by pyarrow as one block, in parallel. Never several blocks in one read: pyarrow's
    reader crashes the process when a field's type differs between blocks in some ways
    (a sender could bring the receiver down); within one block it reports an error.
    """
    start = data.index(b"{")  # a record line begins with it, after blank lines if any
    end = data.find(b"\n", start)
    try:
        ts = json.loads(data[start : end if end >= 0 else len(data)]).get("ts")
    except (ValueError, AttributeError, RecursionError):
        return None
    schema = _json_schema(pa.string() if isinstance(ts, str) else pa.int64())
    buffer = pa.py_buffer(data)
    pieces = [buffer[begin:end] for begin, end in _pieces(data)]
    if len(pieces) == 1:
        tables = [_read_piece(pieces[0], schema)]
    else:
        tables = list(_pool().map(lambda piece: _read_piece(piece, schema), pieces))
    read = [table for table in tables if table is not None]
    if len(read) < len(tables) or sum(t.num_rows for t in read) != records:
        return None  # a type error, an unknown field, two records on a line: find the line
    # Pieces saw different attrs keys: their structs merge by key name.
    return pa.concat_tables(read, promote_options="permissive")


_POOL: ThreadPoolExecutor | None = None


PIECE_BYTES = 1 << 20
"""About how many bytes of an NDJSON body pyarrow reads as one block."""


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="llmwh-ndjson")
    return _POOL


def _pieces(data: bytes) -> list[tuple[int, int]]:
    """(begin, end) of consecutive pieces of ``data`` that end at line ends."""
    size = PIECE_BYTES  # read at each call: tests set it small
    spans, begin = [], 0
    while begin < len(data):
        cut = data.find(b"\n", min(begin + size, len(data)) - 1)
        end = len(data) if cut < 0 else cut + 1
        spans.append((begin, end))
        begin = end
    return spans


def _read_piece(piece: pa.Buffer, schema: pa.Schema) -> pa.Table | None:
    """One piece as one block: the explicit fields, and ``attrs`` as a struct of strings."""
    try:
        table = _pyarrow_json(piece, schema)
        if not set(table.column_names) <= set(_FIELDS):
            return None  # an unknown field
        table.validate(full=True)  # the reader lets invalid UTF-8 through
        attrs = table.schema.field("attrs").type if "attrs" in table.column_names else None
        if attrs is None or pa.types.is_null(attrs):
            return table
        if not pa.types.is_struct(attrs):
            return None
        # The reader lets invalid UTF-8 through in object keys too: a key's name then
        # fails to decode here, and the per-line pass names the line.
        names = [f.name for f in attrs]
        if not all(pa.types.is_string(f.type) or pa.types.is_null(f.type) for f in attrs):
            # The reader infers timestamps from date-like text and numbers from numbers:
            # read again with every key seen as a string.
            keys = pa.struct([pa.field(name, pa.string()) for name in names])
            table = _pyarrow_json(piece, schema.append(pa.field("attrs", keys)))
    except (pa.ArrowException, UnicodeDecodeError):  # invalid UTF-8 in a field name
        return None
    return table


def _pyarrow_json(piece: pa.Buffer, schema: pa.Schema) -> pa.Table:
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
    read = pa_json.ReadOptions(block_size=piece.size + 1, use_threads=False)
    return pa_json.read_json(pa.BufferReader(piece), read_options=read, parse_options=options)
