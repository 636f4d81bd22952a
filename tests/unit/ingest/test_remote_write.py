"""Remote-write decoding: real payloads built with the message classes, no database.

Run this file directly for the decode throughput figures:
``.venv/bin/python tests/unit/ingest/test_remote_write.py``.
"""

from __future__ import annotations

import hashlib
import random
import struct
import sys
import time
import uuid

import numpy as np
import pyarrow as pa
import pytest
from payloads import Symbols, v1, v2

from warehouse.errors import IngestError
from warehouse.ingest import remote_write
from warehouse.ingest.remote_write import (
    EXEMPLARS_SCHEMA,
    HISTOGRAMS_SCHEMA,
    METADATA_SCHEMA,
    SAMPLES_SCHEMA,
    SERIES_SCHEMA,
    _decode_v1_python,
    decode_v1,
    decode_v2,
    series_id,
    series_key,
)
from warehouse.ingest.remote_write_tables import with_tenant
from warehouse.wire import prometheus as proto
from warehouse.wire.prometheus import V1, V2

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0]
T0 = 1_700_000_000_000


def bits(values) -> list[int]:
    return np.asarray(values, np.float64).view(np.uint64).tolist()


def as_dicts(table: pa.Table) -> list[dict]:
    return table.to_pylist()


# --- decoding --------------------------------------------------------------------------


def test_v1_series_samples_and_ids():
    body = v1(
        ([("__name__", "up"), ("job", "api"), ("instance", "a:1")], [(T0, 1.0), (T0 + 15, 2.5)]),
        ([("__name__", "llm_ttft_seconds"), ("model", "m")], [(T0 + 5, 0.25)]),
    )
    decoded = decode_v1(body)

    assert decoded.series.schema == SERIES_SCHEMA
    assert decoded.samples.schema == SAMPLES_SCHEMA
    series = as_dicts(decoded.series)
    assert [s["metric_name"] for s in series] == ["up", "llm_ttft_seconds"]
    assert series[0]["labels"] == [("instance", "a:1"), ("job", "api")]  # sorted, no __name__
    assert str(series[0]["id"]) == series_id("up", {"job": "api", "instance": "a:1"})
    assert series[0]["min_time"].timestamp() * 1000 == T0
    assert series[0]["max_time"].timestamp() * 1000 == T0 + 15
    samples = as_dicts(decoded.samples)
    assert [(str(s["id"]), s["value"]) for s in samples] == [
        (str(series[0]["id"]), 1.0),
        (str(series[0]["id"]), 2.5),
        (str(series[1]["id"]), 0.25),
    ]
    assert decoded.samples_written == 3
    assert decoded.histograms_written == decoded.exemplars_written == 0
    assert decoded.nbytes > 0


def test_the_id_layout_is_length_prefixed_and_md5_read_as_clickhouse_uuid():
    key = series_key("up", {"job": "api", "__name__": "ignored", "a": "é:1"})
    assert key == b"2:up1:a4:\xc3\xa9:13:job3:api"
    # Half the key's MD5, then half its target's (job, instance, __tenant__): 0023.
    digest, target = hashlib.md5(key).digest(), hashlib.md5(b"3:job3:api").digest()
    expected = uuid.UUID(bytes=digest[7::-1] + target[7::-1])
    assert series_id("up", {"job": "api", "a": "é:1"}) == str(expected)
    # Length prefixes keep label sets apart that plain concatenation would merge.
    assert series_id("a", {"b": "c"}) != series_id("ab", {"": "c"})
    assert series_id("m", {"a": "bc"}) != series_id("m", {"ab": "c"})


def test_label_order_does_not_change_the_id_in_either_version():
    labels = [("__name__", "requests_total"), ("zone", "b"), ("Tenant", "x"), ("model", "m")]
    shuffled = [labels[2], labels[0], labels[3], labels[1]]
    one = decode_v1(v1((labels, [(T0, 1.0)])))
    other = decode_v1(v1((shuffled, [(T0, 1.0)])))
    two = decode_v2(v2((shuffled, [(T0, 1.0)])))
    ids = {str(d.series.column("id")[0].as_py()) for d in (one, other, two)}
    assert len(ids) == 1
    assert as_dicts(two.series)[0]["labels"] == [("Tenant", "x"), ("model", "m"), ("zone", "b")]


