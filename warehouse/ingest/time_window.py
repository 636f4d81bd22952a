"""The times a write may carry: what the store keeps and returns, one rule for every path.

A 2xx means kept and readable, so each door refuses (a 4xx naming the reason, or
``partial_success`` on OTLP) a timestamp the store would drop or could not return:

- older than the table's retention (``requests_ttl_days`` for requests and their
  per-request metrics, ``samples_ttl_days`` for Prometheus samples), where the store
  enforces one (its TTL would drop the row at once);
- further ahead of the receiver's clock than ``max_future_seconds``;
- past what the schema can hold at all: the TTLs read times as ``DateTime`` (seconds in
  32 bits, to 2106-02-07), and before 1970 nothing is kept.

See docs/reliability.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.config import Config
from warehouse.store.base import Capabilities

__all__ = ["LAST_MS", "TimeWindow", "keep_within", "window_for"]

LAST_MS = (2**32 - 1) * 1000
"""The last millisecond ``DateTime`` holds (2106-02-07 06:28:15 UTC)."""


@dataclass(frozen=True)
class TimeWindow:
    """Unix milliseconds ``[earliest_ms, latest_ms]`` a write may carry into ``table``."""

    table: str
    earliest_ms: int
    latest_ms: int
    retention_days: int | None
    """The retention behind ``earliest_ms``; None where the store keeps everything."""
    ahead_seconds: int

    def too_old(self, ms: Any) -> pa.Array:
        """True where a millisecond timestamp is before the window (null: false)."""
        return pc.fill_null(pc.less(ms, pa.scalar(self.earliest_ms, pa.int64())), False)

    def too_new(self, ms: Any) -> pa.Array:
        """True where a millisecond timestamp is after the window (null: false)."""
        return pc.fill_null(pc.greater(ms, pa.scalar(self.latest_ms, pa.int64())), False)

    def outside(self, ms: Any) -> tuple[pa.Array, str]:
        """True where a millisecond timestamp is outside the window (null: false), and
        why for the first such ('' when none is)."""
        old = self.too_old(ms)
        outside = pc.or_(old, self.too_new(ms))
        if not pc.any(outside).as_py():
            return outside, ""
        first = pc.index(outside, True).as_py()
        return outside, self.old_reason if old[first].as_py() else self.new_reason

    @property
    def old_reason(self) -> str:
        if self.retention_days is None:
            return "is before 1970"
        return f"is older than the {self.table} retention ({self.retention_days} days)"

    @property
    def new_reason(self) -> str:
        return (
            f"is more than {self.ahead_seconds} s ahead of the receiver's clock "
            "(max_future_seconds)"
        )


def window_for(
    table: str, config: Config, capabilities: Capabilities, now: datetime | None = None
) -> TimeWindow:
    """The window of ``table`` (``requests`` or ``samples``) as the store keeps it now."""
    now = now or datetime.now(UTC)
    days = config.requests_ttl_days if table == "requests" else config.samples_ttl_days
    retention = days if capabilities.ttl else None
    earliest = 0 if retention is None else _ms(now - timedelta(days=retention))
    latest = min(_ms(now + timedelta(seconds=config.max_future_seconds)), LAST_MS)
    return TimeWindow(table, earliest, latest, retention, config.max_future_seconds)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def keep_within(table: pa.Table, column: str, window: TimeWindow) -> tuple[pa.Table, int, str]:
    """``table`` less its rows whose ``column`` (a timestamp or Unix ms) is outside
    ``window``; how many those were; and why, for the first of them ('' when none)."""
    ms = pc.cast(pc.cast(table.column(column), pa.timestamp("ms", "UTC")), pa.int64())
    outside, reason = window.outside(ms)
    if not reason:
        return table, 0, ""
    dropped = pc.sum(outside).as_py()
    return table.filter(pc.invert(outside)), dropped, f"{column} {reason}"
