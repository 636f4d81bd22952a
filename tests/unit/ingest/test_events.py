"""Per-request events: what a sender may send, what is stored, and what is refused.

Every decoder returns a table with exactly REQUESTS_SCHEMA, or raises IngestError naming
the first bad line (NDJSON, 1-based) or row (Arrow and Parquet, 0-based) and the field.
No database is needed here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warehouse.errors import IngestError
from warehouse.ingest import events
from warehouse.ingest.events import (
    decode_arrow_stream,
    decode_ndjson,
    derive_tpot_ms,
    encode_ndjson,
    read_batches,
    read_file,
)
from warehouse.ingest.events import ndjson as ndjson_decoder
from warehouse.model import ERROR_CLASSES, LABEL_COLUMNS, REQUESTS_SCHEMA, STATUSES
from warehouse.synthetic import synthetic_requests

MAY_1 = 1714564800000
"""2024-05-01T12:00:00Z in epoch milliseconds."""


def record(**fields) -> dict:
    """The smallest valid record, with ``fields`` on top (None removes a field)."""
    base = {"ts": MAY_1, "request_id": "req-1", "status": "ok"}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def ndjson(*records: dict | str) -> bytes:
    """One line per record; a str is put in as it is (raw text, blank lines)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    return ("\n".join(lines) + "\n").encode()


def decode_one(**fields) -> dict:
    """Decode one record and return the stored row as a dict."""
    table = decode_ndjson(ndjson(record(**fields)))
    assert table.schema == REQUESTS_SCHEMA
    return table.to_pylist()[0]


def arrow_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def refusal(body: bytes) -> str:
    with pytest.raises(IngestError) as caught:
        decode_ndjson(body)
    assert caught.value.http_status == 400
    return str(caught.value)


def arrow_refusal(table: pa.Table) -> str:
    with pytest.raises(IngestError) as caught:
        decode_arrow_stream(arrow_stream(table))
    return str(caught.value)


@contextmanager
def small_pieces(size: int = 256) -> Iterator[None]:
    """Make decode_ndjson cut bodies into pieces of ``size`` bytes, as it does big ones."""
    kept, ndjson_decoder.PIECE_BYTES = ndjson_decoder.PIECE_BYTES, size
    try:
        yield
    finally:
        ndjson_decoder.PIECE_BYTES = kept


@pytest.fixture(scope="module")
def requests_table() -> pa.Table:
    return synthetic_requests(3000, seed=11)


# --- round trips -----------------------------------------------------------------------------


def test_synthetic_requests_round_trip_through_ndjson(requests_table):
    assert decode_ndjson(encode_ndjson(requests_table)).equals(requests_table)


def test_synthetic_requests_round_trip_through_an_arrow_stream(requests_table):
    assert decode_arrow_stream(arrow_stream(requests_table)).equals(requests_table)


def write_file(table: pa.Table, path) -> None:
    """``table`` written as the file type its name ends with."""
    suffix = path.suffix
    if suffix == ".parquet":
        pq.write_table(table, path)
    elif suffix == ".arrow":
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
    elif suffix == ".arrows":
        path.write_bytes(arrow_stream(table))
    elif suffix == ".feather":
        feather.write_feather(table, path)
    else:
        path.write_bytes(encode_ndjson(table))


@pytest.mark.parametrize(
    "suffix", [".parquet", ".arrow", ".arrows", ".feather", ".ndjson", ".jsonl"]
)
def test_synthetic_requests_round_trip_through_every_file_type(requests_table, tmp_path, suffix):
    path = tmp_path / f"requests{suffix}"
    write_file(requests_table, path)
    assert read_file(path).equals(requests_table)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".ndjson"])
