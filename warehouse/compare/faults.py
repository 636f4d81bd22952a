"""A wrong answer on purpose: a store that perturbs one column of one question's results.

It exists to prove that the agreement check catches a backend answering wrongly
(``llmwh compare --fault chdb:drill-2:count``, and the tests). The perturbation happens
below the query layer, on the rows the database returns, so the answer goes through
everything a real wrong answer would.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import InvalidArgument
from warehouse.store.base import Parameters, Settings, Store

__all__ = ["Fault", "FaultyStore"]


@dataclass(frozen=True)
class Fault:
    """Make ``backend`` answer ``question`` wrongly: integers in ``column`` gain 1,
    floats grow by 1%."""

    backend: str
    question: str
    column: str

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``BACKEND:QUESTION:COLUMN``."""
        parts = text.split(":")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgument(f"bad fault {text!r}: expected BACKEND:QUESTION:COLUMN")
        return cls(*parts)


class FaultyStore:
    """A :class:`~warehouse.store.base.Store` whose query results are perturbed while
    :attr:`question` is the fault's question."""

    def __init__(self, store: Store, fault: Fault):
        self._store = store
        self.fault = fault
        self.question: str | None = None
        self.url = store.url
        self.database = store.database
        self.capabilities = store.capabilities
        self.cluster = store.cluster
        self.shard_urls = store.shard_urls
        self.hits = 0
        """Results perturbed so far."""

    def command(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> None:
        self._store.command(sql, parameters, settings)

    def as_tenant(self, tenant: str) -> Store:
        """The wrapped store's tenant view, unperturbed (faults apply to this store's
        own reads)."""
        return self._store.as_tenant(tenant)

    def query_arrow(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> pa.Table:
        table = self._store.query_arrow(sql, parameters, settings)
        name = self.fault.column
        if self.question != self.fault.question or name not in table.column_names:
            return table
        column = table.column(name)
        if pa.types.is_integer(column.type):
            changed = pc.add(column, pa.scalar(1, column.type))
        elif pa.types.is_floating(column.type):
            changed = pc.multiply(column, pa.scalar(1.01, column.type))
        else:
            return table
        self.hits += 1
        return table.set_column(table.column_names.index(name), name, changed)

    def insert_arrow(
        self,
        table: str,
        data: pa.Table,
        settings: Settings | None = None,
        dedup_token: str | None = None,
    ) -> None:
        self._store.insert_arrow(table, data, settings, dedup_token)

    def close(self) -> None:
        self._store.close()
