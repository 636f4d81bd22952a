"""The SLA report as one self-contained HTML file: styles inline, charts inline SVG,
nothing fetched, so it opens offline and can be forwarded as it is."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import polars as pl

from warehouse.exporters.report import charts, units
from warehouse.exporters.report.figures import Miss, SloFigures, min_group_size
from warehouse.query.sla import WORKBOOK_ALERTS
from warehouse.query.timerange import TimeRange

__all__ = [
    "anchor",
    "by_trouble",
    "headline",
    "render",
    "render_sections",
    "render_summary",
    "section_link",
]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #222; margin: 1.5rem auto; max-width: 118rem;
  padding: 0 2rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { margin-top: 2.5rem; border-bottom: 2px solid
  #1f4e79; padding-bottom: .2rem; } h3 { margin-top: 1.6rem; }
.muted { color: #666; } .held { color: #2e7d32; font-weight: 600; }
.missed { color: #c0392b; font-weight: 600; }
.headline { font-size: 1.1rem; margin: .4rem 0 .8rem; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; margin: 1rem 0; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: .6rem .9rem; min-width: 9rem; }
.card b { display: block; font-size: 1.3rem; }
.wide { overflow-x: auto; }
table { border-collapse: collapse; margin: .6rem 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e5e5; padding: .25rem .7rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
table.slos { width: 100%; font-size: 14px; } table.slos td { white-space: nowrap; }
table.slos td.what { white-space: normal; text-align: left; }
.alert { border-radius: 4px; padding: .05rem .45rem; font-weight: 600; }
.alert.page { background: #c0392b; color: #fff; } .alert.ticket { background: #f0ad4e; }
.alert.none { color: #2e7d32; }
td.spark svg { width: 11rem; height: 2.4rem; display: block; margin-left: auto; }
figure { margin: .8rem 0; } figure svg { width: 100%; height: auto; display: block; }
.sources { font-size: 12px; color: #555; overflow-wrap: anywhere; }
form { margin: 1rem 0; } input, select, button { font: inherit; }
@page { size: A4; margin: 14mm; }
@media print { body { margin: 0; max-width: none; padding: 0; } form { display: none; }
  figure, table, .cards { break-inside: avoid; } }
"""

Link = Callable[[str], str]
"""Where a summary row of an SLO leads: its page, or its section of the same file."""