def test_a_file_streams_in_pieces_that_add_up_to_it(requests_table, tmp_path, suffix):
    path = tmp_path / f"requests{suffix}"
    write_file(requests_table, path)
    pieces = list(read_batches(path, piece_bytes=4096, piece_rows=7))
    assert len(pieces) > 3 and max(p.num_rows for p in pieces) <= max(7, 4096 // 100)
    assert pa.concat_tables(pieces).equals(requests_table)


def test_a_bad_record_deep_in_a_streamed_file_is_named_by_its_line_in_the_file(
    requests_table, tmp_path
):
    lines = encode_ndjson(requests_table.slice(0, 60)).splitlines()
    bad = json.loads(lines[49])
    bad["ttft_ms"] = -1
    lines[49] = json.dumps(bad).encode()
    path = tmp_path / "requests.ndjson"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(IngestError, match=r"requests.ndjson: line 50, field ttft_ms"):
        list(read_batches(path, piece_bytes=2048))


def test_a_line_longer_than_a_piece_is_refused_not_held(tmp_path):
    path = tmp_path / "endless.ndjson"
    path.write_bytes(b'{"request_id": "' + b"x" * 100_000)  # a line that never ends
    with pytest.raises(IngestError, match="line 1 is longer than 10,000 bytes"):
        list(read_batches(path, piece_bytes=10_000))


def test_a_file_without_a_record_is_refused(tmp_path):
    path = tmp_path / "blank.ndjson"
    path.write_bytes(b"\n\n")
    with pytest.raises(IngestError, match=r"blank\.ndjson: empty body: no records"):
        read_file(path)


def test_an_arrow_file_named_arrow_may_hold_a_stream(requests_table, tmp_path):
    path = tmp_path / "requests.arrow"
    path.write_bytes(arrow_stream(requests_table))
    assert read_file(path).equals(requests_table)


def test_file_errors_begin_with_the_path(tmp_path):
    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(ndjson(record(), record(ttft_ms=-4)))
    with pytest.raises(IngestError, match=r"bad\.ndjson: line 2, field ttft_ms"):
        read_file(bad)
    with pytest.raises(IngestError, match=r"unknown file type; use one of \.ndjson"):
        read_file(tmp_path / "requests.csv")
    with pytest.raises(IngestError, match=r"missing\.parquet: cannot read"):
        read_file(tmp_path / "missing.parquet")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    with pytest.raises(IngestError, match=r"garbage\.parquet: not a valid \.parquet file"):
        read_file(garbage)


def test_a_big_body_is_read_in_pieces_whose_attrs_keys_differ(requests_table):
    body = encode_ndjson(requests_table) + ndjson(record(request_id="zz", attrs={"rare": "1"}))
    with small_pieces(4096):
        decoded = decode_ndjson(body)
    assert decoded.equals(decode_ndjson(body))
    assert decoded.column("attrs").to_pylist()[-1] == [("rare", "1")]
    assert decoded.slice(0, requests_table.num_rows).equals(requests_table)


def test_type_changes_between_pieces_are_refused_never_a_crash():
    # One pyarrow read of this body in 128-byte blocks crashes the process (pyarrow 26),
    # as 4 MiB blocks do when the second line is over 4 MiB. Each piece is read as a
    # block of its own: the reader reports the error and the line is named.
    first = record(request_id="r1") | {"attrs": ["x"]}
    second = record(request_id="r2", tenant=None, attrs=20.567331713900316, tpot_ms=982893525218)
    with small_pieces(128):
        assert refusal(ndjson(first, second)) == (
            'line 1, field attrs: must be an object whose values are strings, got ["x"]'
        )


def test_the_slow_path_decodes_the_same_table_as_the_fast_one(requests_table):
    body = encode_ndjson(requests_table)
    assert events._decode_lines(body).equals(decode_ndjson(body))


# --- ts -----------------------------------------------------------------------------------


def stored_ts(value) -> int:
    """What ``ts`` becomes, as epoch milliseconds."""
    return int(decode_one(ts=value)["ts"].timestamp() * 1000)


@pytest.mark.parametrize(
    ("sent", "ms"),
    [
        (MAY_1, MAY_1),
        (0, 0),
        ("2024-05-01T12:00:00Z", MAY_1),
        ("2024-05-01T12:00:00.123Z", MAY_1 + 123),
        ("2024-05-01T12:00:00.5Z", MAY_1 + 500),
        ("2024-05-01T12:00:00.123999999Z", MAY_1 + 123),  # finer than ms: truncated
        ("2024-05-01T14:00:00+02:00", MAY_1),
        ("2024-05-01T06:30:00-05:30", MAY_1),
        ("2024-05-01T14:00:00+0200", MAY_1),
        ("2024-05-01 12:00:00z", MAY_1),
        ("2024-05-01t12:00:00.250+00:00", MAY_1 + 250),
    ],
)
def test_ts_is_epoch_ms_or_rfc3339_with_an_offset_stored_as_utc_ms(sent, ms):
    assert stored_ts(sent) == ms


@pytest.mark.parametrize(
    "sent",
    [
        "2024-05-01T12:00:00",  # no offset: which zone?
        "2024-05-01",
        "2024-02-30T12:00:00Z",  # no such day
        "2024-05-01T24:00:00Z",
        "2024-05-01T12:00:00+24:00",
        "yesterday",
        "1714564800000",  # a number in a string
        1714564800.5,  # not an integer
        1714564800000000,  # microseconds, year 56000
        -1,
        True,
    ],
)
def test_ts_in_any_other_form_is_refused(sent):
    message = refusal(ndjson(record(ts=sent)))
    assert message.startswith("line 1, field ts: must be epoch milliseconds (an integer) or an")
    assert message.endswith(f"got {json.dumps(sent)}")


def test_one_body_may_mix_integer_and_text_ts():
    body = ndjson(record(ts=MAY_1), record(ts="2024-05-01T12:00:01Z"), record(ts=MAY_1 + 2000))
    ts = decode_ndjson(body).column("ts").cast(pa.int64()).to_pylist()
    assert ts == [MAY_1, MAY_1 + 1000, MAY_1 + 2000]


def test_arrow_ts_may_be_integers_text_or_a_zoned_timestamp():
    paris = timezone(timedelta(hours=2))
    moment = datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=paris)
    for column in [
        pa.array([MAY_1 + 123], pa.int64()),
        pa.array([MAY_1 + 123], pa.uint64()),
        pa.array(["2024-05-01T14:00:00.123+02:00"]),
        pa.array([moment], pa.timestamp("us", tz="Europe/Paris")),
        pa.array([moment], pa.timestamp("ns", tz="UTC")),
    ]:
        table = pa.table({"ts": column, "request_id": ["r"], "status": ["ok"]})
        decoded = decode_arrow_stream(arrow_stream(table))
        assert decoded.column("ts").cast(pa.int64()).to_pylist() == [MAY_1 + 123], column.type


