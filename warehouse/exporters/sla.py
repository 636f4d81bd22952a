"""The Prometheus SLA exporter: SLO figures from the warehouse, computed on an interval.

Every ``interval`` seconds, per SLO and per group of the chosen dimensions, the exporter
computes (as of the last whole minute, so that the rollups can answer):

- per window (the SLO's burn windows plus ``windows``): requests, attainment, burn rate,
  error and rejection rates, and each objective's measure and whether it holds;
- over the SLO's period: the error budget remaining;
- the SLO's target.

A scrape only reads the last figures; it never queries the store. Label values are
bounded: per dimension the ``top`` values with the most requests over the longest
window keep their names, the rest are grouped as ``other``. When a computation fails
the SLO's figures are dropped from the exposition (Prometheus then marks those series
stale), ``llmwh_exporter_up{slo}`` turns 0, the failure is counted and logged; the
figures come back with the next good computation.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from warehouse.api import Warehouse
from warehouse.errors import InvalidArgument
from warehouse.exporters.alerts import alert_windows
from warehouse.exporters.metrics import BUDGET_REMAINING, BURN_RATE, EXPORTER_UP
from warehouse.query import slo_apply
from warehouse.query.builder import Question
from warehouse.query.registry import dimension
from warehouse.query.run import ask
from warehouse.query.sla import budget_remaining, burn_rate, held
from warehouse.query.slo import SLO
from warehouse.query.slo_rollup import SloRollup
from warehouse.query.timerange import parse_duration, time_range

__all__ = ["DEFAULT_WINDOWS", "SLAExporter"]

log = logging.getLogger(__name__)

DEFAULT_WINDOWS = alert_windows()
"""The windows the multi-window, multi-burn-rate alerts read (5m, 30m, 1h, 6h, 3d)."""

_LABEL = re.compile(r"[^a-zA-Z0-9_]")


@dataclass
class _Figures:
    metrics: list[Metric] = field(default_factory=list)
    ok: bool = False
    last_success: float | None = None
    failures: int = 0
    duration: float = 0.0


class SLAExporter(Collector):
    """A prometheus-client collector of SLA figures, refreshed by :meth:`refresh`."""

    def __init__(
        self,
        warehouse: Warehouse,
        slos: Sequence[SLO],
        by: Sequence[str] = (),
        windows: Iterable[str] = DEFAULT_WINDOWS,
        top: int = 10,
        clock: Callable[[], float] = time.time,
    ):
        if top < 1:
            raise InvalidArgument("top must be at least 1")
        self.warehouse = warehouse
        self.slos = list(slos)
        self.by = [dimension(name).name for name in by]
        self._by_sql = list(by)
        self.labels = [_LABEL.sub("_", name) for name in self.by]
        self.windows = {label: parse_duration(label) for label in windows}
        self.top = top
        self.clock = clock
        self._figures = {slo.name: _Figures() for slo in self.slos}
        self._lock = threading.Lock()

    # -- computing --------------------------------------------------------------------

    def refresh(self) -> None:
        """Compute every SLO's figures now; a failure is recorded per SLO, never raised."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        until = now.replace(second=0, microsecond=0)
        for slo in self.slos:
            started = time.perf_counter()
            try:
                metrics = self._compute(slo, until)
            except Exception as exc:
                log.error("SLA figures for %s failed: %s", slo.name, exc)
                with self._lock:
                    state = self._figures[slo.name]
                    state.ok, state.metrics = False, []
                    state.failures += 1
                    state.duration = time.perf_counter() - started
                continue
            with self._lock:
                state = self._figures[slo.name]
                state.ok, state.metrics = True, metrics
                state.last_success = self.clock()
                state.duration = time.perf_counter() - started

    def _compute(self, slo: SLO, until: datetime) -> list[Metric]:
        windows = {**dict(slo.burn_windows), **self.windows}
        longest = max(windows.values())
        rollup = slo_apply.find(self.warehouse.reader, slo)  # once a computation
        keep = self._top_values(slo, rollup, until - longest, until)
        names = ["slo", *self.labels]
        gauges = {
            "requests": GaugeMetricFamily(
                "llmwh_slo_requests", "Valid requests in the window.", labels=[*names, "window"]
            ),
            "attainment": GaugeMetricFamily(
                "llmwh_slo_attainment",
                "Share of valid requests that were good (ok and within every threshold).",
                labels=[*names, "window"],
            ),
            "burn_rate": GaugeMetricFamily(
                BURN_RATE,
                "Error budget burn rate over the window: (1 - attainment) / (1 - target).",
                labels=[*names, "window"],
            ),
            "error_rate": GaugeMetricFamily(
                "llmwh_slo_error_rate", "Errors / valid requests.", labels=[*names, "window"]
            ),
            "rejection_rate": GaugeMetricFamily(
                "llmwh_slo_rejection_rate",
                "Rejections / valid requests.",
                labels=[*names, "window"],
            ),
            "objective": GaugeMetricFamily(
                "llmwh_slo_objective_value",
                "The value of an objective's measure over the window.",
                labels=[*names, "window", "measure"],
            ),
            "met": GaugeMetricFamily(
                "llmwh_slo_objective_met",
                "1 when the objective holds over the window, else 0.",
                labels=[*names, "window", "objective"],
            ),
        }
        measures = ["count", "attainment", "error_rate", "rejection_rate", *slo.measures]
        budget = 1 - slo.target
        for label, length in sorted(windows.items(), key=lambda item: item[1]):
            frame = self._ask(slo, rollup, measures, until - length, until, keep)
            met = {o: held(frame, o).to_list() for o in slo.objectives}
            for index, row in enumerate(frame.iter_rows(named=True)):
                values = [slo.name, *(str(row[name]) for name in self.by), label]
                gauges["requests"].add_metric(values, row["count"] or 0)
                for name in ("attainment", "error_rate", "rejection_rate"):
                    _add(gauges[name], values, row[name])
                if row["attainment"] is not None:
                    gauges["burn_rate"].add_metric(values, burn_rate(row["attainment"], budget))
                for measure in slo.measures:
                    _add(gauges["objective"], [*values, measure], row[measure])
                for objective in slo.objectives:
                    holds = met[objective][index]
                    gauges["met"].add_metric([*values, objective.text], 1.0 if holds else 0.0)
        remaining = GaugeMetricFamily(
            BUDGET_REMAINING,
            "Share of the error budget left over the SLO period (below 0 once spent).",
            labels=names,
        )
        period = self._ask(slo, rollup, ["count", "attainment"], until - slo.period, until, keep)
        for row in period.iter_rows(named=True):
            if row["attainment"] is not None:
                values = [slo.name, *(str(row[name]) for name in self.by)]
                remaining.add_metric(values, budget_remaining(row["attainment"], budget))
        target = GaugeMetricFamily("llmwh_slo_target", "The SLO's target.", labels=["slo"])
        target.add_metric([slo.name], slo.target)
        return [*gauges.values(), remaining, target]

    def _top_values(
        self, slo: SLO, rollup: SloRollup | None, since: datetime, until: datetime
    ) -> dict[str, list[str]]:
        keep = {}
        for name, asked in zip(self.by, self._by_sql, strict=True):
            frame = self._ask(slo, rollup, ["count"], since, until, by=[asked], top=True)
            if frame.height:  # no traffic: nothing to bound
                keep[name] = [str(v) for v in frame[name].to_list()]
        return keep

    def _ask(
        self,
        slo: SLO,
        rollup: SloRollup | None,
        measures: list[str],
        since: datetime,
        until: datetime,
        keep: dict[str, list[str]] | None = None,
        by: list[str] | None = None,
        top: bool = False,
    ) -> pl.DataFrame:
        """The measures per group over ``[since, until)``: from the SLO's ``rollup`` when
        it has one (one small query whatever the traffic), with the position counts that
        decide its percentile objectives exactly."""
        wh = self.warehouse
        question = Question(
            measures=measures,
            range=time_range(since, until),
            by=self._by_sql if by is None else by,
            filters=wh.scoped(slo.filters()),
            thresholds=slo.thresholds,
            keep=keep or {},
            checks=rollup.checks if rollup is not None else (),
            order_by="-count" if top else None,
            limit=self.top if top else None,
        )
        sources = (rollup.source(wh.reader.capabilities),) if rollup else ()
        return pl.DataFrame(ask(wh.reader, question, sources))

    # -- exposing ---------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            states = {name: _copy(state) for name, state in self._figures.items()}
        up = GaugeMetricFamily(
            EXPORTER_UP,
            "1 when the last computation of the SLO's figures succeeded (its figures are "
            "exported), else 0 (they are not).",
            labels=["slo"],
        )
        last = GaugeMetricFamily(
            "llmwh_exporter_last_success_timestamp_seconds",
            "When the SLO's figures were last computed successfully.",
            labels=["slo"],
        )
        failures = GaugeMetricFamily(
            "llmwh_exporter_failures",
            "Failed computations of the SLO's figures since the exporter started.",
            labels=["slo"],
        )
        duration = GaugeMetricFamily(
            "llmwh_exporter_duration_seconds",
            "How long the last computation of the SLO's figures took.",
            labels=["slo"],
        )
        for name, state in states.items():
            up.add_metric([name], 1.0 if state.ok else 0.0)
            if state.last_success is not None:
                last.add_metric([name], state.last_success)
            failures.add_metric([name], state.failures)
            duration.add_metric([name], state.duration)
            if state.ok:
                yield from state.metrics
        yield from (up, last, failures, duration)

    def run(self, interval: float, stop: threading.Event) -> None:
        """Refresh every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            started = time.monotonic()
            self.refresh()
            stop.wait(max(0.0, interval - (time.monotonic() - started)))


def _add(gauge: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        gauge.add_metric(labels, float(value))


def _copy(state: _Figures) -> _Figures:
    return _Figures(
        list(state.metrics), state.ok, state.last_success, state.failures, state.duration
    )
