"""With a write-ahead log (``wal_dir``), a 2xx means "on the receiver's disk": every
acknowledged write reaches the store once, through store outages, failed inserts and
receivers that die before inserting what they acknowledged."""

from __future__ import annotations

import asyncio
import os

import pytest
from asgi import Client
from polling import poll_until
from test_receiver import NOW_MS, V1_TYPE, count, samples_in, snappy, v1_body

from warehouse.config import Config
from warehouse.errors import ConfigError, StoreUnavailable
from warehouse.ingest.events import encode_ndjson
from warehouse.ingest.wal import check_unlocked
from warehouse.serve import build_app
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests
from warehouse.wire.prometheus import V1

NDJSON = "application/x-ndjson"


class Outage:
    """A real store whose inserts can be made to fail: before the insert (``down``), or
    after it committed (``lose_acks``: the connection drops before the answer)."""

    def __init__(self, store):
        self.store = store
        self.down = False
        self.lose_acks = 0
        self.inserts = 0

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_arrow(self, table, data, settings=None, dedup_token=None):
        if self.down:
            raise StoreUnavailable("connection refused (simulated outage)")
        self.store.insert_arrow(table, data, settings, dedup_token)
        self.inserts += 1
        if self.lose_acks:
            self.lose_acks -= 1
            raise StoreUnavailable("connection reset after commit (simulated)")


def receiver(store, wal_dir, **options) -> Client:
    return Client(build_app(store, Config(wal_dir=str(wal_dir), wal_flush_ms=50, **options)))


def crash(client: Client) -> None:
    """End a receiver as a crash would, as far as its log goes: what it has not inserted
    stays in the log, nothing is drained."""
    client.loop.run_until_complete(client.app.writes.committer.close())
    client.app.writes.wal.close(timeout=0)
    tasks = asyncio.all_tasks(client.loop)  # the sealing watch, which a crash ends too
    for task in tasks:
        task.cancel()
    client.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    client.loop.close()


def request_parts_body(request_id: str) -> bytes:
    """One request as per-request metric samples (one request part)."""
    request = V1.WriteRequest()
    for name, value in (("llm_request_ttft_seconds", 0.2), ("llm_request_e2e_seconds", 1.5)):
        series = request.timeseries.add()
        labels = {"__name__": name, "request_id": request_id, "tenant": "acme", "model": "m"}
        for key, val in sorted(labels.items()):
            series.labels.add(name=key, value=val)
        series.samples.add(value=value, timestamp=NOW_MS)
    return snappy(request.SerializeToString())


def events(n: int, seed: int) -> bytes:
    return encode_ndjson(synthetic_requests(n, seed=seed))


def rows_everywhere(store) -> tuple[int, int, int]:
    """Requests in `requests` and as counted by both rollups."""
    db = store.database
    return (
        count(store, f"SELECT count(*) FROM {db}.requests"),
        count(store, f"SELECT sum(requests) FROM {db}.requests_1m"),
        count(store, f"SELECT sum(requests) FROM {db}.requests_1h"),
    )


def test_acknowledged_writes_reach_the_store_shortly_after(migrated, tmp_path):
    client = receiver(migrated, tmp_path / "wal")
    try:
        assert client.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 204
        assert client.post("/api/v1/requests", events(150, 1), content_type=NDJSON).status == 200
        poll_until(lambda: samples_in(migrated), "the samples", until=lambda n: n == 12)
        poll_until(lambda: rows_everywhere(migrated), "the requests in the store",
                   until=lambda rows: rows == (150, 150, 150))  # fmt: skip
        metrics = client.get("/metrics").text
        assert "llmwh_receiver_wal_inserted_rows_total" in metrics
    finally:
        client.close()
    assert not list((tmp_path / "wal").glob("*.wal"))[:-1]  # applied segments are dropped


def test_writes_acknowledged_during_a_store_outage_land_once_it_ends(migrated, tmp_path):
    store = Outage(migrated)
    store.down = True
    client = receiver(store, tmp_path / "wal")
    try:
        for seed in range(3):
            response = client.post("/api/v1/requests", events(100, seed), content_type=NDJSON)
            assert response.status == 200
        assert client.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 204
        assert rows_everywhere(migrated)[0] == 0
        poll_until(lambda: client.app.writes.wal.last_error, "the failed insert to be reported")
        store.down = False
        poll_until(lambda: rows_everywhere(migrated), "the requests after the outage",
                   until=lambda rows: rows == (300, 300, 300), timeout=60)  # fmt: skip
        poll_until(lambda: samples_in(migrated), "the samples", until=lambda n: n == 12)
    finally:
        client.close()


def test_an_insert_whose_answer_was_lost_is_retried_without_counting_twice(migrated, tmp_path):
    store = Outage(migrated)
    store.lose_acks = 2
    client = receiver(store, tmp_path / "wal")
    try:
        assert client.post("/api/v1/requests", events(200, 5), content_type=NDJSON).status == 200
        assert client.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 204
        assert client.app.writes.wal.wait_inserted(60)
    finally:
        client.close()
    assert store.inserts > 2  # the lost answers were retried
    final = " FINAL" if migrated.capabilities.collapsing_engines else ""
    assert rows_everywhere(migrated) == (200, 200, 200)
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.samples{final}") == 12


