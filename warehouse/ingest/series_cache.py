"""The series rows a receiver has written, so a flush writes only the new or widened ones.

A long-lived series sends a sample every scrape. Writing its ``series`` row on every
flush costs ClickHouse an insert (a part of a dozen files, merged away later) for a
row that collapses into the one already there. :class:`WrittenSeries` remembers, per
series id, the time range the rows written so far cover; a flush writes a series' row
only when the series is new to this receiver, reaches back before that range, or
into a later refresh period than its end. Periods are ``refresh_seconds`` long and
aligned on the epoch, so the series of a scrape cross into the next period together
and their rewrites share a flush instead of trickling into every one. So
``series.min_time`` stays exact and ``series.max_time`` trails a live series' newest
sample by less than ``refresh_seconds``. The table lives in C (``_series_cache.c``);
past ``capacity`` series it starts again empty, which costs one more write of each.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from warehouse.ingest._series_cache import SeriesCache

__all__ = ["WrittenSeries", "id_bytes"]


class WrittenSeries:
    """Which series rows still need writing (see the module docstring)."""

    def __init__(self, capacity: int, refresh_seconds: float):
        self._cache = SeriesCache(capacity)
        self._refresh_ms = int(refresh_seconds * 1000)

    def __len__(self) -> int:
        return len(self._cache)

    def to_write(self, series: pa.Table) -> pa.Table:
        """The rows of a ``series`` table that this receiver has not written yet."""
        if not series.num_rows:
            return series
        write = self._cache.unseen(*_buffers(series), self._refresh_ms)
        mask = np.frombuffer(write, np.bool_)
        return series if mask.all() else series.filter(mask)

    def remember(self, series: pa.Table) -> None:
        """These rows are committed."""
        if series.num_rows:
            self._cache.remember(*_buffers(series))


def id_bytes(series: pa.Table) -> np.ndarray:
    """The 16-byte ids of a ``series`` table, back to back, as the cache takes them."""
    ids = series.column("id").combine_chunks().storage  # fixed_size_binary(16)
    raw = np.frombuffer(ids.buffers()[1], np.uint8)[ids.offset * 16 : (ids.offset + len(ids)) * 16]
    return np.ascontiguousarray(raw)


def _buffers(series: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def millis(name: str) -> np.ndarray:
        return series.column(name).cast(pa.int64()).to_numpy()

    return id_bytes(series), millis("min_time"), millis("max_time")
