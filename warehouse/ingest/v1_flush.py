"""The fast path of remote write 1.0: a flush's bodies decoded in C and written together.

The group committer hands a flush's 1.0 bodies over by tenant (``insert_bodies``):
they are parsed in C without the GIL, one pass per tenant (each series made its
tenant's in multi-tenant mode, its per-request samples pivoted into request parts, a
series already written mapped from its label fields to its id:
:mod:`~warehouse.ingest.series_cache`), charged to the new-series budget, and written
as one insert per table whatever their tenants: to the write-ahead log when there is
one, else to the store, series first.
A body the C decoder leaves out (anything but float samples, anything the Python
decoder would refuse, a time outside the store's windows, a write over the limits) is
decoded alone by the Python path, which says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait

import pyarrow as pa

from warehouse.config import Config
from warehouse.errors import TooManyNewSeries
from warehouse.ingest import remote_write
from warehouse.ingest.batcher import insert_in_order, merge_tables
from warehouse.ingest.limits import WriteLimits
from warehouse.ingest.metric_mapping import MetricMapping
from warehouse.ingest.remote_write_tables import DecodedWrite
from warehouse.ingest.request_pivot import Pivot, c_spec, parts_table
from warehouse.ingest.tenant import TenantPolicy
from warehouse.ingest.time_window import window_for
from warehouse.ingest.wal import Entry
from warehouse.ingest.wal_inserter import WalInserter
from warehouse.store.base import Store

try:  # C, like the decoder it serves (see hatch_build.py)
    from warehouse.ingest.cardinality import NewSeriesBudget
    from warehouse.ingest.series_cache import WrittenSeries
except ImportError:  # pragma: no cover - built without a C compiler
    # The classes' names stay, as None, so that callers can tell (mypy's own idiom).
    WrittenSeries = NewSeriesBudget = None  # type: ignore[assignment,misc]

__all__ = ["NewSeriesBudget", "V1Flush", "available"]

log = logging.getLogger("llmwh.receiver")

Counted = Callable[[str, DecodedWrite, Pivot, float], None]
"""Told what each tenant's bodies wrote, and when: (tenant, decoded, pivot, written at)."""


def available(store: Store) -> bool:
    """Whether 1.0 writes take this path: the C extensions are built, and the store
    collapses rows a retry repeats (so that no write needs a token of its own)."""
    return (
        remote_write.FAST_V1 and WrittenSeries is not None and store.capabilities.collapsing_engines
    )


class V1Flush:
    """``insert_bodies`` for the group committer (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        config: Config,
        mapping: MetricMapping,
        limits: WriteLimits,
        tenants: TenantPolicy,
        new_series: NewSeriesBudget | None,
        wal: WalInserter | None,
        counted: Counted,
    ):
        self.store, self.config, self.mapping, self.limits = store, config, mapping, limits
        self.tenants, self.new_series, self.wal, self.counted = tenants, new_series, wal, counted
        self._written = WrittenSeries(config.series_cache_size, config.series_refresh_seconds)
        # Inserts of one flush's tables run side by side (ClickHouse takes each on a core).
        self._inserts = ThreadPoolExecutor(max_workers=4, thread_name_prefix="llmwh-insert")

    def close(self) -> None:
        self._inserts.shutdown()

    def __call__(self, groups: Mapping[str, list[bytes]]) -> dict[str, list[int]]:
        """Write one flush's bodies, by tenant; returns each tenant's bodies left out."""
        written_at = time.time()
        # A body with any time outside the narrower window of the two is left to the
        # Python decoder, which keeps what it can and says why it refused the rest.
        windows = [
            window_for(t, self.config, self.store.capabilities) for t in ("samples", "requests")
        ]
        earliest = max(w.earliest_ms for w in windows)
        latest = min(w.latest_ms for w in windows)
        left: dict[str, list[int]] = {}
        writes = []
        for tenant, bodies in groups.items():
            spec = c_spec(self.mapping, tenant or None, self.config.request_samples_as_series)
            decoded, pivot, left[tenant] = remote_write.decode_v1_batch(
                bodies,
                earliest,
                self.limits.as_tuple(),
                spec,
                latest,
                self.tenants.series_label(tenant),
                self._written.known,
            )
            if self.new_series is not None:
                try:
                    self.new_series.charge(tenant, decoded.series)
                except TooManyNewSeries:
                    left[tenant] = list(range(len(bodies)))  # each alone: those within pass
                    continue
            writes.append((tenant, decoded, pivot, parts_table(pivot)))
        if not writes:
            return left
        ordered = merge_tables(
            {"series": d.series, "samples": d.samples, "request_parts": parts}
            for _, d, _, parts in writes
        )
        if self.wal is not None:
            self.wal.write([Entry(name, table) for name, table in ordered], _weights(writes))
        else:
            insert_in_order(self.store, ordered, self._side_by_side)
        for tenant, decoded, pivot, _ in writes:
            self.counted(tenant, decoded, pivot, written_at)
        try:  # committed whatever happens here: filing only saves later flushes work
            for _, decoded, _, _ in writes:
                self._written.remember(decoded)
        except MemoryError:
            log.warning("the series already written could not be filed (out of memory)")
        return left

    def _side_by_side(self, inserts: list[Callable[[], None]]) -> None:
        """Run the inserts at once; raises the first error once every one has ended."""
        running = [self._inserts.submit(insert) for insert in inserts]
        wait(running)
        for future in running:
            future.result()


def _weights(writes: list[tuple[str, DecodedWrite, Pivot, pa.Table]]) -> dict[str, int]:
    """How much of a flush's frame is each tenant's: the bytes of its tables. A flush of
    one tenant's bodies holds nothing else (and a table's ``nbytes`` walks its buffers:
    measured 0.04-0.4 ms a flush)."""
    if len(writes) == 1:
        return {writes[0][0]: 1}
    return {t: d.series.nbytes + d.samples.nbytes + p.nbytes for t, d, _, p in writes}
