"""`llmwh report`: one self-contained HTML file per run, from the query layer's figures,
on every store, over generated traffic with an incident."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from warehouse.api import Warehouse
from warehouse.exporters.report import gather, render
from warehouse.exporters.report.pdf import to_pdf
from warehouse.query.timerange import TimeRange
from warehouse.synthetic import Incident, synthetic_requests

END = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=5)
START = END - timedelta(hours=6)
# A data line (the charts' ink) or a bar (red below the target, green above).
DATA = re.compile(r"stroke: #1f4e79|fill: #c0392b|fill: #2e7d32")
INCIDENT = Incident("zone-ttft", at=0.5, length=0.3)  # TTFT degrades in zone sh-b


@pytest.fixture(scope="module")
def wh(module_migrated):
    module_migrated.insert_arrow(
        "requests",
        synthetic_requests(30_000, seed=21, start=START, span=END - START, incidents=[INCIDENT]),
    )
    return Warehouse(module_migrated)


@pytest.fixture(scope="module")
def page(wh) -> tuple[list, str]:
    window = TimeRange(START, END)
    figures = [gather(wh, name, window, "zone") for name in ("chat-assistant", "code-completion")]
    return figures, render(figures)


def test_the_page_fetches_nothing(page):
    _, html = page
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html and "@import" not in html
    # Only in-page references: SVG's clip paths and markers (`url(#id)`, `href="#id"`),
    # the SLOs' sections, and the empty icon that keeps a browser from asking for one.
    fetched = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", html)
    fetched += re.findall(r"url\(\s*['\"]?([^)'\"]+)", html)
    assert fetched and all(link.startswith("#") or link == "data:," for link in fetched), fetched


def test_every_slo_has_its_figures_and_charts(page):
    figures, html = page
    for figure in figures:
        assert f"<h2>{figure.slo.name}</h2>" in html
        for objective in figure.slo.objectives:
            assert str(objective).replace("<", "&lt;").replace(">", "&gt;") in html
    charts = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    assert len(charts) >= 3 * sum(not f.empty for f in figures) > 0
    for chart in charts:
        assert DATA.search(chart), "a chart without its data drawn"


def test_the_incident_zone_is_the_worst_and_named(page):
    figures, html = page
    chat = figures[0]
    assert chat.worst is not None and chat.worst["zone"][0] == INCIDENT.target
    assert f"<td>{INCIDENT.target}</td>" in html
    # The root cause of each of the worst intervals names the zone too.
    assert chat.causes
    for window, attainment, causes in chat.causes:
        assert attainment < chat.slo.target and window.since >= START
        top = causes.row(0, named=True)
        assert (top["dimension"], top["value"]) == ("zone", INCIDENT.target)


def test_the_budget_burn_down_ends_at_the_reported_budget(page):
    figures, _ = page
    for figure in (f for f in figures if not f.empty):
        last = figure.over_time["budget_remaining"][-1]
        assert last == pytest.approx(figure.summary["budget_remaining"], rel=1e-9)
        assert figure.over_time["count"].sum() == figure.summary["count"]


def test_sources_and_stated_errors_are_on_the_page(page):
    figures, html = page
    for figure in figures:
        for text in figure.sources.values():
            assert text.replace("'", "&#x27;") in html or text in html


def test_a_range_shorter_than_an_interval_still_draws(wh):
    moment = START + timedelta(hours=2, seconds=7)
    figure = gather(wh, "chat-assistant", TimeRange(moment, moment + timedelta(seconds=40)), None)
    assert not figure.empty and figure.over_time.height == 1
    html = render([figure])
    for chart in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        assert "<use " in chart  # the lone point, as a marker


def test_a_range_without_requests_says_so(wh):
    empty = TimeRange(START - timedelta(days=30), START - timedelta(days=29))
    figure = gather(wh, "chat-assistant", empty, "zone")
    assert figure.empty
    assert "No request in this range" in render([figure])


def test_the_cli_writes_the_file_and_refuses_an_unknown_slo(tmp_path):
    store = f"duckdb:///{tmp_path / 'r.duckdb'}"

    def llmwh(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "warehouse", *args, "--store", store],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip

    assert llmwh("migrate", "up").returncode == 0
    out = tmp_path / "report.html"
    done = llmwh("report", "--slo", "chat-assistant", "--since", "1d", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "no request in range for chat-assistant" in done.stdout
    assert "No request in this range" in out.read_text()
    pdf = tmp_path / "report.pdf"
    done = llmwh("report", "--slo", "chat-assistant", "--format", "pdf", "--out", str(pdf))
    assert done.returncode == 0, done.stderr
    assert pdf.read_bytes().startswith(b"%PDF-")
    for args, named in (
        (["--slo", "no-such-slo"], "no-such-slo"),
        (["--slo", "chat-assistant", "--since", "99999999d"], "99999999d"),
        (["--slo", "chat-assistant", "--by", "no_such_dimension"], "no_such_dimension"),
    ):
        bad = llmwh("report", *args)
        assert bad.returncode == 1, bad.stderr
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("llmwh: error:") and named in lines[0]


def test_the_report_as_pdf(page, tmp_path):
    weasyprint = pytest.importorskip("weasyprint", reason="the pdf extra is not installed")
    _, html = page
    document = weasyprint.HTML(string=html).render()
    assert len(document.pages) >= 2  # cards, tables and charts of two SLOs
    pdf = to_pdf(html)
    assert pdf.startswith(b"%PDF-") and len(pdf) > 20_000
