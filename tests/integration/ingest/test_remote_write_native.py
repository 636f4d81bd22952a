"""Remote write 1.0 decoded by ClickHouse lands exactly what the Python decoder lands.

The fast path (``remote_write_native``) and the reference decoder (``remote_write`` +
``llm_metrics.request_parts``) take the same bodies into two databases of the same
server; every row must agree, floats bit for bit.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid

import cramjam
import pytest

from warehouse.config import Config
from warehouse.errors import StoreUnavailable
from warehouse.ingest import remote_write_native as native
from warehouse.ingest.app import Receiver
from warehouse.ingest.llm_metrics import load_mapping, request_parts
from warehouse.ingest.proto import V1
from warehouse.ingest.remote_write import decode_v1
from warehouse.store import open_store
from warehouse.store.migrations import Migrator

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
        series([("__name__", "epoch_zero")], [(2.5, 0)]),
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
    """Two migrated databases on the session's server: native, and Python-decoded."""
    stores = []
    for _ in range(2):
        store = open_store(embedded_server.store_url(f"native_{uuid.uuid4().hex[:10]}"))
        Migrator(store).up()
        stores.append(store)
    yield stores
    for store in stores:
        store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
        store.close()


def land_native(store, bodies: list[bytes], tenant: str | None = None) -> None:
    store.insert_body(
        native.insert_sql(store.database),
        b"".join(bodies),
        native.insert_parameters(MAPPING, tenant, 0),
        native.SETTINGS,
    )


def land_python(store, bodies: list[bytes], tenant: str | None = None) -> None:
    for raw in bodies:
        decoded = decode_v1(raw)
        store.insert_arrow("series", decoded.series)
        store.insert_arrow("samples", decoded.samples)
        parts = request_parts(decoded.series, decoded.samples, MAPPING, tenant)
        if parts.num_rows:
            store.insert_arrow("request_parts", parts)


def rows(store, sql: str) -> list[dict]:
    return store.query_arrow(sql.format(db=store.database)).to_pylist()


SAMPLES = """SELECT toString(id) AS id, toUnixTimestamp64Milli(timestamp) AS t,
    reinterpretAsUInt64(value) AS bits FROM {db}.samples FINAL ORDER BY id, t"""
SERIES = """SELECT toString(id) AS id, metric_name, toString(labels) AS labels,
    toUnixTimestamp64Milli(min_time) AS lo, toUnixTimestamp64Milli(max_time) AS hi
    FROM {db}.series FINAL ORDER BY id"""
PARTS = """SELECT * EXCEPT (received), toString(attrs) AS attrs
    FROM {db}.request_parts FINAL ORDER BY request_id, tenant"""


@pytest.mark.parametrize("tenant", [None, "from-header"])
def test_clickhouse_decodes_the_same_rows_as_the_python_decoder(databases, tenant):
    fast, reference = databases
    land_native(fast, BODIES, tenant)
    land_python(reference, BODIES, tenant)
    for sql in (SAMPLES, SERIES, PARTS):
        assert rows(fast, sql) == rows(reference, sql)
    # Not vacuous: every kind of row is there, special floats kept bit for bit.
    bits = {r["bits"] for r in rows(fast, SAMPLES)}
    assert {0x7FF0000000000002, 0x7FF8DEADBEEF0001, 0x8000000000000000} <= bits
    parts = rows(fast, PARTS)
    assert [p["request_id"] for p in parts] == ["r-1", "r-2"]
    assert parts[0]["tenant"] == (tenant or "acme")
    assert parts[0]["status_rank"] == 2 and parts[0]["error_class"] == "overloaded"
    assert "gpu" in parts[0]["attrs"]


