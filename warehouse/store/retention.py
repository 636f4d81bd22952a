"""Keep ClickHouse table TTLs in line with the ``*_ttl_days`` settings.

Migrations set each TTL when a table is created; after that, changing a setting and
running ``llmwh migrate up`` brings the tables in line with ``ALTER TABLE ... MODIFY
TTL``. The TTL expression itself (which column, which conversion) is read back from
ClickHouse, so it stays defined in the migration files only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warehouse.config import Config
from warehouse.store.base import Store

__all__ = ["TTL_SETTINGS", "TtlChange", "sync_ttls"]

TTL_SETTINGS = {
    "requests": "requests_ttl_days",
    "samples": "samples_ttl_days",
    "histogram_samples": "samples_ttl_days",
    "exemplars": "samples_ttl_days",
    "sample_starts": "samples_ttl_days",
    "requests_1m": "rollup_1m_ttl_days",
    "requests_1h": "rollup_1h_ttl_days",
    "requests_sla_1h": "rollup_1h_ttl_days",
}
"""Which setting governs which table's TTL."""

# How system.tables.engine_full prints a TTL: `TTL toDateTime(ts) + toIntervalDay(90)`.
_TTL = re.compile(r"\bTTL (.+?) \+ toIntervalDay\((\d+)\)")


@dataclass(frozen=True)
class TtlChange:
    table: str
    old_days: int
    new_days: int


def sync_ttls(store: Store, config: Config, local_suffix: str = "") -> list[TtlChange]:
    """ALTER every table whose TTL differs from its setting; returns what changed.

    ``local_suffix`` (``_local``) names a cluster shard's tables, which hold the TTLs.
    """
    if not store.capabilities.ttl:
        return []
    tables = store.query_arrow(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String}",
        {"db": store.database},
    ).to_pylist()
    changes = []
    for row in tables:
        name = row["name"]
        if local_suffix:
            if not name.endswith(local_suffix):
                continue
            name = name[: -len(local_suffix)]
        setting = TTL_SETTINGS.get(name)
        match = _TTL.search(row["engine_full"])
        if setting is None or match is None:
            continue
        old, new = int(match.group(2)), getattr(config, setting)
        if old != new:
            store.command(
                f"ALTER TABLE {store.database}.{row['name']} "
                f"MODIFY TTL {match.group(1)} + INTERVAL {new} DAY"
            )
            changes.append(TtlChange(row["name"], old, new))
    return changes
