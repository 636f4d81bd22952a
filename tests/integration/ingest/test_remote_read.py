"""Remote read: series written by remote write come back through /api/v1/read, selected
by Prometheus's matcher semantics, on every store."""

from __future__ import annotations

import re
import struct
import time

import cramjam
import pytest

from warehouse.wire.prometheus import READ, V1, V2

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
T0 = (int(time.time()) - 3600) * 1000
STEP = 15_000

SERIES = [
    {"__name__": "vllm:num_requests_running", "model": "llama-3-8b", "zone": "a", "job": "vllm"},
    {"__name__": "vllm:num_requests_running", "model": "llama-3-70b", "zone": "b", "job": "vllm"},
    {"__name__": "vllm:num_requests_running", "model": "qwen2-72b", "job": "vllm"},
    {"__name__": "up", "job": "vllm", "instance": "10.0.0.1:8000"},
    {"__name__": "up", "job": "gateway", "instance": "10.0.0.2:9000"},
    {"__name__": "http_request_duration_seconds_bucket", "le": "0.1", "job": "gateway"},
    {"__name__": "http_request_duration_seconds_bucket", "le": "+Inf", "job": "gateway"},
]
SPECIAL = [STALE, float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 5e-324, 1.5]


def values_of(index: int) -> list[float]:
    """Series 0 carries the special values; the others count up."""
    if index == 0:
        return SPECIAL
    return [float(index * 100 + k) for k in range(10)]


def write_body() -> bytes:
    request = V1.WriteRequest()
    for index, labels in enumerate(SERIES):
        series = request.timeseries.add()
        for name, value in labels.items():
            series.labels.add(name=name, value=value)
        for k, value in enumerate(values_of(index)):
            series.samples.add(value=value, timestamp=T0 + k * STEP)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def read_body(*queries: READ.Query, accepted: tuple[int, ...] = ()) -> bytes:
    request = READ.ReadRequest(queries=list(queries), accepted_response_types=list(accepted))
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def query(*matchers: tuple[str, str, str], start: int = T0, end: int = T0 + 3_600_000):
    types = {"=": 0, "!=": 1, "=~": 2, "!~": 3}
    return READ.Query(
        start_timestamp_ms=start,
        end_timestamp_ms=end,
        matchers=[READ.LabelMatcher(type=types[op], name=n, value=v) for n, op, v in matchers],
    )


def read(client, *queries, **headers) -> list[list[tuple[dict[str, str], list[tuple]]]]:
    response = client.post(
        "/api/v1/read",
        read_body(*queries),
        content_type="application/x-protobuf",
        content_encoding="snappy",
        x_prometheus_remote_read_version="0.1.0",
        **headers,
    )
    assert response.status == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    assert response.headers["content-encoding"] == "snappy"
    decoded = READ.ReadResponse.FromString(bytes(cramjam.snappy.decompress_raw(response.body)))
    return [
        [
            (
                {label.name: label.value for label in series.labels},
                [(s.timestamp, _bits(s.value)) for s in series.samples],
            )
            for series in result.timeseries
        ]
        for result in decoded.results
    ]


