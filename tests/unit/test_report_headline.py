"""What an SLO's section says first, and the order of the SLOs' table: from figures made
here, so that each case is the one named (no store, no traffic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl

from warehouse.exporters.report.figures import SloFigures, misses
from warehouse.exporters.report.page import by_trouble, headline, render
from warehouse.query.sla import alert_rates, firing, with_alert_windows
from warehouse.query.slo import parse_slo
from warehouse.query.timerange import TimeRange

START = datetime(2026, 12, 4, 12, tzinfo=UTC)
EVERY = timedelta(minutes=5)
SLO_TEXT = """
name = "{name}"
target = 0.99
[thresholds]
ttft_ms = 300
[[objectives]]
objective = "p95(ttft_ms) <= 200"
"""


def figures(name: str, attainment: list[float], p95: list[float], **status: float) -> SloFigures:
    """An SLO over ``len(attainment)`` 5-minute intervals of 1,000 requests each, with
    ``status`` the period's figures (``burn_rate_1h=...``)."""
    slo = with_alert_windows(parse_slo(SLO_TEXT.format(name=name)))
    n = len(attainment)
    times = [START + k * EVERY for k in range(n)]
    bad = pl.Series([1000 * (1 - a) for a in attainment]).cum_sum()
    over_time = pl.DataFrame(
        {
            "time": times,
            "count": [1000] * n,
            "good_count": [round(1000 * a) for a in attainment],
            "attainment": attainment,
            "p95_ttft_ms": p95,
            "budget_remaining": (1 - bad / (0.01 * 1000 * n)).to_list(),
        }
    )
    overall = sum(attainment) / n
    summary: dict[str, Any] = {
        "count": 1000 * n,
        "attainment": overall,
        "p95_ttft_ms": 150.0,  # over the range the objective holds
        "p95_ttft_ms_ok": True,
        "budget_remaining": 1 - (1 - overall) / 0.01,
    }
    row = {"count": 1000 * n, "attainment": overall, **status}
    rates = alert_rates(row, slo)
    window = TimeRange(START, START + n * EVERY)
    return SloFigures(
        slo, window, EVERY, summary, over_time, None, None, [], pl.DataFrame(), {}, row,
        rates, firing(rates), misses(slo, summary, over_time),
    )  # fmt: skip


def test_a_missed_target_is_the_headline_even_when_every_objective_held():
    """The report once showed attainment in red beside objectives all 'held': the reader
    could not tell what was missed. The target is named, and from when."""
    report = figures("chat", [0.999] * 6 + [0.95] * 6, [150.0] * 6 + [260.0] * 6)
    verdict, details = headline(report)
    assert verdict == "Missed the 99.0 % target"
    assert details.startswith("97.4 % of requests were good, below it first at 12:30 UTC")
    assert "p95(ttft_ms) <= 200 in 6 (first 12:30 UTC)" in details  # held over the range
    assert "error budget ran out at" in details
    page = render([report])
    assert '<p class="headline"><b class="missed">Missed the 99.0 % target.</b>' in page
    assert "attainment &ge; 99.0 % (the target)</td><td>97.4 %</td><td class='missed'>" in page


def test_a_held_slo_says_so():
    verdict, details = headline(figures("fine", [0.999] * 12, [150.0] * 12))
    assert (verdict, details) == ("Held the 99.0 % target and 1 objective", "")


def test_the_table_puts_the_fastest_burning_first():
    calm = figures("a-calm", [0.999] * 12, [150.0] * 12)
    paging = figures("c-paging", [0.999] * 12, [150.0] * 12, burn_rate_1h=20.0, burn_rate_5m=30.0)
    ticket = figures("b-ticket", [0.999] * 12, [150.0] * 12, burn_rate_3d=2.0, burn_rate_6h=3.0)
    slow = figures("d-slow", [0.999] * 12, [150.0] * 12, burn_rate_3d=0.9, burn_rate_6h=0.9)
    assert paging.alert is not None and paging.alert.severity == "page"
    ordered = by_trouble([calm, slow, ticket, paging])
    assert [f.slo.name for f in ordered] == ["c-paging", "b-ticket", "d-slow", "a-calm"]
    page = render(ordered)
    rows = page.index("href='#slo-c-paging'"), page.index("href='#slo-b-ticket'")
    assert rows[0] < rows[1] < page.index('<section id="slo-c-paging">')
    assert "<span class='alert page'>page</span>" in page
