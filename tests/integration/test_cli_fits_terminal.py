"""Every command's default answer fits a terminal of 100 columns, times in ISO 8601.

The commands come from the typer app itself: each is either run here (:data:`RUNS`, the
arguments its default answer needs) or named in :data:`NO_ANSWER` with why it prints
none to measure, so a new command fails this module until it is placed in one of them.
They run in process with ``COLUMNS=100``, against one store on the embedded ClickHouse
server (its footers are the longest: rollups, an SLO's among them) holding two hours of
synthetic traffic with an incident.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import Result
from commands import registered_commands
from typer.testing import CliRunner

import warehouse
from warehouse.cli import app
from warehouse.query.named import named_queries
from warehouse.store import open_store
from warehouse.store.embedded import ServerInfo, stop_server
from warehouse.synthetic import parse_incident, synthetic_requests

WIDTH = 100
START = (datetime.now(UTC) - timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
SPAN = timedelta(hours=2)
RANGE = ("--since", f"{START:%Y-%m-%dT%H:%M:%SZ}", "--until", f"{START + SPAN:%Y-%m-%dT%H:%M:%SZ}")
WINDOW = (
    "-p",
    f"since={START:%Y-%m-%dT%H:%M:%SZ}",
    "-p",
    f"until={START + SPAN:%Y-%m-%dT%H:%M:%SZ}",
)

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d{3})?)?Z")
A_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d[\d:.]*Z?")
"""Anything that looks like a date and a time; each must be :data:`ISO`."""

NO_ANSWER = {
    "serve": "runs the warehouse until stopped",
    "export": "serves /metrics until stopped",
    "migrate plan": "prints the migrations' SQL as their files hold it",
    "query show": "prints a query's file as it is",
    "alert-rules": "prints the alerting rules' YAML, exporters/prometheus/alerts.yml",
    "compare": "loads a data set into every backend: test_compare.py checks its report fits "
    "100 columns with all three",
}


@dataclass(frozen=True)
class Place:
    """What a command's arguments may name: a scratch folder and the server's data."""

    tmp: Path
    server: ServerInfo


def _named_runs(place: Place) -> list[list[str]]:
    runs = []
    for query in named_queries():
        given = {p.name for p in query.parameters}
        window = list(WINDOW) if {"since", "until"} <= given else []
        runs.append(["query", "run", query.name, *window])
    return runs


def _ingest(place: Place) -> list[list[str]]:
    path = place.tmp / "more.parquet"
    pq.write_table(synthetic_requests(50, seed=9, start=START, span=SPAN), path)
    store = f"duckdb://{place.tmp / 'ingest.duckdb'}"
    return [["migrate", "up", "--store", store], ["ingest", str(path), "--store", store]]


RUNS: dict[str, Callable[[Place], list[list[str]]]] = {
    "drill": lambda _: [["drill", *RANGE], ["drill", "--by", "model,region", *RANGE]],
    "timeseries": lambda _: [
        ["timeseries", *RANGE],
        ["timeseries", "--interval", "30m", *RANGE, "--format", "csv"],
        ["timeseries", "--interval", "30m", *RANGE, "--format", "json"],
    ],
    "sla": lambda _: [
        ["sla", "--slo", "chat-assistant", "--by", "zone", *RANGE],
        ["sla", "--slo", "chat-assistant", "--by", "model", *RANGE],
    ],
    "root-cause": lambda _: [["root-cause", "--slo", "chat-assistant", *RANGE]],
    "drift": lambda _: [["drift", *RANGE], ["drift", *RANGE, "--format", "csv"]],
    "ab": lambda _: [["ab", *RANGE]],
    "sql": lambda _: [
        ["sql", "SELECT * FROM requests ORDER BY request_id LIMIT 5"],
        ["sql", "SELECT * FROM requests ORDER BY request_id LIMIT 5", "--format", "json"],
    ],
    "query list": lambda _: [["query", "list"]],
    "query run": _named_runs,
    "slo apply": lambda _: [["slo", "apply", "--slo", "chat-assistant"]],
    "slo status": lambda _: [["slo", "status"]],
    "migrate status": lambda _: [["migrate", "status"]],
    "migrate up": lambda _: [["migrate", "up"]],
    "ingest": _ingest,
    "generate": lambda place: [
        ["generate", "-n", "500", "-i", "zone-ttft", "--out", str(place.tmp / "g.parquet")]
    ],
    "token new": lambda _: [
        ["token", "new", "--name", "ci", "--tenant", "acme", "--right", "read"]
    ],
    "report": lambda place: [
        ["report", "--slo", "chat-assistant", *RANGE, "--out", str(place.tmp / "r.html")]
    ],
    "exporters write": lambda place: [["exporters", "write", str(place.tmp / "exporters")]],
    "clickhouse status": lambda place: [["clickhouse", "status", "--data", place.server.data_dir]],
    "clickhouse start": lambda place: [
        [
            "clickhouse",
            "start",
            "--data",
            str(place.tmp / "own"),
            "--http-port",
            "0",
            "--tcp-port",
            "0",
        ],
        ["clickhouse", "stop", "--data", str(place.tmp / "own")],
    ],
    "clickhouse stop": lambda place: [["clickhouse", "stop", "--data", str(place.tmp / "none")]],
}

NOT_YET_ISO: dict[str, str] = {}
"""Commands whose output still holds a time that is not ISO 8601, and where it comes from."""


def test_every_command_is_run_here_or_said_to_print_no_answer():
    placed = set(RUNS) | set(NO_ANSWER)
    assert not set(RUNS) & set(NO_ANSWER)
    assert placed == registered_commands(), (
        f"not placed in RUNS or NO_ANSWER: {sorted(registered_commands() - placed)}; "
        f"no longer commands: {sorted(placed - registered_commands())}"
    )


@pytest.fixture(scope="module")
def store_url(embedded_server: ServerInfo) -> Iterator[str]:
    """A store on the embedded server with two hours of traffic (a zone's TTFT degrades)
    and the rollup of SLO chat-assistant."""
    url = embedded_server.store_url(f"fits_{uuid.uuid4().hex[:10]}")
    incident = parse_incident("zone-ttft")
    with warehouse.connect(url) as wh:
        wh.migrate()
        wh.insert_requests(
            synthetic_requests(6_000, seed=4, start=START, span=SPAN, incidents=[incident])
        )
        wh.slo_apply(["chat-assistant"])
    yield url
    store = open_store(url)
    try:
        store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
    finally:
        store.close()


@pytest.fixture
def place(embedded_server: ServerInfo) -> Iterator[Place]:
    """A short scratch folder (``/tmp/fit-...``, not pytest's 70 characters): the lines
    measured are the command's, with a path a user's could be."""
    folder = Path(tempfile.mkdtemp(prefix="fit-"))
    yield Place(folder, embedded_server)
    stop_server(folder / "own")  # the server `clickhouse start` started, if it outlived the test
    shutil.rmtree(folder)


@pytest.fixture
def llmwh(store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``llmwh ARGS`` in process at ``COLUMNS=100`` on the store; it must succeed."""
    for name in [n for n in os.environ if n.startswith("LLMWH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./llmwh.toml steers it

    def run(*args: str) -> Result:
        env = {"COLUMNS": str(WIDTH), "LLMWH_STORE": store_url}
        result = CliRunner().invoke(app, list(args), env=env)
        assert result.exit_code == 0, (args, result.stdout, result.stderr, result.exception)
        return result

    return run


def said(result: Result) -> str:
    return result.stdout + result.stderr


@pytest.mark.parametrize("command", sorted(RUNS))
def test_the_default_answer_fits_100_columns_and_says_times_in_iso_8601(command, llmwh, place):
    for args in RUNS[command](place):
        out = said(llmwh(*args))
        wide = [line for line in out.splitlines() if len(line) > WIDTH]
        times = A_TIME.findall(out)
        if {"csv", "json"} & set(args):  # for machines: a row a line, as wide as it is
            assert times, f"llmwh {' '.join(args)} printed no time to check"
        else:
            assert not wide, f"llmwh {' '.join(args)}: {len(wide)} lines over {WIDTH}: {wide[:3]}"
        not_iso = [t for t in times if not ISO.fullmatch(t)]
        if command in NOT_YET_ISO:
            assert not_iso, f"{command} is ISO 8601 now: take it off NOT_YET_ISO"
            continue
        assert not not_iso, f"llmwh {' '.join(args)}: times not ISO 8601: {not_iso[:3]}"


def test_a_table_with_columns_left_out_says_so_and_machine_formats_keep_them(llmwh):
    args = ("sla", "--slo", "chat-assistant", "--by", "zone", *RANGE)
    table = llmwh(*args).stdout.splitlines()
    assert "(7 rows; 14 more columns with --wide)" in table
    header = [cell.strip() for cell in table[0].split("|")]
    row = json.loads(llmwh(*args, "--format", "json").stdout)[0]
    assert set(header) < set(row) and len(row) == len(header) + 14


def test_the_footer_of_a_range_across_days_says_its_times_in_iso_8601(llmwh):
    footer = llmwh("sla", "--slo", "chat-assistant").stdout
    assert A_TIME.findall(footer) and all(ISO.fullmatch(t) for t in A_TIME.findall(footer))