def test_special_floats_keep_every_bit():
    values = [STALE, NAN_PAYLOAD, float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 0.0]
    samples = [(T0 + k, value) for k, value in enumerate(values)]
    for decode, build in ((decode_v1, v1), (decode_v2, v2)):
        decoded = decode(build(([("__name__", "x")], samples)))
        assert bits(decoded.samples.column("value")) == bits(values)


def test_zero_values_and_timestamps_left_off_the_wire_are_read_back():
    # proto3 omits zero fields: these series take the sample-by-sample path, the
    # others stay columnar, and the order of series is kept.
    body = v1(
        ([("__name__", "a")], [(T0, 1.0), (T0 + 1, 2.0)]),
        ([("__name__", "b")], [(T0, 0.0), (0, 3.0), (T0 + 2, 0.0)]),
        ([("__name__", "c")], [(T0, 4.0)]),
    )
    for decoded in (decode_v1(body), decode_v2(v2(*V1_AS_SERIES(body)))):
        samples = as_dicts(decoded.samples)
        names = dict(
            zip(
                decoded.series.column("id").to_pylist(),
                decoded.series.column("metric_name").to_pylist(),
                strict=True,
            )
        )
        got = [
            (names[s["id"]], int(s["timestamp"].timestamp() * 1000), s["value"]) for s in samples
        ]
        assert got == [
            ("a", T0, 1.0),
            ("a", T0 + 1, 2.0),
            ("b", T0, 0.0),
            ("b", 0, 3.0),
            ("b", T0 + 2, 0.0),
            ("c", T0, 4.0),
        ]


def test_samples_in_an_unusual_field_order_or_with_unknown_fields_are_read_exactly():
    # Hand-encoded: timestamp before value, an unknown field, and a zero value.
    value = struct.pack("<d", STALE)
    odd = b"\x10\x05\x09" + value  # timestamp 5, then the value
    extra = b"\x09" + struct.pack("<d", 2.0) + b"\x10\x06\x28\x01"  # field 5: unknown
    zero = b"\x10\x07"  # value 0.0 left off
    label = V1.Label(name="__name__", value="x").SerializeToString()
    series = b"\x0a" + bytes([len(label)]) + label
    for sample in (odd, extra, zero):
        series += b"\x12" + bytes([len(sample)]) + sample
    body = b"\x0a" + bytes([len(series)]) + series
    decoded = decode_v1(body)
    assert decoded.samples.column("timestamp").cast(pa.int64()).to_pylist() == [5, 6, 7]
    assert bits(decoded.samples.column("value")) == bits([STALE, 2.0, 0.0])


def V1_AS_SERIES(body: bytes):
    request = V1.WriteRequest.FromString(body)
    return [
        (
            [(label.name, label.value) for label in ts.labels],
            [(s.timestamp, s.value) for s in ts.samples],
        )
        for ts in request.timeseries
    ]


def test_labels_with_empty_values_are_dropped():
    body = v1(([("__name__", "x"), ("a", ""), ("b", "1")], [(T0, 1.0)]))
    decoded = decode_v1(body)
    assert as_dicts(decoded.series)[0]["labels"] == [("b", "1")]
    assert str(decoded.series.column("id")[0].as_py()) == series_id("x", {"b": "1"})


def test_repeated_series_collapse_into_one_row():
    labels = [("__name__", "x"), ("job", "j")]
    decoded = decode_v1(v1((labels, [(T0 + 10, 1.0)]), (labels[::-1], [(T0, 2.0)])))
    assert decoded.series.num_rows == 1
    row = as_dicts(decoded.series)[0]
    assert row["min_time"].timestamp() * 1000 == T0
    assert row["max_time"].timestamp() * 1000 == T0 + 10
    assert decoded.samples.num_rows == 2


