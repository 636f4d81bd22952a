"""Group commit: shared flushes, acknowledgement after commit, a byte bound, failures."""

import asyncio
import threading
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from polling import poll_until_async

from warehouse.errors import BufferFull, IngestError, NotRunning, StoreError, StoreUnavailable
from warehouse.ingest.batcher import Body, GroupCommitter
from warehouse.store import open_store
from warehouse.store.migrations import Migrator


@pytest.fixture
def store():
    opened = open_store("duckdb://")
    Migrator(opened).up()
    yield opened
    opened.close()


class FlakyStore:
    """A real store whose inserts can be held back or made to fail, to watch the committer."""

    def __init__(self, store):
        self.store = store
        self.inserts = 0
        self.fail_next = False
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = 0
        """Inserts held back at the gate right now."""

    def insert_arrow(self, table, data, settings=None):
        self.waiting += 1
        self.gate.wait(10)
        self.waiting -= 1
        self.inserts += 1
        if self.fail_next:
            self.fail_next = False
            raise StoreError("disk full (simulated)")
        self.store.insert_arrow(table, data, settings)


def metadata_rows(name: str, n: int = 1) -> pa.Table:
    return pa.table(
        {
            "metric_family_name": [f"{name}_{i}" for i in range(n)],
            "type": ["gauge"] * n,
            "unit": [""] * n,
            "help": ["h"] * n,
            "updated_at": pa.array([datetime.now(UTC)] * n, pa.timestamp("ms", tz="UTC")),
        }
    )


def count(store) -> int:
    return store.query_arrow("SELECT count(*) AS n FROM metric_metadata").column("n")[0].as_py()


async def run(committer, *coroutines):
    await committer.start()
    try:
        return await asyncio.gather(*coroutines, return_exceptions=True)
    finally:
        await committer.close()


def test_concurrent_writes_share_flushes_and_are_committed_once(store):
    flaky = FlakyStore(store)
    flushes = []
    committer = GroupCommitter(flaky, linger=0.02, on_flush=flushes.append)
    results = asyncio.run(
        run(
            committer,
            *(committer.submit({"metric_metadata": metadata_rows(f"m{i}")}) for i in range(50)),
        )
    )
    assert results == [None] * 50
    assert count(store) == 50
    assert len(flushes) < 10  # 50 writes, a handful of inserts
    assert sum(f.writes for f in flushes) == 50


def test_a_write_returns_only_after_its_rows_are_in_the_store(store):
    committer = GroupCommitter(store, linger=0)

    async def write_then_look():
        await committer.submit({"metric_metadata": metadata_rows("x", 3)})
        return count(store)

    assert asyncio.run(run(committer, write_then_look())) == [3]


def test_a_full_buffer_refuses_with_buffer_full(store):
    flaky = FlakyStore(store)
    flaky.gate.clear()  # the first flush hangs in the store
    rows = metadata_rows("big", 100)
    committer = GroupCommitter(flaky, linger=0, max_buffer_bytes=int(rows.nbytes * 1.5))

    async def scenario():
        first = asyncio.create_task(committer.submit({"metric_metadata": rows}))
        await poll_until_async(lambda: flaky.waiting, "the first flush to hang in the store")
        with pytest.raises(BufferFull, match="retry"):
            await committer.submit({"metric_metadata": rows})
        flaky.gate.set()
        await first

    asyncio.run(run(committer, scenario()))
    assert count(store) == 100


def test_a_failed_flush_fails_every_write_in_it_and_the_next_one_succeeds(store):
    flaky = FlakyStore(store)
    flaky.fail_next = True
    committer = GroupCommitter(flaky, linger=0.05)

    async def scenario():
        first = await asyncio.gather(
            *(committer.submit({"metric_metadata": metadata_rows(f"a{i}")}) for i in range(5)),
            return_exceptions=True,
        )
        await committer.submit({"metric_metadata": metadata_rows("after")})
        return first

    [first] = asyncio.run(run(committer, scenario()))
    assert all(isinstance(r, StoreError) for r in first)
    assert count(store) == 1


def test_closing_flushes_what_is_waiting(store):
    committer = GroupCommitter(store, linger=0.5)

    async def scenario():
        await committer.start()
        task = asyncio.create_task(committer.submit({"metric_metadata": metadata_rows("w", 4)}))
        await poll_until_async(lambda: committer.buffer.buffered_bytes, "the write to be waiting")
        await committer.close()
        await task

    asyncio.run(scenario())
    assert count(store) == 4


class BodySink:
    """Stands in for a flush-wide decoder: records each call's bodies by group, leaves
    out the bodies it is told to, or refuses the whole call."""

    def __init__(self, refuse_with: Exception | None = None, leave_out: bytes = b"-"):
        self.inserts: list[dict[str, list[bytes]]] = []
        self.refuse_with = refuse_with
        self.leave_out = leave_out

    def __call__(self, groups):
        if self.refuse_with is not None:
            raise self.refuse_with
        self.inserts.append(
            {
                g: [b for b in bodies if not b.startswith(self.leave_out)]
                for g, bodies in groups.items()
            }
        )
        return {
            g: [i for i, b in enumerate(bodies) if b.startswith(self.leave_out)]
            for g, bodies in groups.items()
        }


