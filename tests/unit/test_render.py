"""Query results as a table for people, and as JSON, CSV or Parquet for machines."""

import datetime as dt
import io
import json

import polars as pl
import pytest

from warehouse.render import (
    FORMATS,
    TABLE_WIDTH,
    fitting_columns,
    footer_to_stderr,
    format_float,
    iso_time,
    write_result,
)

FOOTER = "source: rollup requests_1h · 12 ms"


@pytest.fixture
def frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "model": ["llama-3.1-70b", "mistral-7b", "qwen2.5-72b"],
            "region": ["us-east-1", "eu-west-1", None],
            "count": [12840, 953, 7],
            "p95_ttft_ms": [812.4, 95.25, float("nan")],
            "error_rate": [0.00423, 0.0, 0.142857],
            "time": [dt.datetime(2025, 3, 1, hour) for hour in (12, 13, 14)],
        }
    )


def render(frame: pl.DataFrame, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    write_result(frame, fmt, out, **kwargs)
    return out.getvalue()


def test_table_aligns_numbers_right_and_text_left_then_counts_rows_and_adds_the_footer(frame):
    text = render(frame, "table", footer=FOOTER).decode()
    assert text == (
        " model         | region    | count | p95_ttft_ms | error_rate | time\n"
        "---------------+-----------+-------+-------------+------------+----------------------\n"
        " llama-3.1-70b | us-east-1 | 12840 |      812.40 |    0.00423 | 2025-03-01T12:00:00Z\n"
        " mistral-7b    | eu-west-1 |   953 |       95.25 |          0 | 2025-03-01T13:00:00Z\n"
        " qwen2.5-72b   | -         |     7 |         nan |     0.1429 | 2025-03-01T14:00:00Z\n"
        "(3 rows)\n"
        f"{FOOTER}\n"
    )
    assert "\x1b[" not in text


def test_empty_table_prints_the_header_and_zero_rows(frame):
    lines = render(frame.head(0), "table").decode().splitlines()
    assert lines[0].split("|")[0].strip() == "model"
    assert set(lines[1]) == {"-", "+"}
    assert lines[2:] == ["(0 rows)"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.00423, "0.00423"),
        (0.123456, "0.1235"),
        (0.5, "0.5"),
        (0.99996, "1.00"),
        (-0.25, "-0.25"),
        (1234567.891, "1234567.89"),
        (3.0, "3.00"),
        (0.0, "0"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
    ],
)
def test_floats_keep_significant_digits_below_one_and_two_decimals_above(value, shown):
    assert format_float(value) == shown


def test_table_converts_to_utc_shows_milliseconds_only_when_present_and_clips_long_text():
    berlin = pl.Series([dt.datetime(2025, 3, 1, 13, 0, 0, 250_000)]).dt.replace_time_zone(
        "Europe/Berlin"
    )
    frame = pl.DataFrame({"time": berlin, "ok": [True], "prompt": ["x" * 100 + "\n"]})
    row = render(frame, "table").decode().splitlines()[2]
    cells = [cell.strip() for cell in row.split("|")]
    assert cells == ["2025-03-01T12:00:00.250Z", "true", "x" * 59 + "…"]


def test_long_text_is_cut_after_a_word_not_inside_one():
    said = "Errors per 5-minute bucket, zone and error class, with their share of the zone's"
    row = render(pl.DataFrame({"answers": [said]}), "table").decode().splitlines()[2]
    assert row.strip() == "Errors per 5-minute bucket, zone and error class, with…"
    assert said.startswith(row.strip()[:-1]) and len(row.strip()) <= 60


def test_a_wrapped_column_fills_the_width_its_words_whole_on_more_lines():
    said = ("why answers ended, per model: stop, length, abort and the rest " * 3).strip()
    frame = pl.DataFrame({"name": ["finish_reasons", "short"], "answers": [said, "one line"]})
    lines = render(frame, "table", wrap=["answers"]).decode().splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH
    rows = [[cell.strip() for cell in line.split("|")] for line in lines[2:-1]]
    assert [name for name, _ in rows] == ["finish_reasons", "", "", "short"]
    assert " ".join(text for _, text in rows[:3]) == said
    assert rows[3] == ["short", "one line"] and lines[-1] == "(2 rows)"


def test_the_footer_wraps_at_words_and_left_out_columns_are_counted():
    footer = "; ".join(
        f"part {k}: source: raw requests (the rollups do not keep node)" for k in range(9)
    )
    lines = render(pl.DataFrame({"n": [1]}), "table", footer=footer, hidden=3).decode().splitlines()
    assert lines[3] == "(1 row; 3 more columns with --wide)"
    assert all(len(line) <= TABLE_WIDTH for line in lines) and len(lines) > 6
    assert " ".join(lines[4:]) == footer