def _bits(value: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def expected(*matchers: tuple[str, str, str], start: int = T0, end: int = T0 + 3_600_000):
    """What Prometheus would answer: an absent label is "", patterns fully anchored."""

    def holds(labels: dict[str, str], name: str, op: str, value: str) -> bool:
        have = labels.get(name, "")
        if op in ("=~", "!~"):
            found = re.fullmatch(value, have) is not None
            return found if op == "=~" else not found
        return (have == value) if op == "=" else (have != value)

    chosen = []
    for index, labels in enumerate(SERIES):
        if all(holds(labels, *m) for m in matchers):
            samples = [
                (T0 + k * STEP, _bits(v))
                for k, v in enumerate(values_of(index))
                if start <= T0 + k * STEP <= end
            ]
            if samples:
                chosen.append((dict(labels), samples))
    return sorted(chosen, key=lambda s: sorted(s[0].items()))


@pytest.fixture
def written(client):
    response = client.post(
        "/api/v1/write",
        write_body(),
        content_type="application/x-protobuf",
        content_encoding="snappy",
    )
    assert response.status == 204, response.text
    return client


MATCHERS = {
    "by name": [("__name__", "=", "up")],
    "name and label": [("__name__", "=", "vllm:num_requests_running"), ("zone", "=", "a")],
    "absent label is empty": [("__name__", "=", "vllm:num_requests_running"), ("zone", "=", "")],
    "not equal keeps the absent": [("job", "=", "vllm"), ("zone", "!=", "a")],
    "regex is anchored": [("model", "=~", "llama-3")],
    "regex alternation": [("model", "=~", "llama-3-(8|70)b")],
    "negative regex": [("__name__", "=~", "vllm:.*"), ("model", "!~", "llama.*")],
    "regex on the name": [("__name__", "=~", "http_.*_bucket"), ("le", "=~", r"\+Inf|0\.1")],
    "regex matching empty": [("job", "=~", "gateway"), ("instance", "=~", ".*")],
    "nothing": [("__name__", "=", "absent_metric")],
}


@pytest.mark.parametrize("matchers", list(MATCHERS.values()), ids=list(MATCHERS))
def test_matchers_select_as_prometheus_does(written, matchers):
    (got,) = read(written, query(*matchers))
    assert got == expected(*matchers)


def test_special_values_and_the_staleness_marker_keep_their_bits(written):
    (got,) = read(written, query(("model", "=", "llama-3-8b")))
    ((labels, samples),) = got
    assert list(labels) == sorted(labels)  # labels sorted by name, __name__ among them
    assert [bits for _, bits in samples] == [_bits(v) for v in SPECIAL]


def test_both_ends_of_the_range_are_included(written):
    start, end = T0 + 2 * STEP, T0 + 5 * STEP
    (got,) = read(written, query(("__name__", "=", "up"), start=start, end=end))
    assert got == expected(("__name__", "=", "up"), start=start, end=end)
    assert [t for t, _ in got[0][1]] == [T0 + k * STEP for k in range(2, 6)]


def test_several_queries_answer_in_order(written):
    first, second = [("job", "=", "gateway")], [("__name__", "=", "up")]
    got = read(written, query(*first), query(*second), query(("job", "=", "nobody")))
    assert got == [expected(*first), expected(*second), []]


def write_v2(client, request: V2.Request) -> None:
    response = client.post(
        "/api/v1/write",
        bytes(cramjam.snappy.compress_raw(request.SerializeToString())),
        content_type="application/x-protobuf;proto=io.prometheus.write.v2.Request",
        content_encoding="snappy",
    )
    assert response.status == 204, response.text


def test_a_series_written_by_remote_write_2_reads_back_with_its_labels(written):
    symbols = ["", "__name__", "llm_tokens_total", "model", "llama-3", "zone", "é:1"]
    request = V2.Request(symbols=symbols)
    series = request.timeseries.add(labels_refs=[1, 2, 3, 4, 5, 6])
    series.samples.add(value=7.0, timestamp=T0)
    write_v2(written, request)
    (got,) = read(written, query(("__name__", "=", "llm_tokens_total")))
    assert got == [
        ({"__name__": "llm_tokens_total", "model": "llama-3", "zone": "é:1"}, [(T0, _bits(7.0))])
    ]


def native_histograms() -> list:
    """An integer histogram (bucket deltas, two spans each side) and a float one with
    custom buckets (schema -53) and a NaN sum with a payload."""
    whole = V2.Histogram(
        count_int=12, sum=3.25, schema=2, zero_threshold=1e-128, zero_count_int=2,
        timestamp=T0, start_timestamp=T0 - 60_000, reset_hint=2,
    )  # fmt: skip
    whole.positive_spans.add(offset=-3, length=2)
    whole.positive_spans.add(offset=4, length=2)
    whole.positive_deltas.extend([1, 2, -1, 3])
    whole.negative_spans.add(offset=1, length=1)
    whole.negative_deltas.extend([1])
    nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0]
    custom = V2.Histogram(count_float=4.5, sum=nan, schema=-53, timestamp=T0 + STEP)
    custom.positive_spans.add(offset=0, length=3)
    custom.positive_counts.extend([0.5, 1.0, 3.0])
    custom.custom_values.extend([0.1, 0.5, 1.0])
    return [whole, custom]


def test_native_histograms_read_back_as_native_histograms(written):
    symbols = ["", "__name__", "vllm:e2e_request_latency_seconds", "model", "llama-3"]
    request = V2.Request(symbols=symbols)
    series = request.timeseries.add(labels_refs=[1, 2, 3, 4])
    series.histograms.extend(native_histograms())
    write_v2(written, request)
    body = read_body(query(("__name__", "=", "vllm:e2e_request_latency_seconds")))
    answer = written.post("/api/v1/read", body)
    assert answer.status == 200, answer.text
    decoded = READ.ReadResponse.FromString(bytes(cramjam.snappy.decompress_raw(answer.body)))
    ((got,),) = [result.timeseries for result in decoded.results]
    assert [(label.name, label.value) for label in got.labels] == [
        ("__name__", "vllm:e2e_request_latency_seconds"),
        ("model", "llama-3"),
    ]
    assert not got.samples
    wanted = []
    for histogram in native_histograms():
        histogram.ClearField("start_timestamp")  # 1.0's Histogram has none
        wanted.append(V1.Histogram.FromString(histogram.SerializeToString()))
    assert [h.SerializeToString(deterministic=True) for h in got.histograms] == [
        h.SerializeToString(deterministic=True) for h in wanted
    ]


# -- refusals ---------------------------------------------------------------------------