def test_long_and_non_ascii_label_values():
    long_value = "ü" * 300  # 600 bytes: a two-byte length on the wire
    labels = [("__name__", "x"), ("long", long_value), ("emoji", "🙂")]
    decoded = decode_v1(v1((labels, [(T0, 1.0)])))
    assert dict(as_dicts(decoded.series)[0]["labels"]) == {"long": long_value, "emoji": "🙂"}
    assert str(decoded.series.column("id")[0].as_py()) == series_id(
        "x", {"long": long_value, "emoji": "🙂"}
    )


def test_an_empty_write_gives_empty_tables():
    for decoded in (decode_v1(b""), decode_v2(b"")):
        assert decoded.series.num_rows == decoded.samples.num_rows == 0
        assert decoded.samples.schema == SAMPLES_SCHEMA
        assert decoded.histograms.schema == HISTOGRAMS_SCHEMA
        assert decoded.exemplars.schema == EXEMPLARS_SCHEMA
        assert decoded.metadata.schema == METADATA_SCHEMA


def test_v1_histograms_exemplars_and_metadata():
    request = V1.WriteRequest()
    ts = request.timeseries.add()
    ts.labels.add(name="__name__", value="llm_e2e_seconds")
    h = ts.histograms.add(
        count_int=10,
        sum=12.5,
        schema=3,
        zero_threshold=1e-9,
        zero_count_int=1,
        timestamp=T0,
        reset_hint=2,
    )
    h.positive_spans.add(offset=-2, length=2)
    h.positive_spans.add(offset=3, length=1)
    h.positive_deltas.extend([3, -1, 4])  # absolute 3, 2, 6
    h.negative_spans.add(offset=0, length=1)
    h.negative_deltas.extend([1])
    f = ts.histograms.add(count_float=2.5, sum=1.0, schema=-53, timestamp=T0 + 1)
    f.positive_spans.add(offset=0, length=2)
    f.positive_counts.extend([0.5, 2.0])
    f.custom_values.extend([0.1, 1.0])
    e = ts.exemplars.add(value=0.75, timestamp=T0)
    e.labels.add(name="trace_id", value="abc")
    request.metadata.add(type=3, metric_family_name="llm_e2e_seconds", help="E2E", unit="seconds")

    decoded = decode_v1(request.SerializeToString())

    assert decoded.histograms.schema == HISTOGRAMS_SCHEMA
    first, second = as_dicts(decoded.histograms)
    assert first["count"] == 10 and first["sum"] == 12.5 and first["schema"] == 3
    assert first["zero_count"] == 1 and first["reset_hint"] == "no"
    assert first["start_timestamp"] is None
    assert first["positive_span_offsets"] == [-2, 3]
    assert first["positive_span_lengths"] == [2, 1]
    assert first["positive_counts"] == [3.0, 2.0, 6.0]
    assert first["negative_counts"] == [1.0]
    assert second["count"] == 2.5 and second["positive_counts"] == [0.5, 2.0]
    assert second["custom_values"] == [0.1, 1.0] and second["reset_hint"] == "unknown"
    assert decoded.histograms_written == 2
    (exemplar,) = as_dicts(decoded.exemplars)
    assert exemplar["value"] == 0.75 and exemplar["labels"] == [("trace_id", "abc")]
    assert decoded.exemplars_written == 1
    (meta,) = as_dicts(decoded.metadata)
    assert (meta["metric_family_name"], meta["type"], meta["help"], meta["unit"]) == (
        "llm_e2e_seconds",
        "histogram",
        "E2E",
        "seconds",
    )
    series_ids = decoded.series.column("id").to_pylist()
    assert decoded.histograms.column("id").to_pylist() == series_ids * 2
    assert decoded.series.column("max_time")[0].as_py().timestamp() * 1000 == T0 + 1


