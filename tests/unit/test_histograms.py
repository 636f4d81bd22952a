"""Rollup histograms: keys are bucket * 2 + ok, folded back into buckets to be read."""

import math

import numpy as np
import pytest

from warehouse.model import (
    bucket_bounds,
    fold_histogram,
    histogram_quantiles,
    histogram_share_below,
    latency_bucket,
)


def test_folding_adds_the_two_halves_of_each_bucket_and_keeps_groups_apart():
    # group 0: bucket 3 (1 failed + 4 ok), bucket 7 (2 ok); group 1: bucket 3 (5 failed)
    offsets, buckets, counts = fold_histogram(
        np.array([0, 3, 4]), np.array([6, 7, 15, 6]), np.array([1, 4, 2, 5])
    )
    assert offsets.tolist() == [0, 2, 3]
    assert buckets.tolist() == [3, 7, 3]
    assert counts.tolist() == [5.0, 2.0, 5.0]


def test_folding_keeps_each_groups_buckets_apart_in_any_arrangement():
    # group 0: buckets 1 (ok and failed), 2 and 4; group 1: bucket 5 alone; group 2:
    # bucket 5 again (ok and failed); group 3: nothing, at the end.
    offsets, buckets, counts = fold_histogram(
        np.array([0, 4, 5, 7, 7]),
        np.array([2, 3, 5, 8, 11, 10, 11]),
        np.array([1, 2, 3, 4, 5, 6, 7]),
    )
    assert offsets.tolist() == [0, 3, 4, 5, 5]
    assert buckets.tolist() == [1, 2, 4, 5, 5]
    assert counts.tolist() == [3.0, 3.0, 4.0, 5.0, 13.0]


def test_an_empty_group_stays_empty():
    offsets, buckets, counts = fold_histogram(
        np.array([0, 0, 2]), np.array([4, 5]), np.array([1, 1])
    )
    assert offsets.tolist() == [0, 0, 1] and buckets.tolist() == [2] and counts.tolist() == [2.0]
    values = histogram_quantiles(offsets, buckets, counts, [0.5])
    assert np.isnan(values[0, 0])
    low, high = bucket_bounds(2)
    assert low <= values[1, 0] < high


# -- buckets ------------------------------------------------------------------------------


def test_buckets_start_at_a_hundredth_of_a_millisecond_and_grow_by_2_percent():
    """The resolution every stored rollup histogram was written with (the rollups compute
    the same buckets in SQL): changing it would misread all of them."""
    assert bucket_bounds(0) == (0.0, 0.01)
    assert bucket_bounds(1) == pytest.approx((0.01, 0.0102))
    for k in (1, 2, 250, 1000):
        low, high = bucket_bounds(k)
        assert high / low == pytest.approx(1.02)
        assert bucket_bounds(k + 1)[0] == pytest.approx(high)  # no gaps, no overlaps


def test_a_latency_falls_in_the_bucket_whose_bounds_hold_it():
    values = np.geomspace(0.0101, 1e7, 5_000)  # clear of the bounds themselves
    for value, bucket in zip(values, latency_bucket(values).tolist(), strict=True):
        low, high = bucket_bounds(bucket)
        assert low <= value < high, (value, bucket)


def test_below_a_hundredth_of_a_millisecond_is_bucket_0_and_the_last_bucket_holds_the_rest():
    assert latency_bucket(np.array([0.0, 0.005, 0.00999, 0.01])).tolist() == [0, 0, 0, 1]
    assert latency_bucket(np.array([math.inf])).tolist() == [65535]  # uint16's largest


def test_the_share_below_a_threshold_counts_part_of_the_bucket_it_falls_in():
    low, high = bucket_bounds(300)
    histogram = {0: 10, 300: 20, 400: 30}
    # Values are taken as spread evenly within a bucket.
    assert histogram_share_below(histogram, low + 0.25 * (high - low)) == pytest.approx(15 / 60)
    assert histogram_share_below(histogram, (low + high) / 2) == pytest.approx(20 / 60)
    assert histogram_share_below(histogram, high) == pytest.approx(30 / 60)
    assert histogram_share_below(histogram, 0.0) == 0.0
    assert histogram_share_below(histogram, bucket_bounds(400)[1]) == pytest.approx(1.0)
    assert math.isnan(histogram_share_below({}, 5.0))
    assert math.isnan(histogram_share_below({300: 0}, 5.0))


# -- quantiles ----------------------------------------------------------------------------


def quantile_by_the_book(histogram: list[tuple[int, float]], q: float) -> float:
    """histogram_quantiles' reading, one histogram at a time, as its docstring states it:
    rank ``q * (n - 1)``; the bucket that holds the order statistic at the rank's floor;
    inside it the values spread evenly, the j-th of c (from 0) at (j + 0.5) / c of the
    bucket's width, j taken at the rank itself and kept within the bucket."""
    n = sum(count for _, count in histogram)
    rank = q * (n - 1)
    ahead = 0.0
    for bucket, count in histogram:
        if ahead <= math.floor(rank) < ahead + count:
            low, high = bucket_bounds(bucket)
            share = min(1.0, max(0.0, (rank - ahead + 0.5) / count))
            return low + share * (high - low)
        ahead += count
    raise AssertionError("rank beyond the histogram")


def test_quantiles_of_many_histograms_read_each_as_the_book_says():
    rng = np.random.default_rng(8)
    histograms = [
        [(0, 4.0), (1, 2.0)],  # bucket 0 starts at 0, not where bucket 1's rule says
        [(5, 1.0)],  # one value: not empty
        [(10, 1.0), (20, 1.0)],  # ranks between two buckets: the floor's bucket, its top
    ]
    for size in (1, 3, 0, 12, 40, 2):  # one empty group among them
        buckets = np.sort(rng.choice(np.arange(0, 600), size=size, replace=False))
        counts = rng.integers(1, 50, size=size).astype(float)
        histograms.append(list(zip(buckets.tolist(), counts.tolist(), strict=True)))
    offsets = np.cumsum([0] + [len(h) for h in histograms])
    buckets = np.array([b for h in histograms for b, _ in h])
    counts = np.array([c for h in histograms for _, c in h])
    levels = [0.0, 0.25, 0.5, 0.9, 0.99, 1.0]
    got = histogram_quantiles(offsets, buckets, counts, levels)
    assert got.shape == (len(histograms), len(levels))
    for g, histogram in enumerate(histograms):
        for column, q in enumerate(levels):
            if not histogram:
                assert math.isnan(got[g, column])
            else:
                assert got[g, column] == pytest.approx(quantile_by_the_book(histogram, q))
