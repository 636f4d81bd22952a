"""A request whose measurements arrive in three writes is one request in every query,
and a retried write changes no figure."""

from __future__ import annotations

import asyncio
import shutil
import time

import cramjam
import pyarrow as pa
import pytest

from warehouse.config import Config
from warehouse.ingest.metric_mapping import PARTS_SCHEMA
from warehouse.store.migrations import Migrator, migrations_dir
from warehouse.wire.prometheus import V1, V2

SEALING = Config(seal_after_seconds=1, seal_every_seconds=1)
NOW_MS = (int(time.time()) - 60) * 1000
LABELS = {
    "request_id": "req-42",
    "tenant": "acme",
    "model": "llama-3-70b",
    "region": "hz",
    "zone": "hz-a",
    "service": "chat",
}


def body(*samples: tuple[str, dict, float]) -> bytes:
    request = V1.WriteRequest()
    for i, (name, labels, value) in enumerate(samples):
        series = request.timeseries.add()
        for key, val in sorted({"__name__": name, **labels}.items()):
            series.labels.add(name=key, value=val)
        series.samples.add(value=value, timestamp=NOW_MS + i)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


@pytest.fixture
def sealing_store(store):
    Migrator(store, SEALING).up()
    return store


def sealed_rows(store, client, expected: int, timeout: float = 20) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        if not store.capabilities.scheduled_views:
            client.loop.run_until_complete(client.app.writes.sealer.seal())
        rows = store.query_arrow(
            f"SELECT * FROM {store.database}.requests ORDER BY request_id"
        ).to_pylist()
        if len(rows) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def more_seals(store, client, n: int = 2, timeout: float = 20) -> None:
    """Wait for ``n`` more completed sealing runs (the view's refreshes, or the
    receiver's own runs where the store has no scheduled views)."""
    if not store.capabilities.scheduled_views:
        for _ in range(n):
            client.loop.run_until_complete(client.app.writes.sealer.seal())
        return
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < n + 1:
        assert time.monotonic() < deadline, f"sealing ran {len(seen) - 1} times, not {n}"
        (row,) = store.query_arrow(
            "SELECT toString(last_success_time) AS t, exception FROM system.view_refreshes "
            f"WHERE database = '{store.database}' AND view = 'request_parts_seal'"
        ).to_pylist()
        assert not row["exception"], row["exception"]
        seen.add(row["t"])
        time.sleep(0.2)


def test_three_writes_and_a_retry_make_one_request(sealing_store, client_for):
    client = client_for(sealing_store, seal_after_seconds=1, seal_every_seconds=1)
    first = body(
        ("llm_request_ttft_seconds", LABELS, 0.2), ("llm_request_queue_seconds", LABELS, 0.01)
    )
    second = body(
        ("llm_request_e2e_seconds", LABELS, 4.2), ("llm_request_prompt_tokens", LABELS, 800)
    )
    third = body(
        ("llm_request_output_tokens", LABELS, 201), ("llm_request_cached_tokens", LABELS, 600)
    )
    for payload in (first, second, third, second):  # the last one is a retry
        assert (
            client.post("/api/v1/write", payload, content_type="application/x-protobuf").status
            == 204
        )

    rows = sealed_rows(sealing_store, client, expected=1)
    more_seals(sealing_store, client)  # more sealing runs must not seal it again
    rows = sealed_rows(sealing_store, client, expected=2, timeout=0)
    assert len(rows) == 1
    (row,) = rows
    assert (row["request_id"], row["tenant"], row["model"], row["status"]) == (
        "req-42",
        "acme",
        "llama-3-70b",
        "ok",
    )
    assert (row["ttft_ms"], row["queue_ms"], row["e2e_ms"]) == (200.0, 10.0, 4200.0)
    assert (row["prompt_tokens"], row["output_tokens"], row["cached_prompt_tokens"]) == (
        800,
        201,
        600,
    )
    assert row["tpot_ms"] == pytest.approx((4200 - 200) / 200)  # derived as docs/querying.md says
    if sealing_store.capabilities.materialized_views:
        total = (
            sealing_store.query_arrow(
                f"SELECT sum(requests) AS n FROM {sealing_store.database}.requests_1m"
            )
            .column("n")[0]
            .as_py()
        )
        assert total == 1


FIVE_MEASURES = (
    ("llm_request_ttft_seconds", 0.2),
    ("llm_request_e2e_seconds", 4.2),
    ("llm_request_queue_seconds", 0.01),
    ("llm_request_prompt_tokens", 800),
    ("llm_request_output_tokens", 201),
)


def count(store, table: str) -> int:
    return store.query_arrow(f"SELECT count() AS n FROM {store.database}.{table}")["n"][0].as_py()


