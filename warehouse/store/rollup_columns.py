"""The ClickHouse types of the `requests` columns an SLO's own table of requests keeps.

What each rollup column holds, fills and merges is its aggregate's
(:mod:`warehouse.aggregates`); its rows are composed by the query layer
(:mod:`warehouse.query.rollup_rows`).
"""

from __future__ import annotations

import pyarrow as pa

from warehouse.errors import InvalidArgument
from warehouse.model import REQUESTS_SCHEMA

__all__ = ["REQUEST_COLUMN_TYPES"]


def _clickhouse_type(field: pa.Field) -> str:
    """A `requests` column's type and codec in ClickHouse, as migration 0001 makes it."""
    if field.name == "ts":
        return "DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))"
    if pa.types.is_string(field.type):
        return "String CODEC(ZSTD(3))" if field.name == "request_id" else "LowCardinality(String)"
    if pa.types.is_boolean(field.type):
        return "Bool"
    if field.type not in _NUMBERS:
        raise InvalidArgument(f"no ClickHouse type for requests column {field.name} ({field.type})")
    name, codec = _NUMBERS[field.type]
    return f"{f'Nullable({name})' if field.nullable else name} CODEC({codec})"


_NUMBERS = {
    pa.float32(): ("Float32", "ZSTD(1)"),
    pa.uint32(): ("UInt32", "T64, ZSTD(1)"),
    pa.uint16(): ("UInt16", "T64, ZSTD(1)"),
}
"""ClickHouse type and codec of each number type `requests` has."""


REQUEST_COLUMN_TYPES = {
    field.name: _clickhouse_type(field) for field in REQUESTS_SCHEMA if field.name != "attrs"
}
"""The ClickHouse type and codec of each `requests` column but ``attrs``, for tables
that keep some of its columns (an SLO's table of requests). The codecs are 0001's, not
those 0025 gives `requests`: they are part of each SLO's version
(``SloRollup.definition``), and changing them would rebuild every SLO's rollups without
changing a row."""
