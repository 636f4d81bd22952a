"""The report's charts: matplotlib figures drawn from the query layer's polars frames,
written as inline SVG (no script, no font or image fetched: a page opens offline).

matplotlib is the plotting library here because it draws on the server, with no
browser and no JavaScript: one figure serves the HTML report, the PDF and the live page
alike, and its SVG output is stable enough to test.

Figures are :class:`matplotlib.figure.Figure` objects made here, never through pyplot:
pyplot's registry of open figures is global and not thread-safe, and the receiver draws
pages on several threads. Styles are set on each figure, not in the process's rcParams,
so importing this module changes nothing for other matplotlib users; only the two SVG
settings are applied around the writing, under a lock.
"""

from __future__ import annotations

import io
import itertools
import math
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import matplotlib
import matplotlib.dates as mdates
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import Formatter, FuncFormatter, PercentFormatter

from warehouse.exporters.report import units

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["MIN_SHARE_SPAN", "bars", "line", "line_figure", "share_axis", "sparkline"]

INK, BAD, GOOD, MUTED, GRID = "#1f4e79", "#c0392b", "#2e7d32", "#7f8c8d", "#e5e5e5"
# Text as text; stable ids.
_SVG: dict[RcKeyType, str] = {"svg.fonttype": "none", "svg.hashsalt": "llmwh"}
_WRITING = threading.Lock()
_NUMBERS = itertools.count(1)
WIDTH = 12.0
"""Inches: the page scales every chart to its own width (``width: 100%``), so this sets
the proportions and the text's size relative to the plot, not a size on screen."""
MIN_SHARE_SPAN = 0.05
"""The narrowest percentage axis: 5 points, so that 99.2 % against a 99 % target does
not fill the chart from top to bottom like a disaster."""


def share_axis(values: Sequence[float | None], limit: float | None = None) -> tuple[float, float]:
    """The y range of a chart of shares: shares near 100 % (an attainment, a hit ratio)
    run up to 100 % from below the data and the limit, the limit at most halfway up;
    small shares (an error rate) from 0 up past the data and the limit, a point at
    least. Never narrower than :data:`MIN_SHARE_SPAN` near 100 %, the floor on a whole
    step of the axis's size."""
    seen = [v for v in values if v is not None and math.isfinite(v)]
    if limit is not None:
        seen.append(limit)
    if not seen:
        return 0.0, 1.0
    if min(seen) >= 0.5 and max(seen) <= 1.0:
        low = min(seen) - 0.002  # the lowest point clear of the axis
        if limit is not None:
            low = min(low, limit - (1.0 - limit))
        low = min(low, 1.0 - MIN_SHARE_SPAN)
        step = 0.01 if 1.0 - low <= 0.1 else 0.05
        return max(0.0, round(math.floor(low / step + 1e-9) * step, 6)), 1.0
    low, high = min(0.0, min(seen)), max(seen) * 1.15
    return low, max(high, low + 0.01)


def line(
    frame: pl.DataFrame,
    column: str,
    *,
    title: str,
    span: tuple[datetime, datetime],
    unit: str = "",
    limit: float | None = None,
    limit_label: str = "",
    bounds: tuple[float, float] | None = None,
    floor_zero: bool = False,
) -> str:
    """``column`` over ``time`` across ``span``, with a limit (an objective's threshold,
    the target) drawn across and named in a legend above the plot, never over it;
    missing intervals (null) break the line. ``unit`` (``%``, ``ms``, ``req``...) labels
    the y axis's ticks; ``bounds`` fixes its range (by default, for ``%``,
    :func:`share_axis`). An SVG element."""
    figure = line_figure(frame, column, title=title, span=span, unit=unit, limit=limit,
                         limit_label=limit_label, bounds=bounds, floor_zero=floor_zero)  # fmt: skip
    return _svg(figure, title)


