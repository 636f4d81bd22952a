"""Group commit: concurrent writes share flushes, and each waits until its rows are committed.

A write hands over its Arrow tables (keyed by store table name) and awaits. One
flusher task takes everything that is waiting, concatenates it per table and inserts
each table once, so ClickHouse gets a few large inserts instead of many small ones;
then it wakes every writer of that flush with the outcome.

A write can instead hand over a :class:`Body`: bytes decoded and inserted a whole
flush at a time. The bodies of a flush go to ``insert_bodies`` in one call, by group
(a group is decoded alike: a tenant's), which writes them all in one insert per table
and returns, per group, the indices of those it left out. Each body left out, or each
body of a call that raised for something in the data, is decoded on its own
(``Body.decode``) and goes the way of Arrow tables, so one bad body gets its own error
and costs the others nothing. A write is acknowledged
only after all of its rows are in the store, or, with a write-ahead log
(``write_ahead``), in the log on disk (see :mod:`warehouse.ingest.wal_inserter`).
The buffer (waiting plus in flight) has byte bounds, in all and per tenant
(:mod:`warehouse.ingest.buffer`): past them, a write is refused with
:class:`~warehouse.errors.BufferFull` (HTTP 429) rather than queued without limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa

from warehouse.errors import BufferFull, InvalidArgument, NotRunning, StoreUnavailable
from warehouse.ingest.buffer import Held, WriteBuffer
from warehouse.ingest.wal import Entry
from warehouse.store.base import Store

log = logging.getLogger("llmwh.receiver")

__all__ = [
    "INSERT_ORDER",
    "Body",
    "FlushStats",
    "GroupCommitter",
    "dedup_token",
    "insert_in_order",
    "merge_tables",
]

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
_FIRST = frozenset(("series", "metric_metadata"))
"""What :func:`insert_in_order` commits before the rest, which may go side by side."""


def dedup_token(tenant: str | None, body: bytes, *, collapsing: bool = False) -> str | None:
    """The deduplication token of a write: the same body from the same tenant, the same
    token, so that the store drops a retry (after a 5xx or a lost answer). None where
    the write's rows go to tables that collapse a retry's repeats anyway
    (``collapsing``: remote-write tables on ClickHouse), which then stay merged."""
    if collapsing:
        return None
    return hashlib.sha256(f"{tenant or ''}\0".encode() + body).hexdigest()


def insert_in_order(
    store: Store,
    ordered: Iterable[tuple[str, pa.Table]],
    side_by_side: Callable[[list[Callable[[], None]]], None] | None = None,
) -> None:
    """Insert ``ordered`` (from :func:`merge_tables`): series and metadata first, one after
    another, so that no sample lands before its series; then the rest, side by side
    when ``side_by_side`` runs a list of calls at once (ClickHouse takes each insert on
    a core), else one after another."""
    rest: list[Callable[[], None]] = []
    for name, table in ordered:
        if name in _FIRST:
            store.insert_arrow(name, table)
        else:
            rest.append(partial(store.insert_arrow, name, table))
    if side_by_side is not None and len(rest) > 1:
        side_by_side(rest)
    else:
        for insert in rest:
            insert()


@dataclass(frozen=True)
class Body:
    """A write decoded a flush at a time (see the module docstring)."""

    data: bytes
    group: str
    """Bodies of one group (a tenant's) are decoded alike:
    ``insert_bodies({group: [data, ...], ...})``."""
    decode: Callable[[], tuple[Mapping[str, pa.Table], Any]]
    """Decodes this body alone: its tables, and what ``submit_body`` then returns.
    Raises :class:`~warehouse.errors.IngestError` for a body that is refused."""


@dataclass
class _Pending:
    tables: Mapping[str, pa.Table]
    nbytes: int
    done: asyncio.Future[Any] = field(repr=False)
    dedup_token: str | None = None
    body: Body | None = None
    result: Any = None
    tenant: str = ""


InsertBodies = Callable[[Mapping[str, list[bytes]]], Mapping[str, Collection[int]]]
"""Writes a flush's bodies by group; returns per group the indices of those left out."""
WriteAhead = Callable[[list[Entry], Mapping[str, int]], None]
"""Appends a flush's tables to the write-ahead log, with the bytes of each tenant's writes."""


@dataclass(frozen=True)
class FlushStats:
    """What one flush wrote, for the receiver's own metrics."""

    writes: int
    rows: int
    """Rows inserted as Arrow tables (not those of bodies the store decoded itself)."""
    nbytes: int
    seconds: float
    failed: bool


class GroupCommitter:
    """Batches concurrent writes into shared inserts on ``store``.

    ``linger`` is how long the flusher waits at most for more writes once one arrives (a
    few milliseconds buy much larger inserts under load). It waits only while a write
    it holds (:meth:`hold`) is still being read or decoded: when every write held is
    already waiting or being written, more waiting would only add latency (four
    senders, each with one write in flight, would each wait the whole linger). Without
    :meth:`hold` it cannot tell, and waits the linger. ``max_flush_bytes`` caps one
    flush and ``concurrency`` is how many flushes may run at once. ``on_flush`` is
    called after every flush; ``insert_bodies`` writes the data of a flush's
    :class:`Body` writes, by group, and returns, per group, the indices of those it left
    to ``Body.decode``.
    """

    def __init__(
        self,
        store: Store,
        *,
        max_buffer_bytes: int = 256 << 20,
        max_tenant_bytes: int = 0,
        max_flush_bytes: int = 64 << 20,
        linger: float = 0.02,
        on_flush: Callable[[FlushStats], None] | None = None,
        insert_bodies: InsertBodies | None = None,
        concurrency: int = 2,
        write_ahead: WriteAhead | None = None,
        backlog: Callable[[str], int] | None = None,
        max_tenant_backlog: int = 0,
    ):
        self.store = store
        self.write_ahead = write_ahead
        """Where a flush's tables go instead of the store (the write-ahead log), if set,
        with the bytes of each tenant's writes among them."""
        self.buffer = WriteBuffer(max_buffer_bytes, max_tenant_bytes, backlog, max_tenant_backlog)
        self.concurrency = concurrency
        self.insert_bodies = insert_bodies
        self.max_flush_bytes = max_flush_bytes
        self.linger = linger
        self.on_flush = on_flush
        self._flushing_writes = 0
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
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
        await self._enqueue(tables, sum(t.nbytes for t in tables.values()), dedup_token, None)

    async def submit_body(self, body: Body) -> Any:
        """Write a body; returns once it is committed.

        Returns None when ``insert_bodies`` wrote it, else the second item of what
        ``body.decode()`` returned. Raises as :meth:`submit` does, and the body's
        :class:`~warehouse.errors.IngestError` when it was decoded alone and refused.
        """
        return await asyncio.shield(self.put_body(body))

    def put_body(self, body: Body) -> asyncio.Future[Any]:
        """:meth:`submit_body` without waiting, for a caller that answers from a callback:
        the future gets what it would return or raise (:class:`BufferFull` and
        :class:`NotRunning` are raised here, at once)."""
        if self.insert_bodies is None:
            raise InvalidArgument("this group committer takes no bodies (no insert_bodies)")
        return self._put({}, len(body.data), None, body)

    def hold(self, nbytes: int, tenant: str = "", write: bool | None = None) -> Held:
        """Hold ``tenant``'s write against the buffer's bounds while it is read, decoded
        and committed (:meth:`WriteBuffer.hold`); a flush lingers only while writes held
        are not yet submitted."""
        return self.buffer.hold(nbytes, tenant, write)

    async def _enqueue(
        self,
        tables: Mapping[str, pa.Table],
        nbytes: int,
        dedup_token: str | None,
        body: Body | None,
    ) -> Any:
        return await asyncio.shield(self._put(tables, nbytes, dedup_token, body))

    def _put(
        self,
        tables: Mapping[str, pa.Table],
        nbytes: int,
        dedup_token: str | None,
        body: Body | None,
    ) -> asyncio.Future[Any]:
        if self._task is None or self._closing:
            raise NotRunning("the receiver is not taking writes: its committer is not running")
        tenant = self.buffer.queue(nbytes, body=body is not None)
        done = asyncio.get_running_loop().create_future()
        pending = _Pending(tables, nbytes, done, dedup_token, body, tenant=tenant)
        self._queue.append(pending)
        self._wakeup.set()
        self.buffer.arrived.set()
        return done

    async def _run(self) -> None:
        # Up to `concurrency` flushes run at once: ClickHouse runs one insert on about
        # one core, and writes that arrive meanwhile make the next flush larger.
        slots = asyncio.Semaphore(self.concurrency)
        flushing: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None]) -> None:
            flushing.discard(task)
            slots.release()

        while True:
            await self._wakeup.wait()
            await self._linger()
            self._wakeup.clear()
            while self._queue:
                await slots.acquire()
                batch = self._take_batch()
                self._flushing_writes += len(batch)
                task = asyncio.create_task(self._flush(batch))
                flushing.add(task)
                task.add_done_callback(finished)
            if self._closing:
                await asyncio.gather(*flushing)
                if not self._queue:
                    return

    async def _linger(self) -> None:
        """Wait up to ``linger`` for the writes held but not yet submitted."""
        if not self.linger or self._closing:
            return
        buffer = self.buffer
        if not buffer.held_writes:  # no way to tell whether more are coming
            await asyncio.sleep(self.linger)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.linger
        while buffer.held_writes > len(self._queue) + self._flushing_writes and not self._closing:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            buffer.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(buffer.arrived.wait(), remaining)

    def _take_batch(self) -> list[_Pending]:
        """Writes from the head of the queue, within ``max_flush_bytes``."""
        batch: list[_Pending] = []
        size = 0
        while self._queue and (not batch or size + self._queue[0].nbytes <= self.max_flush_bytes):
            pending = self._queue.pop(0)
            batch.append(pending)
            size += pending.nbytes
        return batch

    async def _flush(self, batch: list[_Pending]) -> None:
        started = time.perf_counter()
        nbytes = sum(p.nbytes for p in batch)
        errors: dict[int, BaseException] = {}
        rows = 0
        try:
            bodies = [(p, p.body) for p in batch if p.body is not None]
            await _flush_bodies(self.insert_bodies, bodies, errors)
            tables = [p for p in batch if p.tables and id(p) not in errors]
            rows = await _flush_tables(self.store, self.write_ahead, tables, errors)
        except Exception as exc:  # a fault of ours, not the data's: every writer hears it
            log.exception("a flush failed")
            for pending in batch:
                errors.setdefault(id(pending), exc)
        finally:
            self.buffer.flushed(nbytes)
            self._flushing_writes -= len(batch)
        for pending in batch:
            if pending.done.done():
                continue
            if id(pending) in errors:
                pending.done.set_exception(errors[id(pending)])
            else:
                pending.done.set_result(pending.result)
        if self.on_flush is not None:
            with contextlib.suppress(Exception):
                self.on_flush(
                    FlushStats(
                        writes=len(batch),
                        rows=rows,
                        nbytes=nbytes,
                        seconds=time.perf_counter() - started,
                        failed=bool(errors),
                    )
                )