@pytest.mark.parametrize("as_series", [False, True], ids=["parts only", "also series"])
def test_a_write_of_requests_lands_one_row_a_request(migrated, client_for, as_series):
    client = client_for(migrated, request_samples_as_series=as_series)
    payload = body(
        *(
            (name, {**LABELS, "request_id": f"req-{i}"}, value)
            for i in range(100)
            for name, value in FIVE_MEASURES
        )
    )
    response = client.post("/api/v1/write", payload, content_type="application/x-protobuf")
    assert response.status == 204
    assert count(migrated, "request_parts") == 100  # not 500
    assert count(migrated, "samples") == (500 if as_series else 0)
    assert count(migrated, "series") == (500 if as_series else 0)
    full = migrated.query_arrow(
        f"SELECT count() AS n FROM {migrated.database}.request_parts WHERE ttft_ms = 200 "
        "AND e2e_ms = 4200 AND queue_ms = 10 AND prompt_tokens = 800 AND output_tokens = 201"
    )
    assert full["n"][0].as_py() == 100


def test_a_2_0_write_of_requests_lands_as_the_1_0_write_does(migrated, client_for):
    """Remote write 2.0 (symbols, decoded in Python) lands one row a request too, and
    says in its header that every sample was written."""
    client = client_for(migrated)
    request = V2.Request(symbols=[""])

    def ref(text: str) -> int:
        if text not in request.symbols:
            request.symbols.append(text)
        return list(request.symbols).index(text)

    for i in range(20):
        for name, value in FIVE_MEASURES:
            labels = sorted({"__name__": name, **LABELS, "request_id": f"v2-{i}"}.items())
            series = request.timeseries.add(labels_refs=[ref(x) for kv in labels for x in kv])
            series.samples.add(value=value, timestamp=NOW_MS)
    payload = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    response = client.post(
        "/api/v1/write",
        payload,
        content_type="application/x-protobuf;proto=io.prometheus.write.v2.Request",
    )
    assert response.status == 204
    assert response.headers["x-prometheus-remote-write-samples-written"] == "100"
    assert (count(migrated, "request_parts"), count(migrated, "series")) == (20, 0)


def test_an_error_part_makes_the_request_an_error(sealing_store, client_for):
    client = client_for(sealing_store, seal_after_seconds=1, seal_every_seconds=1)
    payload = body(
        ("llm_request_queue_seconds", LABELS, 0.5),
        ("llm_request_error", {**LABELS, "error_class": "timeout"}, 1),
    )
    assert (
        client.post("/api/v1/write", payload, content_type="application/x-protobuf").status == 204
    )
    (row,) = sealed_rows(sealing_store, client, expected=1)
    assert (row["status"], row["error_class"], row["queue_ms"], row["ttft_ms"]) == (
        "error",
        "timeout",
        500.0,
        None,
    )


def test_parts_that_contradict_each_other_still_seal_into_a_valid_row(sealing_store, client_for):
    """No sender's data can stop sealing: a row that would fail a constraint of
    `requests` (E2E below TTFT, more cached tokens than prompt tokens) is sealed with
    what cannot be true left out, and attrs that disagree keep the greatest value."""
    client = client_for(sealing_store, seal_after_seconds=1, seal_every_seconds=1)
    writes = [
        body(
            ("llm_request_ttft_seconds", {**LABELS, "gpu": "a100"}, 2.0),
            ("llm_request_cached_tokens", LABELS, 900),
        ),
        body(
            ("llm_request_e2e_seconds", {**LABELS, "gpu": "h100"}, 1.0),
            ("llm_request_output_tokens", LABELS, 10),
            ("llm_request_prompt_tokens", LABELS, 100),
        ),
    ]
    for payload in writes:
        response = client.post("/api/v1/write", payload, content_type="application/x-protobuf")
        assert response.status == 204
    (row,) = sealed_rows(sealing_store, client, expected=1)
    assert (row["ttft_ms"], row["e2e_ms"], row["tpot_ms"]) == (2000.0, 1000.0, None)
    assert (row["prompt_tokens"], row["cached_prompt_tokens"]) == (100, None)
    assert dict(row["attrs"])["gpu"] == "h100"