def test_numbers_past_the_known_metric_types_and_reset_hints_read_as_unknown():
    request = V1.WriteRequest()
    ts = request.timeseries.add()
    ts.labels.add(name="__name__", value="h")
    for hint in (3, 4, 9):  # gauge, then past the four hints
        ts.histograms.add(count_int=0, timestamp=T0 + hint, reset_hint=hint)
    for kind in (7, 8, 42):  # stateset, then past the eight types
        request.metadata.add(type=kind, metric_family_name=f"m{kind}")
    decoded = decode_v1(request.SerializeToString())
    hints = [h["reset_hint"] for h in as_dicts(decoded.histograms)]
    assert hints == ["gauge", "unknown", "unknown"]
    assert {m["metric_family_name"]: m["type"] for m in as_dicts(decoded.metadata)} == {
        "m7": "stateset",
        "m8": "unknown",
        "m42": "unknown",
    }


def plain_writes() -> dict[str, tuple]:
    """The common write of each version (float samples, labels with values, nothing
    zero) and its decoder."""
    series = [
        (
            [("__name__", f"m{i}"), ("job", "api"), ("pod", f"p-{i}")],
            [(T0 + k, k + 0.5) for k in (1, 2)],
        )
        for i in range(20)
    ]
    return {"1.0": (_decode_v1_python, v1(*series)), "2.0": (decode_v2, v2(*series))}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_the_common_write_is_read_from_its_columns_alone(version, monkeypatch):
    """As the module says: no element counts, no sample read again from its own bytes,
    no full parse of the message: the columns view and the totals view, once each."""
    decode, body = plain_writes()[version]
    expected = decode(body)
    parsed = []

    def recording(view, data, message):
        parsed.append(view)
        return real_parse(view, data, message)

    def never(*args):
        raise AssertionError("the common write took the slow path")

    real_parse = remote_write._parse
    monkeypatch.setattr(remote_write, "_parse", recording)
    monkeypatch.setattr(remote_write, "_counts", never)
    monkeypatch.setattr(remote_write, "_redo_samples", never)
    decoded = decode(body)
    views = proto.V1_COLUMNS, proto.V1_TOTALS
    if version == "2.0":
        views = proto.V2_COLUMNS, proto.V2_TOTALS
    message = "WriteRequest" if version == "1.0" else "Request"
    assert parsed == [getattr(view, message) for view in views]
    assert decoded.series.equals(expected.series) and decoded.samples.equals(expected.samples)
    assert decoded.samples.num_rows == 40


def test_the_common_1_0_write_is_decoded_in_c_with_no_limits_by_default(monkeypatch):
    if not remote_write.FAST_V1:
        pytest.skip("the C decoder was not built (test_v1_fast's extension test says why)")
    _, body = plain_writes()["1.0"]
    decoded, pivot, left_out = remote_write.decode_v1_batch([body] * 3, -(2**63))
    assert (decoded.samples.num_rows, pivot, left_out) == (120, None, [])

    def never(data):
        raise AssertionError("decoded in Python")

    monkeypatch.setattr(remote_write, "_decode_v1_python", never)
    assert decode_v1(body).samples.num_rows == 40


def test_the_c_decoder_makes_the_series_a_tenants_as_with_tenant_does():
    if not remote_write.FAST_V1:
        pytest.skip("the C decoder was not built (test_v1_fast's extension test says why)")
    request = V1.WriteRequest()
    # Label names on both sides of `__tenant__` (upper case and digits sort before it),
    # and a sender's own `__tenant__`, which the tenant replaces.
    for labels in (
        [("A", "x"), ("__name__", "up"), ("job", "vllm")],
        [("0", "y"), ("__name__", "up"), ("__tenant__", "spoofed"), ("pod", "p")],
        [("__name__", "up")],
        [("__name__", "up"), ("zone", "sh-b")],
    ):
        series = request.timeseries.add()
        for name, value in labels:
            series.labels.add(name=name, value=value)
        series.samples.add(value=1.0, timestamp=T0)
    body = request.SerializeToString()
    in_c, _, left_out = remote_write.decode_v1_batch([body], -(2**63), tenant="acme")
    plain, _, _ = remote_write.decode_v1_batch([body], -(2**63))
    assert left_out == []
    expected = with_tenant(plain, "acme")
    assert in_c.series.to_pylist() == expected.series.to_pylist()
    assert in_c.samples.to_pylist() == expected.samples.to_pylist()