async def _flush_bodies(
    insert_bodies: InsertBodies | None,
    batch: list[tuple[_Pending, Body]],
    errors: dict[int, BaseException],
) -> None:
    """Insert the bodies (each write with its body), every group in one call; those
    left out become tables."""
    if not batch:
        return
    assert insert_bodies is not None  # submit_body takes no body without it
    groups: dict[str, list[tuple[_Pending, Body]]] = {}
    for pending, body in batch:
        groups.setdefault(body.group, []).append((pending, body))
    try:
        left: Mapping[str, Collection[int]] = await asyncio.to_thread(
            insert_bodies, {g: [body.data for _, body in ms] for g, ms in groups.items()}
        )
    except (StoreUnavailable, BufferFull) as exc:  # nothing to do with the data
        errors.update((id(p), exc) for p, _ in batch)
        return
    except Exception:  # something in the data: each body on its own
        left = {group: range(len(members)) for group, members in groups.items()}
    for group, members in groups.items():
        for pending, body in (members[i] for i in left.get(group, ())):
            try:
                pending.tables, pending.result = await asyncio.to_thread(body.decode)
            except Exception as exc:
                errors[id(pending)] = exc


async def _flush_tables(
    store: Store,
    write_ahead: WriteAhead | None,
    batch: list[_Pending],
    errors: dict[int, BaseException],
) -> int:
    """Insert the tables of ``batch``; on failure every write of it gets the error."""
    if not batch:  # a flush of bodies alone (their flush wrote them): no trip to a thread
        return 0
    merged = _merge([p for p in batch if p.dedup_token is None])
    own = [
        (name, table, p.dedup_token)
        for p in batch
        if p.dedup_token is not None
        for name, table in _merge([p])
    ]
    try:
        if write_ahead is not None:
            entries = [Entry(name, table) for name, table in merged]
            entries += [Entry(name, table, token) for name, table, token in own]
            tenants: dict[str, int] = {}
            for pending in batch:
                tenants[pending.tenant] = tenants.get(pending.tenant, 0) + pending.nbytes
            await asyncio.to_thread(write_ahead, entries, tenants)
            return sum(t.num_rows for _, t in merged) + sum(t.num_rows for _, t, _ in own)
        await asyncio.to_thread(insert_in_order, store, merged)
        for name, table, token in own:
            await asyncio.to_thread(store.insert_arrow, name, table, None, f"{token}:{name}")
    except Exception as exc:  # the writers get it; the flusher carries on
        errors.update((id(p), exc) for p in batch)
    return sum(t.num_rows for _, t in merged) + sum(t.num_rows for _, t, _ in own)


def _merge(batch: list[_Pending]) -> list[tuple[str, pa.Table]]:
    return merge_tables(p.tables for p in batch)


def merge_tables(writes: Iterable[Mapping[str, pa.Table]]) -> list[tuple[str, pa.Table]]:
    """The tables of several writes, one per store table name, in INSERT_ORDER."""
    by_name: dict[str, list[pa.Table]] = {}
    for tables in writes:
        for name, table in tables.items():
            if table.num_rows:
                by_name.setdefault(name, []).append(table)
    unknown = by_name.keys() - set(INSERT_ORDER)
    ordered = [n for n in INSERT_ORDER if n in by_name] + sorted(unknown)
    return [(name, pa.concat_tables(by_name[name])) for name in ordered]
