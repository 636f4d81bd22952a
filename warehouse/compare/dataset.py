"""The data set every backend loads: synthetic requests written once to a Parquet file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.model import REQUESTS_SCHEMA
from warehouse.synthetic import Incident, request_batches

__all__ = ["Dataset", "read_batches", "write_dataset"]

SPAN = timedelta(days=1)


@dataclass(frozen=True)
class Dataset:
    """``rows`` seeded requests over one day ending at a whole hour, with one incident."""

    rows: int
    seed: int = 0
    until: datetime = field(
        default_factory=lambda: datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    )
    incidents: tuple[Incident, ...] = (Incident("zone-ttft"),)

    @property
    def since(self) -> datetime:
        return self.until - SPAN

    def batches(self) -> Iterator[pa.Table]:
        """The requests, in time order, a block of at most 100,000 at a time."""
        return request_batches(
            self.rows, seed=self.seed, start=self.since, span=SPAN, incidents=self.incidents
        )

    def describe_incidents(self) -> list[str]:
        start_ms = int(self.since.timestamp() * 1000)
        span_ms = int(SPAN.total_seconds() * 1000)
        return [incident.describe(start_ms, span_ms) for incident in self.incidents]


def write_dataset(dataset: Dataset, path: Path) -> float:
    """Write the data set to ``path`` as Parquet (streamed, one row group per block);
    returns the seconds it took."""
    started = time.perf_counter()
    with pq.ParquetWriter(path, REQUESTS_SCHEMA, compression="zstd") as writer:
        for table in dataset.batches():
            writer.write_table(table.cast(REQUESTS_SCHEMA))
    return time.perf_counter() - started


def read_batches(path: Path, batch_rows: int) -> Iterator[pa.Table]:
    """The rows of a data set file, ``batch_rows`` at a time, as ``requests`` tables."""
    reader = pq.ParquetFile(path)
    for batch in reader.iter_batches(batch_size=batch_rows):
        yield pa.Table.from_batches([batch]).cast(REQUESTS_SCHEMA)
