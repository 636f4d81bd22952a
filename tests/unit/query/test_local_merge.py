"""Rollup rows merged in the client: the same figures ClickHouse's merge would give."""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from sqlglot import exp

from warehouse.aggregates import BUILT_IN
from warehouse.model import fold_histogram, histogram_quantiles
from warehouse.query import local_merge, trees
from warehouse.query.local_merge import LocalMerge, Untranslatable, aggregate, merge_rows
from warehouse.query.registry import Measure, measure, measures_of_every_family

T0 = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)
MS = int(T0.timestamp() * 1000)
HISTOGRAM = pa.map_(pa.uint16(), pa.uint64())


def rows(*items: tuple[int, str, int, int, dict[int, int]]) -> pa.Table:
    """Rollup rows: (seconds after T0, model, requests, good, ttft histogram)."""
    return pa.table(
        {
            "ts": pa.array(
                [T0 + timedelta(seconds=s) for s, *_ in items], pa.timestamp("ms", "UTC")
            ),
            "model": [m for _, m, *_ in items],
            "requests": pa.array([r for _, _, r, _, _ in items], pa.uint64()),
            "good": pa.array([g for *_, g, _ in items], pa.uint64()),
            "ttft_ms_hist": pa.array([sorted(h.items()) for *_, h in items], HISTOGRAM),
        }
    )


def quantile(histogram: Counter, level: float) -> float:
    keys = np.array(sorted(histogram), np.int64)
    counts = np.array([histogram[k] for k in keys], np.float64)
    folded = fold_histogram(np.array([0, len(keys)]), keys, counts)
    return float(histogram_quantiles(*folded, [level])[0, 0])


def rolled(m: Measure) -> exp.Expr:
    """``m`` over rollup rows whose own column ``good`` counts the good requests."""

    def good(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Placeholder) and node.name == "good_count":
            return trees.expression("sum(good)")
        return node

    return m.tree(rollup=True).transform(good)


ASKED = ("count", "attainment", "goodput_rps", "count_ttft_ms")
MEASURES = tuple((name, rolled(measure(name))) for name in ASKED)


def test_measures_spans_and_groups_merge_as_sums_and_merged_histograms():
    data = rows(
        (0, "a", 4, 3, {10: 1, 11: 3}),
        (60, "a", 2, 1, {11: 1, 40: 1}),
        (3600 + 59.5, "b", 1, 1, {12: 1}),  # a raw request, late in the range
        (3600 + 61, "a", 5, 5, {11: 5}),
    )
    merge = LocalMerge(
        columns=("span", "model", "count", "attainment", "goodput_rps", "count_ttft_ms", "p50"),
        dimensions=("model",),
        aggregates=MEASURES,
        percentiles=(("p50", "ttft_ms_hist", 0.5),),
        spans=((MS + 60_000, MS + 7200_000),),
        seconds=7200.0,
    )
    found = merge_rows(data, merge)
    assert found.select("span", "model", "count").rows() == [
        (0, "a", 11),
        (0, "b", 1),
        (1, "a", 7),
        (1, "b", 1),
    ]
    assert found["attainment"].to_list() == [9 / 11, 1.0, 6 / 7, 1.0]
    assert found["goodput_rps"].to_list() == [9 / 7200, 1 / 7200, 6 / 7140, 1 / 7140]
    assert found["count_ttft_ms"].to_list() == [11, 1, 7, 1]
    whole_a = Counter({10: 1, 11: 9, 40: 1})
    late_a = Counter({11: 6, 40: 1})
    assert found["p50"].to_list()[0] == quantile(whole_a, 0.5)
    assert found["p50"].to_list()[2] == quantile(late_a, 0.5)


