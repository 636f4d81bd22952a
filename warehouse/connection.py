"""The Python API's entry point: a :class:`Warehouse` over one store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from warehouse.config import Config
from warehouse.query.builder import FilterValue, Question
from warehouse.query.result import Result
from warehouse.query.run import ask
from warehouse.query.timerange import Instant, parse_duration, time_range
from warehouse.store import Store, open_store
from warehouse.store.migrations import Migration, Migrator
from warehouse.store.retention import sync_ttls

__all__ = ["Warehouse", "connect"]


class Warehouse:
    """A warehouse on one store. Results are polars DataFrames (Arrow underneath)."""

    def __init__(self, store: Store, config: Config | None = None):
        self.store = store
        self.config = config or Config()

    def migrate(self) -> list[Migration]:
        """Apply pending schema migrations and the TTL settings; returns the migrations applied."""
        applied = Migrator(self.store, self.config).up()
        sync_ttls(self.store, self.config)
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
    ) -> Result:
        """Measures per combination of the ``by`` dimensions over ``[since, until)``.

        ``filters`` maps dimensions to a value or a list of values. Times are durations
        back from now (``"15m"``, ``"7d"``), ISO 8601 strings or datetimes, in UTC.
        ``thresholds`` (latency column -> ms) define a good request for ``attainment``
        and ``goodput_rps``. ``exact=True`` forces exact percentiles from raw rows;
        ``result.plan`` says whether a rollup or raw rows answered.
        """
        question = Question(
            measures=list(measures),
            by=list(by),
            filters=dict(filters or {}),
            range=time_range(since, until),
            thresholds=dict(thresholds or {}),
            exact=exact,
            include_probes=include_probes,
            order_by=order_by,
            limit=limit,
        )
        return ask(self.store, question)

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
            filters=dict(filters or {}),
            range=time_range(since, until),
            interval=parse_duration(interval),
            thresholds=dict(thresholds or {}),
            exact=exact,
            include_probes=include_probes,
        )
        return ask(self.store, question)

    def sql(self, query: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        """Run SQL in the store's own dialect and return the result."""
        return pl.from_arrow(self.store.query_arrow(query, parameters))

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(url: str, config: Config | None = None) -> Warehouse:
    """Open the store ``url`` names (see :func:`warehouse.store.open_store`)."""
    return Warehouse(open_store(url), config)
