"""Rollups agree with the raw rows: counts and sums exactly, quantiles within the stated error.

The expected figures are computed here from the inserted Arrow table with polars, an
oracle independent of both databases.
"""

from datetime import timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from days import at

from warehouse.aggregates import histogram_quantile_sql
from warehouse.model import (
    ROLLUP_DIMENSIONS,
    ROLLUP_LATENCIES,
    SLA_ROLLUP_DIMENSIONS,
    fold_histogram,
    histogram_quantiles,
    histogram_share_below,
    latency_bucket,
)
from warehouse.query.builder import Question
from warehouse.query.run import ask
from warehouse.query.timerange import TimeRange
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

START = at(9)
SUMS = [
    "requests",
    "errors",
    "rejections",
    "prompt_tokens_sum",
    "output_tokens_sum",
    "cached_prompt_tokens_sum",
    "decode_tokens_sum",
]
ROLLUPS = [
    ("requests_1m", "1m", SLA_ROLLUP_DIMENSIONS),
    ("requests_1h", "1h", ROLLUP_DIMENSIONS),
    ("requests_sla_1h", "1h", SLA_ROLLUP_DIMENSIONS),
]


@pytest.fixture(scope="module")
def traffic():
    return synthetic_requests(30_000, seed=11, start=START, span=timedelta(hours=2))


@pytest.fixture(scope="module")
def loaded(module_migrated, traffic):
    """The traffic, written once per backend: the tests that take it only read."""
    module_migrated.insert_arrow("requests", traffic)
    return module_migrated


def expected_rollup(traffic, every: str, dims) -> pl.DataFrame:
    raw = pl.from_arrow(traffic)
    decode = (pl.col("output_tokens") > 1) & (pl.col("e2e_ms") > pl.col("ttft_ms"))
    return (
        raw.with_columns(pl.col("ts").dt.truncate(every))
        .group_by(["ts", *dims])
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
        )
    )


def read_rollup(store, table: str, dims) -> pl.DataFrame:
    listed = ", ".join(dims)
    sums = ", ".join(f"sum({c}) AS {c}" for c in SUMS)
    result = store.query_arrow(
        f"SELECT ts, {listed}, {sums} FROM {store.database}.{table} GROUP BY ts, {listed}"
    )
    return pl.from_arrow(result)


def normalized(frame: pl.DataFrame, dims) -> pl.DataFrame:
    return frame.select(
        pl.col("ts").cast(pl.Datetime("ms", "UTC")),
        *(pl.col(d).cast(pl.String) if d != "is_probe" else pl.col(d) for d in dims),
        *(pl.col(c).cast(pl.Int64) for c in SUMS),
    ).sort(["ts", *dims])


@pytest.mark.parametrize(("table", "every", "dims"), ROLLUPS, ids=[t for t, _, _ in ROLLUPS])
def test_rollup_counts_and_sums_equal_the_raw_rows(loaded, traffic, table, every, dims):
    got = normalized(read_rollup(loaded, table, dims), dims)
    want = normalized(expected_rollup(traffic, every, dims), dims)
    assert got.height == want.height
    assert got.equals(want)


