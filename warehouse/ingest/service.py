"""The write service: every body, whatever its transport, takes the same stages.

======================  ===============================================================
decode                  remote write 1.0 (in C a flush at a time, :mod:`.v1_flush`, or in
                        Python) and 2.0, events NDJSON and Arrow, OTLP (:mod:`.otlp.exports`)
limits                  :class:`~warehouse.ingest.limits.WriteLimits`
tenant                  :class:`~warehouse.ingest.tenant.TenantPolicy`
new-series budget       ``max_new_series_per_minute`` (:mod:`.cardinality`)
retention               :mod:`.windows`: what the store would not keep is refused
commit                  the group committer (:mod:`.batcher`; insert order and the
                        deduplication token there), through the write-ahead log if any
======================  ===============================================================

HTTP (:mod:`.app`) and gRPC (:mod:`.otlp.grpc_server`) only read a request, name its
tenant and map what this raises onto their status codes. A call returns once what it
wrote is committed (or, with the log, on disk).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import pyarrow as pa

from warehouse.config import Config
from warehouse.errors import ConfigError, IngestError
from warehouse.ingest import remote_write, v1_flush
from warehouse.ingest.batcher import Body, GroupCommitter, dedup_token
from warehouse.ingest.limits import WriteLimits
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.receiver_metrics import ReceiverMetrics
from warehouse.ingest.remote_write_tables import DecodedWrite
from warehouse.ingest.request_pivot import Pivot, parts_table, split_requests
from warehouse.ingest.sealing import Sealer
from warehouse.ingest.tenant import TenantPolicy
from warehouse.ingest.time_window import TimeWindow, window_for
from warehouse.ingest.wal import WriteAheadLog
from warehouse.ingest.wal_inserter import WalInserter
from warehouse.ingest.windows import Refused, parts_within, samples_within
from warehouse.store.base import Store
from warehouse.wire.compression import DECOMPRESSORS, unsnappy

__all__ = ["INLINE_DECOMPRESS_BYTES", "RemoteWritten", "WriteService"]

INLINE_DECOMPRESS_BYTES = 256 << 10
"""Bodies up to this size are decompressed on the event loop (well under a millisecond)."""


@dataclass(frozen=True)
class RemoteWritten:
    """What a remote write wrote. ``decoded`` is None when its flush wrote it whole."""

    decoded: DecodedWrite | None = None
    refused: Refused = (0, "")


class WriteService:
    """The stages every write takes, and the parts that run them (see the module)."""

    def __init__(self, store: Store, config: Config, metrics: ReceiverMetrics | None = None):
        self.store, self.config = store, config
        self.metrics = metrics or ReceiverMetrics()
        self.metrics.buffer_limit_bytes.set(config.buffer_bytes)
        self.mapping = load_mapping(config.metric_mapping)
        self.limits = WriteLimits.from_config(config)
        self.tenants = TenantPolicy(config.tenant_header)
        self.new_series = None
        if config.max_new_series_per_minute:
            if v1_flush.NewSeriesBudget is None:
                raise ConfigError("max_new_series_per_minute needs the C extensions (not built)")
            self.new_series = v1_flush.NewSeriesBudget(
                config.max_new_series_per_minute, config.series_cache_size
            )
        self.sealer = Sealer(store, config, self.mapping.request_id_label)
        self.metrics.sealing_lag_seconds.set_function(self.sealer.lag.seconds)
        self.wal: WalInserter | None = None
        wal_directory = config.wal_directory()
        if wal_directory is not None:
            self.wal = wal = WalInserter(
                store,
                WriteAheadLog(wal_directory, sync=config.wal_sync),
                interval=config.wal_flush_ms / 1000,
                max_pending_bytes=config.wal_max_bytes,
                on_insert=self._logged_writes_inserted,
            )
            self.metrics.wal_pending_bytes.set_function(lambda: wal.pending_bytes)
        self.v1_flush = None
        if v1_flush.available(store):
            self.v1_flush = v1_flush.V1Flush(
                store, config, self.mapping, self.limits, self.tenants, self.new_series,
                self.wal, self.count_written,
            )  # fmt: skip
        self.committer = self._committer()

    def _committer(self) -> GroupCommitter:
        config, wal = self.config, self.wal
        return GroupCommitter(
            self.store,
            max_buffer_bytes=config.buffer_bytes,
            max_tenant_bytes=config.tenant_buffer_bytes if self.tenants.multi_tenant else 0,
            linger=config.flush_linger_ms / 1000,
            on_flush=self.metrics.observe_flush,
            insert_bodies=self.v1_flush,
            # With the log a flush only decodes and appends, on the CPU under the GIL:
            # one at a time makes each larger (measured: 1.5x the writes with 4 senders).
            concurrency=1 if wal is not None else config.flush_concurrency,
            write_ahead=wal.write if wal is not None else None,
            # In multi-tenant mode no tenant's backlog may fill the log for the others.
            backlog=wal.tenant_backlog if wal is not None else None,
            max_tenant_backlog=(
                config.wal_max_bytes // 4 if wal and self.tenants.multi_tenant else 0
            ),
        )

    async def start(self) -> None:
        """Start the committer (and the log's inserts, after inserting what it held from
        before), and sealing."""
        if self.wal is not None:
            await asyncio.to_thread(self.wal.start)
        await self.committer.start()
        await self.sealer.start()

    async def stop(self) -> None:
        """Commit every acknowledged write, then stop."""
        await self.committer.close()
        if self.wal is not None:  # what the store cannot take now stays in the log
            await asyncio.to_thread(self.wal.close)
        if self.v1_flush is not None:
            self.v1_flush.close()
        await self.sealer.stop()

    def window(self, table: str) -> TimeWindow:
        """The times a write into ``table`` (``requests`` or ``samples``) may carry now."""
        return window_for(table, self.config, self.store.capabilities)

    # -- remote write ----------------------------------------------------------------------

    async def remote_write(self, body: bytes, v2: bool, tenant: str | None) -> RemoteWritten:
        """One remote-write body (snappy, 1.0 or ``v2``), committed when this returns."""
        started = time.perf_counter()
        limit = self.config.max_body_bytes
        if not v2 and self.v1_flush is not None:  # decoded in C with the rest of its flush
            if len(body) <= INLINE_DECOMPRESS_BYTES:
                raw = unsnappy(body, limit)
            else:
                raw = await asyncio.to_thread(unsnappy, body, limit)
            written_at = time.time()
            outcome = await asyncio.shield(self._put_v1(raw, tenant, started))
            return self.v1_written(outcome, tenant, written_at)
        decode = remote_write.decode_v2 if v2 else remote_write.decode_v1
        written_at = time.time()
        tables, (decoded, refused, pivot) = await asyncio.to_thread(
            lambda: self.decode_remote_write(unsnappy(body, limit), decode, tenant)
        )
        self.observe_decode("/api/v1/write", started)
        await self.commit(tables, tenant, body)
        self.count_written(tenant or "", decoded, pivot, written_at)
        return RemoteWritten(decoded, refused)

    def put_v1(self, body: bytes, tenant: str | None) -> tuple[asyncio.Future[Any], float]:
        """A 1.0 body (snappy, at most ``INLINE_DECOMPRESS_BYTES``) handed to the
        committer as :meth:`remote_write` hands it, for a caller that answers from a
        callback: the future's outcome goes to :meth:`v1_written`, with the time it
        was written at (returned too). Raises as :meth:`remote_write` does before its
        flush; needs the C path (:attr:`v1_flush`)."""
        started = time.perf_counter()
        raw = unsnappy(body, self.config.max_body_bytes)
        written_at = time.time()
        return self._put_v1(raw, tenant, started), written_at

    def _put_v1(self, raw: bytes, tenant: str | None, started: float) -> asyncio.Future[Any]:
        self.observe_decode("/api/v1/write", started)
        self.sealer.refuse_while_behind(raw, tenant)
        decode_alone = partial(self.decode_remote_write, raw, remote_write.decode_v1, tenant)
        return self.committer.put_body(Body(raw, tenant or "", decode_alone))

    def v1_written(self, outcome: Any, tenant: str | None, written_at: float) -> RemoteWritten:
        """What a 1.0 body's flush wrote, from its committer's outcome (None: its flush
        wrote it whole and counted it; else it was decoded alone), counted."""
        if outcome is None:
            return RemoteWritten()
        decoded, refused, pivot = outcome
        self.count_written(tenant or "", decoded, pivot, written_at)
        return RemoteWritten(decoded, refused)

    def decode_remote_write(
        self, raw: bytes, decode: Callable[[bytes], DecodedWrite], tenant: str | None
    ) -> tuple[dict[str, pa.Table], tuple[DecodedWrite, Refused, Pivot]]:
        """A decompressed remote-write body through the stages in Python: its store tables
        (per-request samples pivoted into request parts), and the write less what the
        store would not keep, how much that was and why, and the pivot."""
        self.sealer.refuse_while_behind(raw, tenant)
        decoded = decode(raw)
        self.limits.check_series(decoded.series)
        decoded, pivot = split_requests(
            decoded, self.mapping, tenant, self.config.request_samples_as_series
        )
        decoded = self.tenants.series(decoded, tenant)
        if self.new_series is not None:  # per-request samples are no series
            self.new_series.charge(tenant or "", decoded.series)
        decoded, (samples_refused, why) = samples_within(decoded, self.window("samples"))
        pivot, (parts_refused, why_parts) = parts_within(pivot, self.window("requests"))
        refused = (samples_refused + parts_refused, why or why_parts)
        tables = {**_store_tables(decoded), "request_parts": parts_table(pivot)}
        return tables, (decoded, refused, pivot)

    async def commit(self, tables: Mapping[str, pa.Table], tenant: str | None, body: bytes) -> None:
        """Commit a remote write's tables (series and samples: where the store collapses a
        retry's repeats, they need no token)."""
        collapsing = self.store.capabilities.collapsing_engines
        token = dedup_token(tenant, body, collapsing=collapsing)
        await self.committer.submit(tables, dedup_token=token)

    # -- requests --------------------------------------------------------------------------

    async def requests(
        self, body: bytes, encoding: str, decode: Callable[..., pa.Table], tenant: str | None
    ) -> int:
        """A body of per-request events (``decode``: NDJSON or Arrow, ``encoding``
        identity, gzip or zstd), committed; returns how many requests it held."""
        started = time.perf_counter()
        table = await asyncio.to_thread(
            _decode_events,
            body,
            encoding,
            partial(decode, window=self.window("requests")),
            self.config.max_body_bytes,
        )
        self.limits.check_requests(table)
        self.observe_decode("/api/v1/requests", started)
        return await self.commit_requests(table, tenant, body)

    async def commit_requests(self, table: pa.Table, tenant: str | None, body: bytes) -> int:
        """Commit request rows as ``tenant``'s. ``requests`` does not collapse repeats: the
        body's token makes the store drop a retry."""
        table = self.tenants.rows(table, tenant)
        await self.committer.submit({"requests": table}, dedup_token=dedup_token(tenant, body))
        self.metrics.labelled(self.metrics.written, "requests").inc(table.num_rows)
        return table.num_rows

    # -- counting --------------------------------------------------------------------------

    def observe_decode(self, what: str, started: float) -> None:
        seconds = time.perf_counter() - started
        self.metrics.labelled(self.metrics.decode_seconds, what).observe(seconds)

    def count_written(
        self, tenant: str, decoded: DecodedWrite, pivot: Pivot, written_at: float
    ) -> None:
        """Count a committed write; ``written_at`` is no later than its parts' ``received``
        (with the write-ahead log, parts count as received when it inserts them)."""
        written = self.metrics.written
        self.metrics.labelled(written, "samples").inc(decoded.samples_written)
        self.metrics.labelled(written, "histograms").inc(decoded.histograms_written)
        self.metrics.labelled(written, "exemplars").inc(decoded.exemplars_written)
        self.metrics.labelled(written, "series").inc(decoded.series_count)
        if len(pivot.rank) and self.wal is None:
            self.sealer.lag.wrote(written_at, tenant)
        self.metrics.labelled(written, "request_samples").inc(pivot.taken)
        self.metrics.labelled(written, "request_parts").inc(len(pivot.rank))
        self.metrics.request_samples_dropped.inc(pivot.dropped)

    def _logged_writes_inserted(
        self, rows: Mapping[str, int], received: datetime, seconds: float, tenants: frozenset[str]
    ) -> None:
        """The write-ahead log inserted a batch; its request parts wait to be sealed, each
        tenant's counted against that tenant (in multi-tenant mode)."""
        if rows.get("request_parts"):
            for tenant in tenants if self.tenants.multi_tenant else ("",):
                self.sealer.lag.wrote(received.timestamp(), tenant)
        self.metrics.observe_wal_insert(sum(rows.values()), seconds)


def _store_tables(decoded: DecodedWrite) -> dict[str, pa.Table]:
    return {
        "series": decoded.series,
        "metric_metadata": decoded.metadata,
        "samples": decoded.samples,
        "histogram_samples": decoded.histograms,
        "exemplars": decoded.exemplars,
        "sample_starts": decoded.starts,
    }


def _decode_events(
    body: bytes, encoding: str, decode: Callable[[bytes], pa.Table], limit: int
) -> pa.Table:
    try:
        raw = DECOMPRESSORS[encoding](body, limit)
    except IngestError:  # the decompressor's own, a 413 among them
        raise
    except Exception as exc:
        raise IngestError(f"body is not valid {encoding}: {exc}") from None
    return decode(raw)
