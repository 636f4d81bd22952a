"""The receiver over HTTP semantics, mirroring the prometheus/compliance receiver cases:
what each status code means, the Written headers, and that 2xx means committed."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import re
import time
from collections import Counter
from functools import partial

import cramjam
import pyarrow as pa
import pytest

from warehouse.auth import new_credential
from warehouse.errors import StoreError
from warehouse.ingest.events import encode_ndjson
from warehouse.synthetic import synthetic_requests
from warehouse.wire.prometheus import V1, V2

V2_TYPE = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
V1_TYPE = "application/x-protobuf"
NOW_MS = (int(time.time()) - 600) * 1000  # recent: older samples fall to the TTL


def snappy(body: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(body))


def v1_body(series: int = 3, samples: int = 4, extra_labels=()) -> bytes:
    request = V1.WriteRequest()
    for s in range(series):
        ts = request.timeseries.add()
        labels = (("__name__", "http_requests_total"), ("job", "api"), ("pod", f"p{s}"))
        for name, value in sorted((*labels, *extra_labels)):
            ts.labels.add(name=name, value=value)
        for i in range(samples):
            ts.samples.add(value=float(i + 1), timestamp=NOW_MS + i * 1000)
    request.metadata.add(type=1, metric_family_name="http_requests_total", help="Requests")
    return snappy(request.SerializeToString())


def v2_request() -> V2.Request:
    request = V2.Request(symbols=["", "__name__", "rpc_latency", "job", "api", "trace_id", "abc"])
    float_series = request.timeseries.add(labels_refs=[1, 2, 3, 4])
    float_series.samples.add(value=0.25, timestamp=NOW_MS)
    float_series.samples.add(value=0.5, timestamp=NOW_MS + 1000)
    float_series.exemplars.add(labels_refs=[5, 6], value=0.5, timestamp=NOW_MS + 1000)
    histogram_series = request.timeseries.add(labels_refs=[1, 2, 3, 6])
    histogram = histogram_series.histograms.add(
        count_int=3,
        sum=1.5,
        schema=0,
        zero_threshold=1e-128,
        zero_count_int=0,
        timestamp=NOW_MS,
    )
    histogram.positive_spans.add(offset=0, length=2)
    histogram.positive_deltas.extend([1, 1])
    return request


def v2_body() -> bytes:
    return snappy(v2_request().SerializeToString())


def count(store, sql: str) -> int:
    return store.query_arrow(sql).column(0)[0].as_py()


def samples_in(store) -> int:
    final = " FINAL" if store.capabilities.dialect == "clickhouse" else ""
    return count(store, f"SELECT count(*) FROM {store.database}.samples{final}")


# -- success -----------------------------------------------------------------------------


def test_v1_write_is_committed_before_204(client, migrated):
    response = client.post(
        "/api/v1/write", v1_body(), content_type=V1_TYPE, content_encoding="snappy"
    )
    assert response.status == 204 and response.body == b""
    assert "content-length" not in response.headers  # RFC 9110, 8.6: none on a 204
    assert samples_in(migrated) == 12
    assert count(migrated, f"SELECT count(DISTINCT id) FROM {migrated.database}.series") == 3
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.metric_metadata") == 1


def test_v2_write_reports_exact_written_counts(client, migrated):
    response = client.post(
        "/api/v1/write", v2_body(), content_type=V2_TYPE, content_encoding="snappy"
    )
    assert response.status == 204
    assert response.headers["x-prometheus-remote-write-samples-written"] == "2"
    assert response.headers["x-prometheus-remote-write-histograms-written"] == "1"
    assert response.headers["x-prometheus-remote-write-exemplars-written"] == "1"
    assert samples_in(migrated) == 2
    db = migrated.database
    assert count(migrated, f"SELECT count(*) FROM {db}.histogram_samples") == 1
    assert count(migrated, f"SELECT count(*) FROM {db}.exemplars") == 1


def test_content_type_without_proto_parameter_means_v1(client):
    response = client.post("/api/v1/write", v1_body(), content_type=V1_TYPE)
    assert response.status == 204
    assert "x-prometheus-remote-write-samples-written" not in response.headers


# -- 415 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "image/png",
        "application/x-protobuf;proto=io.prometheus.write.v9.Request",
    ],
)
def test_unsupported_content_types_are_415(refusing_client, content_type):
    response = refusing_client.post(
        "/api/v1/write", v1_body(), content_type=content_type, content_encoding="snappy"
    )
    assert response.status == 415
    assert "Content-Type" in response.text


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd"])
def test_unsupported_content_encodings_are_415(refusing_client, encoding):
    response = refusing_client.post(
        "/api/v1/write", v1_body(), content_type=V2_TYPE, content_encoding=encoding
    )
    assert response.status == 415
    assert "Content-Encoding" in response.text


# -- 400 ---------------------------------------------------------------------------------


def test_a_body_that_is_not_snappy_is_400(client, migrated):
    response = client.post(
        "/api/v1/write",
        b"\xff\x00definitely not snappy",
        content_type=V1_TYPE,
        content_encoding="snappy",
    )
    assert response.status == 400
    assert "snappy" in response.text


def test_corrupt_protobuf_is_400(client):
    response = client.post(
        "/api/v1/write",
        snappy(b"\x0a\xff\xff\xff\x0f garbage"),
        content_type=V2_TYPE,
        content_encoding="snappy",
    )
    assert response.status == 400


def mutated_v2(change) -> bytes:
    request = v2_request()
    change(request)
    return snappy(request.SerializeToString())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda r: r.symbols.__setitem__(0, "x"), "symbols"),
        (lambda r: r.timeseries[0].labels_refs.append(99), "out of range|odd"),
        (lambda r: r.timeseries[0].labels_refs.extend([1, 2, 3]), "odd"),
        (lambda r: r.timeseries[0].labels_refs.__setitem__(1, 70), "out of range"),
        (lambda r: r.timeseries[0].histograms.add(count_int=1, timestamp=NOW_MS), "histograms"),
        (lambda r: setattr(r.timeseries[0].exemplars[0], "timestamp", 0), "timestamp"),
    ],
)
def test_invalid_v2_data_is_400_naming_the_problem_and_nothing_is_written(
    refusing_client, module_migrated, change, named
):
    response = refusing_client.post(
        "/api/v1/write", mutated_v2(change), content_type=V2_TYPE, content_encoding="snappy"
    )
    assert response.status == 400
    assert re.search(named, response.text), response.text
    assert samples_in(module_migrated) == 0


# -- 413, 429, 401 -------------------------------------------------------------------------


def test_a_body_above_the_limit_is_413(make_client):
    client = make_client(max_body_bytes=100)
    response = client.post("/api/v1/write", v1_body(series=20), content_type=V1_TYPE)
    assert response.status == 413


def test_a_series_over_a_label_limit_refuses_the_whole_write_naming_the_setting(
    make_client, migrated
):
    client = make_client(max_labels_per_series=3)  # v1_body's series: __name__, job, pod
    assert client.post("/api/v1/write", v1_body(series=2), content_type=V1_TYPE).status == 204
    written = samples_in(migrated)
    tight = make_client(max_labels_per_series=1)
    for body, content_type in ((v1_body(series=2), V1_TYPE), (v2_body(), V2_TYPE)):
        response = tight.post("/api/v1/write", body, content_type=content_type)
        assert response.status == 400, response.text
        assert "labels; the limit is 1 (max_labels_per_series)" in response.text
    assert samples_in(migrated) == written


def test_limits_on_series_per_write_and_label_bytes_are_400(make_client, migrated):
    response = make_client(max_series_per_write=2).post(
        "/api/v1/write", v1_body(series=3), content_type=V1_TYPE
    )
    assert response.status == 400
    assert "the write holds 3 series; the limit is 2 (max_series_per_write)" in response.text
    response = make_client(max_label_value_bytes=10).post(
        "/api/v1/write", v1_body(), content_type=V1_TYPE
    )
    assert response.status == 400
    assert "the value of __name__ is 19 bytes; the limit is 10" in response.text
    rows = encode_ndjson(synthetic_requests(20, seed=1))
    response = make_client(max_label_value_bytes=3).post(
        "/api/v1/requests", rows, content_type="application/x-ndjson"
    )
    assert response.status == 400 and "(max_label_value_bytes)" in response.text
    assert samples_in(migrated) == 0
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 0


def test_new_series_past_the_tenants_minute_budget_are_429_with_retry_after(make_client, migrated):
    client = make_client(max_new_series_per_minute=3)
    assert client.post("/api/v1/write", v1_body(series=3), content_type=V1_TYPE).status == 204
    written = samples_in(migrated)
    response = client.post("/api/v1/write", v1_body(series=5), content_type=V1_TYPE)
    assert response.status == 429, response.text
    assert "would add 2 new series, 3 already this minute" in response.text
    assert 1 <= int(response.headers["retry-after"]) <= 61
    assert samples_in(migrated) == written  # refused whole
    # The three it knows are no new series: they keep flowing.
    assert client.post("/api/v1/write", v1_body(series=3), content_type=V1_TYPE).status == 204


def test_a_full_buffer_is_429_with_retry_after(client):
    committer = client.app.writes.committer
    committer.buffer.buffered_bytes = committer.buffer.max_buffer_bytes  # saturated
    try:
        response = client.post("/api/v1/write", v1_body(), content_type=V1_TYPE)
    finally:
        client.app.writes.committer.buffer.buffered_bytes = 0
    assert response.status == 429
    assert response.headers["retry-after"].isdigit()


def test_writes_being_decoded_count_against_the_buffer_too(make_client, migrated):
    client = make_client(buffer_bytes=10_000)
    body = v1_body(series=50)
    # other writes, being decoded:
    client.app.writes.committer.buffer.in_flight_bytes = 10_000 - len(body) + 1
    try:
        refused = client.post(
            "/api/v1/write", body, content_type=V1_TYPE, content_length=str(len(body))
        )
    finally:
        client.app.writes.committer.buffer.in_flight_bytes = 0
    assert refused.status == 429 and refused.headers["retry-after"].isdigit()
    assert "(buffer_bytes) in writes being read, decoded or committed" in refused.text
    assert samples_in(migrated) == 0
    taken = client.post("/api/v1/write", body, content_type=V1_TYPE, content_length=str(len(body)))
    assert taken.status == 204  # alone, a write is taken whatever its size
    assert client.app.writes.committer.buffer.in_flight_bytes == 0  # released once answered
    # A body is held for the bytes that arrived, not for those it declared: nine idle
    # senders declaring 32 MiB each once held the whole buffer.
    client.app.writes.committer.buffer.in_flight_bytes = 1
    try:
        declared = client.post(
            "/api/v1/write", body, content_type=V1_TYPE, content_length=str(32 << 20)
        )
    finally:
        client.app.writes.committer.buffer.in_flight_bytes = 0
    assert declared.status == 204


def test_one_tenant_holding_its_share_of_the_buffer_stalls_no_other(make_client, migrated):
    client = make_client(tenant_header="X-Scope-OrgID", tenant_buffer_bytes=5_000)
    body = v1_body(series=20)
    write = partial(client.post, "/api/v1/write", body, content_type=V1_TYPE,
                    content_encoding="snappy")  # fmt: skip
    with client.app.writes.committer.hold(4_900, "acme"):  # acme's other writes, arriving
        throttled = write(x_scope_orgid="acme")
        other = write(x_scope_orgid="bravo")
    assert throttled.status == 429 and "tenant 'acme' holds" in throttled.text
    assert other.status == 204
    assert write(x_scope_orgid="acme").status == 204  # once its writes are answered


class CountingInserts:
    """A store that counts its inserts per table."""

    def __init__(self, store):
        self._store, self.inserts = store, Counter()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def insert_arrow(self, table, data, *args, **kwargs):
        self.inserts[table] += 1
        return self._store.insert_arrow(table, data, *args, **kwargs)


def test_writes_of_several_tenants_in_one_flush_share_its_inserts(migrated, client_for):
    store = CountingInserts(migrated)
    client = client_for(store, tenant_header="X-Scope-OrgID")
    headers = {"content-type": V1_TYPE, "content-encoding": "snappy"}
    writes = [
        client._request("POST", "/api/v1/write", v1_body(series=5), {**headers, "x-scope-orgid": t},
                        65536)
        for t in ("acme", "bravo", "initech")
    ]  # fmt: skip

    async def at_once():
        return await asyncio.gather(*writes)

    answers = client.loop.run_until_complete(at_once())
    assert [a.status for a in answers] == [204, 204, 204]
    # One flush, one insert, three tenants. (On DuckDB, whose tables do not collapse a
    # retried write's rows, each write is inserted alone, under its body's hash.)
    assert store.inserts["samples"] == (1 if migrated.capabilities.collapsing_engines else 3)
    tenants = migrated.query_arrow(
        f"SELECT DISTINCT labels['__tenant__'] AS t FROM {migrated.database}.series ORDER BY t"
    )
    assert tenants["t"].to_pylist() == ["acme", "bravo", "initech"]
    assert count(migrated, f"SELECT count() FROM {migrated.database}.samples") == 3 * 5 * 4


def test_a_tenants_decoded_rows_count_against_its_share_too(make_client):
    # Its body fits the share beside acme's other writes; the rows it decodes into,
    # which wait in the buffer until committed, do not. (Remote write 1.0 bodies that
    # the store decodes itself wait as bodies: their share is their bytes.)
    body = gzip.compress(encode_ndjson(synthetic_requests(200, seed=2)))
    client = make_client(tenant_header="X-Scope-OrgID", tenant_buffer_bytes=len(body) + 1_100)
    write = partial(client.post, "/api/v1/requests", body, content_encoding="gzip",
                    content_type="application/x-ndjson")  # fmt: skip
    with client.app.writes.committer.hold(1_000, "acme"):
        throttled = write(x_scope_orgid="acme")
        other = write(x_scope_orgid="bravo")
    assert throttled.status == 429 and "tenant 'acme' holds" in throttled.text
    assert other.status == 200, other.text
    assert (
        client.app.writes.committer.buffer.tenant_bytes == {}
    )  # every write let go of what it held


def test_a_body_that_never_arrives_is_408_and_lets_go_of_the_buffer(make_client):
    client = make_client(body_timeout_seconds=1)

    async def stalled() -> list[dict]:
        sent, never = [], asyncio.Event()
        first = True

        async def receive():
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"\x00", "more_body": True}
            await never.wait()  # the rest of the body never comes

        async def send(message):
            sent.append(message)

        headers = [(b"content-type", b"application/x-protobuf"),
                   (b"content-encoding", b"snappy"), (b"content-length", b"33554432")]  # fmt: skip
        scope = {"type": "http", "method": "POST", "path": "/api/v1/write", "headers": headers}
        await client.app(scope, receive, send)
        return sent

    answer = client.loop.run_until_complete(stalled())
    assert answer[0]["status"] == 408
    assert b"body_timeout_seconds" in b"".join(m.get("body", b"") for m in answer[1:])
    assert client.app.writes.committer.buffer.in_flight_bytes == 0


def test_with_a_token_configured_writes_need_it(make_client):
    client = make_client(auth_token="s3cret")
    assert client.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 401
    assert (
        client.post(
            "/api/v1/write", v1_body(), content_type=V1_TYPE, authorization="Bearer wrong"
        ).status
        == 401
    )
    assert (
        client.post(
            "/api/v1/write", v1_body(), content_type=V1_TYPE, authorization="Bearer s3cret"
        ).status
        == 204
    )
    # Events and the receiver's own metrics need it too; health and readiness do not.
    rows = encode_ndjson(synthetic_requests(3, seed=1))
    assert client.post("/api/v1/requests", rows, content_type="application/x-ndjson").status == 401
    assert client.get("/metrics").status == 401
    assert (
        client.request("GET", "/metrics", headers={"authorization": "Bearer s3cret"}).status == 200
    )
    assert client.get("/healthz").status == 200
    assert client.get("/readyz").status == 200


def test_basic_auth(make_client):
    client = make_client(basic_auth="prom:pw")
    good = "Basic " + base64.b64encode(b"prom:pw").decode()
    assert client.post("/api/v1/write", v1_body(), content_type=V1_TYPE).status == 401
    assert (
        client.post("/api/v1/write", v1_body(), content_type=V1_TYPE, authorization=good).status
        == 204
    )


@pytest.fixture
def bound(make_client, tmp_path):
    """A multi-tenant receiver whose credentials bind tenants: acme's agent may write
    acme only, the dashboards may read acme and bravo, ops may see /metrics."""
    tokens, entries = {}, []
    for name, tenants, rights in (
        ("acme-agent", ["acme"], ["write"]),
        ("dashboards", ["acme", "bravo"], ["read"]),
        ("ops", ["*"], ["admin"]),
    ):
        tokens[name], entry = new_credential(name, tenants, rights)
        entries.append(entry)
    path = tmp_path / "credentials.toml"
    path.write_text("\n".join(entries))
    client = make_client(tenant_header="X-Scope-OrgID", credentials_file=str(path))
    return client, {name: f"Bearer {token}" for name, token in tokens.items()}


def test_a_credential_writes_to_its_own_tenants_only(bound, migrated):
    client, auth = bound
    write = partial(client.post, "/api/v1/write", v1_body(), content_type=V1_TYPE,
                    content_encoding="snappy")  # fmt: skip
    assert write(x_scope_orgid="acme").status == 401
    assert write(x_scope_orgid="acme", authorization="Bearer guess").status == 401
    other = write(x_scope_orgid="bravo", authorization=auth["acme-agent"])
    assert other.status == 403 and "may not use tenant 'bravo'" in other.text
    reader = write(x_scope_orgid="acme", authorization=auth["dashboards"])
    assert reader.status == 403 and "may not write" in reader.text
    assert count(migrated, f"SELECT count() FROM {migrated.database}.samples") == 0
    assert write(x_scope_orgid="acme", authorization=auth["acme-agent"]).status == 204
    tenants = migrated.query_arrow(
        f"SELECT DISTINCT labels['__tenant__'] AS t FROM {migrated.database}.series"
    )
    assert tenants.column(0).to_pylist() == ["acme"]


def test_reads_and_the_receivers_metrics_need_their_rights(bound):
    client, auth = bound
    page = client.request("GET", "/", headers={"authorization": auth["acme-agent"],
                                               "x-scope-orgid": "acme"})  # fmt: skip
    assert page.status == 403 and "may not read" in page.text
    outside = client.request("GET", "/", headers={"authorization": auth["dashboards"],
                                                  "x-scope-orgid": "globex"})  # fmt: skip
    assert outside.status == 403 and "may not use tenant 'globex'" in outside.text
    for name in ("acme-agent", "dashboards"):
        metrics = client.request("GET", "/metrics", headers={"authorization": auth[name]})
        assert metrics.status == 403
    ops = client.request("GET", "/metrics", headers={"authorization": auth["ops"]})
    assert ops.status == 200


# -- 5xx and the retry ---------------------------------------------------------------------


def test_a_retry_after_a_5xx_leaves_every_figure_as_if_written_once(migrated, client_for):
    client = client_for(FailsAfterCommit(migrated, "samples"))
    body = v1_body()
    assert client.post("/api/v1/write", body, content_type=V1_TYPE).status == 500
    assert client.post("/api/v1/write", body, content_type=V1_TYPE).status == 204
    db = migrated.database
    # ClickHouse collapses the repeats (read with FINAL); DuckDB never stored them twice.
    final = " FINAL" if migrated.capabilities.collapsing_engines else ""
    assert samples_in(migrated) == 12
    assert count(migrated, f"SELECT count(*) FROM {db}.series{final}") == 3
    assert count(migrated, f"SELECT count(*) FROM {db}.metric_metadata{final}") == 1
    assert count(migrated, f"SELECT sum(value) FROM {db}.samples{final}") == 3 * (1 + 2 + 3 + 4)


# -- per-request events --------------------------------------------------------------------


def test_ndjson_events_are_committed_and_counted(client, migrated):
    rows = synthetic_requests(200, seed=4)
    response = client.post(
        "/api/v1/requests", encode_ndjson(rows), content_type="application/x-ndjson"
    )
    assert response.status == 200
    assert json.loads(response.body) == {"accepted": 200}
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 200


def test_gzip_ndjson_and_arrow_streams_are_taken(client, migrated):
    rows = synthetic_requests(50, seed=5)
    gz = client.post(
        "/api/v1/requests",
        gzip.compress(encode_ndjson(rows)),
        content_type="application/x-ndjson",
        content_encoding="gzip",
    )
    assert gz.status == 200
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    arrow = client.post(
        "/api/v1/requests",
        sink.getvalue().to_pybytes(),
        content_type="application/vnd.apache.arrow.stream",
    )
    assert arrow.status == 200
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 100


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("zstd", lambda data: bytes(cramjam.zstd.compress(data))),
        # Two frames: the bound holds across frames, not per frame.
        ("zstd", lambda data: bytes(cramjam.zstd.compress(data[:60_000])) * 2),
    ],
    ids=["gzip", "zstd", "zstd frames"],
)
def test_an_events_body_that_inflates_past_the_limit_is_413(
    make_client, migrated, encoding, compress
):
    client = make_client(max_body_bytes=100_000)
    bomb = compress(b"\n" * 1_000_000)
    assert len(bomb) < 100_000
    response = client.post(
        "/api/v1/requests", bomb, content_type="application/x-ndjson", content_encoding=encoding
    )
    assert response.status == 413 and "100,000-byte limit" in response.text
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 0


@pytest.mark.parametrize("field", ["request_id", "model", "zone"])
def test_an_event_text_over_the_label_value_limit_is_refused(client, migrated, field):
    row = json.loads(encode_ndjson(synthetic_requests(1, seed=3)))
    row[field] = "x" * 10_000_000  # once stored as sent
    body = (json.dumps(row) + "\n").encode()
    response = client.post("/api/v1/requests", body, content_type="application/x-ndjson")
    assert response.status == 400
    assert f"field {field}" in response.text and "max_label_value_bytes" in response.text
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 0


def test_a_snappy_body_stating_more_than_the_limit_is_413_before_inflating(make_client):
    client = make_client(max_body_bytes=100_000)
    # A block format body states its length first (a varint): here 2 GiB, for 4 bytes.
    states_2gib = bytes([0x80, 0x80, 0x80, 0x80, 0x08]) + b"\x00\x00\x00\x00"
    response = client.post(
        "/api/v1/write", states_2gib, content_type=V1_TYPE, content_encoding="snappy"
    )
    assert response.status == 413 and "100,000-byte limit" in response.text


def test_one_bad_event_refuses_the_whole_body_naming_line_and_field(client, migrated):
    lines = encode_ndjson(synthetic_requests(5, seed=6)).splitlines()
    bad = json.loads(lines[2])
    bad["ttft_ms"] = -4
    lines[2] = json.dumps(bad).encode()
    response = client.post(
        "/api/v1/requests", b"\n".join(lines), content_type="application/x-ndjson"
    )
    assert response.status == 400
    assert "line 3" in response.text and "ttft_ms" in response.text
    assert count(migrated, f"SELECT count(*) FROM {migrated.database}.requests") == 0


def test_events_in_other_media_types_are_415(client):
    response = client.post("/api/v1/requests", b"a,b\n1,2\n", content_type="text/csv")
    assert response.status == 415


def test_the_tenant_header_decides_the_tenant(make_client, migrated):
    client = make_client(tenant_header="X-Scope-OrgID")
    body = encode_ndjson(synthetic_requests(20, seed=7))
    refused = client.post("/api/v1/requests", body, content_type="application/x-ndjson")
    assert refused.status == 400 and "X-Scope-OrgID" in refused.text
    accepted = client.post(
        "/api/v1/requests", body, content_type="application/x-ndjson", x_scope_orgid="team-a"
    )
    assert accepted.status == 200
    tenants = migrated.query_arrow(f"SELECT DISTINCT tenant FROM {migrated.database}.requests")
    assert tenants.column(0).to_pylist() == ["team-a"]


@pytest.mark.parametrize(
    ("path", "body", "content_type"),
    [
        ("/api/v1/write", v1_body(), V1_TYPE),
        ("/api/v1/requests", encode_ndjson(synthetic_requests(3, seed=7)), "application/x-ndjson"),
    ],
    ids=["remote write", "events"],
)
@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ([], "missing tenant header X-Scope-OrgID"),
        ([("X-Scope-OrgID", "")], "not a tenant name"),
        ([("X-Scope-OrgID", "acme"), ("X-Scope-OrgID", "bravo")], "given 2 times"),
        ([("X-Scope-OrgID", "acme/../bravo")], "not a tenant name"),
    ],
    ids=["absent", "empty", "repeated", "malformed"],
)
def test_a_multi_tenant_write_names_exactly_one_tenant(
    make_client, migrated, path, body, content_type, headers, reason
):
    client = make_client(tenant_header="X-Scope-OrgID")
    sent = [("content-type", content_type)]
    if path.endswith("write"):
        sent.append(("content-encoding", "snappy"))
    refused = client.request("POST", path, body, [*sent, *headers])
    assert refused.status == 400 and reason in refused.text
    for table in ("requests", "samples", "series"):
        assert count(migrated, f"SELECT count(*) FROM {migrated.database}.{table}") == 0


def test_a_tenant_label_never_chooses_the_tenant(make_client, migrated):
    client = make_client(tenant_header="X-Scope-OrgID")
    labelled = v1_body(extra_labels=[("__tenant__", "bravo")])
    accepted = client.post(
        "/api/v1/write", labelled, content_type=V1_TYPE, content_encoding="snappy",
        x_scope_orgid="acme",
    )  # fmt: skip
    assert accepted.status == 204
    tenants = migrated.query_arrow(
        f"SELECT DISTINCT labels['__tenant__'] AS t FROM {migrated.database}.series"
    )
    assert tenants.column(0).to_pylist() == ["acme"]


# -- operations ---------------------------------------------------------------------------


def test_health_readiness_metrics_and_unknown_paths(client):
    assert client.get("/healthz").status == 200
    assert client.get("/readyz").status == 200
    client.post("/api/v1/write", v1_body(), content_type=V1_TYPE)
    metrics = client.get("/metrics")
    assert metrics.status == 200
    assert 'llmwh_receiver_written_total{kind="samples"} 12.0' in metrics.text
    assert (
        'llmwh_receiver_http_requests_total{code="204",endpoint="/api/v1/write"} 1.0'
        in metrics.text
    )
    assert client.get("/nope").status == 404
    method = client.get("/api/v1/write")
    assert method.status == 405 and method.headers["allow"] == "POST"


class FailsAfterCommit:
    """A real store that commits the first insert of ``table`` and then reports failure."""

    def __init__(self, store, table):
        self.store, self.table, self.failed = store, table, False

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_arrow(self, table, data, settings=None, dedup_token=None):
        self.store.insert_arrow(table, data, settings, dedup_token)
        if table == self.table and not self.failed:
            self.failed = True
            raise StoreError("connection reset after commit (simulated)")


def test_a_retried_event_body_changes_no_figure_rollups_included(migrated, client_for):
    client = client_for(FailsAfterCommit(migrated, "requests"))
    body = encode_ndjson(synthetic_requests(300, seed=8))
    assert client.post("/api/v1/requests", body, content_type="application/x-ndjson").status == 500
    retried = client.post("/api/v1/requests", body, content_type="application/x-ndjson")
    assert retried.status == 200
    db = migrated.database
    assert count(migrated, f"SELECT count(*) FROM {db}.requests") == 300
    assert count(migrated, f"SELECT sum(requests) FROM {db}.requests_1m") == 300
    assert count(migrated, f"SELECT sum(requests) FROM {db}.requests_1h") == 300
    other = encode_ndjson(synthetic_requests(10, seed=9))
    assert client.post("/api/v1/requests", other, content_type="application/x-ndjson").status == 200
    assert count(migrated, f"SELECT count(*) FROM {db}.requests") == 310


def test_samples_older_than_retention_are_refused_and_the_rest_written(client, migrated):
    request = v2_request()
    old = request.timeseries[0].samples.add(value=9.0, timestamp=NOW_MS - 40 * 86_400_000)
    assert old.value == 9.0
    body = snappy(request.SerializeToString())
    response = client.post("/api/v1/write", body, content_type=V2_TYPE)
    if not migrated.capabilities.ttl:  # DuckDB keeps everything: nothing is too old
        assert response.status == 204
        assert samples_in(migrated) == 3
        return
    assert response.status == 400
    assert "older than the samples retention (30 days)" in response.text
    assert response.headers["x-prometheus-remote-write-samples-written"] == "2"
    assert samples_in(migrated) == 2


def test_v2_start_timestamps_of_float_samples_are_stored(client, migrated):
    request = v2_request()
    for sample in request.timeseries[0].samples:
        sample.start_timestamp = NOW_MS - 3_600_000
    response = client.post(
        "/api/v1/write", snappy(request.SerializeToString()), content_type=V2_TYPE
    )
    assert response.status == 204
    db = migrated.database
    assert count(migrated, f"SELECT count(*) FROM {db}.sample_starts") == 1