def test_v2_everything():
    symbols = Symbols()
    request = V2.Request()
    counter = request.timeseries.add()
    counter.labels_refs.extend(symbols.refs([("__name__", "tokens_total"), ("model", "m")]))
    counter.samples.add(value=42.0, timestamp=T0, start_timestamp=T0 - 60_000)
    counter.metadata.type = 1
    counter.metadata.help_ref = symbols.ref("Tokens generated")
    counter.metadata.unit_ref = symbols.ref("tokens")
    e = counter.exemplars.add(value=7.0, timestamp=T0)
    e.labels_refs.extend(symbols.refs([("trace_id", "t1")]))
    hist = request.timeseries.add()
    hist.labels_refs.extend(symbols.refs([("__name__", "ttft_seconds"), ("model", "m")]))
    h = hist.histograms.add(
        count_int=3, sum=0.9, schema=0, timestamp=T0, start_timestamp=T0 - 1000, reset_hint=3
    )
    h.positive_spans.add(offset=1, length=2)
    h.positive_deltas.extend([2, -1])
    hist.metadata.type = 3
    request.symbols.extend(symbols.table)

    decoded = decode_v2(request.SerializeToString())

    assert [s["metric_name"] for s in as_dicts(decoded.series)] == ["tokens_total", "ttft_seconds"]
    assert decoded.samples_written == 1 and decoded.histograms_written == 1
    assert decoded.exemplars_written == 1
    (row,) = as_dicts(decoded.histograms)
    assert row["positive_counts"] == [2.0, 1.0] and row["reset_hint"] == "gauge"
    assert row["start_timestamp"].timestamp() * 1000 == T0 - 1000
    assert as_dicts(decoded.exemplars)[0]["labels"] == [("trace_id", "t1")]
    meta = {m["metric_family_name"]: m for m in as_dicts(decoded.metadata)}
    assert (meta["tokens_total"]["type"], meta["tokens_total"]["help"]) == (
        "counter",
        "Tokens generated",
    )
    assert meta["tokens_total"]["unit"] == "tokens"
    assert (meta["ttft_seconds"]["type"], meta["ttft_seconds"]["help"]) == ("histogram", "")


def test_v2_exemplar_labels_pair_up_and_metadata_need_give_only_a_type():
    symbols = Symbols()
    request = V2.Request()
    for name, kind in (("counted", 1), ("odd_kind", 8)):  # a counter, and past the eight
        ts = request.timeseries.add()
        ts.labels_refs.extend(symbols.refs([("__name__", name)]))
        ts.samples.add(value=1.0, timestamp=T0)
        ts.metadata.type = kind  # no help, no unit
    e = ts.exemplars.add(value=7.0, timestamp=T0)
    e.labels_refs.extend(symbols.refs([("trace_id", "t1"), ("span_id", "s2"), ("pod", "p3")]))
    request.symbols.extend(symbols.table)
    decoded = decode_v2(request.SerializeToString())
    assert as_dicts(decoded.exemplars)[0]["labels"] == [  # sorted by name
        ("pod", "p3"),
        ("span_id", "s2"),
        ("trace_id", "t1"),
    ]
    meta = {m["metric_family_name"]: m["type"] for m in as_dicts(decoded.metadata)}
    assert meta == {"counted": "counter", "odd_kind": "unknown"}
    e.labels_refs[5] = len(symbols.table)  # one past the last symbol
    del request.symbols[:]
    request.symbols.extend(symbols.table)
    refuses(decode_v2, request.SerializeToString(), r"exemplar 0: labels_refs\[5\] = \d+ is out")