def post(client, body: bytes, **headers: str):
    return client.post("/api/v1/read", body, **headers)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xff not snappy", "not valid snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\x05\x08")), "not a valid prometheus.ReadRequest"),
        (read_body(query(("job", "=~", "(unclosed"))), "bad regular expression"),
        (read_body(query(("job", "=~", "(?=ahead)x"))), "invalid perl operator"),
        (read_body(query(("job", "=~", "a{1001}"))), "invalid repetition size"),
        (read_body(query(("", "=", "x"))), "without a label name"),
        (read_body(query(("job", "=", "x")), accepted=(1,)), "SAMPLES"),
    ],
    ids=["not snappy", "not protobuf", "bad regex", "lookahead", "repeat", "no name", "type"],
)
def test_a_bad_read_is_a_400_naming_the_problem(refusing_client, body, message):
    response = post(refusing_client, body)
    assert response.status == 400 and message in response.text, response.text


def test_re2_syntax_that_python_lacks_is_taken(written):
    matchers = [("model", "=~", r"\p{L}+-3-\d+b"), ("zone", "=~", r"\Qa\E|b")]
    (got,) = read(written, query(*matchers))
    assert [labels["model"] for labels, _ in got] == ["llama-3-70b", "llama-3-8b"]


def test_a_dot_stops_at_a_newline_as_in_prometheus(written):
    request = V1.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="multiline")
    series.labels.add(name="v", value="a\nb")
    series.samples.add(value=1.0, timestamp=T0)
    body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    assert written.post("/api/v1/write", body, content_encoding="snappy").status == 204
    assert read(written, query(("__name__", "=", "multiline"), ("v", "=~", "a.b"))) == [[]]
    assert read(written, query(("__name__", "=", "multiline"), ("v", "=~", ".*"))) == [[]]
    (got,) = read(written, query(("__name__", "=", "multiline"), ("v", "=~", "a\nb")))
    assert len(got) == 1


def test_an_open_range_and_a_reversed_one(written):
    """Prometheus sends its MinTime and MaxTime for a range it leaves open, and answers
    a range that ends before it starts with nothing."""
    everything = query(("__name__", "=", "up"), start=-(2**63), end=2**63 - 1)
    assert read(written, everything) == [expected(("__name__", "=", "up"), start=0, end=2**62)]
    assert read(written, query(("__name__", "=", "up"), start=T0 + 10, end=T0)) == [[]]


def test_an_unknown_matcher_type_is_a_400(refusing_client):
    request = READ.ReadRequest(queries=[query()])
    request.queries[0].matchers.add(type=9, name="job", value="x")
    response = post(
        refusing_client, bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
    )
    assert response.status == 400 and "unknown label matcher type 9" in response.text


def test_other_media_types_are_415(refusing_client):
    body = read_body(query(("job", "=", "x")))
    assert post(refusing_client, body, content_type="application/json").status == 415
    assert post(refusing_client, body, content_encoding="gzip").status == 415


def test_a_read_over_the_limits_is_refused_not_answered_in_part(make_client):
    client = make_client(remote_read_max_samples=25)
    assert client.post("/api/v1/write", write_body(), content_encoding="snappy").status == 204
    response = post(client, read_body(query(("job", "=", "vllm"))))  # 28 samples
    assert response.status == 400 and "remote_read_max_samples" in response.text
    assert read(client, query(("__name__", "=", "up")))[0] == expected(("__name__", "=", "up"))
    client = make_client(remote_read_max_series=2)
    response = post(client, read_body(query(("job", "=", "vllm"))))
    assert response.status == 400 and "remote_read_max_series" in response.text


def test_reads_need_the_write_credentials(make_client):
    client = make_client(auth_token="s3cret")
    body = read_body(query(("job", "=", "x")))
    assert post(client, body).status == 401
    assert post(client, body, authorization="Bearer s3cret").status == 200


def tenant_body(value: float) -> bytes:
    request = V1.WriteRequest()
    series = request.timeseries.add()
    for name, label in (("__name__", "up"), ("job", "vllm"), ("__tenant__", "spoofed")):
        series.labels.add(name=name, value=label)
    series.samples.add(value=value, timestamp=T0)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def test_in_multi_tenant_mode_a_read_sees_its_tenants_series_only(make_client):
    """The same labels from two tenants are two series; each tenant reads its own, without
    the `__tenant__` label the warehouse keeps them apart by (a sender's is overwritten)."""
    client = make_client(tenant_header="X-Scope-OrgID")
    for tenant, value in (("acme", 1.0), ("globex", 2.0)):
        response = client.post(
            "/api/v1/write", tenant_body(value), content_encoding="snappy", x_scope_orgid=tenant
        )
        assert response.status == 204, response.text
    for tenant, value in (("acme", 1.0), ("globex", 2.0), ("initech", None)):
        (got,) = read(client, query(("job", "=", "vllm")), x_scope_orgid=tenant)
        if value is None:
            assert got == []
        else:
            assert got == [({"__name__": "up", "job": "vllm"}, [(T0, _bits(value))])]
    body = read_body(query(("job", "=", "vllm")))
    missing = post(client, body)
    assert missing.status == 400 and "missing tenant header X-Scope-OrgID" in missing.text
    crossing = post(client, read_body(query(("__tenant__", "=", "globex"))), x_scope_orgid="acme")
    assert crossing.status == 400 and "set by the tenant header" in crossing.text