def decodes_to(name: str, *, refused: bool = False):
    def decode():
        if refused:
            raise IngestError(f"{name}: no __name__ label")
        return {"metric_metadata": metadata_rows(name)}, f"decoded {name}"

    return decode


def test_every_group_of_a_flush_shares_one_insert(store):
    sink = BodySink()
    committer = GroupCommitter(store, linger=0.05, insert_bodies=sink)
    bodies = [
        Body(f"b{i}".encode(), "tenant-a" if i < 3 else "tenant-b", decodes_to(f"b{i}"))
        for i in range(5)
    ]
    results = asyncio.run(run(committer, *(committer.submit_body(b) for b in bodies)))
    assert results == [None] * 5  # decoded by the store: nothing to report
    assert sink.inserts == [{"tenant-a": [b"b0", b"b1", b"b2"], "tenant-b": [b"b3", b"b4"]}]
    assert count(store) == 0  # nothing went the Arrow way


def test_a_refused_group_is_decoded_body_by_body_and_only_the_bad_one_fails(store):
    sink = BodySink(refuse_with=StoreError("a series of this flush needs the Python decoder"))
    committer = GroupCommitter(store, linger=0.05, insert_bodies=sink)
    bodies = [
        Body(b"good-1", "", decodes_to("good_1")),
        Body(b"bad", "", decodes_to("bad", refused=True)),
        Body(b"good-2", "", decodes_to("good_2")),
    ]
    results = asyncio.run(run(committer, *(committer.submit_body(b) for b in bodies)))
    assert results[0] == "decoded good_1" and results[2] == "decoded good_2"
    assert isinstance(results[1], IngestError)
    assert count(store) == 2


def test_bodies_left_out_of_a_group_insert_are_decoded_alone(store):
    sink = BodySink()
    committer = GroupCommitter(store, linger=0.05, insert_bodies=sink)
    bodies = [
        Body(b"fast-1", "", decodes_to("fast_1")),
        Body(b"-histograms", "", decodes_to("slow")),
        Body(b"-corrupt", "", decodes_to("corrupt", refused=True)),
        Body(b"fast-2", "", decodes_to("fast_2")),
    ]
    results = asyncio.run(run(committer, *(committer.submit_body(b) for b in bodies)))
    assert results[0] is None and results[3] is None
    assert results[1] == "decoded slow"
    assert isinstance(results[2], IngestError)
    assert sink.inserts == [{"": [b"fast-1", b"fast-2"]}]
    assert count(store) == 1  # only the left-out body that decoded went the Arrow way


def test_an_unreachable_store_fails_the_group_without_decoding_it(store):
    sink = BodySink(refuse_with=StoreUnavailable("connection refused"))
    committer = GroupCommitter(store, linger=0.05, insert_bodies=sink)
    body = Body(b"x", "", decodes_to("never"))
    [result] = asyncio.run(run(committer, committer.submit_body(body)))
    assert isinstance(result, StoreUnavailable)
    assert count(store) == 0


def test_no_linger_once_every_write_held_is_waiting(store):
    """Four senders with one write in flight each: their flush does not wait the linger."""
    flushes = []
    committer = GroupCommitter(store, linger=5.0, on_flush=flushes.append)

    async def write(k: int):
        with committer.hold(100):
            await committer.submit({"metric_metadata": metadata_rows(f"s{k}")})

    async def scenario():
        await committer.start()
        started = asyncio.get_running_loop().time()
        await asyncio.gather(*(write(k) for k in range(4)))
        waited = asyncio.get_running_loop().time() - started
        await committer.close()
        return waited

    waited = asyncio.run(scenario())
    assert waited < 2.5  # far below the 5 s linger
    assert count(store) == 4 and sum(f.writes for f in flushes) == 4


def test_a_write_still_being_decoded_is_waited_for(store):
    """A held write not yet submitted keeps the flush open (up to the linger): both
    writes share one flush."""
    flushes = []
    committer = GroupCommitter(store, linger=5.0, on_flush=flushes.append)

    async def scenario():
        await committer.start()
        decoded = asyncio.Event()

        async def slow():
            with committer.hold(100):
                await decoded.wait()  # still being decoded
                await committer.submit({"metric_metadata": metadata_rows("slow")})

        async def fast():
            with committer.hold(100):
                await committer.submit({"metric_metadata": metadata_rows("fast")})

        slow_task = asyncio.create_task(slow())
        await poll_until_async(lambda: committer.buffer.held_writes, "slow() to hold its write")
        fast_task = asyncio.create_task(fast())
        await poll_until_async(
            lambda: committer.buffer.buffered_bytes, "fast() to submit its write"
        )
        # Nothing to wait for: a committer that did not wait for the held write would
        # flush fast()'s write alone meanwhile (the linger is 5 s).
        await asyncio.sleep(0.2)
        assert flushes == []
        decoded.set()
        await asyncio.gather(slow_task, fast_task)
        await committer.close()

    asyncio.run(scenario())
    assert [f.writes for f in flushes] == [2]


def test_a_write_to_a_committer_that_is_not_running_is_a_503_to_retry(store):
    committer = GroupCommitter(store, linger=0.0)

    async def write_after_close():
        await committer.start()
        await committer.close()
        await committer.submit({"metric_metadata": metadata_rows("late")})

    with pytest.raises(NotRunning, match="not taking writes") as refused:
        asyncio.run(write_after_close())
    assert refused.value.http_status == 503
    assert count(store) == 0
