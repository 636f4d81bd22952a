"""The demo's story as the README tells it, held against the data `llmwh serve --demo` sends.

The fixture seeds what a demo started at a given time backfills (``DemoTraffic.backfill``,
the very batches the demo sends, all of its 6 hours) into DuckDB, once per start time:
at 18:00 UTC, when the busiest six hours of the day end (the worst case for an SLO), and
at 03:00 UTC, when the fleet is quiet. The numbers are read from the README's passage
between ``<!-- demo-story -->`` and ``<!-- /demo-story -->``, so that neither the README
nor the demo changes without the other; the questions are the ones the README's commands
ask, over the backfilled hours.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from warehouse.api import Warehouse
from warehouse.cli.serve import serve
from warehouse.demo import DemoTraffic
from warehouse.query.slo import load_slo, shipped_slos
from warehouse.store import open_store
from warehouse.synthetic.traffic import REGIONS

README = Path(__file__).parents[2] / "README.md"
DAY = datetime(2026, 11, 2, 18, tzinfo=UTC)
NIGHT = datetime(2026, 11, 3, 3, tzinfo=UTC)
COMMANDS = (
    "llmwh sla --slo chat-assistant --since 6h --by zone",
    "llmwh root-cause --slo chat-assistant --since 1h",
    "llmwh drift -m p95_ttft_ms --by zone --interval 5m --since 3h --alerts-only",
)
"""The README's commands whose answers it states, asked below through the API."""


def _passage() -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"<!-- demo-story -->(.*?)<!-- /demo-story -->", text, re.S)
    assert found, "README.md has no passage between <!-- demo-story --> and <!-- /demo-story -->"
    return " ".join(found.group(1).split())


PASSAGE = _passage()


def stated(pattern: str) -> tuple[str, ...]:
    """The numbers ``pattern`` captures in the README's demo passage."""
    found = re.search(pattern, PASSAGE)
    assert found, f"the README's demo passage no longer says /{pattern}/: {PASSAGE}"
    return found.groups()


def number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class Demo:
    wh: Warehouse
    began: datetime
    requests: int
    incident_at: datetime


@pytest.fixture(scope="module", params=[DAY, NIGHT], ids=["day", "night"])
def demo(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Demo]:
    began: datetime = request.param
    wh = Warehouse(open_store(f"duckdb://{tmp_path_factory.mktemp('demo')}/demo.duckdb"))
    wh.migrate()
    traffic = DemoTraffic("http://127.0.0.1:9", wh.store)
    n, batches = traffic.backfill(began)
    for batch in batches:
        wh.insert_requests(batch)
    assert traffic.incident_from(began).target == "sh-b"  # as the README says
    yield Demo(wh, began, n, began - traffic.incident_ago)
    wh.close()


def test_the_readme_shows_the_commands_whose_answers_it_states():
    for command in COMMANDS:
        assert command in PASSAGE


def test_the_rate_and_the_backfilled_requests_are_the_demos(demo):
    (rate,) = stated(r"(\d+) requests/s on average over the day")
    low, high = stated(r"the backfill is ([\d,]+) to ([\d,]+) requests by the time of day")
    traffic = DemoTraffic("http://127.0.0.1:9", demo.wh.store)
    assert traffic.rate == number(rate)
    assert inspect.signature(serve).parameters["demo_rate"].default == number(rate)
    history = traffic.history
    day = [
        traffic.requests_in(demo.began - history + timedelta(minutes=m), history)
        for m in range(0, 24 * 60, 10)
    ]
    assert min(day) == pytest.approx(number(low), rel=0.02)
    assert max(day) == pytest.approx(number(high), rel=0.02)
    stored = demo.wh.sql("SELECT count() AS n FROM requests")["n"][0]
    assert stored == demo.requests and number(low) <= demo.requests <= number(high)


