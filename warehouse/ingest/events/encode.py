"""The other way round: REQUESTS_SCHEMA rows -> NDJSON."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events.fields import _UTC_MS


def encode_ndjson(table: pa.Table) -> bytes:
    """REQUESTS_SCHEMA rows -> NDJSON that :func:`decode_ndjson` reads back identically.

    ``ts`` as epoch milliseconds; NULL measures are left out. Not a hot path (Python
    objects per row): for tests, samples and ``generate --out``.
    """
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(pc.cast(column, _UTC_MS), pa.int64())
        columns[name] = column.to_pylist()
    lines = []
    for row in range(table.num_rows):
        record = {}
        for name, column in columns.items():
            value = column[row]
            if value is None:
                continue
            record[name] = dict(value) if name == "attrs" else value
        lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False))
    return ("\n".join(lines) + "\n").encode()