def test_metadata_keeps_one_row_per_family_the_last_given():
    decoded = decode_v1(
        v1(
            metadata=[
                (1, "a_total", "old", ""),
                (2, "b", "gauge b", "bytes"),
                (1, "a_total", "new", ""),
            ]
        )
    )
    rows = {
        m["metric_family_name"]: (m["type"], m["help"], m["unit"])
        for m in as_dicts(decoded.metadata)
    }
    assert rows == {"a_total": ("counter", "new", ""), "b": ("gauge", "gauge b", "bytes")}

    symbols = Symbols()
    request = V2.Request()
    for help_text in ("first", "second"):
        ts = request.timeseries.add(labels_refs=symbols.refs([("__name__", "x"), ("k", help_text)]))
        ts.samples.add(value=1.0, timestamp=T0)
        ts.metadata.type = 2
        ts.metadata.help_ref = symbols.ref(help_text)
    request.timeseries.add(labels_refs=symbols.refs([("__name__", "y")])).samples.add(
        value=1.0, timestamp=T0
    )  # no metadata: no row
    request.symbols.extend(symbols.table)
    rows = as_dicts(decode_v2(request.SerializeToString()).metadata)
    assert [(m["metric_family_name"], m["type"], m["help"]) for m in rows] == [
        ("x", "gauge", "second")
    ]


def test_many_random_requests_match_a_sample_by_sample_reading():
    rnd = random.Random(7)
    for _ in range(30):
        series = []
        for i in range(rnd.randint(0, 40)):
            labels = [("__name__", f"m{rnd.randint(0, 3)}")]
            labels += [
                (f"l{k}", rnd.choice(["", "v", "w" * rnd.randint(1, 200)]))
                for k in rnd.sample(range(8), rnd.randint(0, 5))
            ]
            rnd.shuffle(labels)
            samples = [
                (
                    rnd.choice([0, T0 + i, -5, 2**62]),
                    rnd.choice([0.0, 1.5, -2.0, STALE, float("inf"), rnd.random()]),
                )
                for _ in range(rnd.randint(0, 6))
            ]
            series.append((labels, samples))
        expected = [
            (series_id(dict(labels)["__name__"], {k: v for k, v in labels if v}), t, v)
            for labels, samples in series
            for t, v in samples
        ]
        for decoded in (decode_v1(v1(*series)), decode_v2(v2(*series))):
            got = list(
                zip(
                    map(str, decoded.samples.column("id").to_pylist()),
                    decoded.samples.column("timestamp").cast(pa.int64()).to_pylist(),
                    decoded.samples.column("value").to_pylist(),
                    strict=True,
                )
            )
            assert [(i, t) for i, t, _ in got] == [(i, t) for i, t, _ in expected]
            assert bits([v for _, _, v in got]) == bits([v for _, _, v in expected])


# --- validation ------------------------------------------------------------------------


def refuses(decode, body, match):
    with pytest.raises(IngestError, match=match) as caught:
        decode(body)
    assert caught.value.http_status == 400


def test_corrupt_protobuf_is_refused():
    refuses(decode_v1, b"\x0a\xff\xff", "not a valid prometheus.WriteRequest")
    refuses(decode_v2, b"\x2a\x05ab", "not a valid io.prometheus.write.v2.Request")
    refuses(decode_v1, v1(([("__name__", "x")], [])) + b"\x0a\x03\x0a\x01\xff", "not a valid")


def test_a_series_without_a_name_is_refused():
    body = v1(([("__name__", "ok")], [(T0, 1.0)]), ([("job", "api")], [(T0, 1.0)]))
    refuses(decode_v1, body, r"series 1: no __name__ label \(labels: \{'job': 'api'\}\)")
    refuses(decode_v2, v2(*V1_AS_SERIES(body)), "series 1: no __name__ label")


def test_duplicate_label_names_are_refused():
    body = v1(([("__name__", "x"), ("job", "a"), ("job", "b")], [(T0, 1.0)]))
    refuses(decode_v1, body, "series 0: duplicate label name 'job'")
    refuses(decode_v2, v2(*V1_AS_SERIES(body)), "series 0: duplicate label name 'job'")


def test_an_empty_label_name_is_refused():
    body = v1(([("__name__", "x")], [(T0, 1.0)]), ([("__name__", "x"), ("", "v")], [(T0, 1.0)]))
    refuses(decode_v1, body, "series 1: empty label name \\(with value 'v'\\)")
    refuses(decode_v2, v2(*V1_AS_SERIES(body)), "series 1: empty label name")