def histogram(store, table: str, column: str, ok_only: bool = False) -> dict[int, int]:
    """A rollup's histogram of ``column`` summed over its rows, by bucket (keys are
    bucket * 2 + ok)."""
    result = store.query_arrow(f"SELECT {column}_hist AS h FROM {store.database}.{table}")
    got: dict[int, int] = {}
    for row in result.column("h").to_pylist():
        for key, count in row or []:
            if ok_only and key % 2 == 0:
                continue
            got[key // 2] = got.get(key // 2, 0) + count
    return got


@pytest.mark.parametrize("table", [t for t, _, _ in ROLLUPS])
def test_latency_histograms_count_every_value_in_its_bucket(loaded, traffic, table):
    for column in ROLLUP_LATENCIES:
        values = traffic.column(column).drop_null().to_numpy().astype(np.float64)
        want = dict(zip(*np.unique(latency_bucket(values), return_counts=True), strict=True))
        assert histogram(loaded, table, column) == {int(k): int(v) for k, v in want.items()}


@pytest.mark.parametrize("table", [t for t, _, _ in ROLLUPS])
def test_odd_keys_hold_the_latencies_of_successful_requests(loaded, traffic, table):
    ok = pl.from_arrow(traffic).filter(pl.col("status") == "ok")
    for column in ROLLUP_LATENCIES:
        values = ok[column].drop_nulls().to_numpy().astype(np.float64)
        want = dict(zip(*np.unique(latency_bucket(values), return_counts=True), strict=True))
        got = histogram(loaded, table, column, ok_only=True)
        assert got == {int(k): int(v) for k, v in want.items()}, column


def test_share_under_any_threshold_is_within_one_percentage_point(loaded, traffic):
    for column in ("ttft_ms", "e2e_ms"):
        counts = histogram(loaded, "requests_1m", column)
        values = traffic.column(column).drop_null().to_numpy()
        for threshold in np.quantile(values, np.linspace(0.01, 0.99, 60)) * 1.003:
            exact = float(np.mean(values < threshold))
            assert abs(histogram_share_below(counts, threshold) - exact) <= 0.01


def test_counts_under_a_latency_are_exact_raw_and_within_their_bucket_from_a_rollup(
    loaded, traffic
):
    """``count_<latency>_le_<ms>``: raw rows count exactly; a rollup (where the store keeps
    them) counts the threshold's own bucket in proportion, so it is off by at most the
    requests in that bucket, and it reads the histogram as histogram_share_below does."""
    window = TimeRange(START, START + timedelta(hours=2))
    for column, limit in [("ttft_ms", 200), ("e2e_ms", 3000), ("tpot_ms", 35)]:
        values = traffic.filter(pc.invert(traffic.column("is_probe"))).column(column)
        values = values.drop_null().to_numpy().astype(np.float64)
        names = [f"count_{column}", f"count_{column}_le_{limit}"]
        exact = ask(loaded, Question(names, window, exact=True)).row(0)
        assert exact == (len(values), int((values <= limit).sum()))
        answer = ask(loaded, Question(names, window))
        if not answer.plan.rollup:
            continue  # DuckDB: raw rows, as above
        assert answer.plan.latency_counts == "histogram"
        total, below = answer.row(0)
        assert total == len(values)
        in_bucket = int((latency_bucket(values) == latency_bucket(np.array([limit]))[0]).sum())
        assert abs(below - (values <= limit).sum()) <= in_bucket
        counts = dict(zip(*np.unique(latency_bucket(values), return_counts=True), strict=True))
        assert below == pytest.approx(histogram_share_below(counts, limit) * len(values))


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_percentiles_from_the_histograms_are_within_two_percent(loaded, traffic, q):
    """The stated error: the answer lies in the 2%-wide bucket of the order statistic
    next to the exact percentile (linear interpolation between order statistics)."""
    for column in ROLLUP_LATENCIES:
        counts = histogram(loaded, "requests_1h", column)
        buckets = np.array(sorted(counts))
        estimate = histogram_quantiles(
            np.array([0, len(buckets)]), buckets, np.array([counts[b] for b in buckets]), [q]
        )[0, 0]
        values = traffic.column(column).drop_null().to_numpy().astype(np.float64)
        exact = float(np.quantile(values, q))
        assert abs(estimate - exact) <= 0.0201 * exact, (column, estimate, exact)


def test_the_lean_rollups_migration_fills_them_from_requests_written_before_it(store, traffic):
    migrator = Migrator(store)
    migrator.migrations = [m for m in migrator.migrations if m.version < 12]
    migrator.up()
    store.insert_arrow("requests", traffic)
    Migrator(store).up()
    store.insert_arrow("requests", traffic.slice(0, 1000))
    both = pa.concat_tables([traffic, traffic.slice(0, 1000)])
    for table, every, dims in ROLLUPS:
        got = normalized(read_rollup(store, table, dims), dims)
        assert got.equals(normalized(expected_rollup(both, every, dims), dims)), table
        assert histogram(store, table, "ttft_ms") == histogram(store, "requests_1h", "ttft_ms")


def test_dashboards_read_the_percentiles_the_query_layer_reads(loaded):
    """Grafana's SQL (histogram_quantile_sql) and the Python reading of the same merged
    histograms give the same percentile, group by group."""
    if loaded.capabilities.dialect != "clickhouse":
        pytest.skip("the SQL is ClickHouse's, for Grafana's ClickHouse datasource")
    rows = loaded.query_arrow(
        f"SELECT model, {histogram_quantile_sql('ttft_ms', '0.95')} AS p, "
        f"sumMap(ttft_ms_hist) AS h FROM {loaded.database}.requests_1h GROUP BY model"
    )
    maps = rows.column("h").combine_chunks()
    offsets, buckets, counts = fold_histogram(
        maps.offsets.to_numpy(),
        maps.keys.to_numpy(zero_copy_only=False),
        maps.items.to_numpy(zero_copy_only=False),
    )
    expected = histogram_quantiles(offsets, buckets, counts, [0.95])[:, 0]
    assert rows.num_rows > 1
    assert np.allclose(rows.column("p").to_numpy(), expected, rtol=1e-9)


@pytest.mark.parametrize("table", [t for t, _, _ in ROLLUPS])
def test_each_rollup_row_holds_the_histogram_of_its_own_requests(migrated, table):
    """Row by row, not only in total: each key counted once per request of the row's
    group (one of them twice), keys ascending (the query layer folds a bucket's two
    keys as neighbours), and an empty histogram for a group none of whose requests has
    the latency."""
    rows = synthetic_requests(6, seed=3, start=at(10), span=timedelta(seconds=30))
    fixed = {
        "tenant": ["a", "a", "a", "a", "b", "b"],
        "ttft_ms": [12.0, 10.0, 10.0, 10.0, None, None],
        "status": ["ok", "error", "ok", "ok", "rejected", "rejected"],
        "is_probe": [False] * 6,
        **{c: [rows.column(c)[0].as_py()] * 6 for c in ("service", "model", "region")},
        "model_version": ["v1"] * 6,
        "zone": ["z"] * 6,
        "ab_group": [""] * 6,
        "request_type": ["chat"] * 6,
    }
    for name, values in fixed.items():
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, name, pa.array(values, rows.schema.field(name).type))
    migrated.insert_arrow("requests", rows)

    got = migrated.query_arrow(
        f"SELECT tenant, ttft_ms_hist AS h FROM {migrated.database}.{table} ORDER BY tenant"
    ).to_pylist()
    ten, twelve = (int(b) for b in latency_bucket(np.array([10.0, 12.0])))
    assert [row["tenant"] for row in got] == ["a", "b"]
    assert [tuple(pair) for pair in got[0]["h"]] == [
        (ten * 2, 1),
        (ten * 2 + 1, 2),
        (twelve * 2 + 1, 1),
    ]
    assert list(got[1]["h"]) == []
