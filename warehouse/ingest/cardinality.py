"""New series per tenant per minute: a cardinality brake for misbehaving senders.

A series is *new* when this receiver has not seen its id lately. Known ids live in two
generations of C hash tables (``_series_cache.c``): ids go into the current one; once it
holds ``capacity`` ids it becomes the previous one and a new current one starts. An id
is known if either generation holds it, so a series seen within the last ``capacity``
to ``2 * capacity`` distinct series stays known, and a long-lived series is never
charged again while it keeps sending.

Each tenant may add ``limit`` new series per wall-clock minute. A write that would
pass it is refused whole with 429 and ``Retry-After`` up to the next minute; nothing of
it is charged or stored. Several receivers each keep their own count.

Per-request metrics are a new series per request by design: leave the limit off (0,
the default) for them, or set it above their request rate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from warehouse.errors import TooManyNewSeries
from warehouse.ingest._series_cache import SeriesCache
from warehouse.ingest.series_cache import id_bytes

__all__ = ["NewSeriesBudget", "TooManyNewSeries"]


class NewSeriesBudget:
    """Charges each write's new series to its tenant's budget for the current minute."""

    def __init__(self, limit: int, capacity: int, clock: Callable[[], float] = time.time):
        self.limit = limit
        self._capacity = capacity
        self._current, self._previous = SeriesCache(capacity), SeriesCache(capacity)
        self._spent: dict[str, tuple[int, int]] = {}  # tenant -> (minute, new series)
        self._lock = threading.Lock()
        self._clock = clock

    def charge(self, tenant: str, series: pa.Table) -> None:
        """Admit the write whose ``series`` table this is, or raise :class:`TooManyNewSeries`."""
        if not self.limit or not series.num_rows:
            return
        ids = id_bytes(series)
        zeros = np.zeros(series.num_rows, np.int64)
        with self._lock:
            new = np.frombuffer(self._current.unseen(ids, zeros, zeros, 0), np.bool_)
            if new.any():
                new = new & np.frombuffer(self._previous.unseen(ids, zeros, zeros, 0), np.bool_)
            count = int(new.sum())
            now = self._clock()
            minute = int(now // 60)
            spent_minute, spent = self._spent.get(tenant, (minute, 0))
            if spent_minute != minute:
                spent = 0
            if count and spent + count > self.limit:
                who = f"tenant {tenant!r}" if tenant else "the default tenant"
                raise TooManyNewSeries(
                    f"{who} would add {count:,} new series, {spent:,} already this minute; the "
                    f"limit is {self.limit:,} a minute (max_new_series_per_minute): retry later",
                    retry_after=max(1, int(60 - now % 60) + 1),
                )
            if len(self._spent) > 10_000:  # tenants are a header's values: forget old minutes
                self._spent = {t: v for t, v in self._spent.items() if v[0] == minute}
            self._spent[tenant] = (minute, spent + count)
            if count:
                fresh = ids.reshape(-1, 16)[new]
                if len(self._current) + count > self._capacity:
                    self._previous, self._current = self._current, SeriesCache(self._capacity)
                fresh_zeros = np.zeros(count, np.int64)
                self._current.remember(
                    np.ascontiguousarray(fresh).reshape(-1), fresh_zeros, fresh_zeros
                )
