"""The log's group commit: frames are written in order and synced while the next flush
decodes; a write is acknowledged only after a sync that began after its frame was
written, and a failed sync fails every write it would have acknowledged."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import Future

import pyarrow as pa
import pytest
from polling import poll_until, poll_until_async

from warehouse.errors import StoreUnavailable
from warehouse.ingest.batcher import Body, GroupCommitter, Written
from warehouse.ingest.wal import Entry, WriteAheadLog
from warehouse.ingest.wal_inserter import WalInserter


class NoStore:
    """Takes the log's inserts and keeps nothing."""

    def insert_arrow(self, table, data, settings=None, dedup_token=None):
        pass


def entries(k: int) -> list[Entry]:
    return [Entry("samples", pa.table({"series_id": pa.array([k], pa.uint64())}))]


class Recorded(WriteAheadLog):
    """A log that records, in order, each frame written and each sync begun and ended;
    a sync can be held at a gate, or made to fail."""

    def __init__(self, directory):
        super().__init__(directory)
        self.events: list[tuple[str, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()
        """Set while a sync waits at the gate."""
        self.fail_sync = False

    def write(self, entries, payload):
        frame = super().write(entries, payload)
        self.events.append(("write", frame.seq))
        return frame

    def sync(self):
        self.events.append(("sync", len(self.events)))
        fail = self.fail_sync  # as it was when this sync began
        if not self.gate.is_set():
            self.held.set()
            assert self.gate.wait(30)
            self.held.clear()
        if fail:
            real = os.fdatasync

            def failing(fd):
                raise OSError(5, "Input/output error")

            os.fdatasync = failing
            try:
                super().sync()
            finally:
                os.fdatasync = real
        else:
            super().sync()
        self.events.append(("synced", len(self.events)))


def acked(log: Recorded, done: Future, name: str) -> None:
    done.add_done_callback(
        lambda f: log.events.append(("ack", name) if not f.exception() else ("failed", name))
    )


@pytest.fixture
def inserter(tmp_path):
    log = Recorded(tmp_path)
    wal = WalInserter(NoStore(), log, interval=3600)
    wal.start()
    yield wal, log
    log.gate.set()
    wal.close(timeout=0)


def test_each_write_is_acknowledged_after_a_sync_that_began_after_its_frame(inserter):
    wal, log = inserter
    log.gate.clear()
    first = wal.append(entries(1))
    acked(log, first, "a")
    poll_until(log.held.is_set, "the first frame's sync to begin")
    later = [wal.append(entries(k)) for k in (2, 3)]
    for name, done in zip("bc", later, strict=True):
        acked(log, done, name)
    # The sync under way began before b and c were written: it acknowledges a alone.
    assert not any(f.done() for f in [first, *later])
    log.gate.set()
    for done in [first, *later]:
        done.result(30)
    assert log.events == [
        ("write", 1), ("sync", 1), ("synced", 2), ("ack", "a"),
        ("write", 2), ("write", 3), ("sync", 6), ("synced", 7), ("ack", "b"), ("ack", "c"),
    ]  # fmt: skip
    assert [f.seq for f in wal._pending] == [1, 2, 3]


def test_a_failed_sync_fails_every_write_it_would_have_acknowledged_and_stops_the_log(inserter):
    wal, log = inserter
    log.gate.clear()
    first = wal.append(entries(1))
    poll_until(log.held.is_set, "the first frame's sync to begin")
    later = [wal.append(entries(k)) for k in (2, 3)]
    log.fail_sync = True  # the next sync: the one for b and c
    log.gate.set()
    assert first.result(30) is None
    for done in later:
        with pytest.raises(StoreUnavailable, match=r"sync failed: .*Input/output error"):
            done.result(30)
    with pytest.raises(StoreUnavailable, match="the write-ahead log is stopped"):
        wal.write(entries(4))
    # Only what was synced goes on to the store; b and c were never acknowledged.
    assert [f.seq for f in wal._pending] == [1]


def test_frames_are_logged_in_the_order_of_their_appends(tmp_path):
    wal = WalInserter(NoStore(), WriteAheadLog(tmp_path), interval=3600)
    wal.start()
    order: list[int] = []
    lock = threading.Lock()

    def sender(k: int) -> None:
        for i in range(25):
            with lock:  # the order of the calls, as the committer makes them
                done = wal.append(entries(k * 100 + i))
                order.append(k * 100 + i)
            done.result(30)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    wal.close(timeout=0)
    frames = WriteAheadLog(tmp_path).open()
    assert [f.seq for f in frames] == list(range(1, 101))
    assert [f.entries[0].rows.column("series_id")[0].as_py() for f in frames] == order


def test_the_next_flush_decodes_while_the_last_ones_frame_is_synced():
    """The committer lets flush 2 start once flush 1 has appended, answers flush 1's
    writers only when its sync is done, and a failed sync fails only its writers."""
    syncs: list[Future] = []
    calls: list[list[bytes]] = []

    def insert_bodies(groups):
        calls.append(groups[""])
        syncs.append(Future())
        return Written({"": []}, syncs[-1])

    committer = GroupCommitter(NoStore(), linger=0, insert_bodies=insert_bodies, concurrency=1)

    def body(name: bytes) -> Body:
        return Body(name, "", lambda: pytest.fail("no body is left out"))

    async def scenario():
        await committer.start()
        one = committer.put_body(body(b"one"))
        await poll_until_async(lambda: len(calls) == 1, "flush 1 to append")
        two = committer.put_body(body(b"two"))
        await poll_until_async(lambda: len(calls) == 2, "flush 2 to start before 1 is synced")
        assert not one.done() and not two.done()
        syncs[1].set_result(None)  # a later sync covers both frames: each is answered
        syncs[0].set_exception(StoreUnavailable("sync failed"))
        with pytest.raises(StoreUnavailable):
            await one
        assert await two is None
        await committer.close()

    asyncio.run(scenario())
    assert calls == [[b"one"], [b"two"]]