@pytest.mark.parametrize(
    "bad",
    [
        series([("job", "api")], [(1.0, T0)]),
        series([("__name__", "up"), ("", "x")], [(1.0, T0)]),
        series([("__name__", "up"), ("job", "a"), ("job", "b")], [(1.0, T0)]),
        series([("__name__", "up")], [(1.0, 1000)]),  # older than the retention
    ],
    ids=["no metric name", "empty label name", "duplicate label", "too old"],
)
def test_a_flush_the_python_decoder_would_refuse_writes_nothing(databases, bad):
    fast, _ = databases
    cutoff = T0 - 86_400_000
    with pytest.raises(Exception, match="needs the Python decoder"):
        fast.insert_body(
            native.insert_sql(fast.database),
            BODIES[0] + body(bad),
            native.insert_parameters(MAPPING, None, cutoff),
            native.SETTINGS,
        )
    assert rows(fast, "SELECT count() AS n FROM {db}.samples") == [{"n": 0}]
    assert rows(fast, "SELECT count() AS n FROM {db}.series") == [{"n": 0}]


def test_bodies_with_histograms_exemplars_or_metadata_take_the_python_path():
    plain = body(series([("__name__", "up")], [(1.0, T0)]))
    assert native.plan(plain) == native.NativeWrite(plain, samples=1, series=1)
    with_exemplar = V1.WriteRequest(
        timeseries=[
            V1.TimeSeries(
                labels=[V1.Label(name="__name__", value="x")],
                exemplars=[V1.Exemplar(value=1.0, timestamp=T0)],
            )
        ]
    ).SerializeToString()
    assert native.plan(with_exemplar) is None
    with_metadata = V1.WriteRequest(
        metadata=[V1.MetricMetadata(metric_family_name="up", type=2)]
    ).SerializeToString()
    assert native.plan(with_metadata) is None


def test_a_bad_body_in_a_shared_flush_gets_its_400_and_the_others_land(databases):
    store, _ = databases
    receiver = Receiver(store, Config(flush_linger_ms=300))
    good = [bytes(cramjam.snappy.compress_raw(b)) for b in BODIES[1:]]  # [0] has a 1970 sample
    bad = bytes(cramjam.snappy.compress_raw(body(series([("job", "x")], [(1.0, T0)]))))

    async def post(payload: bytes) -> tuple[int, bytes]:
        sent = []
        messages = [{"type": "http.request", "body": payload, "more_body": False}]

        async def receive():
            return messages.pop(0)

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/v1/write",
            "headers": [
                (b"content-type", b"application/x-protobuf"),
                (b"content-encoding", b"snappy"),
            ],
        }
        await receiver(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    async def scenario():
        await receiver.start()
        try:
            return await asyncio.gather(*(post(p) for p in [*good, bad]))
        finally:
            await receiver.stop()

    results = asyncio.run(scenario())
    assert [status for status, _ in results] == [204, 204, 400]
    assert b"no __name__ label" in results[-1][1]
    expected = sum(
        len(ts.samples) for b in BODIES[1:] for ts in V1.WriteRequest.FromString(b).timeseries
    )
    assert rows(store, "SELECT count() AS n FROM {db}.samples FINAL") == [{"n": expected}]


class CommitsThenDrops:
    """A real store whose first body insert commits, then loses its answer."""

    def __init__(self, store):
        self.store, self.dropped = store, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_body(self, sql, body, parameters=None, settings=None):
        self.store.insert_body(sql, body, parameters, settings)
        if not self.dropped:
            self.dropped = True
            raise StoreUnavailable("connection reset after commit (simulated)")


def test_a_retry_after_a_lost_answer_leaves_every_figure_as_if_written_once(databases, client_for):
    store, _ = databases
    client = client_for(CommitsThenDrops(store))
    payload = bytes(cramjam.snappy.compress_raw(BODIES[1]))
    headers = {"content_type": "application/x-protobuf", "content_encoding": "snappy"}
    assert client.post("/api/v1/write", payload, **headers).status == 503
    assert client.post("/api/v1/write", payload, **headers).status == 204
    assert rows(store, "SELECT count() AS n FROM {db}.samples FINAL") == [{"n": 5}]
    assert rows(store, "SELECT count() AS n FROM {db}.series FINAL") == [{"n": 5}]
    parts = rows(store, "SELECT request_id, ttft_ms, output_tokens FROM {db}.request_parts FINAL")
    assert parts == [{"request_id": "r-1", "ttft_ms": 250.0, "output_tokens": 120}]
