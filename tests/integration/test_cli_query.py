"""`llmwh drill|timeseries|sla|sql|root-cause|drift|ab` end to end, on a DuckDB file and on the
embedded ClickHouse server over HTTP.

The data is loaded once per store with the Python API. Commands that should succeed run in
process through typer's CliRunner on `warehouse.cli.app`; commands that should fail run as a
user runs them, `python -m warehouse ...` in a subprocess, so that they go through
`warehouse.cli:main` (warehouse errors become one `llmwh: error: ...` line and exit code 1)
and so that any traceback or stray library warning would show on stderr.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import Result
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

import warehouse
from warehouse.cli import app
from warehouse.model import REQUESTS_SCHEMA
from warehouse.query.readonly import check_read_only
from warehouse.store import open_store
from warehouse.store.embedded import ServerInfo
from warehouse.synthetic import synthetic_requests

START = (datetime.now(UTC) - timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
"""09:00 UTC two days back: absolute, hour-aligned, and inside every retention."""
SPAN = timedelta(hours=2)
STEP_AT = START + SPAN - timedelta(minutes=30)
ROWS = 5_000
RANGE = ("--since", f"{START:%Y-%m-%dT%H:%M:%SZ}", "--until", f"{START + SPAN:%Y-%m-%dT%H:%M:%SZ}")
BACKENDS = ("duckdb", "clickhouse")
DEFAULT_COLUMNS = ["model", "count", "error_rate", "p95_ttft_ms", "p95_tpot_ms", "p95_e2e_ms"]


def traffic() -> pa.Table:
    """Seeded synthetic requests whose TTFT triples for the last half hour (for `drift`)."""
    table = synthetic_requests(ROWS, seed=3, start=START, span=SPAN)
    ttft = table.column("ttft_ms").combine_chunks()
    late = pc.greater_equal(table.column("ts"), pa.scalar(STEP_AT, pa.timestamp("ms", "UTC")))
    slower = pc.if_else(late, pc.multiply(ttft, pa.scalar(3.0, pa.float32())), ttft)
    field = REQUESTS_SCHEMA.field("ttft_ms")
    return table.set_column(table.schema.get_field_index("ttft_ms"), field, slower)


@pytest.fixture(scope="module")
def requests() -> pa.Table:
    return traffic()


@pytest.fixture(scope="module")
def stores(
    embedded_server: ServerInfo, tmp_path_factory: pytest.TempPathFactory, requests: pa.Table
) -> Iterator[dict[str, str]]:
    """Store URLs by backend, each migrated and holding ``requests``."""
    urls = {
        "duckdb": f"duckdb://{tmp_path_factory.mktemp('cli-query') / 'warehouse.duckdb'}",
        "clickhouse": embedded_server.store_url(f"cli_query_{uuid.uuid4().hex[:10]}"),
    }
    for url in urls.values():
        with warehouse.connect(url) as wh:
            wh.migrate()
            wh.insert_requests(requests)
    yield urls
    store = open_store(urls["clickhouse"])
    try:
        store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
    finally:
        store.close()


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, stores: dict[str, str]) -> str:
    return stores[request.param]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """No developer LLMWH_* settings and no ./llmwh.toml steer the in-process runs."""
    for name in [n for n in os.environ if n.startswith("LLMWH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def run(*args: str) -> Result:
    """`llmwh ARGS` in process; it must succeed. Returns the click Result (stdout, stderr)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def llmwh(*args: str, cwd) -> subprocess.CompletedProcess:
    """`python -m warehouse ARGS` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "warehouse", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")},
    )


def assert_one_line_error(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith(f"llmwh: error: {expected}"), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr  # no traceback, no warnings


def row_count(url: str) -> int:
    store = open_store(url)
    try:
        return store.query_arrow("SELECT count() AS n FROM requests").column("n")[0].as_py()
    finally:
        store.close()


def valid(requests: pa.Table) -> np.ndarray:
    return ~requests.column("is_probe").to_numpy(zero_copy_only=False)


def cells(line: str) -> list[str]:
    """The cells of one line of a table."""
    return [cell.strip() for cell in line.split("|")]


def trailer(stdout: str) -> tuple[list[str], str, str]:
    """A table's lines, its ``(N rows)`` line and its footer, which wraps at 100
    characters, as one line."""
    lines = stdout.splitlines()
    at = max(k for k, line in enumerate(lines) if line.startswith("("))
    assert all(len(line) <= 100 for line in lines[at:]), lines[at:]
    return lines[:at], lines[at], " ".join(lines[at + 1 :])


def assert_only_the_footer(stderr: str) -> None:
    """stderr holds the footer alone (no warning), wrapped at 100 characters."""
    assert stderr.startswith("source: "), stderr
    assert all(len(line) <= 100 for line in stderr.splitlines()), stderr
    assert "Warning" not in stderr and "Traceback" not in stderr, stderr


# -- output formats -----------------------------------------------------------------------


def test_drill_json_has_the_asked_columns_in_order_and_the_footer_on_stderr(url, requests):
    asked = ("drill", "--by", "model,region", "-m", "p95_ttft_ms", "-m", "count", *RANGE)
    result = run(*asked, "--format", "json", "--store", url)
    rows = json.loads(result.stdout)
    assert [list(row) for row in rows] == [["model", "region", "p95_ttft_ms", "count"]] * len(rows)
    assert sum(row["count"] for row in rows) == valid(requests).sum()
    assert_only_the_footer(result.stderr)


def test_drill_csv_parses_and_keeps_the_footer_off_stdout(url, requests):
    asked = ("drill", "--by", "zone", "-m", "count,error_rate", *RANGE)
    result = run(*asked, "--format", "csv", "--store", url)
    assert result.stdout.splitlines()[0] == "zone,count,error_rate"
    frame = pl.read_csv(io.StringIO(result.stdout))
    assert frame.height == 7 and frame["count"].sum() == valid(requests).sum()
    assert "source:" not in result.stdout
    assert_only_the_footer(result.stderr)


def test_drill_parquet_to_a_file_round_trips(url, tmp_path):
    asked = ("drill", "--by", "model", "-m", "count,p50_ttft_ms,kv_hit_ratio", *RANGE)
    path = tmp_path / "drill.parquet"
    written = run(*asked, "--format", "parquet", "--output", str(path), "--store", url)
    assert written.stdout == ""
    as_json = pl.DataFrame(json.loads(run(*asked, "--format", "json", "--store", url).stdout))
    assert_frame_equal(pl.read_parquet(path), as_json)
    assert pl.read_parquet(path).columns == ["model", "count", "p50_ttft_ms", "kv_hit_ratio"]


def test_table_ends_with_the_row_count_and_where_the_answer_came_from(url):
    lines, count, footer = trailer(run("drill", "--by", "model", *RANGE, "--store", url).stdout)
    assert cells(lines[0]) == DEFAULT_COLUMNS
    assert count == "(5 rows)"
    if url.startswith("duckdb"):
        assert footer.startswith("source: raw requests (this store keeps no materialized rollups)")
    else:
        assert footer.startswith(
            "source: rollup requests_sla_1h (range and buckets align to whole hours)"
        )
        assert "percentiles from 2%-wide latency buckets" in footer
    exact = run("drill", "--by", "model", "--exact", *RANGE, "--store", url).stdout
    _, count, footer = trailer(exact)
    assert count == "(5 rows)"
    assert footer.startswith("source: raw requests (exact percentiles asked)")


def test_timeseries_puts_time_first(url, requests):
    asked = ("timeseries", "-m", "count,p95_ttft_ms", "--interval", "30m", *RANGE)
    result = run(*asked, "--format", "json", "--store", url)
    rows = json.loads(result.stdout)
    assert [next(iter(row)) for row in rows] == ["time"] * 4
    starts = [START + timedelta(minutes=30 * i) for i in range(4)]
    assert [row["time"] for row in rows] == [f"{t:%Y-%m-%dT%H:%M:%S}.000Z" for t in starts]
    assert sum(row["count"] for row in rows) == valid(requests).sum()
    assert rows[-1]["p95_ttft_ms"] > 2 * rows[0]["p95_ttft_ms"]  # TTFT x 3 in the last half hour


def test_sla_prints_the_budget_and_burn_rates(url, requests):
    args = ("sla", "--slo", "chat-assistant", "--where", "service=chat", *RANGE, "--store", url)
    lines, count, footer = trailer(run(*args).stdout)
    assert cells(lines[0]) == [
        "count",
        "attainment",
        "budget_remaining",
        "burn_rate_5m",
        "burn_rate_1h",
        "burn_rate_6h",
    ]
    assert count == "(1 row; 14 more columns with --wide)"
    target = "SLO chat-assistant: target 0.99, an error budget of 0.01 of requests over 30 days"
    assert footer.startswith(f"{target} ") and "source: " in footer
    if url.startswith("http"):  # the windows come from a rollup, the period from raw rows
        assert "windows: source: rollup requests_1m" in footer
        assert "period" in footer and "source: raw requests" in footer
    wide, count, _ = trailer(run(*args, "--wide").stdout)
    assert {"compliance", "score", "p95_ttft_ms_ok"} <= set(cells(wide[0]))
    assert count == "(1 row)"

    [row] = json.loads(run(*args, "--format", "json").stdout)
    chat = valid(requests) & (requests.column("service").to_numpy(zero_copy_only=False) == "chat")
    assert row["count"] == chat.sum() > 0
    assert row["budget_remaining"] == pytest.approx(1 - (1 - row["attainment"]) / 0.01)


def test_slo_status_without_rollups_says_how_to_build_one(stores):
    for url in stores.values():
        shown = run("slo", "status", "--store", url)
        assert "`llmwh slo apply` builds one" in shown.stderr


# -- sql ----------------------------------------------------------------------------------


def test_sql_in_clickhouse_dialect_gives_the_same_answer_on_both_stores(stores, requests):
    query = (
        "SELECT count() AS n, countIf(status = 'error') AS errors, "
        "quantileExactInclusive(0.5)(ttft_ms) AS p50 FROM requests"
    )
    answers = {
        backend: json.loads(run("sql", query, "--format", "json", "--store", url).stdout)
        for backend, url in stores.items()
    }
    [duck], [house] = answers["duckdb"], answers["clickhouse"]
    assert duck["n"] == house["n"] == ROWS
    statuses = requests.column("status").to_numpy(zero_copy_only=False)
    assert duck["errors"] == house["errors"] == (statuses == "error").sum()
    ttft = requests.column("ttft_ms").drop_null().to_numpy().astype(np.float64)
    assert duck["p50"] == pytest.approx(house["p50"], rel=1e-6)
    assert duck["p50"] == pytest.approx(np.quantile(ttft, 0.5), rel=1e-6)


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_sql_prints_a_datetime_as_a_time_in_every_format(stores, requests, fmt):
    """ClickHouse sends a DateTime (toStartOfHour's, not a DateTime64) as seconds in
    Arrow; they print as the time they are, on both stores, and a UInt32 stays a number."""
    first = pc.min(requests.column("ts")).as_py().replace(minute=0, second=0, microsecond=0)
    query = "SELECT toStartOfHour(min(ts)) AS first_hour, toUInt32(7) AS n FROM requests"
    for url in stores.values():
        out = run("sql", query, "--format", fmt, "--store", url).stdout
        assert f"{first:%Y-%m-%d}" in out and f"{first:%H}:00:00" in out, out
        assert str(int(first.timestamp())) not in out, out  # not epoch seconds
        if fmt == "json":
            [row] = json.loads(out)
            assert row["n"] == 7


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("DROP TABLE requests", "llmwh sql is read-only: DROP is refused"),
        (
            "INSERT INTO requests (ts, request_id) VALUES (now(), 'x')",
            "llmwh sql is read-only: INSERT is refused",
        ),
        ("SELECT 1; DROP TABLE requests", "one statement at a time, got 2"),
    ],
    ids=["drop", "insert", "two-statements"],
)
def test_sql_refuses_writes_in_one_line_and_leaves_the_table(url, query, message, tmp_path):
    assert_one_line_error(llmwh("sql", query, "--store", url, cwd=tmp_path), message)
    assert row_count(url) == ROWS


def test_clickhouse_readonly_refuses_what_the_sql_parser_lets_through(
    stores, embedded_server, tmp_path
):
    url = stores["clickhouse"]
    database = url.rsplit("/", 1)[1]
    # A SELECT whose table function asks the server itself to create a table, and one that
    # tries to switch the readonly setting off: both parse as plain reads.
    create = f"CREATE TABLE {database}.sneaky (x UInt8) ENGINE = Memory".replace(" ", "+")
    sneaky = (
        f"SELECT * FROM url('http://127.0.0.1:{embedded_server.http_port}/?query={create}', "
        "'TSV', 'x String')"
    )
    for query in (sneaky, "SELECT count() FROM requests SETTINGS readonly = 0"):
        assert check_read_only(query) is not None
        result = llmwh("sql", query, "--store", url, cwd=tmp_path)
        assert_one_line_error(result, "ClickHouse error 164 (READONLY): ")
        assert "in readonly mode" in result.stderr and "for url" not in result.stderr
    store = open_store(url)
    try:
        tables = store.query_arrow(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": database}
        ).column("name")
    finally:
        store.close()
    assert "sneaky" not in tables.to_pylist() and "requests" in tables.to_pylist()


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("drill", "--by", "model; DROP TABLE requests", *RANGE),
            "unknown dimension 'model; DROP TABLE requests'; known: tenant, ",
        ),
        (("drill", "-m", "count,p97_ttft_ms", *RANGE), "unknown measure 'p97_ttft_ms'; known: "),
        (("drill", "--since", "yesterday"), "bad time 'yesterday': expected a duration"),
        (("drill", "--where", "tenant", *RANGE), "bad --where 'tenant': expected DIMENSION=VALUE"),
        (
            ("drill", "-m", "attainment", "--threshold", "ttft_ms=abc", *RANGE),
            "bad --threshold 'ttft_ms=abc': expected LATENCY=MILLISECONDS",
        ),
        (("drill", "--format", "xml", *RANGE), "unknown --format 'xml': use table, json, csv"),
    ],
    ids=["dimension", "measure", "since", "where", "threshold", "format"],
)
def test_bad_input_is_one_line_and_a_failing_exit_code(url, args, message, tmp_path):
    assert_one_line_error(llmwh(*args, "--store", url, cwd=tmp_path), message)


# -- analyses -----------------------------------------------------------------------------


def table_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a table that ends with its row count and source lines."""
    lines, count, footer = trailer(stdout)
    assert count.startswith(f"({len(lines) - 2} row{'' if len(lines) == 3 else 's'}")
    assert "source: " in footer
    return cells(lines[0]), [cells(line) for line in lines[2:]]


def test_root_cause_prints_a_table(url):
    asked = ("root-cause", "-d", "zone", "-d", "region", "--threshold", "ttft_ms=300", *RANGE)
    out = run(*asked, "--store", url).stdout
    header, rows = table_rows(out)
    assert header[:2] == ["dimension", "value"]
    assert {"traffic_share", "bad_share", "lift", "contribution"} <= set(header)
    assert {row[0] for row in rows} == {"zone", "region"} and len(rows) == 10
    wide, _ = table_rows(run(*asked, "--wide", "--store", url).stdout)
    assert {"bad", "excess_bad"} <= set(wide) - set(header)


def test_drift_alerts_only_prints_the_alerting_windows(url):
    out = run("drift", "--alerts-only", *RANGE, "--store", url).stdout
    header, rows = table_rows(out)
    assert header[:2] == ["time", "p95_ttft_ms"] and header[-1] == "alert"
    assert rows and all(row[-1] == "true" for row in rows)
    # TTFT tripled at 10:30: the third window on and later alert.
    last = [START + SPAN - timedelta(minutes=5 * i) for i in (4, 3, 2, 1)]
    assert [f"{t:%Y-%m-%dT%H:%M:%SZ}" for t in last] == [row[0] for row in rows[-4:]]


def test_ab_prints_a_table(url):
    asked = ("ab", "--a", "control", "--b", "treatment", *RANGE, "--store", url)
    header, rows = table_rows(run(*asked).stdout)
    assert header[:2] == ["a", "b"]
    assert {"difference", "low", "high", "significant"} <= set(header)
    assert [row[:2] for row in rows] == [["control", "treatment"]]
    header, rows = table_rows(run(*asked, "--wide").stdout)
    assert header[:4] == ["dimension", "a", "b", "measure"] and "p_value" in header
    assert [row[:4] for row in rows] == [["ab_group", "control", "treatment", "attainment"]]


def test_columns_picks_and_orders_the_columns_in_every_format(url):
    asked = ("ab", "--a", "control", "--b", "treatment", *RANGE, "--store", url)
    header, rows = table_rows(run(*asked, "--columns", "p_value,b", "-c", "n_b").stdout)
    assert header == ["p_value", "b", "n_b"] and rows[0][1] == "treatment"
    [row] = json.loads(run(*asked, "--columns", "p_value,b", "--format", "json").stdout)
    assert list(row) == ["p_value", "b"]
    [every] = json.loads(run(*asked, "--format", "json").stdout)
    assert {"dimension", "measure", "n_a", "level", "method"} <= set(every)


def test_an_unknown_column_is_one_line_naming_the_columns(url, tmp_path):
    result = llmwh("ab", "--columns", "a,p", *RANGE, "--store", url, cwd=tmp_path)
    assert_one_line_error(result, "unknown column 'p' in --columns; this answer has dimension, a, ")
