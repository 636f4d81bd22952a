"""The SLA report as one self-contained HTML file: styles inline, charts inline SVG,
nothing fetched, so it opens offline and can be forwarded as it is."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import polars as pl

from warehouse.exporters.report import charts
from warehouse.exporters.report.figures import SloFigures, min_group_size
from warehouse.query.timerange import TimeRange

__all__ = ["render", "render_sections"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 2rem auto; max-width: 60rem;
  padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.5rem; border-bottom: 2px solid
  #1f4e79; padding-bottom: .2rem; } h3 { margin-top: 1.6rem; }
.muted { color: #666; } .held { color: #2e7d32; font-weight: 600; }
.missed { color: #c0392b; font-weight: 600; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; margin: 1rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6rem .9rem; min-width: 9rem; }
.card b { display: block; font-size: 1.3rem; }
table { border-collapse: collapse; margin: .6rem 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .25rem .7rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: .8rem 0; } figure svg { max-width: 100%; height: auto; }
.sources { font-size: 12px; color: #555; }
form { margin: 1rem 0; } input, select, button { font: inherit; }
@page { size: A4; margin: 14mm; }
@media print { body { margin: 0; max-width: none; } form { display: none; }
  figure, table, .cards { break-inside: avoid; } }
"""


def render(
    reports: list[SloFigures],
    generated: datetime | None = None,
    *,
    title: str = "SLA report",
    header: str = "",
    refresh_seconds: int | None = None,
    window: TimeRange | None = None,
) -> str:
    """The HTML document of one or more SLOs' figures; ``header`` (HTML) goes before
    them, and with ``refresh_seconds`` the page reloads itself (the live overview);
    ``window`` is the range named at the top when no report gives it."""
    generated = generated or datetime.now(UTC)
    first = reports[0].range if reports else window
    span = f"{_when(first.since)} to {_when(first.until)}" if first else ""
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">{_e(span)} (UTC) &middot; generated {_when(generated)}</p>',
        header,
    ]
    body.append(render_sections(reports))
    refresh = (
        f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{refresh}<title>{_e(title)} {_e(span)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def render_sections(reports: list[SloFigures]) -> str:
    """The sections of the SLOs' figures, without the document around them."""
    return "".join(_section(report) for report in reports)


def _section(report: SloFigures) -> str:
    slo, row = report.slo, report.summary
    parts = [f"<h2>{_e(slo.name)}</h2>"]
    if slo.description:
        parts.append(f"<p>{_e(slo.description)}</p>")
    if report.empty:
        parts.append(_objectives(report))
        parts.append('<p class="missed">No request in this range: nothing to report.</p>')
        return "<section>" + "".join(parts) + "</section>"
    target = slo.target
    held = None if row.get("attainment") is None else row["attainment"] >= target
    parts.append('<div class="cards">')
    parts.append(_card("attainment", _pct(row.get("attainment")), f"target {_pct(target)}", held))
    windows = f"{_duration(slo.window)} windows"
    parts.append(_card("window compliance", _pct(row.get("compliance")), windows))
    remaining = row.get("budget_remaining")
    parts.append(
        _card(
            "error budget left",
            _pct(remaining),
            "of the range's budget",
            None if remaining is None else remaining >= 0,
        )
    )
    for label, _ in slo.burn_windows:
        rate = row.get(f"burn_rate_{label}")
        on_budget = None if rate is None else rate <= 1
        parts.append(_card(f"burn rate {label}", _num(rate), "1 = on budget", on_budget))
    parts.append(_card("requests", f"{row['count']:,}", "valid, in scope"))
    parts.append("</div>")
    parts.append(_objectives(report))
    frame = report.over_time
    span = (report.range.since, report.range.until)
    parts.append("<h3>Error budget over the range</h3>")
    parts.append(
        _figure(
            charts.line(
                frame,
                "budget_remaining",
                span=span,
                title="error budget left",
                percent=True,
                floor_zero=True,
            )
        )
    )
    parts.append(
        _figure(
            charts.line(
                frame,
                "attainment",
                span=span,
                title=f"attainment per {_duration(report.interval)}",
                limit=target,
                limit_label=f"target {_pct(target)}",
                percent=True,
            )
        )
    )
    for objective in slo.objectives:
        if objective.measure in frame.columns and objective.measure != "attainment":
            parts.append(
                _figure(
                    charts.line(
                        frame,
                        objective.measure,
                        span=span,
                        title=f"{objective.measure} per {_duration(report.interval)}",
                        limit=objective.value,
                        limit_label=str(objective),
                        percent="rate" in objective.measure,
                    )
                )
            )
    if report.worst is not None and report.by:
        parts.append(_worst(report))
    for window, attainment, causes in report.causes:
        parts.append(
            f"<h3>What carried the bad requests of {_when(window.since)} to "
            f"{_when(window.until)}</h3><p class='muted'>one of the worst "
            f"{_duration(report.interval)} intervals: attainment {_pct(attainment)}</p>"
        )
        parts.append(
            _table(
                causes, ["dimension", "value", "count", "bad", "bad_rate", "lift", "contribution"]
            )
        )
    parts.append(_drift(report))
    sources = "".join(
        f"<li><b>{_e(name)}</b>: {_e(text)}</li>" for name, text in report.sources.items()
    )
    parts.append(f"<h3>Sources</h3><ul class='sources'>{sources}</ul>")
    return "<section>" + "".join(parts) + "</section>"


_CAUSE_COLUMNS = ["dimension", "value", "count", "bad", "bad_rate", "lift", "contribution"]


def _objectives(report: SloFigures) -> str:
    row = report.summary
    rows = []
    for objective in report.slo.objectives:
        value = row.get(objective.measure)
        ok = row.get(f"{objective.measure}_ok")
        verdict = "held" if ok else "missed"
        rows.append(
            f"<tr><td>{_e(str(objective))}</td><td>{_num(value)}</td>"
            f"<td class='{verdict}'>{verdict}</td></tr>"
        )
    thresholds = ", ".join(f"{k} &le; {v:g} ms" for k, v in report.slo.thresholds.items())
    good = f"<p>A good request is ok{' and ' + thresholds if thresholds else ''}.</p>"
    if not rows:
        return good
    head = "<tr><th>objective</th><th>over the range</th><th></th></tr>"
    return good + f"<table>{head}{''.join(rows)}</table>"


def _worst(report: SloFigures) -> str:
    by, frame = report.by, report.worst
    assert by is not None and frame is not None
    shown = frame.head(12)
    least = min_group_size(report.summary.get("count") or 0)
    heading = (
        f"<h3>Worst {_e(by)}</h3><p class='muted'>by attainment, among the groups with at "
        f"least {least:,} requests</p>"
    )
    if shown.is_empty():
        return heading + "<p class='muted'>No group that large.</p>"
    drawn = shown.filter(pl.col("attainment").is_not_null())
    chart = charts.bars(
        [str(v) for v in drawn[by].to_list()],
        drawn["attainment"].to_list(),
        title=f"attainment by {by}, worst first",
        limit=report.slo.target,
    )
    columns = [by, "count", "attainment", "budget_remaining", "compliance"]
    return heading + _figure(chart) + _table(shown, columns)


def _drift(report: SloFigures) -> str:
    if report.drift.is_empty():
        return "<h3>Drift</h3><p class='muted'>No drift alert in the range.</p>"
    watched = report.drift.columns[1]
    return "<h3>Drift alerts</h3>" + _table(report.drift, ["time", watched, "baseline_mean", "z"])


def _table(frame: pl.DataFrame, columns: list[str]) -> str:
    columns = [c for c in columns if c in frame.columns]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    rows = []
    for row in frame.select(columns).iter_rows():
        cells = "".join(f"<td>{_cell(v, c)}</td>" for v, c in zip(row, columns, strict=True))
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _cell(value: object, column: str) -> str:
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, float):
        shares = ("attainment", "compliance", "budget_remaining", "bad_rate", "contribution")
        return _pct(value) if column in shares else _num(value)
    if isinstance(value, int):
        return f"{value:,}"
    return _e("" if value is None else str(value))


def _card(label: str, value: str, note: str, good: bool | None = None) -> str:
    tone = "" if good is None else (" held" if good else " missed")
    return (
        f"<div class='card'><span class='muted'>{_e(label)}</span>"
        f"<b class='{tone.strip()}'>{value}</b><span class='muted'>{_e(note)}</span></div>"
    )


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def _pct(value: float | None) -> str:
    if value is None:
        return "&ndash;"
    return f"{value:.3%}" if abs(value) >= 0.99 or abs(value) < 0.01 else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "&ndash;" if value is None else f"{value:,.4g}"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _duration(interval: timedelta) -> str:
    minutes = int(interval.total_seconds() // 60)
    if minutes % 1440 == 0:
        return f"{minutes // 1440} d"
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
