"""Files of records into a store's ``requests`` table, as ``llmwh ingest`` loads them.

Two passes over the files, each streamed in pieces of bounded size (:func:`read_batches`):
:func:`check_files` reads and checks every record of every file, writing nothing, so
that one bad record anywhere writes nothing; :func:`insert_files` then reads them again
and inserts them in batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from warehouse.errors import IngestError, StoreError
from warehouse.ingest.events.files import read_batches
from warehouse.ingest.limits import WriteLimits
from warehouse.store.base import Store

__all__ = ["check_files", "insert_files"]


def check_files(paths: Sequence[Path], limits: WriteLimits) -> int:
    """Read and check every record of ``paths`` against ``limits``; the number of records.

    Raises :class:`IngestError` naming the file (and its line or row, and field).
    """
    total = 0
    for path in paths:
        for table in read_batches(path):  # its errors name the file, line or row, and field
            try:
                limits.check_requests(table)
            except IngestError as exc:
                raise IngestError(f"{path}: {exc}") from None
            total += table.num_rows
    return total


def insert_files(
    store: Store,
    paths: Sequence[Path],
    *,
    total: int,
    batch_rows: int,
    advance: Callable[[int], None] = lambda rows: None,
) -> None:
    """Insert the records of ``paths`` (checked: :func:`check_files`, which counted
    ``total``) into ``requests``, at most ``batch_rows`` an insert; ``advance`` is told
    the rows of each insert once it committed.

    A :class:`StoreError` says how many of the ``total`` rows were committed before it.
    """
    done = 0
    for path in paths:
        for table in read_batches(path):
            for batch in table.to_batches(max_chunksize=batch_rows):
                try:
                    store.insert_arrow("requests", pa.Table.from_batches([batch]))
                except StoreError as exc:
                    raise StoreError(
                        f"{exc} (after {done:,} of {total:,} rows were committed)",
                        database_message=exc.database_message,
                        code=exc.code,
                    ) from None
                done += batch.num_rows
                advance(batch.num_rows)