def test_an_arrow_timestamp_without_a_time_zone_is_refused():
    table = pa.table(
        {"ts": pa.array([1], pa.timestamp("ms")), "request_id": ["r"], "status": ["ok"]}
    )
    assert arrow_refusal(table) == (
        "column ts: timestamp[ms] has no time zone; give the column one (for instance UTC)"
    )


# --- defaults ---------------------------------------------------------------------------------


def test_absent_fields_take_their_defaults():
    row = decode_one()
    assert all(row[name] == "" for name in LABEL_COLUMNS)
    assert row["error_class"] == row["finish_reason"] == ""
    assert row["http_status"] == 0
    assert row["is_probe"] is False
    assert row["attrs"] == []
    for name in ("queue_ms", "ttft_ms", "e2e_ms", "tpot_ms", "prompt_tokens", "hallucination"):
        assert row[name] is None, name  # measures: unknown, not zero


def test_null_means_the_same_as_absent():
    nulls = {name: None for name in REQUESTS_SCHEMA.names if name not in events.REQUIRED}
    body = json.dumps({"ts": MAY_1, "request_id": "r", "status": "ok", **nulls}).encode()
    assert decode_ndjson(body).equals(decode_ndjson(ndjson(record(request_id="r"))))


def test_given_fields_are_stored_with_their_types():
    row = decode_one(
        tenant="acme",
        status="error",
        error_class="timeout",
        http_status=504,
        is_probe=True,
        ttft_ms=12.5,
        prompt_tokens=4294967295,
        consistency_score=-0.5,
    )
    assert (row["tenant"], row["status"], row["error_class"]) == ("acme", "error", "timeout")
    assert (row["http_status"], row["is_probe"], row["ttft_ms"]) == (504, True, 12.5)
    assert (row["prompt_tokens"], row["consistency_score"]) == (4294967295, -0.5)


