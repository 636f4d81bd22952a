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

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["bars", "line"]

INK, BAD, GOOD, MUTED, GRID = "#1f4e79", "#c0392b", "#2e7d32", "#7f8c8d", "#e5e5e5"
# Text as text; stable ids.
_SVG: dict[RcKeyType, str] = {"svg.fonttype": "none", "svg.hashsalt": "llmwh"}
_WRITING = threading.Lock()
_NUMBERS = itertools.count(1)


def line(
    frame: pl.DataFrame,
    column: str,
    *,
    title: str,
    span: tuple[datetime, datetime],
    limit: float | None = None,
    limit_label: str = "",
    percent: bool = False,
    floor_zero: bool = False,
) -> str:
    """``column`` over ``time`` across ``span``, with a limit (an objective's threshold,
    the target) drawn across; missing intervals (null) break the line. An SVG element."""
    figure = Figure(figsize=(7.2, 2.4))
    axes = _axes(figure, title)
    times, values = frame["time"].to_list(), frame[column].to_list()
    marker = "o" if sum(v is not None for v in values) < 3 else None  # a lone point shows
    drawn = [float("nan") if v is None else v for v in values]
    axes.plot(times, drawn, color=INK, linewidth=1.4, marker=marker, markersize=3)
    if limit is not None:
        axes.axhline(limit, color=BAD, linestyle="--", linewidth=1, label=limit_label)
        legend = axes.legend(loc="best", frameon=False)
        for text in legend.get_texts():
            text.set_parse_math(False)
    if floor_zero:
        axes.axhline(0, color=MUTED, linewidth=0.8)
    if percent:
        axes.yaxis.set_major_formatter(lambda v, _: f"{v:.2%}" if abs(v) < 0.1 else f"{v:.1%}")
    # Datetimes are converted by matplotlib's date units; its stubs take floats only.
    axes.set_xlim(*span)  # type: ignore[arg-type]
    locator = mdates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    return _svg(figure, title)


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, limit: float | None) -> str:
    """Horizontal bars of shares, worst first, red where below ``limit``; an SVG element."""
    figure = Figure(figsize=(7.2, 0.35 * len(labels) + 0.9))
    axes = _axes(figure, title)
    colors = [BAD if limit is not None and v < limit else GOOD for v in values]
    positions = list(range(len(labels)))[::-1]
    axes.barh(positions, list(values), color=colors)
    axes.set_yticks(positions, [_short(label) for label in labels], parse_math=False)
    if limit is not None:
        axes.axvline(limit, color=BAD, linestyle="--", linewidth=1)
    low = min([*values, limit if limit is not None else 1.0])
    axes.set_xlim(max(0.0, low - (1 - low) * 0.2), 1.0)
    axes.xaxis.set_major_formatter(lambda v, _: f"{v:.1%}")
    return _svg(figure, title)


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
    figure.tight_layout()
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