def test_request_parts_of_a_retried_batch_land_once(migrated, tmp_path):
    """The log stamps parts as received when it inserts them, so a retry's rows differ
    from the first try's: the batch's token, not the rows, makes the retry a no-op."""
    store = Outage(migrated)
    store.lose_acks = 3
    client = receiver(store, tmp_path / "wal")
    try:
        for i in range(2):
            body = request_parts_body(f"req-{i}")
            assert client.post("/api/v1/write", body, content_type=V1_TYPE).status == 204
        assert client.app.writes.wal.wait_inserted(60)
    finally:
        client.close()
    assert store.inserts > 3
    db = migrated.database
    assert count(migrated, f"SELECT count(*) FROM {db}.request_parts") == 2


def test_requests_sent_as_metrics_are_sealed_and_stop_counting_as_waiting(store, tmp_path):
    Migrator(store, Config(seal_after_seconds=1, seal_every_seconds=1)).up()
    client = receiver(store, tmp_path / "wal", seal_after_seconds=1, seal_every_seconds=1)
    try:
        for i in range(3):
            body = request_parts_body(f"req-{i}")
            assert client.post("/api/v1/write", body, content_type=V1_TYPE).status == 204
        db = store.database

        def sealed_and_seen() -> tuple[int, bool]:
            # The receiver's loop runs only inside calls here: let it seal (DuckDB) or
            # follow the store's sealing (ClickHouse) for a moment.
            if store.capabilities.scheduled_views:
                client.loop.run_until_complete(asyncio.sleep(0.6))
            else:
                client.loop.run_until_complete(client.app.writes.sealer.seal())
            sealed = count(store, f"SELECT count(*) FROM {db}.requests")
            return sealed, client.app.writes.sealer.lag.waiting

        # Sealed, and the receiver sees sealing reach the parts it wrote: no lag left.
        poll_until(sealed_and_seen, "the requests sealed and the lag cleared",
                   until=lambda seen: seen == (3, False))  # fmt: skip
        assert "llmwh_receiver_sealing_lag_seconds 0.0" in client.get("/metrics").text
    finally:
        client.close()


@pytest.mark.parametrize("inserted_before_crash", [False, True], ids=["not-inserted", "inserted"])
def test_a_receiver_that_dies_leaves_its_writes_to_the_next_one(
    migrated, tmp_path, inserted_before_crash
):
    store = Outage(migrated)
    if inserted_before_crash:
        store.lose_acks = 10**6  # committed, but the receiver never learns it
    else:
        store.down = True
    first = receiver(store, tmp_path / "wal")
    bodies = [events(120, seed) for seed in range(4)]
    for body in bodies:
        assert first.post("/api/v1/requests", body, content_type=NDJSON).status == 200
    poll_until(lambda: first.app.writes.wal.last_error, "an insert to have failed")
    crash(first)
    landed = rows_everywhere(migrated)[0]  # the first batch, inserted again and again
    assert 0 < landed < 480 if inserted_before_crash else landed == 0

    # The next receiver inserts them (replays its log) before it takes a write.
    second = receiver(migrated, tmp_path / "wal")
    try:
        assert (second.app.writes.wal.replayed, second.app.writes.wal.pending_bytes) == (4, 0)
        assert rows_everywhere(migrated) == (480, 480, 480)
    finally:
        second.close()


def test_a_replay_the_store_refuses_is_retried_while_the_receiver_takes_writes(migrated, tmp_path):
    store = Outage(migrated)
    store.down = True
    first = receiver(store, tmp_path / "wal")
    assert first.post("/api/v1/requests", events(100, 1), content_type=NDJSON).status == 200
    crash(first)
    second = receiver(store, tmp_path / "wal")  # starts although the store is still down
    try:
        assert second.app.writes.wal.replayed == 0 and second.app.writes.wal.pending_bytes > 0
        assert second.post("/api/v1/requests", events(50, 2), content_type=NDJSON).status == 200
        store.down = False
        assert second.app.writes.wal.wait_inserted(60)
        assert rows_everywhere(migrated) == (150, 150, 150)
    finally:
        second.close()


def test_a_second_receiver_on_the_log_is_refused_naming_the_first(migrated, tmp_path):
    first = receiver(migrated, tmp_path / "wal")
    try:
        with pytest.raises(ConfigError, match=rf"process {os.getpid()} keeps its write-ahead"):
            check_unlocked(tmp_path / "wal")
    finally:
        first.close()
    check_unlocked(tmp_path / "wal")  # closed, the log is free again


