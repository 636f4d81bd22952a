"""`llmwh generate` as a user runs it, and the incidents it injects as the query layer sees them."""

from __future__ import annotations

from datetime import timedelta

import pyarrow.parquet as pq
import pytest
from days import DAY, at
from test_cli import llmwh

from warehouse.api import Warehouse
from warehouse.ingest.events import read_file
from warehouse.synthetic import INCIDENT_KINDS, Incident, synthetic_requests

START = at(6)
SPAN = timedelta(hours=4)


class TestCommand:
    def test_the_same_seed_writes_the_same_rows_in_either_format(self, tmp_path):
        common = (
            "generate",
            "-n",
            "3000",
            "--seed",
            "9",
            "--start",
            START.isoformat(),
            "--span",
            "4h",
        )
        first, again = tmp_path / "a.parquet", tmp_path / "b.parquet"
        lines = tmp_path / "a.ndjson"
        for out in (first, again, lines):
            done = llmwh(*common, "-i", "zone-ttft", "--out", str(out))
            assert done.returncode == 0, done.stderr
        assert (
            f"incident zone-ttft: TTFT degrades for zone=sh-b, {DAY:%Y-%m-%d}T08:24Z" in done.stderr
        )
        assert "generated 3,000 requests (seed 9)" in done.stderr
        table = pq.read_table(first)
        assert table.equals(pq.read_table(again))
        assert read_file(lines).equals(table)  # the NDJSON passes `llmwh ingest`'s checks

    def test_the_file_holds_what_the_python_api_generates(self, tmp_path):
        out = tmp_path / "t.parquet"
        done = llmwh(
            "generate", "-n", "500", "--seed", "2", "--start", START.isoformat(), "--out", str(out)
        )
        assert done.returncode == 0, done.stderr
        expected = synthetic_requests(500, seed=2, start=START, span=timedelta(days=1))
        assert pq.read_table(out).equals(expected)

    @pytest.mark.parametrize(
        ("args", "complaint"),
        [
            ((), "give exactly one of --out FILE and --send URL"),
            (("--out", "x.csv"), "name it .ndjson, .jsonl or .parquet"),
            (("--out", "x.ndjson", "-i", "zone-slow"), "unknown incident 'zone-slow'"),
            (("--send", "ftp://host"), "--send needs an http(s) URL"),
            (("--send", "http://127.0.0.1:9", "--via", "carrier-pigeon"), "unknown --via"),
            (("--send", "http://127.0.0.1:9", "-H", "Bearer"), "expected NAME: VALUE"),
        ],
    )
    def test_bad_arguments_are_one_line_and_a_failing_exit_code(self, args, complaint):
        done = llmwh("generate", "-n", "10", *args)
        assert done.returncode == 1
        assert complaint in done.stderr and "Traceback" not in done.stderr


ROOT_CAUSE_THRESHOLDS = {"ttft_ms": 300.0}


@pytest.mark.parametrize("kind", list(INCIDENT_KINDS))
def test_root_cause_finds_each_incident(migrated, kind):
    """The incident's dimension value is the top finding over its window, on every store."""
    incident = Incident(kind, at=0.5, length=0.25)
    table = synthetic_requests(40_000, seed=13, start=START, span=SPAN, incidents=[incident])
    warehouse = Warehouse(migrated)
    warehouse.insert_requests(table)
    first = START + SPAN * 0.5
    found = warehouse.root_cause(
        thresholds=ROOT_CAUSE_THRESHOLDS, since=first, until=first + SPAN * 0.25, limit=3
    )
    top = found.row(0, named=True)
    assert (top["dimension"], top["value"]) == (incident.dimension, incident.target), found
    assert top["lift"] > 1.5

    # Before the incident, the same value was nowhere near as bad.
    before = warehouse.root_cause(
        thresholds=ROOT_CAUSE_THRESHOLDS, since=START, until=first, limit=None
    ).filter(dimension=incident.dimension, value=incident.target)
    assert before["bad_rate"].item() * 2 < top["bad_rate"]