def parts(*rows: tuple[str, int]) -> pa.Table:
    """Request parts (request_id, received ms) with one TTFT each."""
    n = len(rows)
    columns = {f.name: pa.nulls(n, f.type) for f in PARTS_SCHEMA}
    stamps = pa.array([ms for _, ms in rows], pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    columns.update(
        tenant=pa.array(["acme"] * n),
        request_id=pa.array([rid for rid, _ in rows]),
        first_ts=stamps,
        received=stamps,
        status_rank=pa.array([0] * n, pa.uint8()),
        ttft_ms=pa.array([100.0] * n, pa.float32()),
        attrs=pa.array([[]] * n, PARTS_SCHEMA.field("attrs").type),
    )
    return pa.table(columns, schema=PARTS_SCHEMA)


def test_sealing_takes_up_where_it_left_off(store, client_for):
    """A refresh reads the parts received since the last sealed one (less a margin),
    not every part kept: a part received long before that is not sealed."""
    Migrator(store, SEALING).up()
    now = int(time.time() * 1000)
    store.insert_arrow("request_parts", parts(("first", now - 5_000)))
    client = client_for(store, seal_after_seconds=1, seal_every_seconds=1)
    assert [r["request_id"] for r in sealed_rows(store, client, expected=1)] == ["first"]
    hour = 3_600_000
    store.insert_arrow("request_parts", parts(("long-ago", now - 2 * hour), ("next", now)))
    rows = sealed_rows(store, client, expected=2)
    more_seals(store, client)
    rows = sealed_rows(store, client, expected=3, timeout=0)
    assert [r["request_id"] for r in rows] == ["first", "next"]


def test_requests_sealed_before_sealing_kept_keys_only_are_not_sealed_again(
    store, client_for, tmp_path
):
    """Migration 0017 replaces `sealed_requests` (whole requests) with `sealed_keys`:
    what was sealed before it stays sealed once, a late part of it included, and
    sealing goes on from where it was."""
    if not store.capabilities.scheduled_views:
        pytest.skip("DuckDB keeps no record of what it sealed: its receiver seals by itself")
    root = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), root)
    later = sorted(f for f in (root / "clickhouse").glob("*.sql") if f.name >= "0017")
    held = {f: f.read_text() for f in later}  # 0017 and what came after it
    for f in later:
        f.unlink()
    Migrator(store, SEALING, root=root).up()
    now = int(time.time() * 1000)
    store.insert_arrow("request_parts", parts(("before", now - 5_000)))
    client = client_for(store, seal_after_seconds=1, seal_every_seconds=1)
    assert [r["request_id"] for r in sealed_rows(store, client, expected=1)] == ["before"]

    for f, text in held.items():
        f.write_text(text)
    applied = [m.version for m in Migrator(store, SEALING, root=root).up()]
    assert applied == [int(f.name[:4]) for f in later]
    tables = {
        r["name"]
        for r in store.query_arrow(
            f"SELECT name FROM system.tables WHERE database = '{store.database}'"
        ).to_pylist()
    }
    assert "sealed_keys" in tables and "sealed_requests" not in tables
    now = int(time.time() * 1000)
    store.insert_arrow("request_parts", parts(("before", now), ("after", now)))  # late part
    rows = sealed_rows(store, client, expected=2)
    more_seals(store, client)
    rows = sealed_rows(store, client, expected=3, timeout=0)
    assert [r["request_id"] for r in rows] == ["after", "before"]


def test_after_an_outage_the_parts_written_before_it_are_still_sealed(store, client_for):
    Migrator(store, SEALING).up()
    hour = 3_600_000
    old = int(time.time() * 1000) - 3 * hour  # nothing newer came since
    store.insert_arrow("request_parts", parts(("before-outage", old), ("also", old + 1)))
    client = client_for(store, seal_after_seconds=1, seal_every_seconds=1)
    rows = sealed_rows(store, client, expected=2)
    assert [r["request_id"] for r in rows] == ["also", "before-outage"]