def test_attrs_are_extra_labels_stored_with_sorted_keys_and_null_meaning_no_label():
    row = decode_one(attrs={"zone_hint": "b", "gpu": "h100", "priority": None})
    assert row["attrs"] == [("gpu", "h100"), ("zone_hint", "b")]


def test_attrs_values_that_look_like_dates_or_numbers_stay_text():
    body = ndjson(
        record(attrs={"deployed": "2024-05-01", "build": "12"}),
        record(attrs={"deployed": "2024-05-01T00:00:00Z"}),
        record(),
    )
    assert decode_ndjson(body).column("attrs").to_pylist() == [
        [("build", "12"), ("deployed", "2024-05-01")],
        [("deployed", "2024-05-01T00:00:00Z")],
        [],
    ]


# --- tpot -------------------------------------------------------------------------------------


def test_tpot_is_derived_when_absent():
    row = decode_one(e2e_ms=1010.0, ttft_ms=10.0, output_tokens=11)
    assert row["tpot_ms"] == pytest.approx(100.0)


@pytest.mark.parametrize(
    "fields",
    [
        {"e2e_ms": 1010.0, "ttft_ms": 10.0, "output_tokens": 1},
        {"e2e_ms": 1010.0, "ttft_ms": 10.0, "output_tokens": 0},
        {"e2e_ms": 1010.0, "ttft_ms": 10.0},
        {"ttft_ms": 10.0, "output_tokens": 11},
    ],
)
def test_tpot_is_null_when_undefined_not_zero(fields):
    assert decode_one(**fields)["tpot_ms"] is None


def test_a_given_tpot_is_kept_as_sent():
    row = decode_one(e2e_ms=1010.0, ttft_ms=10.0, output_tokens=11, tpot_ms=7.25)
    assert row["tpot_ms"] == 7.25


def test_tpot_is_derived_the_same_way_from_arrow():
    table = pa.table(
        {
            "ts": [MAY_1, MAY_1],
            "request_id": ["a", "b"],
            "status": ["ok", "ok"],
            "e2e_ms": [1010.0, 1010.0],
            "ttft_ms": [10.0, 10.0],
            "output_tokens": [11, 1],
        }
    )
    assert decode_arrow_stream(arrow_stream(table)).column("tpot_ms").to_pylist() == [100.0, None]


def test_derive_tpot_ms_works_on_whole_columns_from_the_stored_float32_values():
    tpot = derive_tpot_ms(
        pa.array([1010.0, 5.0, None, 300.1]),
        pa.array([10.0, 5.0, 1.0, 0.1]),
        pa.array([11, 1, 3, 4], pa.uint32()),
    )
    assert tpot.type == pa.float32()
    expected_last = (float(pa.scalar(300.1, pa.float32()).as_py()) - 0.10000000149011612) / 3
    assert tpot.to_pylist()[:3] == [100.0, None, None]
    assert tpot.to_pylist()[3] == pytest.approx(expected_last, rel=1e-7)


def test_e2e_below_ttft_is_refused_when_tpot_would_be_derived_from_them():
    message = refusal(ndjson(record(e2e_ms=5, ttft_ms=10, output_tokens=3)))
    assert message == (
        "line 1, field e2e_ms: must be >= ttft_ms, or tpot_ms = (e2e_ms - ttft_ms) / "
        "(output_tokens - 1) would be negative, got 5"
    )
    assert decode_one(e2e_ms=5, ttft_ms=10, output_tokens=3, tpot_ms=1.0)["tpot_ms"] == 1.0


# --- validation: the table's rules, with the line and field named ------------------------------