def test_time_buckets_start_at_multiples_of_their_interval_since_the_epoch():
    """As ClickHouse's toStartOfInterval(ts, INTERVAL n SECOND): a 7-minute bucket
    starts at a multiple of 7 minutes since 1970, not at the first row's time."""
    step = 420_000
    seconds = (197, 317, 397, 700)  # from 14:03:17
    data = rows(*((s, "a", 1, 1, {}) for s in seconds))
    merge = LocalMerge(
        columns=("time", "count"),
        dimensions=(),
        aggregates=(("count", "sum(requests)"),),
        interval_ms=step,
    )
    starts = Counter((MS + s * 1000) // step * step for s in seconds)
    expected = [
        (datetime.fromtimestamp(start / 1000, UTC), n) for start, n in sorted(starts.items())
    ]
    assert expected[0][0] != T0 + timedelta(seconds=197)
    assert merge_rows(data, merge).rows() == expected


IN_ROLLUPS = [
    m
    for m in measures_of_every_family()
    if not m.is_percentile and set(m.rollup_columns) <= set(BUILT_IN)
]
SUMMED = [m for m in IN_ROLLUPS if not m.counts_below]


@pytest.mark.parametrize("m", SUMMED, ids=[m.name for m in SUMMED])
def test_every_measure_a_rollup_sums_is_computed_here(m):
    """Every measure of the registry that a rollup holds as sums stays off the SQL path:
    a new measure, or a parser upgrade that read one of their functions differently,
    fails here rather than falling back to the slower path in silence."""
    aggregate(rolled(m))


def test_only_counts_under_a_latency_and_percentiles_are_left_to_the_server():
    """Counts under a latency share a bucket in proportion, which the client does not
    do; percentiles are read from merged histograms, not as aggregates."""
    left = {m.name for m in IN_ROLLUPS if m not in SUMMED}
    assert left and all(re.fullmatch(r"count_\w+_le_150", name) for name in left)
    for m in IN_ROLLUPS:
        if m.counts_below:
            with pytest.raises(Untranslatable):
                aggregate(m.tree(rollup=True))


def test_sparse_histograms_merge_as_dense_ones(monkeypatch):
    data = rows(
        (0, "a", 4, 3, {10: 1, 11: 3}),
        (60, "b", 2, 1, {11: 1, 40: 1}),
        (120, "a", 5, 5, {11: 5, 7001: 2}),
    )
    merge = LocalMerge(
        columns=("model", "p50", "p99"),
        dimensions=("model",),
        aggregates=(),
        percentiles=(("p50", "ttft_ms_hist", 0.5), ("p99", "ttft_ms_hist", 0.99)),
    )
    dense = merge_rows(data, merge)
    monkeypatch.setattr(local_merge, "_MAX_SLOTS", 0)
    assert merge_rows(data, merge).equals(dense)
    assert dense["p99"][0] == quantile(Counter({10: 1, 11: 8, 7001: 2}), 0.99)


@pytest.mark.parametrize("by", [(), ("model",)])
def test_a_few_groups_merge_their_histograms_as_many_do(monkeypatch, by):
    """A few groups are counted one by one (the whole range without a copy of its
    entries); many share one count of (group, bucket) slots. Both give the same."""
    rng = np.random.default_rng(7)
    data = rows(
        *(
            (
                int(second),
                str(rng.choice(["a", "b", "c"])),
                3,
                2,
                {int(k): int(rng.integers(1, 9)) for k in rng.choice(400, rng.integers(1, 30))},
            )
            for second in np.sort(rng.integers(0, 7200, 300))
        )
    )
    percentiles = tuple((f"p{q}", "ttft_ms_hist", q / 100) for q in (50, 95, 99))
    merge = LocalMerge(
        columns=("span", *by, "p50", "p95", "p99"),
        dimensions=by,
        aggregates=(),
        percentiles=percentiles,
        spans=((MS + 600_000, MS + 7200_000), (MS + 7000_000, MS + 7200_000), (MS, MS + 1000)),
        seconds=7200.0,
    )
    few = merge_rows(data, merge)
    monkeypatch.setattr(local_merge, "_FEW_GROUPS", 0)
    many = merge_rows(data, merge)
    assert few.equals(many)
    # A span without requests (its first second) has no row.
    assert few["span"].unique().sort().to_list() == [0, 1, 2]
    assert few.height == 3 * (3 if by else 1) and few["p99"].null_count() == 0


def test_nothing_grouped_over_no_rows_is_one_row_of_nothing():
    merge = LocalMerge(
        columns=("count", "attainment", "p95"),
        dimensions=(),
        aggregates=(("count", "sum(requests)"), MEASURES[1]),
        percentiles=(("p95", "ttft_ms_hist", 0.95),),
        seconds=60.0,
    )
    found = merge_rows(rows(), merge)
    assert found["count"].to_list() == [0]
    assert found["attainment"].to_list() == [None]
    assert np.isnan(found["p95"].item())  # NaN, as ClickHouse says it: normalize nulls it


def test_position_merges_take_maxima_and_minima():
    frame = pl.DataFrame({"lo": [1.5, 7.0, 0.0], "hi": [9.0, float("inf"), 8.5]})
    found = frame.select(aggregate("max(lo) AS lo"), aggregate("min(hi) AS hi"))
    assert found.rows() == [(7.0, 8.5)]


def test_ratios_of_nothing_are_null_not_an_error():
    frame = pl.DataFrame(
        {"errors": [0, 0], "requests": [0, 0]}, schema={"errors": pl.UInt64, "requests": pl.UInt64}
    )
    found = frame.select(aggregate(measure("error_rate").tree(rollup=True)))
    assert found.item() is None


@pytest.mark.parametrize("sql", ["count_ttft_ms_le_150", "quantileExact(0.95)(ttft_ms)"])
def test_what_the_client_cannot_compute_is_refused(sql):
    with pytest.raises(Untranslatable):
        aggregate(measure(sql).tree(rollup=True) if "(" not in sql else sql)
