"""Writes acknowledged once in the write-ahead log, inserted into the store in large batches.

With ``wal_dir`` set, the receiver's flushes go to :meth:`WalInserter.write` instead of
the store: the write is appended to the log (:mod:`warehouse.ingest.wal`) and synced,
and the sender gets its 2xx. A thread of its own takes every frame waiting, every
``interval`` seconds, and inserts them as one insert per table, so the store makes a
part a table per interval rather than one per flush (each part is a dozen files; see
docs/remote-write.md). An insert that fails is retried, the same frames with the same
deduplication tokens, until it succeeds: what was acknowledged is never dropped.

The price is freshness: rows are queryable up to ``interval`` (plus an insert) after
their acknowledgement rather than at it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import BufferFull
from warehouse.ingest.batcher import merge_tables
from warehouse.ingest.wal import Entry, Frame, WriteAheadLog
from warehouse.store.base import Store

__all__ = ["WalInserter"]

log = logging.getLogger("llmwh.wal")

_RETRY_SECONDS = (0.2, 0.5, 1, 2, 5)
_JOIN_SECONDS = 5


class WalInserter:
    """Appends writes to ``wal`` and inserts them into ``store`` from a thread of its own."""

    def __init__(
        self,
        store: Store,
        wal: WriteAheadLog,
        *,
        interval: float = 0.5,
        max_pending_bytes: int = 1 << 30,
        max_batch_bytes: int = 256 << 20,
        on_insert: Callable[[Mapping[str, int], datetime, float, frozenset[str]], None]
        | None = None,
    ):
        self.store = store
        self.wal = wal
        self.interval = interval
        self.max_pending_bytes = max_pending_bytes
        self.max_batch_bytes = max_batch_bytes
        self.on_insert = on_insert
        """Called after each batch with its rows per table, the time its request parts
        count as received, the seconds it took, and the tenants of its request parts."""
        self.pending_bytes = 0
        self.tenant_bytes: dict[str, int] = {}
        """Of ``pending_bytes``, each tenant's, as the writes that appended them said
        (frames taken back from before a restart are no one's)."""
        self._frame_tenants: dict[int, dict[str, int]] = {}
        self.last_error: str | None = None
        self._pending: list[Frame] = []
        self._replayed_batch: tuple[int, int] | None = None
        self._failed_batch: list[Frame] | None = None
        """A batch whose insert failed: retried as it is, so its tokens stay the same."""
        self._changed = threading.Condition()
        self._closing = False
        self._failures = 0
        """Inserts that failed so far."""
        self._thread: threading.Thread | None = None
        self.replayed = 0
        """Writes acknowledged before this start that :meth:`start` inserted."""

    def start(self) -> int:
        """Open the log, take back the frames not yet in the store, and insert them (the
        writes a crash or a store outage left there: *replay*) before returning; then
        insert from a thread of its own. Returns how many writes were replayed.

        If the store refuses the replay, the log is not held up by it: what is left is
        retried by the thread, as any insert is, while new writes are appended.
        """
        frames = self.wal.open()
        self._pending = frames
        self.pending_bytes = sum(f.nbytes for f in frames)
        self._replayed_batch = self.wal.checkpoint.batch
        kept = len(frames)  # the queue is this list: inserting empties it
        while self._pending and self._attempt(self._failed_batch or self._take()):
            pass
        self.replayed = replayed = kept - len(self._pending)
        if kept:
            log.info(
                "write-ahead log %s: inserted %d writes acknowledged before this start%s",
                self.wal.directory,
                replayed,
                f"; {len(self._pending)} wait for the store" if self._pending else "",
            )
        self._thread = threading.Thread(target=self._run, name="llmwh-wal", daemon=True)
        self._thread.start()
        return replayed

    def write(self, entries: list[Entry], tenants: Mapping[str, int] | None = None) -> None:
        """Append a write to the log; once this returns it may be acknowledged.

        ``tenants`` weighs whose rows the write holds (tenant -> bytes), to share its
        frame's bytes among them in :attr:`tenant_bytes`. Raises :class:`BufferFull`
        while the writes not yet in the store pass ``max_pending_bytes`` (the store is
        down or slower than the senders).
        """
        entries = [e for e in entries if e.rows.num_rows]
        if not entries:
            return
        if self.pending_bytes > self.max_pending_bytes:
            reason = f" (the store: {self.last_error})" if self.last_error else ""
            raise BufferFull(
                f"the write-ahead log holds {self.pending_bytes:,} bytes not yet in the store, "
                f"over wal_max_bytes ({self.max_pending_bytes:,}){reason}; retry later",
                retry_after=5,
            )
        with self._changed:  # frames join the queue in the order of their numbers
            frame = self.wal.append(entries)
            self._pending.append(frame)
            self.pending_bytes += frame.nbytes
            if tenants:
                self._frame_tenants[frame.seq] = shares = _shares(frame.nbytes, tenants)
                for tenant, nbytes in shares.items():
                    self.tenant_bytes[tenant] = self.tenant_bytes.get(tenant, 0) + nbytes
            if self.pending_bytes >= self.max_batch_bytes:
                self._changed.notify_all()

    def tenant_backlog(self, tenant: str) -> int:
        """Bytes of ``tenant``'s writes in the log not yet in the store."""
        return self.tenant_bytes.get(tenant, 0)

    def wait_inserted(self, timeout: float) -> bool:
        """Wait until every write appended so far is in the store; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._changed.notify_all()
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def close(self, timeout: float = 30) -> None:
        """Insert what is waiting (for up to ``timeout`` seconds, and no longer once an
        insert fails), then stop. What was not inserted stays in the log for the next
        start."""
        deadline = time.monotonic() + timeout
        with self._changed:
            failures = self._failures
            self._changed.notify_all()
            while self._pending and self._failures == failures:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._thread is not None:
            # The thread ends at its next turn, or once the insert it runs returns.
            self._thread.join(max(deadline - time.monotonic(), _JOIN_SECONDS))
            if self._thread.is_alive():  # an insert hangs in the store: it ends with us
                log.warning("write-ahead log: an insert still runs; its writes stay in the log")
                return
        self.wal.close()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._changed:
                if not self._closing and self.pending_bytes < self.max_batch_bytes:
                    self._changed.wait(self.interval)
                if self._closing:
                    return
                batch = self._failed_batch or self._take()
            if not batch:
                continue
            if self._attempt(batch):
                failures = 0
                continue
            failures += 1  # retried: the frames stay first in line
            with self._changed:
                if not self._closing:  # close() may have come between the two locks
                    self._changed.wait(_RETRY_SECONDS[min(failures, len(_RETRY_SECONDS)) - 1])

    def _attempt(self, batch: list[Frame]) -> bool:
        """Insert ``batch`` and drop it from the queue; False when the insert failed (the
        batch is then kept to be retried as it is)."""
        try:
            self._insert(batch)
        except Exception as exc:
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("write-ahead log: insert of %d writes failed: %s", len(batch), exc)
            self._failed_batch = batch
            with self._changed:
                self._failures += 1
                self._changed.notify_all()
            return False
        self.last_error, self._failed_batch = None, None
        with self._changed:
            del self._pending[: len(batch)]
            self.pending_bytes -= sum(f.nbytes for f in batch)
            for frame in batch:
                for tenant, nbytes in self._frame_tenants.pop(frame.seq, {}).items():
                    left = self.tenant_bytes[tenant] - nbytes
                    if left > 0:
                        self.tenant_bytes[tenant] = left
                    else:
                        del self.tenant_bytes[tenant]
            self._changed.notify_all()
        return True

    def _take(self) -> list[Frame]:
        """The next batch: the one a crash interrupted, else frames within max_batch_bytes."""
        if self._replayed_batch is not None:
            last = self._replayed_batch[1]
            batch = [f for f in self._pending if f.seq <= last]
            if batch:
                return batch
            self._replayed_batch = None  # nothing of it left to insert
        batch, size = [], 0
        for frame in self._pending:
            if batch and size + frame.nbytes > self.max_batch_bytes:
                break
            batch.append(frame)
            size += frame.nbytes
        return batch

    def _insert(self, batch: list[Frame]) -> None:
        first, last = batch[0].seq, batch[-1].seq
        if self.wal.checkpoint.batch != (first, last):
            self.wal.begin(first, last)
        started = time.perf_counter()
        now = datetime.now(UTC)  # to the millisecond, as `received` is stored and read back
        received = now.replace(microsecond=now.microsecond // 1000 * 1000)
        rows: dict[str, int] = {}
        tenants: set[str] = set()
        for table, data, token in _batch_inserts(batch, f"wal:{self.wal.id}:{first}-{last}"):
            if table == "request_parts":
                data = _received_at(data, received)
                tenants.update(pc.unique(data.column("tenant")).to_pylist())
            self.store.insert_arrow(table, data, dedup_token=token)
            rows[table] = rows.get(table, 0) + data.num_rows
        self.wal.applied(last)
        self._replayed_batch = None
        if self.on_insert is not None:
            self.on_insert(rows, received, time.perf_counter() - started, frozenset(tenants))


def _shares(nbytes: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``nbytes`` shared in proportion to ``weights`` (each share at least 1 byte)."""
    total = sum(weights.values()) or 1
    return {tenant: max(1, nbytes * weight // total) for tenant, weight in weights.items()}


def _batch_inserts(batch: list[Frame], token: str) -> list[tuple[str, pa.Table, str]]:
    """One insert per table of the entries without a token, in INSERT_ORDER, then one per
    entry with a token of its own (a write the sender may retry: the store drops it twice)."""
    shared = merge_tables(
        {e.table: e.rows} for frame in batch for e in frame.entries if e.token is None
    )
    own = [
        (e.table, e.rows, f"{e.token}:{e.table}")
        for frame in batch
        for e in frame.entries
        if e.token is not None
    ]
    return [(name, rows, f"{token}:{name}") for name, rows in shared] + own


def _received_at(parts: pa.Table, at: datetime) -> pa.Table:
    """Request parts count as received when they reach the store: sealing finds parts by
    when they landed, and a part held back by a store outage must not land behind it.
    (A retried batch is stamped anew; its token keeps the store from taking it twice.)"""
    index = parts.schema.get_field_index("received")
    column = pa.repeat(pa.scalar(at, parts.schema.field(index).type), parts.num_rows)
    return parts.set_column(index, parts.schema.field(index), column)