ALL_STATUSES = ", ".join(STATUSES)
ALL_CLASSES = ", ".join(ERROR_CLASSES)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"ts": None}, "field ts: is required"),
        ({"request_id": None}, "field request_id: is required"),
        ({"request_id": ""}, 'field request_id: must not be empty, got ""'),
        ({"status": None}, "field status: is required"),
        ({"status": "exploded"}, f'field status: must be one of {ALL_STATUSES}, got "exploded"'),
        (
            {"error_class": "oops"},
            f'field error_class: must be empty or one of {ALL_CLASSES}, got "oops"',
        ),
        ({"tenant": 5}, "field tenant: must be a string, got 5"),
        ({"model": ["a"]}, 'field model: must be a string, got ["a"]'),
        ({"ttft_ms": -4}, "field ttft_ms: must be a finite number >= 0, got -4"),
        ({"e2e_ms": -0.5}, "field e2e_ms: must be a finite number >= 0, got -0.5"),
        ({"queue_ms": "12"}, 'field queue_ms: must be a finite number >= 0, got "12"'),
        ({"itl_p99_ms": 1e39}, "field itl_p99_ms: must be a finite number >= 0, got 1e+39"),
        ({"tpot_ms": True}, "field tpot_ms: must be a finite number >= 0, got true"),
        (
            {"prompt_tokens": -1},
            "field prompt_tokens: must be an integer from 0 to 4294967295, got -1",
        ),
        (
            {"output_tokens": 4294967296},
            "field output_tokens: must be an integer from 0 to 4294967295, got 4294967296",
        ),
        (
            {"max_context_tokens": 2**70},
            f"field max_context_tokens: must be an integer from 0 to 4294967295, got {2**70}",
        ),
        (
            {"prompt_tokens": 1.5},
            "field prompt_tokens: must be an integer from 0 to 4294967295, got 1.5",
        ),
        (
            {"prompt_tokens": "3"},
            'field prompt_tokens: must be an integer from 0 to 4294967295, got "3"',
        ),
        (
            {"prompt_tokens": 100, "cached_prompt_tokens": 200},
            "field cached_prompt_tokens: must be <= prompt_tokens, got 200",
        ),
        (
            {"http_status": 70000},
            "field http_status: must be an integer from 0 to 65535, got 70000",
        ),
        ({"is_probe": 1}, "field is_probe: must be true or false, got 1"),
        ({"is_probe": "false"}, 'field is_probe: must be true or false, got "false"'),
        (
            {"consistency_score": "high"},
            'field consistency_score: must be a finite number, got "high"',
        ),
        (
            {"attrs": {"gpu": 1}},
            'field attrs: must be an object whose values are strings, got {"gpu": 1}',
        ),
        (
            {"attrs": "gpu=h100"},
            'field attrs: must be an object whose values are strings, got "gpu=h100"',
        ),
        (
            {"attrs": {"gpu": {"name": "h100"}}},
            "field attrs: must be an object whose values are strings, "
            'got {"gpu": {"name": "h100"}}',
        ),
    ],
)
def test_every_rule_names_the_line_and_the_field(bad, message):
    body = ndjson(record(request_id="a"), "", "   ", record(**{"request_id": "b", **bad}), record())
    assert refusal(body) == f"line 4, {message}"


@pytest.mark.parametrize(
    ("literal", "message"),
    [
        ('"ttft_ms": NaN', "field ttft_ms: must be a finite number >= 0, got NaN"),
        ('"e2e_ms": Infinity', "field e2e_ms: must be a finite number >= 0, got Infinity"),
        (
            '"hallucination": -Infinity',
            "field hallucination: must be a finite number, got -Infinity",
        ),
        ('"queue_ms": 1e400', "field queue_ms: must be a finite number >= 0, got Infinity"),
    ],
)
def test_nan_and_infinity_are_refused(literal, message):
    body = b'{"ts": 1, "request_id": "a", "status": "ok", %s}\n' % literal.encode()
    assert refusal(body) == f"line 1, {message}"


def test_the_first_bad_line_is_named_whatever_kind_of_error_follows():
    body = ndjson(record(), record(ttft_ms=-4), record(tenant=5), "{not json")
    assert refusal(body) == "line 2, field ttft_ms: must be a finite number >= 0, got -4"
    body = ndjson(record(), record(tenant=5), record(ttft_ms=-4))
    assert refusal(body) == "line 2, field tenant: must be a string, got 5"


def test_an_unknown_field_is_refused_with_the_nearest_known_name():
    body = ndjson(record(), record(ttft_sec=0.2))
    assert refusal(body) == "line 2, field ttft_sec: unknown field, did you mean ttft_ms?"
    assert refusal(ndjson(record(TTFT_MS=3))).endswith("unknown field, did you mean ttft_ms?")


