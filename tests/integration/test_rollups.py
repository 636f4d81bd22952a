"""Rollups agree with the raw rows: counts and sums exactly, quantiles within the stated error.

The expected figures are computed here from the inserted Arrow table with polars, an
oracle independent of both databases.
"""

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from warehouse.model import (
    ROLLUP_DIMENSIONS,
    ROLLUP_LATENCIES,
    histogram_share_below,
    latency_bucket,
)
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
SUMS = [
    "requests",
    "errors",
    "rejections",
    "prompt_tokens_sum",
    "output_tokens_sum",
    "cached_prompt_tokens_sum",
    "decode_tokens_sum",
    *(f"{c}_count" for c in ROLLUP_LATENCIES),
]


@pytest.fixture(scope="module")
def traffic():
    return synthetic_requests(30_000, seed=11, start=START, span=timedelta(hours=2))


@pytest.fixture
def loaded(migrated, traffic):
    migrated.insert_arrow("requests", traffic)
    return migrated


def expected_rollup(traffic, every: str) -> pl.DataFrame:
    raw = pl.from_arrow(traffic)
    decode = (pl.col("output_tokens") > 1) & (pl.col("e2e_ms") > pl.col("ttft_ms"))
    return (
        raw.with_columns(pl.col("ts").dt.truncate(every))
        .group_by(["ts", *ROLLUP_DIMENSIONS])
        .agg(
            pl.len().alias("requests"),
            (pl.col("status") == "error").sum().alias("errors"),
            (pl.col("status") == "rejected").sum().alias("rejections"),
            pl.col("prompt_tokens").sum().alias("prompt_tokens_sum"),
            pl.col("output_tokens").sum().alias("output_tokens_sum"),
            pl.col("cached_prompt_tokens").sum().alias("cached_prompt_tokens_sum"),
            (pl.col("output_tokens").cast(pl.Int64) - 1)
            .filter(decode)
            .sum()
            .alias("decode_tokens_sum"),
            *(pl.col(c).count().alias(f"{c}_count") for c in ROLLUP_LATENCIES),
        )
    )


def read_rollup(store, table: str) -> pl.DataFrame:
    dims = ", ".join(ROLLUP_DIMENSIONS)
    sums = ", ".join(f"sum({c}) AS {c}" for c in SUMS)
    result = store.query_arrow(
        f"SELECT ts, {dims}, {sums} FROM {store.database}.{table} GROUP BY ts, {dims}"
    )
    return pl.from_arrow(result)


def normalized(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(
        pl.col("ts").cast(pl.Datetime("ms", "UTC")),
        *(pl.col(d).cast(pl.String) if d != "is_probe" else pl.col(d) for d in ROLLUP_DIMENSIONS),
        *(pl.col(c).cast(pl.Int64) for c in SUMS),
    ).sort(["ts", *ROLLUP_DIMENSIONS])


@pytest.mark.parametrize(("table", "every"), [("requests_1m", "1m"), ("requests_1h", "1h")])
def test_rollup_counts_and_sums_equal_the_raw_rows(loaded, traffic, table, every):
    got = normalized(read_rollup(loaded, table))
    want = normalized(expected_rollup(traffic, every))
    assert got.height == want.height
    assert got.equals(want)


def test_latency_histograms_count_every_value_in_its_bucket(loaded, traffic):
    result = loaded.query_arrow(
        f"SELECT {', '.join(f'{c}_hist' for c in ROLLUP_LATENCIES)} "
        f"FROM {loaded.database}.requests_1h"
    )
    for column in ROLLUP_LATENCIES:
        values = traffic.column(column).drop_null().to_numpy().astype(np.float64)
        want = dict(zip(*np.unique(latency_bucket(values), return_counts=True), strict=True))
        got: dict[int, int] = {}
        for row in result.column(f"{column}_hist").to_pylist():
            for bucket, count in row or []:
                got[bucket] = got.get(bucket, 0) + count
        assert got == {int(k): int(v) for k, v in want.items()}, column


def test_share_under_any_threshold_is_within_one_percentage_point(loaded, traffic):
    result = loaded.query_arrow(
        f"SELECT ttft_ms_hist, e2e_ms_hist FROM {loaded.database}.requests_1m"
    )
    for column in ("ttft_ms", "e2e_ms"):
        histogram: dict[int, int] = {}
        for row in result.column(f"{column}_hist").to_pylist():
            for bucket, count in row or []:
                histogram[bucket] = histogram.get(bucket, 0) + count
        values = traffic.column(column).drop_null().to_numpy()
        for threshold in np.quantile(values, np.linspace(0.01, 0.99, 60)) * 1.003:
            exact = float(np.mean(values < threshold))
            assert abs(histogram_share_below(histogram, threshold) - exact) <= 0.01


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_tdigest_quantiles_are_within_one_percent_of_rank(loaded, traffic, q):
    if not loaded.capabilities.aggregate_states:
        pytest.skip("DuckDB keeps no aggregate states; its percentiles are exact from raw rows")
    raw = pl.from_arrow(traffic)
    for table in ("requests_1m", "requests_1h"):
        result = pl.from_arrow(
            loaded.query_arrow(
                f"SELECT model, quantileTDigestMerge({q})(ttft_ms_tdigest) AS p "
                f"FROM {loaded.database}.{table} GROUP BY model"
            )
        )
        for model, estimate in result.iter_rows():
            values = raw.filter(pl.col("model") == model)["ttft_ms"].drop_nulls().to_numpy()
            rank = float(np.mean(values <= estimate))
            assert abs(rank - q) <= 0.01, (table, model, rank)


def ok_histogram_totals(store, table: str) -> dict[str, int]:
    sums = ", ".join(f"arraySum(mapValues(sumMap({c}_ok_hist))) AS {c}" for c in ROLLUP_LATENCIES)
    if store.capabilities.dialect == "duckdb":
        sums = ", ".join(
            f"sum(list_sum(map_values({c}_ok_hist)))::BIGINT AS {c}" for c in ROLLUP_LATENCIES
        )
    row = store.query_arrow(f"SELECT {sums} FROM {store.database}.{table}").to_pylist()[0]
    return {c: int(v) for c, v in row.items()}


def expected_ok_totals(traffic) -> dict[str, int]:
    raw = pl.from_arrow(traffic).filter(pl.col("status") == "ok")
    return {c: raw[c].count() for c in ROLLUP_LATENCIES}


@pytest.mark.parametrize("table", ["requests_1m", "requests_1h"])
def test_ok_histograms_hold_the_latencies_of_successful_requests(loaded, traffic, table):
    assert ok_histogram_totals(loaded, table) == expected_ok_totals(traffic)


def test_the_ok_histogram_migration_fills_rows_rolled_up_before_it(store, traffic):
    migrator = Migrator(store)
    migrator.migrations = [m for m in migrator.migrations if m.version < 6]
    migrator.up()
    store.insert_arrow("requests", traffic)
    Migrator(store).up()
    store.insert_arrow("requests", traffic.slice(0, 1000))
    expected = expected_ok_totals(pa.concat_tables([traffic, traffic.slice(0, 1000)]))
    for table in ("requests_1m", "requests_1h"):
        assert ok_histogram_totals(store, table) == expected
    counts = store.query_arrow(f"SELECT sum(requests) AS n FROM {store.database}.requests_1h")
    assert counts.column("n")[0].as_py() == 31_000  # the backfill added no requests
