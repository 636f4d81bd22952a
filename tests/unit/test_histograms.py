"""Rollup histograms: keys are bucket * 2 + ok, folded back into buckets to be read."""

import numpy as np

from warehouse.model import bucket_bounds, fold_histogram, histogram_quantiles


def test_folding_adds_the_two_halves_of_each_bucket_and_keeps_groups_apart():
    # group 0: bucket 3 (1 failed + 4 ok), bucket 7 (2 ok); group 1: bucket 3 (5 failed)
    offsets, buckets, counts = fold_histogram(
        np.array([0, 3, 4]), np.array([6, 7, 15, 6]), np.array([1, 4, 2, 5])
    )
    assert offsets.tolist() == [0, 2, 3]
    assert buckets.tolist() == [3, 7, 3]
    assert counts.tolist() == [5.0, 2.0, 5.0]


def test_an_empty_group_stays_empty():
    offsets, buckets, counts = fold_histogram(
        np.array([0, 0, 2]), np.array([4, 5]), np.array([1, 1])
    )
    assert offsets.tolist() == [0, 0, 1] and buckets.tolist() == [2] and counts.tolist() == [2.0]
    values = histogram_quantiles(offsets, buckets, counts, [0.5])
    assert np.isnan(values[0, 0])
    low, high = bucket_bounds(2)
    assert low <= values[1, 0] < high