def test_an_unknown_field_like_nothing_known_points_to_attrs():
    assert refusal(ndjson(record(gpu="h100"))) == (
        "line 1, field gpu: unknown field, extra labels go in attrs"
    )


# --- the body as a whole ---------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"\n", b"  \n\r\n\t\n"])
def test_an_empty_body_is_refused(body):
    assert refusal(body) == "empty body: no records"


def test_blank_lines_are_ignored_and_lines_still_counted():
    body = ndjson("", record(request_id="a"), "  ", "\t", record(request_id="b"), "")
    assert decode_ndjson(body).column("request_id").to_pylist() == ["a", "b"]
    assert refusal(ndjson("", record(), "", record(status="x"))).startswith("line 4, field status")


def test_windows_line_endings_are_fine():
    body = ndjson(record(request_id="a"), record(request_id="b")).replace(b"\n", b"\r\n")
    assert decode_ndjson(body).num_rows == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "{not json",
            "line 2: invalid JSON at column 2: Expecting property name enclosed in double quotes",
        ),
        (
            '{"ts": 1,',
            "line 2: invalid JSON at column 10: Expecting property name enclosed in double quotes",
        ),
        ("null", "line 2: a record must be a JSON object, got null"),
        ("[1, 2]", "line 2: a record must be a JSON object, got [1, 2]"),
        ('"text"', 'line 2: a record must be a JSON object, got "text"'),
        (
            json.dumps(record()) + " " + json.dumps(record()),
            "line 2: invalid JSON at column 62: Extra data",
        ),
        ('{"ts": 1, "ts": 2}', "line 2: key 'ts' appears twice in one object"),
    ],
)
def test_a_line_that_is_not_one_json_object_is_named(line, message):
    assert refusal(ndjson(record(), line, record())) == message


def test_invalid_utf8_is_refused():
    body = ndjson(record()) + b'{"ts": 1, "request_id": "\xff", "status": "ok"}\n'
    assert refusal(body) == "line 2: invalid JSON: not UTF-8 text"


def test_invalid_utf8_in_a_field_name_is_refused_not_a_crash():
    # Found by the receiver fuzz test: the fast reader raised on the column name.
    body = ndjson(record()) + b'{"ts": 1, "request_id": "a", "status": "ok", "e\x80x": 1}\n'
    assert refusal(body) == "line 2: invalid JSON: not UTF-8 text"


def test_invalid_utf8_in_an_attrs_key_is_refused_not_a_crash():
    # Found by the decoder fuzz test: with a valid first line the fast reader took the
    # body, and the key's name failed to decode while attrs became maps.
    body = ndjson(record()) + (
        b'{"ts": 1, "request_id": "a", "status": "ok", "attrs": {"pri\xe0\xe0ority": "high"}}\n'
    )
    assert refusal(body) == "line 2: invalid JSON: not UTF-8 text"


def test_a_record_spread_over_several_lines_is_refused():
    body = ndjson(record()) + b'{"ts": 1,\n "request_id": "a", "status": "ok"}\n'
    assert refusal(body).startswith("line 2: invalid JSON")


def test_null_lines_at_block_starts_do_not_reach_the_json_reader():
    # pyarrow's reader crashes the process on a top-level null at the start of a block.
    body = ndjson(record()) + b"null\n" * 2_000_000
    assert refusal(body) == "line 2: a record must be a JSON object, got null"


def test_nothing_partial_one_bad_record_refuses_the_whole_body(requests_table):
    body = encode_ndjson(requests_table) + ndjson(record(status="exploded"))
    line = requests_table.num_rows + 1
    assert refusal(body).startswith(f"line {line}, field status: must be one of")


# --- Arrow: rows are 0-based, columns are named ----------------------------------------------


