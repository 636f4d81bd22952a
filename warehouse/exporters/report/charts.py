"""The report's charts: matplotlib figures drawn from the query layer's polars frames,
written as inline SVG (no script, no font or image fetched: a page opens offline).

matplotlib is the plotting library here because it draws on the server, with no
browser and no JavaScript: one figure serves the HTML report, a PDF and the live page
alike, and its SVG output is stable enough to test.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # no display: figures are only written

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import polars as pl

__all__ = ["bars", "line"]

INK, BAD, GOOD, MUTED = "#1f4e79", "#c0392b", "#2e7d32", "#7f8c8d"

plt.rcParams.update(
    {
        "svg.fonttype": "none",  # text stays text, in the page's own fonts
        "svg.hashsalt": "llmwh",  # the same figure, the same SVG
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.color": "#e5e5e5",
    }
)


def line(
    frame: pl.DataFrame,
    column: str,
    *,
    title: str,
    limit: float | None = None,
    limit_label: str = "",
    percent: bool = False,
    floor_zero: bool = False,
) -> str:
    """``column`` over ``time``, with a limit (an objective's threshold, the target)
    drawn across; an SVG element."""
    figure, axes = plt.subplots(figsize=(7.2, 2.4))
    data = frame.select("time", column).drop_nulls()
    axes.plot(data["time"].to_list(), data[column].to_list(), color=INK, linewidth=1.4)
    if limit is not None:
        axes.axhline(limit, color=BAD, linestyle="--", linewidth=1, label=limit_label)
        axes.legend(loc="best", frameon=False)
    if floor_zero:
        axes.axhline(0, color=MUTED, linewidth=0.8)
    if percent:
        axes.yaxis.set_major_formatter(lambda v, _: f"{v:.2%}" if abs(v) < 0.1 else f"{v:.1%}")
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(axes.xaxis.get_major_locator()))
    axes.set_title(title, loc="left")
    return _svg(figure)


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, limit: float | None) -> str:
    """Horizontal bars, worst first, red where below ``limit``; an SVG element."""
    figure, axes = plt.subplots(figsize=(7.2, 0.35 * len(labels) + 0.8))
    colors = [BAD if limit is not None and v < limit else GOOD for v in values]
    axes.barh(list(labels)[::-1], list(values)[::-1], color=colors[::-1])
    if limit is not None:
        axes.axvline(limit, color=BAD, linestyle="--", linewidth=1)
    axes.set_title(title, loc="left")
    return _svg(figure)


def _svg(figure) -> str:
    figure.tight_layout()
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    text = out.getvalue()
    return text[text.index("<svg") :]  # the element, without the XML prolog and doctype
