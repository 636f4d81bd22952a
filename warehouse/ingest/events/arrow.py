"""Arrow in: an IPC stream or a table, through the same column checks as NDJSON."""

from __future__ import annotations

import pyarrow as pa

from warehouse.errors import IngestError
from warehouse.ingest.events.fields import _FIELDS, REQUIRED, _unknown_field
from warehouse.ingest.events.pipeline import _finish
from warehouse.ingest.time_window import TimeWindow


def decode_arrow_stream(data: bytes, window: TimeWindow | None = None) -> pa.Table:
    """An Arrow IPC stream of records -> a checked REQUESTS_SCHEMA table.

    Columns are named as the fields; any subset, any castable type (integers or floats
    for numbers, strings or dictionary-encoded strings, ``ts`` as integers, RFC 3339 text
    or a zoned timestamp, ``attrs`` as a map of strings). Errors name the row (0-based)
    and the field, or the column when its type cannot be read. With ``window``, a ``ts``
    outside it is such an error.
    """
    if not data:
        raise IngestError("empty body: no records")
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"not an Arrow IPC stream: {exc}") from None
    return decode_arrow_table(table, window)


def decode_arrow_table(table: pa.Table, window: TimeWindow | None = None) -> pa.Table:
    """An Arrow table of records (as :func:`decode_arrow_stream` takes) -> checked table."""
    # IPC readers trust the sender's offsets and lengths: a crafted body would make
    # the compute kernels read out of bounds (a crash). Check every buffer first.
    try:
        table.validate(full=True)
        names = table.column_names
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise IngestError(f"invalid Arrow data: {exc}") from None
    for name in names:
        if name not in _FIELDS:
            raise IngestError(f"column {name}: {_unknown_field(name)}")
        if names.count(name) > 1:
            raise IngestError(f"column {name}: appears twice")
    for name in REQUIRED:
        if name not in names:
            raise IngestError(f"column {name}: is required, missing")
    if table.num_rows == 0:
        raise IngestError("empty body: no records")
    return _finish(table, lambda row: f"row {row} (0-based)", window=window)