def test_arrow_errors_name_the_row_0_based_and_the_field():
    table = pa.table(
        {
            "ts": [MAY_1] * 3,
            "request_id": ["a", "b", "c"],
            "status": ["ok", "ok", "ok"],
            "ttft_ms": [1.0, -4.0, 2.0],
        }
    )
    assert (
        arrow_refusal(table)
        == "row 1 (0-based), field ttft_ms: must be a finite number >= 0, got -4"
    )


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array(["7"]), "column prompt_tokens: string cannot be read as an integer"),
        (pa.array([True]), "column prompt_tokens: bool cannot be read as an integer"),
    ],
)
def test_an_arrow_column_of_the_wrong_type_is_named(column, message):
    table = pa.table(
        {"ts": [MAY_1], "request_id": ["r"], "status": ["ok"], "prompt_tokens": column}
    )
    assert arrow_refusal(table) == message


def test_arrow_column_names_are_checked():
    table = pa.table({"ts": [MAY_1], "request_id": ["r"], "status": ["ok"], "ttft_sec": [0.2]})
    assert arrow_refusal(table) == "column ttft_sec: unknown field, did you mean ttft_ms?"
    table = pa.table({"ts": [MAY_1], "request_id": ["r"]})
    assert arrow_refusal(table) == "column status: is required, missing"


def test_arrow_takes_castable_types():
    table = pa.table(
        {
            "ts": pa.array([MAY_1, MAY_1], pa.int64()),
            "request_id": pa.array(["a", "b"], pa.large_string()),
            "status": pa.array(["ok", "error"]).dictionary_encode(),
            "ttft_ms": pa.array([1, 2], pa.int16()),
            "prompt_tokens": pa.array([3.0, None]),  # pandas writes nullable ints as floats
            "http_status": pa.array([200, 500], pa.uint64()),
        }
    )
    decoded = decode_arrow_stream(arrow_stream(table))
    assert decoded.schema == REQUESTS_SCHEMA
    assert decoded.column("status").to_pylist() == ["ok", "error"]
    assert decoded.column("prompt_tokens").to_pylist() == [3, None]
    assert decoded.column("ttft_ms").to_pylist() == [1.0, 2.0]


def test_arrow_integers_beyond_the_column_range_are_refused_by_row():
    table = pa.table(
        {
            "ts": [MAY_1, MAY_1],
            "request_id": ["a", "b"],
            "status": ["ok", "ok"],
            "prompt_tokens": pa.array([1, 2**64 - 1], pa.uint64()),
        }
    )
    assert arrow_refusal(table) == (
        "row 1 (0-based), field prompt_tokens: must be an integer from 0 to 4294967295, "
        f"got {2**64 - 1}"
    )


def test_arrow_attrs_are_a_map_of_strings_with_sorted_keys_and_null_values_dropped():
    attrs = pa.array(
        [[("z", "1"), ("a", "2"), ("n", None)], None, []],
        pa.map_(pa.string(), pa.string()),
    )
    table = pa.table({"ts": [MAY_1] * 3, "request_id": ["a", "b", "c"], "status": ["ok"] * 3})
    decoded = decode_arrow_stream(arrow_stream(table.append_column("attrs", attrs)))
    assert decoded.column("attrs").to_pylist() == [[("a", "2"), ("z", "1")], [], []]
    twice = pa.array([[], [("k", "1"), ("k", "2")]], pa.map_(pa.string(), pa.string()))
    table = table.slice(0, 2).append_column("attrs", twice)
    assert arrow_refusal(table).startswith(
        "row 1 (0-based), field attrs: must not hold a key twice"
    )


def test_an_arrow_body_that_is_not_a_stream_is_refused():
    with pytest.raises(IngestError, match="not an Arrow IPC stream"):
        decode_arrow_stream(b"definitely not arrow")
    with pytest.raises(IngestError, match="empty body"):
        decode_arrow_stream(b"")
    empty = pa.table({"ts": pa.array([], pa.int64()), "request_id": pa.array([], pa.string())})
    empty = empty.append_column("status", pa.array([], pa.string()))
    with pytest.raises(IngestError, match="empty body: no records"):
        decode_arrow_stream(arrow_stream(empty))


