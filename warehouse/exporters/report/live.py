"""The live overview page at ``GET /`` of ``llmwh serve``, each SLO's page at
``GET /slo/<name>``, and ``GET /report``.

The overview opens with every SLO in one table, the one in most trouble first (the
alert its burn rates fire, how fast it burns, its budget left; each row leads to the
SLO's page), then the receiver's own health (writes and values per second since the
page was last drawn, flush latency, sealing lag), a form that opens the full report for
a chosen range, and the report's sections for the last hours in the table's order. It
refreshes itself every minute. Read-only; it reads through
:class:`warehouse.api.Warehouse`, so it is scoped to the ``tenant`` setting when one is
set.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client import CollectorRegistry

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import QueryError
from warehouse.exporters.report.figures import SloFigures, gather
from warehouse.exporters.report.page import (
    Link,
    by_trouble,
    render,
    render_sections,
    render_summary,
    section_link,
)
from warehouse.query.timerange import TimeRange, parse_duration, time_range
from warehouse.store.base import Store

__all__ = ["Overview"]

REFRESH_SECONDS = 60
REDRAW_SECONDS = 30
TENANT_WINDOW = "5m"
"""What a tenant's own figures on the overview cover."""
MAX_REPORT_RANGE = timedelta(days=400)
"""The longest range a report page answers (the hourly rollups' default retention)."""
_WRITE_ENDPOINTS = ("/api/v1/write", "/api/v1/requests")


@dataclass(frozen=True)
class _Snapshot:
    at: float
    writes: float
    values: float


