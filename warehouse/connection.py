"""The Python API's entry point: a :class:`Warehouse` over one store."""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from warehouse.config import Config
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
