"""The overview page, an SLO's page and the SLA report, looked at in Debian's headless
Chromium as a person would, at 1366x768 and 1920x1080: no console message, no
horizontal scroll, every chart drawn across the page's width, the SLO in most trouble
in the table's first row and its page's headline naming what it missed.

Chromium is driven over the DevTools protocol (tests/chromium.py), so that what is
checked is the page as laid out: its scroll width, each chart's size on screen. Which
SLO is in trouble is read from the page's own table and checked for consistency, not
assumed: the traffic's incident decides it. The screenshots stay in the test's
directory."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
from chromium import Chromium, Looked
from PIL import Image
from senders import require_binary

from warehouse.api import Warehouse
from warehouse.exporters.report import gather, render
from warehouse.query.slo import shipped_slos
from warehouse.query.timerange import TimeRange
from warehouse.store import open_store
from warehouse.store.migrations import Migrator
from warehouse.synthetic import Incident, synthetic_requests

END = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
START = END - timedelta(hours=5)
INCIDENT = Incident("zone-ttft", at=0.6, length=0.4)  # TTFT degrades in one zone, to the end
SIZES = [(1366, 768), (1920, 1080)]
SEVERITY = {"page": 2, "ticket": 1, "none": 0}


def traffic():
    return synthetic_requests(30_000, seed=9, start=START, span=END - START, incidents=[INCIDENT])


@pytest.fixture(scope="module")
def chromium():
    with Chromium(require_binary("chromium")) as browser:
        yield browser


def ink(shot: Path) -> float:
    """The share of the screenshot's pixels that are not near white."""
    image = Image.open(shot).convert("L")
    dark = sum(count for level, count in enumerate(image.histogram()) if level < 200)
    return dark / (image.width * image.height)


def assert_looks_right(looked: Looked) -> dict[str, Any]:
    """What every page must do at every size; its measurements, for more checks."""
    seen = looked.measured
    where = f"{looked.url} at {looked.width}x{looked.height}"
    assert looked.console == [], where
    assert seen["scrollWidth"] <= seen["clientWidth"], f"{where} scrolls sideways"
    assert seen["charts"], where
    for chart in seen["charts"]:
        # Drawn, with its data, across the page's width (not 540 px of 1400).
        assert chart["inked"], f"{where}: {chart['label']} has no data drawn"
        assert chart["height"] > 100, f"{where}: {chart['label']}: {chart}"
        assert chart["width"] >= 0.9 * seen["clientWidth"], f"{where}: {chart['label']}"
    for spark in seen["sparklines"]:
        assert spark["inked"] and spark["width"] > 50 and spark["height"] > 10, where
    assert ink(looked.screenshot) > 0.01, where
    return seen


def assert_trouble_first(seen: dict[str, Any], where: str) -> str:
    """The table lists every SLO, none with a worse alert than the first row's, and the
    first has missed something (over the range or in some intervals): its name."""
    assert sorted(seen["rows"]) == shipped_slos(), where
    ranks = [SEVERITY[alert] for alert in seen["alerts"]]
    shown = dict(zip(seen["rows"], seen["alerts"], strict=True))
    assert ranks[0] == max(ranks), f"{where}: {shown}"
    missed = seen["missed"][0], seen["someMissed"][0]
    assert any(missed), f"{where}: the first SLO missed nothing: {seen}"
    return seen["rows"][0]


def assert_headline_names(seen: dict[str, Any], table: dict[str, Any], where: str) -> None:
    """The page's (first) headline says plainly what the table's first row said was
    missed: over the range in its verdict, in some intervals after it."""
    verdict, headline = seen["verdicts"][0], seen["headlines"][0]
    over, some = table["missed"][0], table["someMissed"][0]
    if over:
        assert verdict.startswith("Missed "), f"{where}: {verdict}"
        for what in over.split(", "):
            assert what in verdict, f"{where}: {what!r} not in {verdict!r}"
    if some:
        for what in some.split(": ", 1)[1].split(", "):
            assert what in headline, f"{where}: {what!r} not in {headline!r}"


def test_a_console_message_is_caught(chromium, tmp_path):
    """The checks can fail: a script error is a console message, a wide page scrolls."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><body><div style='width: 3000px'>wide</div>"
        "<script>no_such_function();</script></body>"
    )
    looked = chromium.look(page.as_uri(), 1366, 768, tmp_path / "broken.png")
    assert any("no_such_function" in message for message in looked.console)
    assert looked.measured["scrollWidth"] > looked.measured["clientWidth"]


def test_the_overview_and_an_slo_page_as_served(chromium, receiver, tmp_path):
    url, store_url = receiver
    store = open_store(store_url)
    store.insert_arrow("requests", traffic())
    store.close()
    for width, height in SIZES:
        overview = chromium.look(f"{url}/", width, height, tmp_path / f"overview-{width}.png")
        seen = assert_looks_right(overview)
        where = f"the overview at {width}x{height}"
        first = assert_trouble_first(seen, where)
        # The table is the first thing on the page: in the first screen.
        assert seen["h1"].startswith("llmwh: the last")
        slo_url = urljoin(f"{url}/", seen["firstHref"])
        assert slo_url == f"{url}/slo/{first}"
        page = chromium.look(slo_url, width, height, tmp_path / f"slo-{width}.png")
        assert_headline_names(assert_looks_right(page), seen, f"/slo/{first}")


def test_the_report_file(chromium, tmp_path):
    store = open_store(f"duckdb:///{tmp_path / 'report.duckdb'}")
    Migrator(store).up()
    store.insert_arrow("requests", traffic())
    window = TimeRange(START, END)
    figures = [gather(Warehouse(store), name, window, "zone") for name in shipped_slos()]
    store.close()
    page = tmp_path / "report.html"
    page.write_text(render(figures), encoding="utf-8")
    for width, height in SIZES:
        looked = chromium.look(page.as_uri(), width, height, tmp_path / f"report-{width}.png")
        seen = assert_looks_right(looked)
        where = f"the report at {width}x{height}"
        first = assert_trouble_first(seen, where)
        assert seen["firstHref"] == f"#slo-{first}"
        # The sections follow the table's order: the first headline is the first row's.
        assert_headline_names(seen, seen, where)
