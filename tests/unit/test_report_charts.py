"""The report's charts: SVG elements that stand alone in a page of many, drawn safely
from several threads, whatever text the data holds."""

from __future__ import annotations

import re
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from warehouse.exporters.report import charts, units

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


def test_a_legend_sits_outside_the_plot():
    values = [0.995, 0.99, 0.97, 0.999] * 3  # data up in the top right corner too
    drawn = frame(values)
    figure = charts.line_figure(
        drawn, "attainment", title="t", span=SPAN, unit="%", limit=0.99, limit_label="target"
    )
    figure.draw_without_rendering()  # lays the figure out, as writing it does
    axes = figure.axes[0]
    legend = axes.get_legend()
    assert legend is not None
    plot, box = axes.get_window_extent(), legend.get_window_extent()
    assert box.y0 >= plot.y1 - 1  # above the plot, not over its data
    assert figure.get_window_extent().contains(box.x1 - 1, box.y1 - 1)  # and on the figure


@pytest.mark.parametrize(
    ("values", "limit", "low", "high"),
    [
        ([0.992, 0.995, 0.999], 0.99, 0.95, 1.0),  # 99.2 % is no disaster: 5 points shown
        ([0.9995, 0.9999], 0.999, 0.95, 1.0),
        ([0.91, 0.99], 0.99, 0.90, 1.0),  # the data's low point, on a whole point
        ([0.6, 0.98], 0.95, 0.55, 1.0),  # wider: steps of 5 points
        ([0.001, 0.004], 0.005, 0.0, 0.01),  # a small share from 0, a point at least
    ],
)
def test_a_percentage_axis_never_zooms_into_a_point(values, limit, low, high):
    found = charts.share_axis(values, limit)
    assert found == pytest.approx((low, high))
    assert found[1] - found[0] >= min(charts.MIN_SHARE_SPAN, high) - 1e-9


def test_a_sparkline_is_a_small_labelled_svg():
    svg = charts.sparkline([0.99, None, 0.95, 0.999], title="chat: attainment", limit=0.99)
    assert svg.startswith('<svg role="img" aria-label="chat: attainment" ')
    assert "stroke: #1f4e79" in svg and "stroke: #c0392b" in svg  # the data, the target


@pytest.mark.parametrize(
    ("value", "name", "shown"),
    [
        (0.992, "attainment", "99.2 %"),
        (0.99, "attainment", "99.0 %"),
        (0.9996, "attainment", "99.96 %"),  # never 100.0 % while below it
        (1.0, "attainment", "100.0 %"),
        (-0.871, "budget_remaining", "-87.1 %"),
        (0.001, "error_rate", "0.10 %"),
        (0.0004, "error_rate", "0.04 %"),  # not 0.0 % against a 0.5 % objective
        (0.0, "error_rate", "0.0 %"),
        (412.3, "p95_ttft_ms", "412 ms"),
        (41.23, "p95_ttft_ms", "41.2 ms"),
        (60_000, "p95_e2e_ms", "60.0 s"),
        (15_410, "count", "15.4k req"),
        (950, "count", "950 req"),
        (38.04, "decode_tps", "38.0 tok/s"),
        (None, "attainment", "&ndash;"),
    ],
)
def test_one_number_format_with_units(value, name, shown):
    assert units.measure(value, name) == shown


def test_burn_rates_read_as_multiples():
    assert [units.burn(v) for v in (0, 0.239, 1.637, 14.4, 120.3, None)] == [
        "0x", "0.24x", "1.6x", "14.4x", "120x", "&ndash;",
    ]  # fmt: skip
