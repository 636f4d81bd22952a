"""Group commit: concurrent writes share flushes, and each waits until its rows are committed.

A write hands over its Arrow tables (keyed by store table name) and awaits. One
flusher task takes everything that is waiting, concatenates it per table and inserts
each table once, so ClickHouse gets a few large inserts instead of many small ones;
then it wakes every writer of that flush with the outcome. A write is acknowledged
only after all of its rows are in the store. The buffer (waiting plus in flight) has
a byte bound: past it, a write is refused with :class:`~warehouse.errors.BufferFull`
(HTTP 429) rather than queued without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from warehouse.errors import BufferFull
from warehouse.store.base import Store

__all__ = ["INSERT_ORDER", "FlushStats", "GroupCommitter"]

INSERT_ORDER = (
    "series",
    "metric_metadata",
    "samples",
    "sample_starts",
    "histogram_samples",
    "exemplars",
    "request_parts",
    "requests",
)
"""Tables are written in this order within a flush: a series before its samples."""


@dataclass
class _Pending:
    tables: Mapping[str, pa.Table]
    nbytes: int
    done: asyncio.Future = field(repr=False)
    dedup_token: str | None = None


@dataclass(frozen=True)
class FlushStats:
    """What one flush wrote, for the receiver's own metrics."""

    writes: int
    rows: int
    nbytes: int
    seconds: float
    failed: bool


class GroupCommitter:
    """Batches concurrent writes into shared inserts on ``store``.

    ``linger`` is how long the flusher waits for more writes once one arrives (a few
    milliseconds buy much larger inserts under load); ``max_flush_bytes`` caps one
    flush. ``on_flush`` is called after every flush.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_buffer_bytes: int = 256 << 20,
        max_flush_bytes: int = 64 << 20,
        linger: float = 0.02,
        on_flush: Callable[[FlushStats], None] | None = None,
    ):
        self.store = store
        self.max_buffer_bytes = max_buffer_bytes
        self.max_flush_bytes = max_flush_bytes
        self.linger = linger
        self.on_flush = on_flush
        self.buffered_bytes = 0
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="llmwh-group-commit")

    async def close(self) -> None:
        """Flush what is waiting, then stop."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task

    async def submit(self, tables: Mapping[str, pa.Table], dedup_token: str | None = None) -> None:
        """Write ``tables`` (store table name -> rows); returns once they are committed.

        A write with a ``dedup_token`` is inserted as blocks of its own carrying that
        token, so that the same write retried is dropped by the store; writes without
        one share merged inserts (their tables' engines collapse retried rows).

        Raises :class:`BufferFull` when the buffer is at its bound, and the store's
        error when the flush that carried these rows failed (nothing of it is
        acknowledged).
        """
        tables = {name: t for name, t in tables.items() if t.num_rows}
        if not tables:
            return
        if self._task is None or self._closing:
            raise RuntimeError("the group committer is not running")
        nbytes = sum(t.nbytes for t in tables.values())
        if self.buffered_bytes + nbytes > self.max_buffer_bytes and self.buffered_bytes:
            raise BufferFull(
                f"the ingest buffer holds {self.buffered_bytes:,} of {self.max_buffer_bytes:,} "
                "bytes; retry after a moment"
            )
        pending = _Pending(tables, nbytes, asyncio.get_running_loop().create_future(), dedup_token)
        self.buffered_bytes += nbytes
        self._queue.append(pending)
        self._wakeup.set()
        await asyncio.shield(pending.done)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            if self.linger and not self._closing:
                await asyncio.sleep(self.linger)
            self._wakeup.clear()
            while self._queue:
                batch = self._take_batch()
                await self._flush(batch)
            if self._closing:
                return

    def _take_batch(self) -> list[_Pending]:
        batch, size = [], 0
        while self._queue and (not batch or size + self._queue[0].nbytes <= self.max_flush_bytes):
            pending = self._queue.pop(0)
            batch.append(pending)
            size += pending.nbytes
        return batch

    async def _flush(self, batch: list[_Pending]) -> None:
        started = time.perf_counter()
        nbytes = sum(p.nbytes for p in batch)
        merged = _merge([p for p in batch if p.dedup_token is None])
        own = [
            (name, table, f"{p.dedup_token}:{name}")
            for p in batch
            if p.dedup_token is not None
            for name, table in _merge([p])
        ]
        error: BaseException | None = None
        try:
            for name, table in merged:
                await asyncio.to_thread(self.store.insert_arrow, name, table)
            for name, table, token in own:
                await asyncio.to_thread(self.store.insert_arrow, name, table, None, token)
        except Exception as exc:  # the writers get it; the flusher carries on
            error = exc
        finally:
            self.buffered_bytes -= nbytes
        for pending in batch:
            if pending.done.done():
                continue
            if error is None:
                pending.done.set_result(None)
            else:
                pending.done.set_exception(error)
        if self.on_flush is not None:
            with contextlib.suppress(Exception):
                self.on_flush(
                    FlushStats(
                        writes=len(batch),
                        rows=sum(t.num_rows for _, t in merged)
                        + sum(t.num_rows for _, t, _ in own),
                        nbytes=nbytes,
                        seconds=time.perf_counter() - started,
                        failed=error is not None,
                    )
                )


def _merge(batch: list[_Pending]) -> list[tuple[str, pa.Table]]:
    """One table per store table name, in INSERT_ORDER."""
    names = {name for pending in batch for name in pending.tables}
    unknown = names - set(INSERT_ORDER)
    ordered = [n for n in INSERT_ORDER if n in names] + sorted(unknown)
    return [
        (name, pa.concat_tables([p.tables[name] for p in batch if name in p.tables]))
        for name in ordered
    ]
