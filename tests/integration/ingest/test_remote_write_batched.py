"""Remote write 1.0 decoded a flush at a time in C lands exactly what the Python decoder lands.

A receiver takes the bodies concurrently, so that they share a flush, which the C
decoder reads in one call (``remote_write.decode_v1_batch``); the reference decoder
(``remote_write`` in Python + ``metric_mapping.request_parts``) lands the same bodies one
by one into another database of the same server. Every row must agree, floats bit
for bit; bodies the C decoder leaves out get the Python decoder's answer, alone.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import cramjam
import pytest
from polling import well_inside_a_minute

from warehouse.config import Config
from warehouse.errors import StoreUnavailable
from warehouse.ingest import remote_write
from warehouse.ingest.app import Receiver
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.remote_write import _decode_v1_python
from warehouse.ingest.remote_write_tables import with_tenant
from warehouse.ingest.request_pivot import parts_table, split_requests
from warehouse.serve import build_app
from warehouse.store import open_store
from warehouse.store.migrations import Migrator
from warehouse.wire.prometheus import V1

pytestmark = pytest.mark.skipif(
    not remote_write.FAST_V1, reason="the C decoder was not built (no C compiler at install time)"
)

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0]
T0 = (int(time.time()) - 3600) * 1000
MAPPING = load_mapping(None)


def series(labels: list[tuple[str, str]], samples: list[tuple[float, int]]) -> V1.TimeSeries:
    return V1.TimeSeries(
        labels=[V1.Label(name=k, value=v) for k, v in labels],
        samples=[V1.Sample(value=v, timestamp=t) for v, t in samples],
    )


def body(*timeseries: V1.TimeSeries) -> bytes:
    return V1.WriteRequest(timeseries=list(timeseries)).SerializeToString()


# Labels out of order, empty values (dropped), non-ASCII text, zero values and
# timestamps (left off the wire), special floats, a series repeated across bodies, and
# per-request metrics in parts, with an error and a start time.
BODIES = [
    body(
        series(
            [("job", "api"), ("__name__", "up"), ("instance", "a:1"), ("empty", "")],
            [(1.0, T0), (0.0, T0 + 1000), (STALE, T0 + 2000)],
        ),
        series(
            [("__name__", "temp_celsius"), ("zone", "é:1"), ("ünïcode", "値")],
            [(NAN_PAYLOAD, T0), (float("inf"), T0 + 1), (float("-inf"), T0 + 2), (-0.0, T0 + 3)],
        ),
        series([("__name__", "zero_time_and_value")], [(0.0, T0 - 5)]),
    ),
    body(
        series([("__name__", "up"), ("instance", "a:1"), ("job", "api")], [(1.0, T0 + 3000)]),
        *(
            series(
                [
                    ("__name__", name),
                    ("request_id", "r-1"),
                    ("model", "llama-3-70b"),
                    ("region", "eu-west-1"),
                    ("tenant", "acme"),
                    ("gpu", "h100"),
                    *extra,
                ],
                [(value, T0 + 100)],
            )
            for name, value, extra in (
                ("llm_request_ttft_seconds", 0.25, []),
                ("llm_request_output_tokens", 120.0, []),
                ("llm_request_start_time_seconds", T0 / 1000 - 1.5, []),
                ("llm_request_error", 1.0, [("error_class", "overloaded")]),
            )
        ),
    ),
    body(
        series(
            [("__name__", "vllm:time_to_first_token_seconds_sum"), ("request_id", "r-2")],
            [(0.031, T0 + 200)],
        ),
        series([("__name__", "llm_request_ttft_seconds"), ("model", "m")], [(0.5, T0)]),
    ),
]


@pytest.fixture
def databases(embedded_server):
    """Two migrated databases on the session's server: batched, and Python-decoded."""
    stores = []
    for _ in range(2):
        store = open_store(embedded_server.store_url(f"batched_{uuid.uuid4().hex[:10]}"))
        Migrator(store).up()
        stores.append(store)
    yield stores
    for store in stores:
        store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
        store.close()