def test_an_arrow_stream_with_offsets_out_of_bounds_is_refused_not_a_crash():
    # Found by fuzz/decoders.py: the IPC reader trusts a body's offsets, and the column
    # checks then read out of bounds (a segmentation fault of the receiver).
    table = synthetic_requests(5, seed=1).select(["ts", "request_id", "status", "tenant"])
    body = bytearray(arrow_stream(table))
    offsets = table.column("tenant").combine_chunks().buffers()[1].to_pybytes()
    last = body.find(offsets) + len(offsets)
    body[last - 4 : last] = (1 << 30).to_bytes(4, "little")
    with pytest.raises(IngestError, match=r"invalid Arrow data: Column 3: .* offsets"):
        decode_arrow_stream(bytes(body))


# --- property: any valid record set round-trips -----------------------------------------------

FLOAT32_MAX = 3.3999999521443642e38
latency = st.floats(0, 1e7, allow_nan=False, width=32)
tokens = st.integers(0, 2**32 - 1)
text = st.text(max_size=12)


@st.composite
def valid_records(draw) -> dict:
    rec: dict = {
        "ts": draw(
            st.one_of(
                st.integers(0, 2**32 * 1000 - 1),
                st.datetimes(
                    min_value=datetime(1971, 1, 1),
                    max_value=datetime(2100, 1, 1),
                    timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3, minutes=-30))]),
                ).map(lambda d: d.isoformat(timespec="milliseconds")),
            )
        ),
        "request_id": draw(st.text(min_size=1, max_size=20)),
        "status": draw(st.sampled_from(STATUSES)),
    }
    optional = {
        **{name: text for name in LABEL_COLUMNS},
        "error_class": st.sampled_from(("", *ERROR_CLASSES)),
        "finish_reason": text,
        "http_status": st.integers(0, 65535),
        "is_probe": st.booleans(),
        "queue_ms": latency,
        "itl_p99_ms": latency,
        "tpot_ms": latency,
        "output_tokens": tokens,
        "max_context_tokens": tokens,
        "consistency_score": st.floats(-FLOAT32_MAX, FLOAT32_MAX, width=32),
        "attrs": st.dictionaries(text, st.one_of(text, st.none()), max_size=3),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            rec[name] = draw(st.one_of(st.none(), strategy))
    if draw(st.booleans()):
        rec["ttft_ms"] = draw(latency)
        rec["e2e_ms"] = rec["ttft_ms"] + draw(latency)  # e2e >= ttft: tpot derivable
    if draw(st.booleans()):
        rec["prompt_tokens"] = draw(tokens)
        rec["cached_prompt_tokens"] = draw(st.integers(0, rec["prompt_tokens"]))
    return rec


def expected_table(records: list[dict]) -> pa.Table:
    """What the decoders should store, built without them (per record, in Python)."""
    rows = []
    for rec in records:
        row = {f.name: rec.get(f.name) for f in REQUESTS_SCHEMA}
        ts = rec["ts"]
        row["ts"] = (
            datetime.fromtimestamp(ts / 1000, UTC)
            if isinstance(ts, int)
            else datetime.fromisoformat(ts)
        )
        for name in (*LABEL_COLUMNS, "error_class", "finish_reason"):
            row[name] = row[name] or ""
        row["http_status"] = row["http_status"] or 0
        row["is_probe"] = bool(row["is_probe"])
        row["attrs"] = sorted((k, v) for k, v in (rec.get("attrs") or {}).items() if v is not None)
        rows.append(row)
    table = pa.Table.from_pylist(rows, schema=REQUESTS_SCHEMA)
    derived = derive_tpot_ms(table["e2e_ms"], table["ttft_ms"], table["output_tokens"])
    tpot = pa.compute.coalesce(table["tpot_ms"], derived)
    return table.set_column(REQUESTS_SCHEMA.get_field_index("tpot_ms"), "tpot_ms", tpot)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(valid_records(), min_size=1, max_size=8))
def test_any_valid_record_set_round_trips(records):
    expected = expected_table(records)
    body = ndjson(*records)
    decoded = decode_ndjson(body)
    assert decoded.equals(expected)
    assert events._decode_lines(body).equals(expected)  # the slow path agrees
    with small_pieces(64):
        assert decode_ndjson(body).equals(expected)  # one record a piece, or near
    assert decode_ndjson(encode_ndjson(decoded)).equals(expected)
    assert decode_arrow_stream(arrow_stream(decoded)).equals(expected)
