"""Sealing as the store runs it: request parts made requests (docs/per-request-metrics.md).

Where the store has scheduled views (ClickHouse), the refreshable view
``request_parts_seal`` seals on its own period, and :class:`SealingProgress` reads how
far it got and which refresh is running. Elsewhere (DuckDB) :func:`seal` does the same
work when called, and the receiver calls it on that period.
"""

from __future__ import annotations

import logging
from datetime import UTC

from warehouse.store.base import Store

__all__ = ["SealingProgress", "seal"]

log = logging.getLogger("llmwh.receiver")


def seal(store: Store) -> None:
    """Move every request whose parts are complete into ``requests`` (idempotent)."""
    db = store.database
    store.command(f"INSERT INTO {db}.requests BY NAME SELECT * FROM {db}.request_parts_sealable")


class SealingProgress:
    """How far the store's sealing view got, and the refresh it is running."""

    def __init__(self, store: Store):
        self.store = store
        db = store.database
        self._through = f"(SELECT max(last_received) FROM {db}.sealed_keys) AS t"
        # last_refresh_time (whole seconds) names the running refresh.
        running = (
            "(SELECT max(if(status = 'Running', toUnixTimestamp(last_refresh_time), NULL)) "
            f"FROM system.view_refreshes WHERE database = '{db}' "
            "AND view = 'request_parts_seal') AS running"
        )
        self._query = f"SELECT {self._through}, {running}"

    def read(self) -> tuple[float | None, int | None]:
        """(every part received up to this Unix time is sealed, or None when nothing is;
        the running refresh's start in whole seconds, or None when none runs or it
        cannot be known). Raises the store's error."""
        try:
            row = self.store.query_arrow(self._query).to_pylist()[0]
        except Exception as exc:
            if "view_refreshes" not in self._query or "view_refreshes" not in str(exc):
                raise
            log.warning(
                "cannot read system.view_refreshes (%s): sealing's pace is judged by its lag alone",
                exc,
            )
            self._query = f"SELECT {self._through}, NULL AS running"
            raise
        at = row["t"]
        through = None if at is None else at.replace(tzinfo=at.tzinfo or UTC).timestamp()
        return through, row["running"]
