"""The SLA report and the live overview page, opened in Debian's headless Chromium: they
render without a console message, every chart draws, and the incident's zone is named.
The screenshots are kept in the test's directory."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from PIL import Image
from senders import require_binary

from warehouse.api import Warehouse
from warehouse.exporters.report import gather, render
from warehouse.query.timerange import TimeRange
from warehouse.store import open_store
from warehouse.store.migrations import Migrator
from warehouse.synthetic import Incident, synthetic_requests

END = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
START = END - timedelta(hours=5)
# A data line (the charts' ink) or a bar (red below the target, green above).
DATA = re.compile(r"stroke: #1f4e79|fill: #c0392b|fill: #2e7d32")
INCIDENT = Incident("zone-ttft", at=0.6, length=0.3)  # TTFT degrades in zone sh-b


@dataclass(frozen=True)
class Opened:
    dom: str
    """The document as Chromium holds it once loaded."""
    console: list[str]
    """Every console message (a script error is one)."""
    screenshot: Path


def open_in_chromium(url: str, shot: Path, height: int = 4000) -> Opened:
    binary = require_binary("chromium")
    flags = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    shown = subprocess.run(
        [*flags, f"--window-size=1280,{height}", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shot.exists(), shown.stderr[-2000:]
    console = re.findall(r":CONSOLE[^\]]*\] (.*)", shown.stderr)
    dumped = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    return Opened(dumped.stdout, console, shot)


def ink(shot: Path) -> float:
    """The share of the screenshot's pixels that are not near white."""
    image = Image.open(shot).convert("L")
    dark = sum(count for level, count in enumerate(image.histogram()) if level < 200)
    return dark / (image.width * image.height)


def assert_drawn(opened: Opened) -> None:
    assert opened.console == []
    charts = re.findall(r"<svg.*?</svg>", opened.dom, flags=re.S)
    assert len(charts) >= 3
    for chart in charts:
        assert DATA.search(chart), "a chart without its data drawn"
    assert f"<td>{INCIDENT.target}</td>" in opened.dom
    assert ink(opened.screenshot) > 0.01


def traffic():
    return synthetic_requests(20_000, seed=9, start=START, span=END - START, incidents=[INCIDENT])


def test_a_console_message_is_caught(tmp_path):
    """The checks below can fail: a page with a script error does not pass them."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><body><script>no_such_function();</script></body>")
    opened = open_in_chromium(page.as_uri(), tmp_path / "broken.png", height=300)
    assert any("no_such_function" in message for message in opened.console)
    assert ink(opened.screenshot) < 0.01


def test_the_report_file_opens_and_draws(tmp_path):
    store = open_store(f"duckdb:///{tmp_path / 'report.duckdb'}")
    Migrator(store).up()
    store.insert_arrow("requests", traffic())
    figures = [gather(Warehouse(store), "chat-assistant", TimeRange(START, END), "zone")]
    page = tmp_path / "report.html"
    page.write_text(render(figures), encoding="utf-8")
    store.close()
    assert_drawn(open_in_chromium(page.as_uri(), tmp_path / "report.png"))


def test_the_overview_page_opens_and_draws(receiver, tmp_path):
    url, store_url = receiver
    store = open_store(store_url)
    store.insert_arrow("requests", traffic())
    store.close()
    opened = open_in_chromium(f"{url}/", tmp_path / "overview.png")
    assert_drawn(opened)
    assert "<h2>Receiver</h2>" in opened.dom
    assert '<meta http-equiv="refresh" content="60">' in opened.dom
