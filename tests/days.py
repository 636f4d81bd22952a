"""The day test data is placed on: yesterday (UTC), so that it is always within every
retention the stores apply (the shortest, `rollup_1m_ttl_days` and `samples_ttl_days`,
is 30 days). A fixed date ages out: ClickHouse drops rows past their TTL when it writes
or merges them, and the rollups then disagree with the rows the test wrote.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

DAY = (datetime.now(UTC) - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
"""Midnight UTC at the start of yesterday."""


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    """That time of :data:`DAY`."""
    return DAY.replace(hour=hour, minute=minute, second=second)
