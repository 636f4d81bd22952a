"""The report's charts: SVG elements that stand alone in a page of many, drawn safely
from several threads, whatever text the data holds."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import polars as pl

from warehouse.exporters.report import charts

START = datetime(2026, 11, 1, tzinfo=UTC)
SPAN = (START, START + timedelta(hours=1))


def frame(values: list[float | None]) -> pl.DataFrame:
    times = [START + timedelta(minutes=5 * k) for k in range(len(values))]
    return pl.DataFrame({"time": times, "attainment": values})


def test_a_line_is_labelled_and_its_ids_are_its_own():
    first = charts.line(frame([0.99, 0.98, None, 0.97]), "attainment", title="a", span=SPAN)
    second = charts.line(frame([0.99, 0.98, 0.97]), "attainment", title="b", span=SPAN)
    assert first.startswith('<svg role="img" aria-label="a" ') and "<title>a</title>" in first
    ids = re.findall(r'\bid="([^"]+)"', first + second)
    assert ids and len(ids) == len(set(ids))  # one document holds both
    for svg in (first, second):
        for ref in re.findall(r'(?:url\(#|href="#)([^)"]+)', svg):
            assert f'id="{ref}"' in svg  # every reference stays inside its chart
    assert "stroke: #1f4e79" in first  # the data's line is drawn
    assert "<metadata>" not in first and "http://purl.org" not in first


def test_a_lone_point_is_drawn_as_a_marker():
    svg = charts.line(frame([None, 0.98, None]), "attainment", title="one", span=SPAN)
    assert "<use " in svg  # matplotlib draws markers as uses of one path


def test_dollar_signs_are_text_not_math():
    svg = charts.bars(["a$x^$b", "$5-$10"], [0.5, 0.97], title="cost $1-$2", limit=0.99)
    assert "a$x^$b" in svg and "$5-$10" in svg and "cost $1-$2" in svg


def test_charts_drawn_on_many_threads_stay_whole():
    def draw(k: int) -> str:
        return charts.bars([f"zone-{k}", "other"], [0.9, 0.995], title=f"t{k}", limit=0.99)

    with ThreadPoolExecutor(8) as pool:
        drawn = list(pool.map(draw, range(40)))
    for k, svg in enumerate(drawn):
        assert f"zone-{k}" in svg and svg.count("<svg") == 1
    assert "matplotlib.pyplot" not in sys.modules  # no global figure registry in play