def test_the_columns_that_fit_are_the_leftmost_and_at_least_one():
    frame = pl.DataFrame({f"column_{k}": [k] for k in range(20)})
    shown = fitting_columns(frame)
    assert shown == frame.columns[: len(shown)] and 1 < len(shown) < 20
    assert max(map(len, render(frame.select(shown), "table").decode().splitlines())) <= TABLE_WIDTH
    wider = frame.select([*shown, frame.columns[len(shown)]])
    assert max(map(len, render(wider, "table").decode().splitlines())) > TABLE_WIDTH
    assert fitting_columns(pl.DataFrame({"x" * 50: ["y" * 200]})) == ["x" * 50]


def test_a_time_in_a_text_answer_is_iso_in_utc():
    tokyo = dt.datetime(2025, 3, 1, 9, tzinfo=dt.timezone(dt.timedelta(hours=9)))
    assert iso_time(tokyo) == "2025-03-01T00:00:00Z"
    assert iso_time(dt.datetime(2025, 3, 1, 9, 30, 5, 999)) == "2025-03-01T09:30:05Z"


def test_color_dims_only_the_row_count_and_footer(frame):
    lines = render(frame, "table", footer=FOOTER, color=True).decode().splitlines()
    assert lines[-2:] == ["\x1b[2m(3 rows)\x1b[0m", f"\x1b[2m{FOOTER}\x1b[0m"]
    assert not any("\x1b[" in line for line in lines[:-2])


def test_json_is_an_array_of_row_objects_with_null_for_nan_and_utc_iso_datetimes(frame):
    frame = frame.with_columns(tags=pl.Series([["a", "b"], [], None]))
    raw = render(frame, "json", footer=FOOTER)
    assert raw.endswith(b"\n")
    rows = json.loads(raw)
    assert list(rows[0]) == frame.columns
    assert rows[0]["time"] == "2025-03-01T12:00:00.000Z"
    assert rows[0]["tags"] == ["a", "b"]
    assert rows[2]["region"] is None
    assert rows[2]["p95_ttft_ms"] is None
    assert rows[0]["error_rate"] == 0.00423
    assert json.loads(render(frame.head(0), "json")) == []


def test_json_turns_infinities_null_and_zoned_datetimes_into_utc():
    tokyo = pl.Series([dt.datetime(2025, 3, 1, 9)]).dt.replace_time_zone("Asia/Tokyo")
    frame = pl.DataFrame({"ratio": [float("inf")], "time": tokyo})
    assert json.loads(render(frame, "json")) == [
        {"ratio": None, "time": "2025-03-01T00:00:00.000Z"}
    ]


def test_csv_parses_back_with_iso_utc_datetimes(frame):
    raw = render(frame, "csv", footer=FOOTER)
    assert FOOTER.encode() not in raw
    back = pl.read_csv(io.BytesIO(raw))
    assert back.columns == frame.columns
    assert back["count"].to_list() == [12840, 953, 7]
    assert back["region"].to_list() == ["us-east-1", "eu-west-1", None]
    assert back["time"][0] == "2025-03-01T12:00:00.000Z"


def test_csv_writes_zoned_datetimes_in_utc_and_nested_values_as_json():
    tokyo = pl.Series([dt.datetime(2025, 3, 1, 9)]).dt.replace_time_zone("Asia/Tokyo")
    frame = pl.DataFrame({"time": tokyo, "tags": [["a"]]})
    back = pl.read_csv(io.BytesIO(render(frame, "csv")))
    assert back.row(0) == ("2025-03-01T00:00:00.000Z", '["a"]')


def test_parquet_round_trips(frame):
    back = pl.read_parquet(io.BytesIO(render(frame, "parquet")))
    assert back.schema == frame.schema
    assert back.drop("p95_ttft_ms").equals(frame.drop("p95_ttft_ms"))
    assert back["p95_ttft_ms"].is_nan().to_list() == [False, False, True]


class Terminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_parquet_is_refused_on_a_terminal(frame):
    out = Terminal()
    with pytest.raises(ValueError, match="refusing to write Parquet to a terminal"):
        write_result(frame, "parquet", out)
    assert out.getvalue() == b""


def test_unknown_format_names_the_allowed_ones(frame):
    with pytest.raises(ValueError, match="table, json, csv, parquet"):
        write_result(frame, "xml", io.BytesIO())
    with pytest.raises(ValueError, match="xml"):
        footer_to_stderr("xml")


def test_only_the_table_carries_its_footer():
    assert [footer_to_stderr(fmt) for fmt in FORMATS] == [False, True, True, True]