def test_v1_metadata_without_a_family_name_is_refused():
    refuses(decode_v1, v1(metadata=[(1, "", "help", "")]), "metadata 0: empty metric_family_name")


def test_v2_symbols_must_start_with_the_empty_string():
    request = V2.Request(symbols=["__name__", "x"])
    request.timeseries.add(labels_refs=[0, 1]).samples.add(value=1, timestamp=T0)
    refuses(decode_v2, request.SerializeToString(), "symbols\\[0\\] must be the empty string")


def test_v2_label_refs_out_of_range_and_odd_are_refused():
    request = V2.Request(symbols=["", "__name__", "x"])
    request.timeseries.add(labels_refs=[1, 2]).samples.add(value=1, timestamp=T0)
    request.timeseries.add(labels_refs=[1, 2, 1, 9]).samples.add(value=1, timestamp=T0)
    refuses(
        decode_v2,
        request.SerializeToString(),
        r"series 1: labels_refs\[3\] = 9 is out of range \(3 symbols\)",
    )
    del request.timeseries[1]
    request.timeseries.add(labels_refs=[1, 3]).samples.add(value=1, timestamp=T0)
    refuses(
        decode_v2,
        request.SerializeToString(),
        r"series 1: labels_refs\[1\] = 3 is out of range \(3 symbols\)",  # one past the last
    )
    del request.timeseries[1]
    request.timeseries.add(labels_refs=[1, 2, 1]).samples.add(value=1, timestamp=T0)
    refuses(decode_v2, request.SerializeToString(), r"series 1: odd number of labels_refs \(3\)")


def test_v2_metadata_refs_out_of_range_are_refused():
    for field in ("help_ref", "unit_ref"):
        request = V2.Request(symbols=["", "__name__", "x"])
        ts = request.timeseries.add(labels_refs=[1, 2])
        ts.samples.add(value=1, timestamp=T0)
        setattr(ts.metadata, field, 3)
        refuses(
            decode_v2,
            request.SerializeToString(),
            f"series 0: metadata {field} = 3 is out of range",
        )


def test_v2_a_series_with_samples_and_histograms_is_refused():
    request = V2.Request(symbols=["", "__name__", "x"])
    ts = request.timeseries.add(labels_refs=[1, 2])
    ts.samples.add(value=1, timestamp=T0)
    ts.histograms.add(count_int=0, timestamp=T0)
    refuses(decode_v2, request.SerializeToString(), "series 0: has both samples and histograms")


def test_v2_an_exemplar_without_timestamp_is_refused():
    request = V2.Request(symbols=["", "__name__", "x", "trace_id", "t"])
    ts = request.timeseries.add(labels_refs=[1, 2])
    ts.samples.add(value=1, timestamp=T0)
    ts.exemplars.add(value=1.0, labels_refs=[3, 4], timestamp=T0)
    ts.exemplars.add(value=1.0, labels_refs=[3, 4])
    refuses(decode_v2, request.SerializeToString(), "series 0, exemplar 1: no timestamp")
    ts.exemplars[1].timestamp = T0
    ts.exemplars[1].labels_refs.append(3)
    refuses(decode_v2, request.SerializeToString(), "series 0, exemplar 1: odd number")


def test_histograms_whose_spans_do_not_match_their_buckets_are_refused():
    for decode, request in ((decode_v1, V1.WriteRequest()), (decode_v2, V2.Request())):
        if decode is decode_v2:
            request.symbols.extend(["", "__name__", "h"])
            ts = request.timeseries.add(labels_refs=[1, 2])
        else:
            ts = request.timeseries.add()
            ts.labels.add(name="__name__", value="h")
        h = ts.histograms.add(count_int=3, timestamp=T0)
        h.positive_spans.add(offset=0, length=3)
        h.positive_deltas.extend([1, 1])
        refuses(
            decode,
            request.SerializeToString(),
            "series 0, histogram 0: positive_spans cover 3 buckets but 2 positive_deltas",
        )
        del h.positive_deltas[:]
        h.negative_spans.add(offset=0, length=1)
        h.positive_deltas.extend([1, 0, 0])
        h.negative_counts.extend([1.0, 2.0])
        refuses(decode, request.SerializeToString(), "negative_spans cover 1 buckets but 2")