class Overview:
    """Draws the overview and the report pages of one receiver."""

    def __init__(
        self,
        store: Store,
        config: Config,
        registry: CollectorRegistry,
        started: float,
        hours: int = 6,
        link: Link = section_link,
    ):
        """``started``: when the receiver started (``time.monotonic()``), so that the
        first page's rates are over the receiver's life, said so. ``link``: where a row
        of the SLOs' table leads."""
        self.store = store
        self.config = config
        self.registry = registry
        self.slos = Warehouse(store, config).configured_slos()
        self.hours = hours
        self.link = link
        """Where the SLOs' table leads (each SLO's page; by default its section)."""
        self._last = _Snapshot(started, 0.0, 0.0)
        self._first = True
        self._lock = threading.Lock()
        self._figures: dict[str | None, tuple[float, TimeRange, list[SloFigures]]] = {}

    def page(self, tenant: str | None = None) -> str:
        """The overview: the SLOs' table, health, then each SLO over the last ``hours``."""
        window, figures = self._latest(tenant)
        # The receiver's own figures are every tenant's: a tenant sees its own instead.
        health = self._health() if tenant is None else self._tenant_health(tenant)
        summary = render_summary(figures, self.link) if figures else ""
        return render(
            [],
            title=f"llmwh: the last {self.hours} hours",
            header=summary + health + _report_form(self.slos) + render_sections(figures),
            refresh_seconds=REFRESH_SECONDS,
            window=window,
        )

    def slo_page(self, name: str, tenant: str | None = None) -> str:
        """One SLO's page: its section of the overview, on its own."""
        window, figures = self._latest(tenant)
        shown = [f for f in figures if f.slo.name == name]
        if not shown:
            raise QueryError(f"unknown SLO {name}: this receiver shows {', '.join(self.slos)}")
        return render(
            shown,
            title=f"{name}: the last {self.hours} hours",
            header="<p><a href='../'>&larr; every SLO</a></p>",
            refresh_seconds=REFRESH_SECONDS,
            window=window,
        )

    def _latest(self, tenant: str | None) -> tuple[TimeRange, list[SloFigures]]:
        """Every SLO's figures over the last ``hours``, in most trouble first; drawn at
        most every :data:`REDRAW_SECONDS` per tenant (each draw asks the store a few
        questions per SLO), shared by the overview and the SLOs' pages."""
        with self._lock:
            cached = self._figures.get(tenant)
        if cached is None or time.monotonic() - cached[0] > REDRAW_SECONDS:
            window = time_range(f"{self.hours}h", None)
            warehouse = Warehouse(self.store, self.config, tenant=tenant)
            figures = by_trouble([gather(warehouse, name, window, "zone") for name in self.slos])
            cached = (time.monotonic(), window, figures)
            with self._lock:
                self._figures[tenant] = cached
        return cached[1], cached[2]

    def report(self, query: Mapping[str, Sequence[str]], tenant: str | None = None) -> str:
        """The full report for ``?slo=NAME&since=7d[&until=...][&by=DIM]``."""
        names = list(query.get("slo", ())) or self.slos
        unknown = set(names) - set(self.slos)
        if unknown:
            raise QueryError(
                f"unknown SLO {', '.join(sorted(unknown))}: this receiver reports "
                f"{', '.join(self.slos)}"
            )
        since = _one(query, "since") or "7d"
        window = time_range(since, _one(query, "until"))
        if window.until - window.since > MAX_REPORT_RANGE:
            raise QueryError(f"a report page covers at most {MAX_REPORT_RANGE.days} days")
        by = _one(query, "by")
        warehouse = Warehouse(self.store, self.config, tenant=tenant)
        return render([gather(warehouse, name, window, by) for name in names])

    def _tenant_health(self, tenant: str) -> str:
        """The tenant's own traffic of the last :data:`TENANT_WINDOW`, from the store."""
        recent = Warehouse(self.store, self.config, tenant=tenant).drill(
            measures=["count", "error_rate"], since=TENANT_WINDOW
        )
        count = int(recent["count"].sum()) if recent.height else 0
        errors = recent["error_rate"].item() if recent.height and count else None
        seconds = parse_duration(TENANT_WINDOW).total_seconds()
        cards = [
            ("requests/s", f"{count / seconds:,.1f}", f"landed, over the last {TENANT_WINDOW}"),
            ("error rate", "&ndash;" if errors is None else f"{errors:.1%}", "of those requests"),
        ]
        return f"<h2>Tenant {html.escape(tenant)}</h2>{_cards(cards)}"

    def _health(self) -> str:
        samples = [s for metric in self.registry.collect() for s in metric.samples]

        def total(name: str, **labels: str) -> float:
            return sum(
                s.value
                for s in samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            )

        writes = sum(
            s.value
            for s in samples
            if s.name == "llmwh_receiver_http_requests_total"
            and s.labels.get("endpoint") in _WRITE_ENDPOINTS
            and s.labels.get("code", "").startswith("2")
        )
        # Values landed: float samples, histograms, exemplars, requests and request parts
        # (series rows are bookkeeping, counted once per write).
        values = sum(
            s.value
            for s in samples
            if s.name == "llmwh_receiver_written_total" and s.labels.get("kind") != "series"
        )
        now = _Snapshot(time.monotonic(), writes, values)
        with self._lock:
            last, self._last = self._last, now
            first, self._first = self._first, False
        seconds = max(now.at - last.at, 1e-9)
        over = "since the receiver started" if first else f"over the last {seconds:,.0f} s"
        flushes = total("llmwh_receiver_flush_seconds_count")
        flush_ms = 1000 * total("llmwh_receiver_flush_seconds_sum") / flushes if flushes else None
        lag = total("llmwh_receiver_sealing_lag_seconds")
        cards = [
            ("writes/s", f"{(now.writes - last.writes) / seconds:,.1f}", f"acknowledged, {over}"),
            ("values/s", f"{(now.values - last.values) / seconds:,.0f}", f"written, {over}"),
            ("flush latency", "&ndash;" if flush_ms is None else f"{flush_ms:,.0f} ms", "mean"),
            ("sealing lag", f"{lag:,.1f} s", "oldest unsealed part"),
        ]
        return f"<h2>Receiver</h2>{_cards(cards)}"


def _cards(cards: Sequence[tuple[str, str, str]]) -> str:
    shown = "".join(
        f"<div class='card'><span class='muted'>{label}</span><b>{value}</b>"
        f"<span class='muted'>{note}</span></div>"
        for label, value, note in cards
    )
    return f"<div class='cards'>{shown}</div>"


def _report_form(slos: Sequence[str]) -> str:
    options = "".join(f"<option>{html.escape(name)}</option>" for name in slos)
    return (
        "<form action='report' method='get'><label>Full report for "
        f"<select name='slo'>{options}</select></label> <label>over the last "
        "<input name='since' value='7d' size='4'></label> <label>worst by "
        "<input name='by' value='zone' size='8'></label> <label>until "
        "<input name='until' placeholder='now' size='16'></label> <button>open</button></form>"
    )


def _one(query: Mapping[str, Sequence[str]], key: str) -> str | None:
    values = query.get(key) or ()
    return values[0] if values and values[0] else None
