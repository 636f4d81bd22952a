"""WrittenSeries: which `series` rows a flush still has to write."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from warehouse.ingest.remote_write_tables import SERIES_SCHEMA

series_cache = pytest.importorskip(
    "warehouse.ingest.series_cache", reason="the C extensions were not built (no C compiler)"
)
WrittenSeries = series_cache.WrittenSeries

MINUTE = 60_000
T0 = 1_700_000_000_000


def rows(*series: tuple[str, int, int]) -> pa.Table:
    """``series``: (name, min_time, max_time); the id is derived from the name."""
    ids = [uuid.uuid5(uuid.NAMESPACE_OID, name).bytes for name, _, _ in series]
    storage = pa.array(ids, pa.binary(16))
    return pa.table(
        {
            "id": pa.ExtensionArray.from_storage(pa.uuid(), storage),
            "metric_name": [name for name, _, _ in series],
            "labels": pa.array([[] for _ in series], pa.map_(pa.string(), pa.string())),
            "min_time": pa.array([lo for _, lo, _ in series], pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")
            ),
            "max_time": pa.array([hi for _, _, hi in series], pa.int64()).cast(
                pa.timestamp("ms", tz="UTC")
            ),
        },
        schema=SERIES_SCHEMA,
    )


def names(table: pa.Table) -> list[str]:
    return table.column("metric_name").to_pylist()


def write(cache: WrittenSeries, table: pa.Table) -> list[str]:
    """What a flush writes, remembered as committed."""
    chosen = cache.to_write(table)
    cache.remember(chosen)
    return names(chosen)


T0_PERIOD = T0 - T0 % MINUTE  # the start of T0's refresh period (epoch-aligned minutes)


def test_a_series_is_written_once_then_once_per_refresh_period():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    start = T0_PERIOD
    assert write(cache, rows(("up", start + 1, start + 1))) == ["up"]
    assert write(cache, rows(("up", start + 15_000, start + 30_000))) == []
    assert write(cache, rows(("up", start + MINUTE - 1, start + MINUTE - 1))) == []
    assert write(cache, rows(("up", start + MINUTE, start + MINUTE))) == ["up"]
    assert write(cache, rows(("up", start + MINUTE, start + 2 * MINUTE - 1))) == []


def test_series_cross_into_the_next_period_together_whatever_their_phase():
    """Series scraped at different offsets are rewritten in the same round."""
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, rows(("a", T0_PERIOD + 5_000, T0_PERIOD + 5_000)))
    write(cache, rows(("b", T0_PERIOD + 50_000, T0_PERIOD + 50_000)))
    next_round = rows(
        ("a", T0_PERIOD + MINUTE + 5_000, T0_PERIOD + MINUTE + 5_000),
        ("b", T0_PERIOD + MINUTE + 6_000, T0_PERIOD + MINUTE + 6_000),
    )
    assert write(cache, next_round) == ["a", "b"]


def test_a_sample_before_the_written_range_writes_the_row_so_min_time_stays_exact():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, rows(("up", T0, T0)))
    assert write(cache, rows(("up", T0 - 1, T0))) == ["up"]


def test_only_committed_rows_are_remembered():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    table = rows(("up", T0, T0), ("rss", T0, T0))
    assert names(cache.to_write(table)) == ["up", "rss"]  # the insert failed: not remembered
    assert names(cache.to_write(table)) == ["up", "rss"]
    cache.remember(table)
    assert cache.to_write(table).num_rows == 0


def test_periods_before_the_epoch_are_periods_too():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, rows(("old", -MINUTE, -MINUTE)))
    assert write(cache, rows(("old", -MINUTE, -1))) == []
    assert write(cache, rows(("old", -MINUTE, 0))) == ["old"]


def test_zero_refresh_writes_every_advance_of_max_time():
    cache = WrittenSeries(capacity=100, refresh_seconds=0)
    assert write(cache, rows(("up", T0, T0))) == ["up"]
    assert write(cache, rows(("up", T0, T0))) == []
    assert write(cache, rows(("up", T0 + 1, T0 + 1))) == ["up"]


def test_past_its_capacity_the_cache_starts_again_and_forgets_nothing_it_should_write():
    cache = WrittenSeries(capacity=3, refresh_seconds=60)
    first = rows(*((f"s{i}", T0, T0) for i in range(3)))
    assert len(write(cache, first)) == 3 and len(cache) == 3
    write(cache, rows(("s3", T0, T0)))  # a fourth: the cache empties first
    assert len(cache) == 1
    assert names(cache.to_write(first)) == ["s0", "s1", "s2"]


def test_extreme_timestamps_do_not_overflow_the_comparison():
    cache = WrittenSeries(capacity=10, refresh_seconds=60)
    low, high = -(2**63), 2**63 - 1
    write(cache, rows(("edge", low, low)))
    assert write(cache, rows(("edge", low, high))) == ["edge"]
    assert write(cache, rows(("edge", low, high))) == []


def test_the_c_table_refuses_misuse_with_an_error_not_a_crash():
    from warehouse.ingest._series_cache import SeriesCache

    bare = SeriesCache.__new__(SeriesCache)  # __init__ never ran
    with pytest.raises(RuntimeError, match="__init__"):
        bare.clear()
    with pytest.raises(RuntimeError, match="__init__"):
        bare.unseen(b"\1" * 16, b"\0" * 8, b"\0" * 8, 0)
    with pytest.raises(ValueError, match="capacity"):
        SeriesCache(2**62 + 1)
    with pytest.raises(ValueError, match="16 bytes"):
        SeriesCache(4).remember(b"\1" * 15, b"\0" * 8, b"\0" * 8)