def render(
    reports: list[SloFigures],
    generated: datetime | None = None,
    *,
    title: str = "SLA report",
    header: str = "",
    refresh_seconds: int | None = None,
    window: TimeRange | None = None,
) -> str:
    """The HTML document of one or more SLOs' figures: the SLOs in one table, the one
    in most trouble first (each row leads to its section), ``header`` (HTML), then each
    SLO's section in the same order. With ``refresh_seconds`` the page reloads itself
    (the live overview); ``window`` is the range named at the top when no report gives
    it."""
    generated = generated or datetime.now(UTC)
    first = reports[0].range if reports else window
    span = f"{_when(first.since)} to {_when(first.until)}" if first else ""
    ordered = by_trouble(reports)
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">{_e(span)} (UTC) &middot; generated {_when(generated)}</p>',
        render_summary(ordered, section_link) if len(ordered) > 1 else "",
        header,
        render_sections(ordered),
    ]
    refresh = (
        f'<meta http-equiv="refresh" content="{int(refresh_seconds)}">' if refresh_seconds else ""
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No icon to fetch: a browser asks for /favicon.ico otherwise, a 404 in its console.
        '<link rel="icon" href="data:,">'
        f"{refresh}<title>{_e(title)} {_e(span)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def by_trouble(reports: list[SloFigures]) -> list[SloFigures]:
    """The SLOs in most trouble first (:attr:`SloFigures.trouble`), else by name."""
    return sorted(reports, key=lambda report: (report.trouble, report.slo.name))


def section_link(name: str) -> str:
    """The SLO's section in the same document."""
    return f"#{anchor(name)}"


def anchor(name: str) -> str:
    """The id of the SLO's section."""
    return "slo-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name)


def render_summary(reports: list[SloFigures], link: Link) -> str:
    """Every SLO in one table, in the order given (:func:`by_trouble`): the alert that
    fires, target, attainment and budget left over the SLO's period, the burn rates of
    each of the SRE workbook's window pairs, what was missed over the range, and the
    range's attainment as a sparkline. Each name leads to ``link(name)``."""
    pairs = "".join(
        f"<th title='{a.severity} when both burn faster than {a.rate:g}x'>"
        f"{a.long} / {a.short}<br><span class='muted'>{a.severity} &gt; {a.rate:g}x</span></th>"
        for a in WORKBOOK_ALERTS
    )
    head = (
        "<tr><th>SLO</th><th>alert</th><th>target</th><th>attainment<br>"
        "<span class='muted'>over its period</span></th><th>budget left</th>"
        f"{pairs}<th class='what'>missed in this range</th><th>attainment, this range</th></tr>"
    )
    rows = [_summary_row(report, link) for report in reports]
    return f"<div class='wide'><table class='slos'>{head}{''.join(rows)}</table></div>"


def _summary_row(report: SloFigures, link: Link) -> str:
    slo, status = report.slo, report.status
    severity = report.alert.severity if report.alert else "none"
    attainment, left = status.get("attainment"), status.get("budget_remaining")
    cells = [
        f"<td><a href='{_e(link(slo.name))}'>{_e(slo.name)}</a></td>",
        f"<td><span class='alert {severity}'>{severity}</span></td>",
        f"<td>{units.pct(slo.target)}</td>",
        _toned(units.pct(attainment), None if attainment is None else attainment >= slo.target),
        _toned(units.pct(left), None if left is None else left >= 0),
    ]
    for alert in WORKBOOK_ALERTS:
        long, short = report.rates.get(alert.long), report.rates.get(alert.short)
        text = f"{units.burn(long)} / {units.burn(short)}"
        cells.append(_toned(text, False if alert.fires(report.rates) else None))
    over = [_e(_named(report, m)) for m in report.misses if m.over_range]
    some = [_e(_named(report, m)) for m in report.misses if not m.over_range]
    shown = f"<b class='missed'>{', '.join(over)}</b>" if over else ""
    if some:
        every = _duration(report.interval)
        shown += f" <span class='some muted'>in some {every} intervals: {', '.join(some)}</span>"
    cells.append(f"<td class='what'>{shown.strip() or '<span class=muted>none</span>'}</td>")
    spark = (
        charts.sparkline(
            report.over_time["attainment"].to_list(),
            title=f"{slo.name}: attainment per {_duration(report.interval)}",
            limit=slo.target,
        )
        if not report.empty
        else ""
    )
    cells.append(f"<td class='spark'>{spark}</td>")
    return f"<tr>{''.join(cells)}</tr>"


def _toned(text: str, good: bool | None) -> str:
    tone = "" if good is None else (" class='held'" if good else " class='missed'")
    return f"<td{tone}>{text}</td>"


def render_sections(reports: list[SloFigures]) -> str:
    """The sections of the SLOs' figures, without the document around them."""
    return "".join(_section(report) for report in reports)


def headline(report: SloFigures) -> tuple[str, str]:
    """What a reader must know first, in words: the verdict (what was missed over the
    range, else that all held), then the details: since when, what was missed in some
    intervals only, when the budget ran out, and the alert that fires."""
    slo = report.slo
    if report.empty:
        return "No request in this range", "nothing to report."
    over = [m for m in report.misses if m.over_range]
    some = [m for m in report.misses if not m.over_range]
    details: list[str] = []
    if over:
        verdict = "Missed " + " and ".join(_named(report, m) for m in over)
        details += [_since(report, m) for m in over]
    else:
        count = len(slo.objectives)
        verdict = f"Held the {units.pct(slo.target)} target" + (
            f" and {'all ' if count > 1 else ''}{count} objective{'s' if count != 1 else ''}"
            if count
            else ""
        )
    if some:
        every = _duration(report.interval)
        missed = ", ".join(
            f"{_named(report, m)} in {m.intervals} (first {_at(report, m.first)})"
            for m in some
            if m.first is not None
        )
        details.append(f"Missed in some {every} intervals: {missed}.")
    spent = report.over_time.filter(pl.col("budget_remaining") < 0)
    if spent.height:
        details.append(f"The range's error budget ran out at {_at(report, spent['time'][0])}.")
    if report.alert is not None:
        a = report.alert
        details.append(
            f"Alert, {a.severity}: the budget burns {units.burn(report.rates.get(a.long))} "
            f"over {a.long} and {units.burn(report.rates.get(a.short))} over {a.short}, "
            f"both above {a.rate:g}x."
        )
    return verdict, " ".join(details)


def _named(report: SloFigures, miss: Miss) -> str:
    return f"the {units.pct(report.slo.target)} target" if miss.what == "target" else miss.what


def _since(report: SloFigures, miss: Miss) -> str:
    """A miss over the range: its value, and from when (:meth:`headline`)."""
    if miss.what == "target":
        text = f"{units.pct(miss.value)} of requests were good"
    else:
        text = f"{miss.what.split()[0]} was {units.measure(miss.value, miss.measure)}"
    if miss.first is not None:
        plural = "s" if miss.intervals != 1 else ""
        text += (
            f", below it first at {_at(report, miss.first)} "
            f"(in {miss.intervals} {_duration(report.interval)} interval{plural})"
        )
    return text[0].upper() + text[1:] + "."


def _at(report: SloFigures, moment: datetime | None) -> str:
    """A moment of the range: its time of day when the range is within a day."""
    if moment is None:
        return "an unknown time"
    short = report.range.until - report.range.since <= timedelta(days=1)
    return moment.astimezone(UTC).strftime("%H:%M UTC" if short else "%Y-%m-%d %H:%M UTC")


def _section(report: SloFigures) -> str:
    slo, row = report.slo, report.summary
    over = any(m.over_range for m in report.misses)
    tone = "missed" if over or report.alert is not None else "held"
    verdict, details = headline(report)
    parts = [
        f"<h2>{_e(slo.name)}</h2>",
        f'<p class="headline"><b class="{tone}">{_e(verdict)}.</b> {_e(details)}</p>',
    ]
    if slo.description:
        parts.append(f"<p>{_e(slo.description)}</p>")
    if report.empty:
        parts.append(_objectives(report))
        return f'<section id="{anchor(slo.name)}">' + "".join(parts) + "</section>"
    target = slo.target
    held = None if row.get("attainment") is None else row["attainment"] >= target
    parts.append('<div class="cards">')
    parts.append(
        _card("attainment", units.pct(row.get("attainment")), f"target {units.pct(target)}", held)
    )
    windows = f"{_duration(slo.window)} windows"
    parts.append(_card("window compliance", units.pct(row.get("compliance")), windows))
    remaining = row.get("budget_remaining")
    parts.append(
        _card(
            "error budget left",
            units.pct(remaining),
            "of the range's budget",
            None if remaining is None else remaining >= 0,
        )
    )
    for label, _ in slo.burn_windows:
        rate = row.get(f"burn_rate_{label}")
        on_budget = None if rate is None else rate <= 1
        parts.append(_card(f"burn rate {label}", units.burn(rate), "1x = on budget", on_budget))
    parts.append(_card("requests", units.count(row["count"]), "valid, in scope"))
    parts.append("</div>")
    parts.append(_objectives(report))
    frame = report.over_time
    span = (report.range.since, report.range.until)
    every = _duration(report.interval)
    budget = [v for v in frame["budget_remaining"].to_list() if v is not None]
    parts.append("<h3>Error budget over the range</h3>")
    parts.append(
        _figure(
            charts.line(
                frame,
                "budget_remaining",
                span=span,
                title="error budget left (share of the range's budget)",
                unit="%",
                bounds=(min([0.0, *budget]) - 0.05, max([1.0, *budget]) + 0.02),
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
                title=f"attainment per {every} (share of requests good)",
                unit="%",
                limit=target,
                limit_label=f"target {units.pct(target)}",
            )
        )
    )
    for objective in slo.objectives:
        if objective.measure in frame.columns and objective.measure != "attainment":
            unit = units.unit_of(objective.measure)
            parts.append(
                _figure(
                    charts.line(
                        frame,
                        objective.measure,
                        span=span,
                        title=f"{objective.measure} per {every}" + (f" ({unit})" if unit else ""),
                        unit=unit,
                        limit=objective.value,
                        limit_label=f"objective {objective}",
                    )
                )
            )
    if report.worst is not None and report.by:
        parts.append(_worst(report))
    for window, attainment, causes in report.causes:
        parts.append(
            f"<h3>What carried the bad requests of {_when(window.since)} to "
            f"{_when(window.until)}</h3><p class='muted'>one of the worst "
            f"{every} intervals: attainment {units.pct(attainment)}</p>"
        )
        parts.append(_table(causes, _CAUSE_COLUMNS))
    parts.append(_drift(report))
    sources = "".join(
        f"<li><b>{_e(name)}</b>: {_e(text)}</li>" for name, text in report.sources.items()
    )
    parts.append(f"<h3>Sources</h3><ul class='sources'>{sources}</ul>")
    return f'<section id="{anchor(slo.name)}">' + "".join(parts) + "</section>"


_CAUSE_COLUMNS = ["dimension", "value", "count", "bad", "bad_rate", "lift", "contribution"]


def _objectives(report: SloFigures) -> str:
    """The target and each objective: its value over the range, whether it held, and
    in how many intervals it was missed, from when."""
    row, slo = report.summary, report.slo
    misses = {m.what: m for m in report.misses}
    every = _duration(report.interval)

    def line(what: str, value: str, ok: bool | None) -> str:
        verdict = "&ndash;" if ok is None else ("held" if ok else "missed")
        tone = "" if ok is None else ("held" if ok else "missed")
        miss = misses.get(what)
        when = (
            f"{miss.intervals} &middot; first from {_when(miss.first)}"
            if miss is not None and miss.first is not None
            else "none"
        )
        shown = (
            f"attainment &ge; {units.pct(slo.target)} (the target)"
            if what == "target"
            else (_e(what))
        )
        return (
            f"<tr><td>{shown}</td><td>{value}</td><td class='{tone}'>{verdict}</td>"
            f"<td>{when}</td></tr>"
        )

    attainment = row.get("attainment")
    rows = [line("target", units.pct(attainment),
                 None if attainment is None else attainment >= slo.target)]  # fmt: skip
    for objective in slo.objectives:
        value = row.get(objective.measure)
        ok = row.get(f"{objective.measure}_ok")
        rows.append(line(str(objective), units.measure(value, objective.measure), ok))
    thresholds = ", ".join(f"{k} &le; {units.ms(v)}" for k, v in slo.thresholds.items())
    good = f"<p>A good request is ok{' and ' + thresholds if thresholds else ''}.</p>"
    head = (
        f"<tr><th>objective</th><th>over the range</th><th></th>"
        f"<th>{every} intervals missed</th></tr>"
    )
    return good + f"<div class='wide'><table>{head}{''.join(rows)}</table></div>"


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
    columns = ["time", watched, "baseline_mean", "z"]
    return "<h3>Drift alerts</h3>" + _table(report.drift, columns, {"baseline_mean": watched})


def _table(frame: pl.DataFrame, columns: list[str], like: dict[str, str] | None = None) -> str:
    """``columns`` of ``frame``; a column's numbers in the unit of its name, or of the
    measure ``like`` names for it (a baseline reads as the measure it is of)."""
    columns = [c for c in columns if c in frame.columns]
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    rows = []
    formats = [(like or {}).get(c, c) for c in columns]
    for row in frame.select(columns).iter_rows():
        cells = "".join(f"<td>{_cell(v, c)}</td>" for v, c in zip(row, formats, strict=True))
        rows.append(f"<tr>{cells}</tr>")
    return f"<div class='wide'><table><tr>{head}</tr>{''.join(rows)}</table></div>"


def _cell(value: object, column: str) -> str:
    if isinstance(value, datetime):
        return _when(value)
    if column == "lift" and isinstance(value, float):
        return units.burn(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if column == "z":
            return units.number(float(value), "")
        return units.measure(float(value), column)
    return _e("" if value is None else str(value))


def _card(label: str, value: str, note: str, good: bool | None = None) -> str:
    tone = "" if good is None else (" held" if good else " missed")
    return (
        f"<div class='card'><span class='muted'>{_e(label)}</span>"
        f"<b class='{tone.strip()}'>{value}</b><span class='muted'>{_e(note)}</span></div>"
    )


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def _duration(interval: timedelta) -> str:
    minutes = int(interval.total_seconds() // 60)
    if minutes % 1440 == 0:
        return f"{minutes // 1440} d"
    return f"{minutes // 60} h" if minutes % 60 == 0 else f"{minutes} min"


def _e(text: str) -> str:
    return html.escape(text, quote=True)