def test_a_log_over_its_bound_refuses_writes_with_429_until_the_store_takes_it(migrated, tmp_path):
    store = Outage(migrated)
    store.down = True
    client = receiver(store, tmp_path / "wal", wal_max_bytes=1)
    try:
        assert client.post("/api/v1/requests", events(50, 1), content_type=NDJSON).status == 200
        poll_until(lambda: client.app.writes.wal.last_error, "the failed insert to be reported")
        refused = client.post("/api/v1/requests", events(50, 2), content_type=NDJSON)
        assert refused.status == 429
        assert refused.headers["retry-after"] == "5"
        assert "wal_max_bytes" in refused.text and "simulated outage" in refused.text
        store.down = False
        assert client.app.writes.wal.wait_inserted(60)
        assert client.post("/api/v1/requests", events(50, 2), content_type=NDJSON).status == 200
        assert client.app.writes.wal.wait_inserted(60)
    finally:
        client.close()
    assert rows_everywhere(migrated) == (100, 100, 100)


def test_one_tenants_backlog_in_the_log_throttles_that_tenant_only(migrated, tmp_path):
    """While the store is down, the log keeps what it acknowledged; a tenant whose
    writes waiting there pass a quarter of wal_max_bytes gets 429, the others write on."""
    store = Outage(migrated)
    store.down = True
    body = events(50, 1)
    client = receiver(store, tmp_path / "wal", tenant_header="X-Scope-OrgID",
                      wal_max_bytes=40 * len(body))  # fmt: skip
    try:
        taken = 0
        while True:
            status = client.post("/api/v1/requests", events(50, taken), content_type=NDJSON,
                                 x_scope_orgid="acme").status  # fmt: skip
            if status == 429:
                break
            assert status == 200 and taken < 100, status
            taken += 1
        refused = client.post("/api/v1/requests", body, content_type=NDJSON, x_scope_orgid="acme")
        assert refused.status == 429 and "tenant 'acme' has" in refused.text
        assert refused.headers["retry-after"] == "5"
        other = client.post("/api/v1/requests", body, content_type=NDJSON, x_scope_orgid="bravo")
        assert other.status == 200, other.text
        store.down = False
        assert client.app.writes.wal.wait_inserted(60)
        assert client.app.writes.wal.tenant_bytes == {}
        again = client.post("/api/v1/requests", events(50, 1000), content_type=NDJSON,
                            x_scope_orgid="acme")  # fmt: skip
        assert again.status == 200
        assert client.app.writes.wal.wait_inserted(60)
    finally:
        client.close()
    assert rows_everywhere(migrated)[0] == 50 * (taken + 2)


def test_with_the_log_one_tenants_sealing_lag_throttles_that_tenant_only(store, tmp_path):
    """The log inserts every tenant's parts together; each tenant's still count as its
    own, so while acme's wait to be sealed past the limit, acme's per-request writes get
    429 and bravo's are taken."""
    Migrator(store, Config(seal_after_seconds=1, seal_every_seconds=1)).up()
    client = receiver(store, tmp_path / "wal", seal_after_seconds=1, seal_every_seconds=1,
                      tenant_header="X-Scope-OrgID")  # fmt: skip
    if store.capabilities.scheduled_views:
        store.command(f"SYSTEM STOP VIEW {store.database}.request_parts_seal")
    else:
        client.app.writes.sealer.seal = _no_seal
    try:
        sent = iter(range(10**6))

        def write(tenant: str) -> int:
            body = request_parts_body(f"{tenant}-{next(sent)}")
            return client.post("/api/v1/write", body, content_type=V1_TYPE,
                               x_scope_orgid=tenant).status  # fmt: skip

        def acme_refused() -> bool:
            client.loop.run_until_complete(asyncio.sleep(0.2))  # its sealing watch runs
            status = write("acme")
            assert status in (204, 429)
            return status == 429

        poll_until(acme_refused, "acme's per-request writes refused for its sealing lag")
        assert write("bravo") == 204
        assert write("acme") == 429
    finally:
        client.close()


async def _no_seal() -> None:
    return None


def test_without_sync_writes_are_acknowledged_unsynced_and_outlive_the_receiver(
    migrated, tmp_path, monkeypatch
):
    """wal_sync = false: the promise Prometheus and VictoriaMetrics make. What the first
    receiver acknowledged is in its log file, unsynced, and the next one inserts it."""

    def no_sync(fd):
        raise AssertionError("wal_sync = false must not sync each append")

    monkeypatch.setattr("warehouse.ingest.wal.os.fdatasync", no_sync)
    store = Outage(migrated)
    store.down = True
    first = receiver(store, tmp_path / "wal", wal_sync=False)
    for seed in range(3):
        assert first.post("/api/v1/requests", events(40, seed), content_type=NDJSON).status == 200
    assert first.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 204
    crash(first)
    monkeypatch.undo()
    second = receiver(migrated, tmp_path / "wal")
    try:
        assert second.app.writes.wal.replayed == 4
        assert rows_everywhere(migrated) == (120, 120, 120)
        assert samples_in(migrated) == 12
    finally:
        second.close()