def test_nothing_is_returned_for_a_write_with_one_bad_series():
    good = [([("__name__", f"m{i}")], [(T0, float(i))]) for i in range(100)]
    bad = ([("__name__", "x"), ("a", "1"), ("a", "2")], [(T0, 1.0)])
    refuses(decode_v1, v1(*good, bad, *good), "series 100: duplicate label name 'a'")


# --- throughput ------------------------------------------------------------------------


def throughput_body(n_series: int, n_samples: int, zeros: bool = False) -> bytes:
    rnd = random.Random(1)
    request = V1.WriteRequest()
    for i in range(n_series):
        ts = request.timeseries.add()
        for name, value in (
            ("__name__", f"vllm:metric_{i % 20}"),
            ("instance", f"host-{i % 50}:8000"),
            ("job", "vllm"),
            ("model_name", f"model-{i % 7}"),
            ("request_id", f"req-{i:08d}"),
            ("tenant", f"t{i % 13}"),
            ("zone", "eu-1a"),
        ):
            ts.labels.add(name=name, value=value)
        for j in range(n_samples):
            value = 0.0 if zeros and i % 10 == 0 else rnd.random() * 100 + 1
            ts.samples.add(value=value, timestamp=T0 + j * 15_000)
    return request.SerializeToString()


def main() -> None:
    """Best of five, in CPU time of this process (wall time suffers from neighbours)."""
    for n_series, n_samples, zeros in (
        (2000, 250, False),
        (2000, 250, True),
        (100_000, 1, False),
        (100_000, 1, True),
    ):
        body = throughput_body(n_series, n_samples, zeros)
        for name, decode in (("C", decode_v1), ("Python", _decode_v1_python)):
            decode(body)
            best = min(_timed(decode, body) for _ in range(5))
            total = n_series * n_samples
            note = ", every 10th series all zeros" if zeros else ""
            print(
                f"{name:>6}: {n_series:>7,} series x {n_samples:>3} samples{note}: "
                f"{best * 1000:6.0f} ms CPU, {total / best / 1e6:.2f} M samples/s"
            )


def _timed(function, argument) -> float:
    start = time.process_time()
    function(argument)
    return time.process_time() - start


if __name__ == "__main__":
    sys.exit(main())


def test_v2_float_start_timestamps_are_kept_once_per_distinct_value():
    symbols = Symbols()
    request = V2.Request()
    counter = request.timeseries.add()
    counter.labels_refs.extend(symbols.refs([("__name__", "tokens_total"), ("pod", "a")]))
    for k in range(3):  # the same start on three samples, then a counter reset
        counter.samples.add(value=10.0 + k, timestamp=T0 + k, start_timestamp=T0 - 60_000)
    counter.samples.add(value=1.0, timestamp=T0 + 3, start_timestamp=T0 + 2)
    gauge = request.timeseries.add()
    gauge.labels_refs.extend(symbols.refs([("__name__", "temperature"), ("pod", "a")]))
    gauge.samples.add(value=21.5, timestamp=T0)  # no start timestamp: none kept
    request.symbols.extend(symbols.table)

    decoded = decode_v2(request.SerializeToString())

    counter_id = decoded.series.column("id")[0].as_py()
    starts = [(r["id"], r["start_timestamp"].timestamp() * 1000) for r in as_dicts(decoded.starts)]
    assert starts == [(counter_id, T0 - 60_000), (counter_id, T0 + 2)]
    assert decoded.samples_written == 5


def test_v1_has_no_start_timestamps():
    request = V1.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="up")
    series.samples.add(value=1.0, timestamp=T0)
    assert decode_v1(request.SerializeToString()).starts.num_rows == 0
