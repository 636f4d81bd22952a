"""The live overview page at ``GET /`` of ``llmwh serve``, and ``GET /report``.

The overview is the report's sections for the last hours, refreshing itself every
minute, with the receiver's own health on top (writes and rows per second since the
page was last drawn, flush latency, sealing lag) and a form that opens the full report
for a chosen range. Read-only; it reads through :class:`warehouse.api.Warehouse`, so it
is scoped to the ``tenant`` setting when one is set.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from warehouse.api import Warehouse
from warehouse.errors import QueryError
from warehouse.exporters.report.figures import gather
from warehouse.exporters.report.page import render
from warehouse.query.slo import shipped_slos
from warehouse.query.timerange import time_range

__all__ = ["Overview"]

REFRESH_SECONDS = 60
_WRITE_ENDPOINTS = ("/api/v1/write", "/api/v1/requests")


@dataclass(frozen=True)
class _Snapshot:
    at: float
    writes: float
    rows: float


class Overview:
    """Draws the overview and the report pages of one receiver."""

    def __init__(
        self,
        warehouse: Warehouse,
        registry: CollectorRegistry,
        slos: Sequence[str] = (),
        hours: int = 6,
    ):
        self.warehouse = warehouse
        self.registry = registry
        self.slos = list(slos) or shipped_slos()
        self.hours = hours
        self._last = _Snapshot(time.monotonic(), 0.0, 0.0)
        self._lock = threading.Lock()

    def page(self) -> str:
        """The overview: health, then each SLO over the last ``hours``."""
        window = time_range(f"{self.hours}h", None)
        figures = [gather(self.warehouse, name, window, "zone") for name in self.slos]
        header = self._health() + _report_form(self.slos)
        return render(
            figures,
            title=f"llmwh: the last {self.hours} hours",
            header=header,
            refresh_seconds=REFRESH_SECONDS,
        )

    def report(self, query: Mapping[str, Sequence[str]]) -> str:
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
        by = _one(query, "by")
        return render([gather(self.warehouse, name, window, by) for name in names])

    def _health(self) -> str:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for metric in self.registry.collect()
            for s in metric.samples
        }

        def total(name: str, **labels: str) -> float:
            return sum(
                value
                for (sample, pairs), value in samples.items()
                if sample == name and all((k, v) in pairs for k, v in labels.items())
            )

        writes = sum(
            value
            for (sample, pairs), value in samples.items()
            if sample == "llmwh_receiver_http_requests_total"
            and dict(pairs).get("endpoint") in _WRITE_ENDPOINTS
            and dict(pairs).get("code", "").startswith("2")
        )
        rows = total("llmwh_receiver_written_total")
        now = _Snapshot(time.monotonic(), writes, rows)
        with self._lock:
            last, self._last = self._last, now
        seconds = max(now.at - last.at, 1e-9)
        flushes = total("llmwh_receiver_flush_seconds_count")
        flush_ms = 1000 * total("llmwh_receiver_flush_seconds_sum") / flushes if flushes else None
        lag = total("llmwh_receiver_sealing_lag_seconds")
        cards = [
            ("writes/s", f"{(now.writes - last.writes) / seconds:,.1f}", "acknowledged"),
            ("rows/s", f"{(now.rows - last.rows) / seconds:,.0f}", "written"),
            ("flush latency", "&ndash;" if flush_ms is None else f"{flush_ms:,.0f} ms", "mean"),
            ("sealing lag", f"{lag:,.1f} s", "oldest unsealed part"),
        ]
        shown = "".join(
            f"<div class='card'><span class='muted'>{label}</span><b>{value}</b>"
            f"<span class='muted'>{note}</span></div>"
            for label, value, note in cards
        )
        return f"<h2>Receiver</h2><div class='cards'>{shown}</div>"


def _report_form(slos: Sequence[str]) -> str:
    options = "".join(f"<option>{html.escape(name)}</option>" for name in slos)
    return (
        "<form action='report' method='get'><label>Full report for "
        f"<select name='slo'>{options}</select></label> <label>over the last "
        "<input name='since' value='7d' size='4'></label> <label>worst by "
        "<input name='by' value='zone' size='8'></label> <button>open</button></form>"
    )


def _one(query: Mapping[str, Sequence[str]], key: str) -> str | None:
    values = query.get(key) or ()
    return values[0] if values and values[0] else None
