"""The Python API's entry point: a :class:`Warehouse` over one store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from warehouse.config import Config
from warehouse.errors import QueryError
from warehouse.model import check_tenant
from warehouse.query import registry, slo_apply
from warehouse.query.ab import compare_groups
from warehouse.query.builder import FilterValue, Question, RollupSource
from warehouse.query.drift import detect_drift
from warehouse.query.named import NamedQuery, bind, read_query
from warehouse.query.readonly import run_read_only
from warehouse.query.result import Result, normalize
from warehouse.query.root_cause import DEFAULT_DIMENSIONS, root_cause
from warehouse.query.run import ask
from warehouse.query.sla import evaluate, scoped_filters
from warehouse.query.slo import SLO, load_slo, shipped_slos
from warehouse.query.slo_apply import Applied
from warehouse.query.timerange import Instant, parse_duration, time_range
from warehouse.store import Store, open_store, schema, tenancy
from warehouse.store.migrations import Migration

__all__ = ["Warehouse", "connect"]


class Warehouse:
    """A warehouse on one store. Results are polars DataFrames (Arrow underneath)."""

    def __init__(self, store: Store, config: Config | None = None, tenant: str | None = None):
        self.store = store
        self.config = config or Config()
        tenant = tenant if tenant is not None else self.config.tenant
        self.tenant = None if tenant is None else check_tenant(tenant)
        """When set, every read sees this tenant's data only."""
        self._reader: Store | None = None

    @property
    def reader(self) -> Store:
        """The store reads run on: with a tenant, held to its rows by ClickHouse's row
        policies where the store has them (:func:`~warehouse.store.tenancy.reader_for`);
        the tenant filter every read carries is then a second wall."""
        if self._reader is None:
            self._reader = tenancy.reader_for(self.store, self.tenant)
        return self._reader

    def migrate(self) -> list[Migration]:
        """Apply pending schema migrations and the TTL settings, on every shard of a
        cluster the store URL names, then the rollups of the SLOs the ``slos`` setting
        names; returns the migrations applied."""
        applied = schema.migrate(self.store, self.config).applied
        self.apply_configured_slos()
        return applied

    def insert_requests(self, rows: pa.Table) -> None:
        """Append per-request rows (see :data:`warehouse.model.REQUESTS_SCHEMA`)."""
        self.store.insert_arrow("requests", rows)

    def drill(
        self,
        by: Sequence[str] = (),
        measures: Sequence[str] = ("count",),
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = "1h",
        until: Instant = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        exact: bool | None = None,
        include_probes: bool = False,
        order_by: str | None = None,
        limit: int | None = None,
        keep: Mapping[str, Sequence[str]] | None = None,
    ) -> Result:
        """Measures per combination of the ``by`` dimensions over ``[since, until)``.

        ``filters`` maps dimensions to a value or a list of values. Times are durations
        back from now (``"15m"``, ``"7d"``), ISO 8601 strings or datetimes, in UTC.
        ``thresholds`` (latency column -> ms) define a good request for ``attainment``
        and ``goodput_rps``. ``exact=True`` forces exact percentiles from raw rows;
        ``result.plan`` says whether a rollup or raw rows answered. ``keep`` maps grouped
        dimensions to the values to keep; the others are grouped as ``other``.
        """
        question = Question(
            measures=list(measures),
            by=list(by),
            filters=self.scoped(filters),
            range=time_range(since, until),
            thresholds=dict(thresholds or {}),
            exact=exact,
            include_probes=include_probes,
            order_by=order_by,
            limit=limit,
            keep=dict(keep or {}),
        )
        return ask(self.reader, question)

    def timeseries(
        self,
        measures: Sequence[str] = ("count",),
        by: Sequence[str] = (),
        interval: str = "5m",
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = "1h",
        until: Instant = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        exact: bool | None = None,
        include_probes: bool = False,
    ) -> Result:
        """Measures per time bucket of ``interval`` (a ``time`` column first), per group."""
        question = Question(
            measures=list(measures),
            by=list(by),
            filters=self.scoped(filters),
            range=time_range(since, until),
            interval=parse_duration(interval),
            thresholds=dict(thresholds or {}),
            exact=exact,
            include_probes=include_probes,
        )
        return ask(self.reader, question)

    def sla(
        self,
        slo: str | Path | SLO,
        by: Sequence[str] = (),
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = None,
        until: Instant = None,
        *,
        exact: bool | None = None,
    ) -> Result:
        """Evaluate an SLO (a shipped name, a TOML path or an :class:`SLO`) per group.

        ``since`` defaults to the SLO's period (30 days unless it says otherwise). The
        columns are described in :mod:`warehouse.query.sla`.
        """
        objective = _load(slo)
        period = time_range(since or _ago(objective.period), until)
        return evaluate(self.reader, objective, period, by, self.scoped(filters), exact=exact)

    def slo_apply(self, slos: Sequence[str | Path | SLO] | None = None) -> list[Applied]:
        """Compile SLOs into rollups (default: :meth:`configured_slos`), backfilled from
        `requests`; see docs/slo-rollups.md."""
        chosen = list(slos or self.configured_slos())
        return slo_apply.apply(self.store, [_load(s) for s in chosen], self.config)

    def apply_configured_slos(self) -> list[Applied]:
        """The rollups of the SLOs the ``slos`` setting names (what ``migrate`` builds
        before writers start); nothing when the setting is unset."""
        if not self.config.slos:
            return []
        return self.slo_apply()

    def configured_slos(self) -> list[str]:
        """The SLOs the ``slos`` setting names, else every shipped SLO."""
        configured = [n.strip() for n in (self.config.slos or "").split(",") if n.strip()]
        return configured or shipped_slos()

    def slo_status(self) -> pl.DataFrame:
        """Each SLO rollup on the store: its SLO, version, state, rows, bytes, newest minute."""
        return slo_apply.status(self.store, self.config)

    def compare_groups(
        self,
        measure: str = "attainment",
        dimension: str = "ab_group",
        a: str | None = None,
        b: Sequence[str] | str | None = None,
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = "1h",
        until: Instant = None,
        *,
        thresholds: Mapping[str, float] | None = None,
        level: float = 0.95,
    ) -> Result:
        """A/B: ``measure`` per arm of ``dimension`` against control ``a``, with a CI."""
        return compare_groups(
            self.reader,
            time_range(since, until),
            measure,
            dimension,
            a,
            b,
            self.scoped(filters),
            thresholds,
            level,
        )

    def drift(
        self,
        measure: str = "p95_ttft_ms",
        by: Sequence[str] = (),
        interval: str = "5m",
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = "6h",
        until: Instant = None,
        *,
        baseline: int = 12,
        z_threshold: float = 3.0,
        alert_after: int = 3,
        direction: str | None = None,
        thresholds: Mapping[str, float] | None = None,
        exact: bool | None = None,
        min_change: float | None = None,
    ) -> Result:
        """Per window: ``measure`` against the trailing ``baseline`` windows (z, EWMA).

        ``direction`` is ``up``, ``down`` or ``both``; by default the bad one for the
        measure (up for latencies and error rates, down for attainment and throughput).
        ``min_change``: the smallest change, as a fraction of the baseline mean, that
        may breach (default 0.1 for latencies, 0 for anything else).
        """
        return detect_drift(
            self.reader,
            time_range(since, until),
            measure,
            by,
            parse_duration(interval),
            self.scoped(filters),
            thresholds,
            baseline=baseline,
            z_threshold=z_threshold,
            alert_after=alert_after,
            direction=direction,
            exact=exact,
            min_change=min_change,
        )

    def root_cause(
        self,
        slo: str | Path | SLO | None = None,
        thresholds: Mapping[str, float] | None = None,
        dimensions: Sequence[str] = DEFAULT_DIMENSIONS,
        filters: Mapping[str, FilterValue] | None = None,
        since: Instant = "1h",
        until: Instant = None,
        *,
        min_share: float = 0.01,
        limit: int | None = 20,
        exact: bool | None = None,
    ) -> Result:
        """The dimension values carrying the most bad requests beyond their traffic share.

        Bad means failed, rejected or over a per-request threshold: ``thresholds``, or
        the SLO's (whose scope then also filters the requests).
        """
        sources: tuple[RollupSource, ...] = ()
        if slo is not None:
            objective = _load(slo)
            filters = scoped_filters(objective, filters)
            thresholds = {**objective.thresholds, **(thresholds or {})}
            rollup = slo_apply.find(self.reader, objective) if exact is not True else None
            sources = (rollup.source(self.reader.capabilities),) if rollup else ()
        return root_cause(
            self.reader,
            time_range(since, until),
            thresholds,
            dimensions,
            self.scoped(filters),
            min_share=min_share,
            limit=limit,
            exact=exact,
            sources=sources,
        )

    def sql(self, query: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        """Run a read-only query written in ClickHouse SQL (transpiled for DuckDB).

        Writes, DDL and settings are refused. Parameters are ``{name:Type}`` placeholders.
        """
        return normalize(run_read_only(self.store, query, parameters, tenant=self.tenant))

    def named_query(self, name: str | Path | NamedQuery, **parameters: str) -> pl.DataFrame:
        """Run a named query of `sql/` (or a query file, or one read already), read-only:
        ``parameters`` as text (``since="7d"``, ``limit="5"``), checked against its
        header, defaults filled in; see docs/named-queries.md."""
        query = name if isinstance(name, NamedQuery) else read_query(name)
        values = bind(query, parameters)
        return self.sql(query.text, values)

    def scoped(self, filters: Mapping[str, FilterValue] | None) -> dict[str, FilterValue]:
        """``filters``, held to this warehouse's tenant when it has one."""
        scoped = dict(filters or {})
        if self.tenant is None:
            return scoped
        asked = scoped.get("tenant")
        if asked is not None:
            values = [asked] if isinstance(asked, str | int | bool) else list(asked)
            others = sorted({str(v) for v in values} - {self.tenant})
            if others:
                raise QueryError(
                    f"this warehouse reads tenant {self.tenant!r} only; "
                    f"tenant {', '.join(others)} is not readable here"
                )
        scoped["tenant"] = self.tenant
        return scoped

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(url: str, config: Config | None = None) -> Warehouse:
    """Open the store ``url`` names (see :func:`warehouse.store.open_store`)."""
    return Warehouse(open_store(url), config)


def _ago(length: timedelta) -> datetime:
    return datetime.now(UTC) - length


def _load(slo: str | Path | SLO) -> SLO:
    return slo if isinstance(slo, SLO) else load_slo(slo, validate_measure=registry.measure)