def line_figure(
    frame: pl.DataFrame,
    column: str,
    *,
    title: str,
    span: tuple[datetime, datetime],
    unit: str = "",
    limit: float | None = None,
    limit_label: str = "",
    bounds: tuple[float, float] | None = None,
    floor_zero: bool = False,
) -> Figure:
    """:func:`line`'s figure, before it is written."""
    figure = Figure(figsize=(WIDTH, 2.6), layout="constrained")
    axes = _axes(figure, title)
    times, values = frame["time"].to_list(), frame[column].to_list()
    marker = "o" if sum(v is not None for v in values) < 3 else None  # a lone point shows
    drawn = [float("nan") if v is None else v for v in values]
    axes.plot(times, drawn, color=INK, linewidth=1.4, marker=marker, markersize=3, label=column)
    if limit is not None:
        axes.axhline(limit, color=BAD, linestyle="--", linewidth=1, label=limit_label)
        _legend(axes)
    if floor_zero:
        axes.axhline(0, color=MUTED, linewidth=0.8)
    if bounds is None and unit == "%":
        bounds = share_axis(values, limit)
    elif bounds is None:  # a latency, a speed: from 0, so that 150 ms against 120 ms is not 5x
        seen = [v for v in [*values, limit] if v is not None and math.isfinite(v)]
        if seen and min(seen) >= 0:
            bounds = (0.0, max(seen) * 1.1 or 1.0)
    if bounds is not None:
        axes.set_ylim(*bounds)
    axes.yaxis.set_major_formatter(_ticks(unit))
    # Datetimes are converted by matplotlib's date units; its stubs take floats only.
    axes.set_xlim(*span)  # type: ignore[arg-type]
    locator = mdates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, offset_formats=_OFFSETS))
    axes.xaxis.get_offset_text().set_fontsize(8)
    return figure


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, limit: float | None) -> str:
    """Shares by group, worst first, as dots on a :func:`share_axis` (red below
    ``limit``, green above): dots, not bars, because the axis does not start at 0 and a
    bar's length would read as the share. An SVG element."""
    figure = Figure(figsize=(WIDTH, 0.3 * len(labels) + 0.9), layout="constrained")
    axes = _axes(figure, title)
    colors = [BAD if limit is not None and v < limit else GOOD for v in values]
    positions = list(range(len(labels)))[::-1]
    low, high = share_axis(values, limit)
    axes.hlines(positions, low, list(values), color=GRID, linewidth=1)
    axes.scatter(list(values), positions, c=colors, s=36, zorder=3)
    axes.set_yticks(positions, [_short(label) for label in labels], parse_math=False)
    if limit is not None:
        axes.axvline(limit, color=BAD, linestyle="--", linewidth=1)
    axes.set_xlim(low, high)
    axes.set_ylim(-0.6, len(labels) - 0.4)
    axes.xaxis.set_major_formatter(_ticks("%"))
    return _svg(figure, title)


def sparkline(values: Sequence[float | None], *, title: str, limit: float | None = None) -> str:
    """A small line of shares without axes, on the same :func:`share_axis` as the
    full charts, with ``limit`` dashed across: for a table's cell."""
    figure = Figure(figsize=(1.8, 0.4))
    axes = figure.add_axes((0.0, 0.04, 1.0, 0.92))
    axes.set_axis_off()
    drawn = [float("nan") if v is None else v for v in values]
    if limit is not None:
        axes.axhline(limit, color=BAD, linestyle="--", linewidth=0.8)
    axes.plot(range(len(drawn)), drawn, color=INK, linewidth=1.2)
    axes.set_xlim(0, max(len(drawn) - 1, 1))
    axes.set_ylim(*share_axis(values, limit))
    return _svg(figure, title)


_OFFSETS = ["", "%Y", "%Y-%m", "%Y-%m-%d UTC", "%Y-%m-%d UTC", "%Y-%m-%d %H:%M UTC"]
"""The date written under the time axis: it names the time zone."""


def _ticks(unit: str) -> Formatter:
    """A tick's text in the page's number format (:mod:`.units`)."""
    if unit == "%":  # as many decimals as the axis's span needs, the same on every tick
        return PercentFormatter(xmax=1.0, symbol=" %")
    return FuncFormatter(lambda v, _: units.number(v, unit))


def _legend(axes: Axes) -> None:
    """The legend above the plot, at its right: never over the data."""
    legend = axes.legend(
        loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, frameon=False, fontsize=8,
        borderaxespad=0.2,
    )  # fmt: skip
    for text in legend.get_texts():
        text.set_parse_math(False)


def _axes(figure: Figure, title: str) -> Axes:
    axes = figure.subplots()
    axes.set_title(title, loc="left", fontsize=9, parse_math=False)
    axes.tick_params(labelsize=8)
    axes.grid(True, color=GRID)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return axes


def _short(label: str, width: int = 28) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _svg(figure: Figure, title: str) -> str:
    """The figure as an ``<svg>`` element: its ids made unique in the page (several
    charts share one document), labelled for screen readers."""
    out = io.StringIO()
    with _WRITING, matplotlib.rc_context(_SVG):
        figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    text = text[text.index("<svg") :]  # the element, without the XML prolog and doctype
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    prefix = f"c{next(_NUMBERS)}-"
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}\1"', text)
    label = _escape(title)
    return text.replace("<svg ", f'<svg role="img" aria-label="{label}" ', 1).replace(
        ">", f"><title>{label}</title>", 1
    )


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