def post_together(receiver: Receiver, bodies: list[bytes], tenant: str | None = None):
    """POST every body at once (they share a flush); the (status, text) of each."""

    async def post(raw: bytes) -> tuple[int, bytes]:
        sent = []
        messages = [
            {"type": "http.request", "body": cramjam.snappy.compress_raw(raw), "more_body": False}
        ]

        async def receive():
            return messages.pop(0)

        async def send(message):
            sent.append(message)

        headers = [(b"content-type", b"application/x-protobuf"), (b"content-encoding", b"snappy")]
        if tenant:
            headers.append((b"x-scope-orgid", tenant.encode()))
        scope = {"type": "http", "method": "POST", "path": "/api/v1/write", "headers": headers}
        await receiver(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    async def scenario():
        await receiver.start()
        try:
            return await asyncio.gather(*(post(b) for b in bodies))
        finally:
            await receiver.stop()

    return asyncio.run(scenario())


def land_python(
    store, bodies: list[bytes], tenant: str | None = None, keep_series: bool = False
) -> None:
    for raw in bodies:
        decoded, pivot = split_requests(_decode_v1_python(raw), MAPPING, tenant, keep_series)
        if tenant:  # a tenant's series are its own (`__tenant__`), in C as in Python
            decoded = with_tenant(decoded, tenant)
        for name, table in (
            ("series", decoded.series),
            ("samples", decoded.samples),
            ("request_parts", parts_table(pivot)),
        ):
            if table.num_rows:
                store.insert_arrow(name, table)


def rows(store, sql: str) -> list[dict]:
    return store.query_arrow(sql.format(db=store.database)).to_pylist()


def count(store, table: str) -> int:
    return rows(store, f"SELECT count() AS n FROM {{db}}.{table} FINAL")[0]["n"]


SAMPLES = """SELECT toString(id) AS id, toUnixTimestamp64Milli(timestamp) AS t,
    reinterpretAsUInt64(value) AS bits FROM {db}.samples FINAL ORDER BY id, t"""
SERIES = """SELECT toString(id) AS id, metric_name, toString(labels) AS labels,
    toUnixTimestamp64Milli(min_time) AS lo, toUnixTimestamp64Milli(max_time) AS hi
    FROM {db}.series FINAL ORDER BY id"""
PARTS = """SELECT * EXCEPT (received), toString(attrs) AS attrs
    FROM {db}.request_parts FINAL ORDER BY request_id, tenant"""


@pytest.fixture
def batches(monkeypatch) -> list[tuple[int, list[int]]]:
    """Each ``decode_v1_batch`` call the receiver makes: (bodies, indices left out)."""
    calls = []
    decode = remote_write.decode_v1_batch

    def spy(bodies, *args):
        decoded, pivot, left_out = decode(bodies, *args)
        calls.append((len(bodies), left_out))
        return decoded, pivot, left_out

    monkeypatch.setattr(remote_write, "decode_v1_batch", spy)
    return calls


@pytest.mark.parametrize("keep_series", [False, True], ids=["parts only", "parts and series"])
@pytest.mark.parametrize("tenant", [None, "from-header"])
def test_a_shared_flush_lands_the_rows_of_the_python_decoder(
    databases, batches, tenant, keep_series
):
    batched, reference = databases
    # No write-ahead log: the flush under test is the one that inserts into the store.
    options = {"flush_linger_ms": 300, "request_samples_as_series": keep_series, "wal": False}
    if tenant:
        options["tenant_header"] = "X-Scope-OrgID"
    statuses = post_together(build_app(batched, Config(**options)), BODIES, tenant)
    assert [status for status, _ in statuses] == [204] * len(BODIES)
    assert batches == [(len(BODIES), [])]  # one flush, all of it decoded in C
    land_python(reference, BODIES, tenant, keep_series)
    for sql in (SAMPLES, SERIES, PARTS):
        assert rows(batched, sql) == rows(reference, sql)
    # Not vacuous: every kind of row is there, special floats kept bit for bit.
    bits = {r["bits"] for r in rows(batched, SAMPLES)}
    assert {0x7FF0000000000002, 0x7FF8DEADBEEF0001, 0x8000000000000000, 0} <= bits
    parts = rows(batched, PARTS)
    assert [p["request_id"] for p in parts] == ["r-1", "r-2"]
    assert parts[0]["tenant"] == (tenant or "acme")
    assert parts[0]["status_rank"] == 2 and parts[0]["error_class"] == "overloaded"
    assert "gpu" in parts[0]["attrs"]
    # One row per request, not one per sample; per-request samples are series only if kept.
    assert rows(batched, "SELECT count() AS n FROM {db}.request_parts")[0]["n"] == 2
    per_request = rows(
        batched, "SELECT count() AS n FROM {db}.series FINAL WHERE has(labels, 'request_id')"
    )[0]["n"]
    assert per_request == (5 if keep_series else 0)


def test_bodies_left_out_of_a_flush_get_the_python_decoders_answer(databases, batches):
    store, _ = databases
    no_name = body(series([("job", "x")], [(1.0, T0)]))
    duplicate = body(series([("__name__", "up"), ("a", "1"), ("a", "2")], [(1.0, T0)]))
    too_old = body(series([("__name__", "old")], [(1.0, 1000), (2.0, T0)]))
    exemplar = V1.WriteRequest(
        timeseries=[
            V1.TimeSeries(
                labels=[V1.Label(name="__name__", value="with_exemplar")],
                samples=[V1.Sample(value=3.0, timestamp=T0)],
                exemplars=[V1.Exemplar(value=1.0, timestamp=T0)],
            )
        ]
    ).SerializeToString()
    receiver = build_app(store, Config(flush_linger_ms=300, wal=False))  # a flush inserts
    results = post_together(receiver, [*BODIES, no_name, duplicate, too_old, exemplar])
    statuses = [status for status, _ in results]
    assert statuses == [204, 204, 204, 400, 400, 400, 204]
    assert batches == [(7, [3, 4, 5, 6])]
    assert b"no __name__ label" in results[3][1]
    assert b"duplicate label name 'a'" in results[4][1]
    assert b"older than the samples retention" in results[5][1]
    good = sum(  # per-request samples are parts, not samples
        len(ts.samples)
        for b in BODIES
        for ts in V1.WriteRequest.FromString(b).timeseries
        if not any(label.name == "request_id" for label in ts.labels)
    )
    # the too-old body keeps its recent sample (a partial write), the exemplar body its sample
    assert count(store, "samples") == good + 1 + 1
    assert count(store, "exemplars") == 1


class CommitsThenDrops:
    """A real store whose first samples insert commits, then loses its answer."""

    def __init__(self, store):
        self.store, self.dropped = store, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_arrow(self, table, data, settings=None, dedup_token=None):
        self.store.insert_arrow(table, data, settings, dedup_token)
        if table == "samples" and not self.dropped:
            self.dropped = True
            raise StoreUnavailable("connection reset after commit (simulated)")


def test_a_retry_after_a_lost_answer_leaves_every_figure_as_if_written_once(databases, client_for):
    store, _ = databases
    client = client_for(CommitsThenDrops(store))
    payload = bytes(cramjam.snappy.compress_raw(BODIES[1]))
    headers = {"content_type": "application/x-protobuf", "content_encoding": "snappy"}
    well_inside_a_minute()  # a repeat collapses within its minute of receipt
    assert client.post("/api/v1/write", payload, **headers).status == 503
    assert client.post("/api/v1/write", payload, **headers).status == 204
    assert count(store, "samples") == 1  # `up`; the rest are parts of request r-1
    assert count(store, "series") == 1
    parts = rows(store, "SELECT request_id, ttft_ms, output_tokens FROM {db}.request_parts FINAL")
    assert parts == [{"request_id": "r-1", "ttft_ms": 250.0, "output_tokens": 120}]


MINUTE_START = T0 - T0 % 60_000  # three scrapes within one refresh period


@pytest.mark.parametrize(
    ("refresh_seconds", "max_time", "rows_written"),
    [(60, MINUTE_START, 1), (0, MINUTE_START + 2000, 3)],
)
def test_a_live_series_row_is_rewritten_only_past_the_refresh(
    databases, client_for, refresh_seconds, max_time, rows_written
):
    store, _ = databases
    store.command(f"SYSTEM STOP MERGES {store.database}.series")  # count the rows written
    client = client_for(store, series_refresh_seconds=refresh_seconds)
    headers = {"content_type": "application/x-protobuf", "content_encoding": "snappy"}
    for t in (MINUTE_START, MINUTE_START + 1000, MINUTE_START + 2000):  # three flushes
        scrape = body(series([("__name__", "up"), ("job", "api")], [(1.0, t)]))
        payload = bytes(cramjam.snappy.compress_raw(scrape))
        assert client.post("/api/v1/write", payload, **headers).status == 204
    assert count(store, "samples") == 3
    [row] = rows(store, SERIES)
    assert (row["lo"], row["hi"]) == (MINUTE_START, max_time)  # trails by < the refresh
    assert rows(store, "SELECT count() AS n FROM {db}.series")[0]["n"] == rows_written