def test_per_request_writes_wait_while_sealing_lags(sealing_store, client_for):
    """While the oldest part written has waited more than seal_after + 1.2 x seal_every
    to be sealed, writes of per-request metrics get 429 with Retry-After and nothing of
    them lands; plain series still land; once sealing catches up, writes are taken
    again and every acknowledged request is sealed, once."""
    store = sealing_store
    client = client_for(store, seal_after_seconds=1, seal_every_seconds=1)  # limit 2.2 s
    sent = iter(range(1_000_000))

    def requests_write() -> tuple[str, int]:
        request_id = f"req-{next(sent)}"
        labels = {**LABELS, "request_id": request_id}
        payload = body(*((name, labels, value) for name, value in FIVE_MEASURES))
        return request_id, client.post(
            "/api/v1/write", payload, content_type="application/x-protobuf"
        ).status

    def run_loop(seconds: float) -> None:  # the receiver's background tasks run meanwhile
        client.loop.run_until_complete(asyncio.sleep(seconds))

    pause_sealing(store, client)
    acknowledged = []
    deadline = time.monotonic() + 30
    while True:
        request_id, status = requests_write()
        if status == 429:
            break
        assert status == 204
        acknowledged.append(request_id)
        assert time.monotonic() < deadline, "per-request writes were never refused"
        run_loop(0.2)
    assert len(acknowledged) >= 2  # refused only once the first part had waited 2.2 s
    parts_before = count(store, "request_parts")
    refused = client.post(
        "/api/v1/write",
        body(*((n, LABELS, v) for n, v in FIVE_MEASURES)),
        content_type="application/x-protobuf",
    )
    assert refused.status == 429 and refused.headers["retry-after"] == "1"
    assert "sealing" in refused.text
    assert count(store, "request_parts") == parts_before  # nothing of a refused write
    plain = body(("node_load1", {"instance": "gpu-node-1"}, 1.5))
    assert client.post("/api/v1/write", plain, content_type="application/x-protobuf").status == 204
    lag = client.get("/metrics").text
    assert "llmwh_receiver_sealing_lag_seconds" in lag

    resume_sealing(store, client)
    deadline = time.monotonic() + 30
    while True:
        request_id, status = requests_write()
        if status == 204:
            acknowledged.append(request_id)
            break
        assert status == 429
        assert time.monotonic() < deadline, "per-request writes were refused after sealing resumed"
        run_loop(0.3)
    rows = sealed_rows(store, client, expected=len(acknowledged))
    assert sorted(r["request_id"] for r in rows) == sorted(acknowledged)


def test_per_request_writes_wait_while_a_sealing_refresh_runs_long(sealing_store, client_for):
    """A refresh of the sealing view that has run more than a fifth of its period (at
    least 1 s) while parts wait gets the cores to itself: writes of per-request metrics get
    429 naming the refresh, plain series still land, and once refreshes are quick again
    per-request writes are taken again."""
    store = sealing_store
    if not store.capabilities.scheduled_views:
        pytest.skip("DuckDB has no sealing view to watch: its receiver seals by itself")
    # The receiver's lag limit (10 + 1.2 s) stays far off: only the refresh can refuse.
    client = client_for(store, seal_after_seconds=10, seal_every_seconds=1)
    db = store.database
    (view,) = store.query_arrow(
        f"SELECT as_select FROM system.tables WHERE database = '{db}' "
        "AND name = 'request_parts_seal'"
    ).to_pylist()
    quick = view["as_select"]
    through = f"(SELECT max(last_received) FROM {db}.sealed_keys)"
    slow = quick.replace(
        through,
        f"(SELECT max(last_received) FROM {db}.sealed_keys "
        "WHERE (SELECT sleep(3) + sleep(3)) = 0)",  # each refresh runs 6 s
    )
    assert slow != quick
    store.command(f"ALTER TABLE {db}.request_parts_seal MODIFY QUERY {slow}")
    sent = iter(range(1_000_000))

    def requests_write() -> int:
        labels = {**LABELS, "request_id": f"req-{next(sent)}"}
        payload = body(*((name, labels, value) for name, value in FIVE_MEASURES))
        return client.post("/api/v1/write", payload, content_type="application/x-protobuf")

    try:
        deadline = time.monotonic() + 30
        while (refused := requests_write()).status != 429:
            assert refused.status == 204
            assert time.monotonic() < deadline, "per-request writes were never refused"
            client.loop.run_until_complete(asyncio.sleep(0.2))
        assert refused.headers["retry-after"] == "1"
        assert "the sealing refresh has run" in refused.text
        plain = body(("node_load1", {"instance": "gpu-node-1"}, 1.5))
        assert (
            client.post("/api/v1/write", plain, content_type="application/x-protobuf").status == 204
        )
    finally:
        store.command(f"ALTER TABLE {db}.request_parts_seal MODIFY QUERY {quick}")
    deadline = time.monotonic() + 30
    while (status := requests_write().status) != 204:
        assert status == 429
        assert time.monotonic() < deadline, (
            "per-request writes were refused after refreshes sped up"
        )
        client.loop.run_until_complete(asyncio.sleep(0.3))


def pause_sealing(store, client) -> None:
    """Sealing stops as if it were very slow: the view's refreshes, or the receiver's runs."""
    if store.capabilities.scheduled_views:
        store.command(f"SYSTEM STOP VIEW {store.database}.request_parts_seal")
    else:
        client.app.writes.sealer.seal = _no_seal


def resume_sealing(store, client) -> None:
    if store.capabilities.scheduled_views:
        store.command(f"SYSTEM START VIEW {store.database}.request_parts_seal")
    else:
        del client.app.writes.sealer.seal


async def _no_seal() -> None:
    return None