@pytest.mark.parametrize("slo", shipped_slos())
def test_outside_the_incident_every_slo_holds_with_room_to_spare(demo, slo):
    """Attainment at least halfway from the target to 100%, over half the error budget
    left and every objective held: in every zone before the incident, and in every zone
    but `sh-b` over all the backfilled hours."""
    target = load_slo(slo).target
    since = demo.began - timedelta(hours=6)
    others = [zone for zones in REGIONS.values() for zone in zones if zone != "sh-b"]
    before = demo.wh.sla(slo, by=["zone"], since=since, until=demo.incident_at)
    after = demo.wh.sla(slo, by=["zone"], filters={"zone": others}, since=since, until=demo.began)
    for when, result in (("before the incident", before), ("outside sh-b", after)):
        assert result.height == len(others) + (result is before), when
        for row in result.iter_rows(named=True):
            where = f"{slo}, zone {row['zone']}, {when}: {row}"
            assert row["attainment"] >= target + (1 - target) / 2, where
            assert row["budget_remaining"] > 0.5, where
            held = [c for c in result.columns if c.endswith("_ok")]
            assert held and all(row[c] for c in held), where


def test_the_sla_report_shows_sh_b_alone_in_red(demo):
    good, target, burn = stated(
        r"every zone but `sh-b` above ([\d.]+)% against its ([\d.]+)% target, burning its "
        r"error budget at under ([\d.]+)x"
    )
    low, high, burn_1h = stated(
        r"`sh-b`'s attainment is (\d+)% to (\d+)% by the time of day and its "
        r"`burn_rate_1h` around (\d+)"
    )
    assert load_slo("chat-assistant").target == number(target) / 100
    report = demo.wh.sla(
        "chat-assistant", by=["zone"], since=demo.began - timedelta(hours=6), until=demo.began
    )
    rows = {row["zone"]: row for row in report.iter_rows(named=True)}
    sh_b = rows.pop("sh-b")
    assert number(low) <= sh_b["attainment"] * 100 <= number(high), sh_b
    assert sh_b["burn_rate_1h"] == pytest.approx(number(burn_1h), rel=0.25), sh_b
    for zone, row in rows.items():
        assert row["attainment"] * 100 > number(good), (zone, row)
        assert row["burn_rate_6h"] < number(burn), (zone, row)


def test_root_cause_names_sh_b_then_its_region(demo):
    (contribution,) = stated(
        r"`root-cause` puts `zone = sh-b` first, carrying about ([\d.]+) of the bad requests "
        r"beyond its share \(`contribution`\), then its region `sh`"
    )
    causes = demo.wh.root_cause(
        "chat-assistant", since=demo.began - timedelta(hours=1), until=demo.began
    )
    first, second = causes.head(2).iter_rows(named=True)
    assert (first["dimension"], first["value"]) == ("zone", "sh-b"), causes
    assert first["contribution"] == pytest.approx(number(contribution), abs=0.05), first
    assert (second["dimension"], second["value"]) == ("region", "sh"), causes


def test_drift_alerts_on_sh_b_soon_after_the_incident_starts(demo):
    (minutes,) = stated(r"`drift` first alerts for `sh-b` about (\d+) minutes after it starts")
    drift = demo.wh.drift(
        "p95_ttft_ms",
        by=["zone"],
        interval="5m",
        since=demo.began - timedelta(hours=3),
        until=demo.began,
    )
    # Only the incident alerts: a quiet zone's p95 follows the day's load by a few
    # percent, which the drift's floor for latencies (a tenth) does not call a drift.
    assert set(drift.filter(pl.col("alert"))["zone"]) == {"sh-b"}, drift.filter("alert")
    alerts = drift.filter(pl.col("alert") & (pl.col("zone") == "sh-b"))
    first = alerts["time"].min()
    # Started on the hour, the incident starts on a window's edge and the alert comes
    # on the third window over the baseline; from any other second, 5 to 10 minutes.
    assert first - demo.incident_at == timedelta(minutes=number(minutes)), alerts
