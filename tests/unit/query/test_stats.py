"""SLA maths: Wilson and Newcombe intervals, bootstrap quantile differences, drift alarms."""

import math
from dataclasses import fields

import numpy as np
import pytest

from warehouse.query.drift import default_min_change
from warehouse.query.registry import measure
from warehouse.query.stats import (
    Difference,
    DriftResult,
    drift,
    proportion_difference,
    quantile_difference,
    wilson_interval,
)

Z95 = 1.959963984540054


def wilson_by_bisection(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's bounds straight from the definition: the proportions pi for which
    |p - pi| = z * sqrt(pi (1 - pi) / n), found by bisection on each side of p."""
    p = successes / n

    def excess(pi: float) -> float:
        return abs(p - pi) - z * math.sqrt(pi * (1 - pi) / n)

    def root(inside: float, outside: float) -> float:
        for _ in range(200):
            middle = (inside + outside) / 2
            inside, outside = (inside, middle) if excess(middle) > 0 else (middle, outside)
        return (inside + outside) / 2

    low = 0.0 if successes == 0 else root(p, 0.0)
    high = 1.0 if successes == n else root(p, 1.0)
    return low, high


# -- wilson_interval ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # Newcombe (1998), "Two-sided confidence intervals for the single proportion",
        # Stat Med 17:857, Table I, method 3 (Wilson score).
        (81, 263, (0.2553, 0.3662)),
        (15, 148, (0.0624, 0.1605)),
        (0, 20, (0.0, 0.1611)),
        (1, 29, (0.0061, 0.1718)),
    ],
)
def test_wilson_matches_textbook_values(successes, n, expected):
    low, high = wilson_interval(successes, n)
    assert (round(low, 4), round(high, 4)) == expected


@pytest.mark.parametrize(("successes", "n"), [(0, 1), (1, 3), (7, 10), (50, 1000), (99, 100)])
def test_wilson_bounds_solve_the_score_equation(successes, n):
    assert wilson_interval(successes, n) == pytest.approx(wilson_by_bisection(successes, n))


def test_wilson_is_clamped_and_exact_at_the_edges():
    assert wilson_interval(0, 50)[0] == 0.0
    assert wilson_interval(50, 50)[1] == 1.0


def test_wilson_narrows_with_confidence_level():
    wide = wilson_interval(30, 100, level=0.99)
    narrow = wilson_interval(30, 100, level=0.80)
    assert wide[0] < narrow[0] < 0.3 < narrow[1] < wide[1]


def test_wilson_of_nothing_is_nan():
    assert all(math.isnan(bound) for bound in wilson_interval(0, 0))


@pytest.mark.parametrize(
    ("successes", "n", "level", "named"),
    [
        (5, 3, 0.95, "successes"),
        (-1, 3, 0.95, "successes"),
        (0, -1, 0.95, "successes"),
        (1, 3, 1.0, "level"),
        (1, 3, 0.0, "level"),
    ],
)
def test_wilson_rejects_impossible_input(successes, n, level, named):
    # Refused by name, before any arithmetic could fail on it (the square root of a
    # negative variance is a ValueError too, but not this one).
    with pytest.raises(ValueError, match=named):
        wilson_interval(successes, n, level)


# -- proportion_difference ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # Newcombe (1998), "Interval estimation for the difference between independent
        # proportions", Stat Med 17:873, Table II, method 10; arm b is the paper's first.
        ((48, 80), (56, 70), (0.0524, 0.3339)),
        ((3, 10), (9, 10), (0.1705, 0.8090)),
        ((0, 29), (5, 56), (-0.0381, 0.1926)),
        ((0, 20), (0, 10), (-0.1611, 0.2775)),
    ],
)
def test_newcombe_matches_textbook_values(a, b, expected):
    result = proportion_difference(*a, *b)
    assert result.method == "newcombe-wilson"
    assert result.estimate == pytest.approx(b[0] / b[1] - a[0] / a[1])
    assert (round(result.low, 4), round(result.high, 4)) == expected


def test_newcombe_is_built_from_the_two_wilson_intervals():
    l_a, u_a = wilson_by_bisection(12, 40)
    l_b, u_b = wilson_by_bisection(30, 55)
    p_a, p_b = 12 / 40, 30 / 55
    result = proportion_difference(12, 40, 30, 55)
    assert result.low == pytest.approx(p_b - p_a - math.sqrt((p_b - l_b) ** 2 + (u_a - p_a) ** 2))
    assert result.high == pytest.approx(p_b - p_a + math.sqrt((u_b - p_b) ** 2 + (p_a - l_a) ** 2))


def test_swapping_the_arms_mirrors_the_difference():
    forward = proportion_difference(48, 80, 56, 70)
    backward = proportion_difference(56, 70, 48, 80)
    assert backward.estimate == pytest.approx(-forward.estimate)
    assert (backward.low, backward.high) == pytest.approx((-forward.high, -forward.low))
    assert backward.p_value == pytest.approx(forward.p_value)


def test_p_value_is_the_pooled_z_test_equal_to_pearson_chi_square():
    # Pearson's chi-square (no continuity correction) on the 2x2 table is the square of the
    # pooled z statistic; with one degree of freedom its p-value is erfc(sqrt(chi2 / 2)).
    table = np.array([[48, 80 - 48], [56, 70 - 56]], dtype=float)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0) / table.sum()
    chi2 = ((table - expected) ** 2 / expected).sum()
    result = proportion_difference(48, 80, 56, 70)
    assert result.p_value == pytest.approx(math.erfc(math.sqrt(chi2 / 2)))
    assert result.p_value == pytest.approx(0.00805, abs=1e-5)


def test_no_variance_on_both_sides_gives_p_value_one_and_an_interval():
    for successes_a, successes_b in [(0, 0), (20, 10)]:
        result = proportion_difference(successes_a, 20, successes_b, 10)
        assert result.estimate == 0.0
        assert result.p_value == 1.0
        assert result.low < 0.0 < result.high


def test_an_empty_arm_gives_nan():
    for result in (proportion_difference(0, 0, 3, 10), proportion_difference(3, 10, 0, 0)):
        assert math.isnan(result.estimate)
        assert math.isnan(result.low) and math.isnan(result.high)
        assert math.isnan(result.p_value)


def test_newcombe_covers_the_true_difference_about_95_percent_of_the_time():
    rng = np.random.default_rng(20240601)
    n_a, p_a, n_b, p_b = 40, 0.2, 50, 0.35
    covered = 0
    trials = 2000
    for successes_a, successes_b in zip(
        rng.binomial(n_a, p_a, trials), rng.binomial(n_b, p_b, trials), strict=True
    ):
        result = proportion_difference(int(successes_a), n_a, int(successes_b), n_b)
        covered += result.low <= p_b - p_a <= result.high
    assert 0.93 <= covered / trials <= 0.97


# -- quantile_difference ------------------------------------------------------------------


def test_quantile_difference_detects_a_shift():
    rng = np.random.default_rng(1)
    a = rng.normal(100.0, 10.0, 5000)
    b = rng.normal(103.0, 10.0, 5000)
    result = quantile_difference(a, b, 0.5)
    assert result.method == "bootstrap-percentile"
    assert result.estimate == pytest.approx(np.quantile(b, 0.5) - np.quantile(a, 0.5))
    assert 0.0 < result.low < result.estimate < result.high
    assert result.p_value < 0.01


def test_quantile_difference_finds_nothing_between_identical_distributions():
    rng = np.random.default_rng(2)
    a = rng.lognormal(0.0, 1.0, 5000)
    b = rng.lognormal(0.0, 1.0, 5000)
    result = quantile_difference(a, b, 0.95)
    assert result.low < 0.0 < result.high
    assert result.p_value > 0.05


def test_quantile_difference_is_deterministic_given_the_seed():
    rng = np.random.default_rng(3)
    a, b = rng.exponential(1.0, 2000), rng.exponential(1.1, 2000)
    assert quantile_difference(a, b, 0.9, seed=7) == quantile_difference(a, b, 0.9, seed=7)
    assert quantile_difference(a, b, 0.9, seed=7) != quantile_difference(a, b, 0.9, seed=8)


def test_quantile_difference_bootstrap_matches_a_naive_bootstrap():
    # The implementation partitions resampled indices into the sorted sample instead of
    # gathering and sorting values; its bootstrap distribution must be the ordinary one.
    rng = np.random.default_rng(4)
    a, b = rng.normal(0.0, 1.0, 400), rng.normal(0.5, 1.0, 400)
    resamples = 4000
    naive = np.random.default_rng(99)
    diffs = np.quantile(
        b[naive.integers(0, b.size, (resamples, b.size))], 0.9, axis=1
    ) - np.quantile(a[naive.integers(0, a.size, (resamples, a.size))], 0.9, axis=1)
    naive_low, naive_high = np.quantile(diffs, [0.025, 0.975])
    result = quantile_difference(a, b, 0.9, resamples=resamples)
    assert result.low == pytest.approx(naive_low, abs=0.05)
    assert result.high == pytest.approx(naive_high, abs=0.05)


def replayed_bootstrap(a, b, q, level, resamples, seed, max_sample):
    """The percentile bootstrap by the book, from the draws quantile_difference is
    documented to make: ``np.random.default_rng(seed)``; an arm larger than
    ``max_sample`` subsampled without replacement, then arm a's resamples and arm b's,
    each a row of indices (int32) into the sorted arm. Each resample's quantile here is
    numpy's own, of the gathered values. Returns (low, high, p-value, how many
    resampled differences are exactly 0)."""
    rng = np.random.default_rng(seed)
    arms = []
    for arm in (a, b):
        if arm.size > max_sample:
            arm = rng.choice(arm, size=max_sample, replace=False)
        arms.append(np.sort(arm))
    boot = []
    for arm in arms:
        index = rng.integers(0, arm.size, size=(resamples, arm.size), dtype=np.int32)
        boot.append(np.quantile(arm[index], q, axis=1))
    diffs = boot[1] - boot[0]
    tail = (1 - level) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    p_value = min(1.0, 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)))
    return low, high, p_value, int((diffs == 0).sum())


@pytest.mark.parametrize(
    ("q", "ties", "b_lower"),
    [
        (0.5, False, False),
        (0.9, False, False),
        (0.99, False, False),
        (0.995, False, False),  # in the top order statistics of the smaller arm
        (0.5, True, False),
        (0.9, True, False),
        (0.5, True, True),
    ],
    ids=["p50", "p90", "p99", "p99.5", "p50-tied", "p90-tied", "p50-tied-b-lower"],
)
@pytest.mark.parametrize("max_sample", [200_000, 120], ids=["whole", "subsampled"])
def test_quantile_difference_is_the_percentile_bootstrap_of_its_seeded_draws(
    q, ties, b_lower, max_sample
):
    # Exactly, not just in distribution: the same draws through numpy's quantile give
    # the same bounds and p-value. Values rounded to 0.1 make some resampled
    # differences exactly 0, which the p-value's "<= 0" and ">= 0" both count (the
    # smaller side decides it: either, as b lies above or below a).
    rng = np.random.default_rng(21)
    a, b = rng.normal(0.0, 1.0, 150), rng.normal(-0.1 if b_lower else 0.4, 1.0, 101)
    if ties:
        a, b = np.round(a, 1), np.round(b, 1)
    result = quantile_difference(a, b, q, level=0.9, resamples=400, seed=5, max_sample=max_sample)
    low, high, p_value, zeros = replayed_bootstrap(a, b, q, 0.9, 400, 5, max_sample)
    assert (result.low, result.high) == pytest.approx((low, high), rel=1e-12, abs=1e-12)
    assert result.p_value == pytest.approx(p_value, abs=1e-12)
    assert 0.0 < result.p_value < 1.0  # a p-value the formula decides, not a clamp
    assert (zeros > 0) == ties


def test_quantile_difference_drops_nans():
    rng = np.random.default_rng(5)
    a, b = rng.normal(0.0, 1.0, 1000), rng.normal(0.2, 1.0, 1000)
    with_gaps = quantile_difference(np.append(a, [np.nan] * 10), np.append(b, np.nan), 0.5)
    assert with_gaps == quantile_difference(a, b, 0.5)


def test_quantile_difference_subsamples_large_arms_for_the_bootstrap_only():
    rng = np.random.default_rng(6)
    a, b = rng.normal(0.0, 1.0, 20_000), rng.normal(0.1, 1.0, 20_000)
    full = quantile_difference(a, b, 0.5, resamples=300)
    small = quantile_difference(a, b, 0.5, resamples=300, max_sample=1000)
    assert small.estimate == full.estimate
    assert small.high - small.low > 2 * (full.high - full.low)
    assert small == quantile_difference(a, b, 0.5, resamples=300, max_sample=1000)
    # Only arms with *more* than max_sample values are subsampled.
    assert quantile_difference(a, b, 0.5, resamples=300, max_sample=a.size) == full


def test_quantile_difference_of_an_empty_arm_is_nan():
    for a, b in [(np.array([]), np.ones(5)), (np.ones(5), np.array([np.nan, np.nan]))]:
        result = quantile_difference(a, b, 0.5)
        assert math.isnan(result.estimate) and math.isnan(result.p_value)
        assert math.isnan(result.low) and math.isnan(result.high)


def test_quantile_difference_of_single_values():
    result = quantile_difference(np.array([1.0]), np.array([3.0]), 0.99)
    assert (result.estimate, result.low, result.high, result.p_value) == (2.0, 2.0, 2.0, 0.0)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.5, 1.5])
def test_quantile_difference_needs_q_strictly_inside_0_1(q):
    with pytest.raises(ValueError, match="q must be"):
        quantile_difference(np.ones(3), np.ones(3), q)


# -- drift --------------------------------------------------------------------------------


def noisy_step(step_at: int = 60, size: int = 100, shift: float = 10.0) -> np.ndarray:
    """A flat series (mean 100, sd 1) that jumps by ``shift`` at window ``step_at``."""
    values = np.random.default_rng(3).normal(100.0, 1.0, size)
    values[step_at:] += shift
    return values


def test_drift_breaches_from_the_step_and_alerts_after_three_windows():
    result = drift(noisy_step(step_at=60), baseline=30)
    assert not result.breach[:60].any()
    assert result.breach[60:70].all()
    assert result.consecutive[58:65].tolist() == [0, 0, 1, 2, 3, 4, 5]
    assert not result.alert[:62].any()
    assert result.alert[62:70].all()
    assert result.z[60] > 3.0


def test_drift_a_sustained_step_keeps_alerting_with_the_defaults():
    # Breaching windows stay out of the baseline, so a step does not become its own
    # baseline: every window after it breaches, and the alert holds until it ends.
    values = np.full(40, 100.0) + np.random.default_rng(3).normal(0, 1, 40)
    values[20:30] += 50.0
    result = drift(values)
    assert not result.breach[:20].any()
    assert result.breach[20:30].all()
    assert result.consecutive[20:30].tolist() == list(range(1, 11))
    assert result.alert[22:30].all() and not result.alert[:22].any()
    assert (result.z[30:] < 3).all()  # the values are back at once ...
    assert not result.breach[-1]  # ... and the EWMA decays back inside its limits
    assert result.baseline_mean[29] == pytest.approx(values[8:20].mean())


def test_drift_returns_one_entry_per_window():
    result = drift(noisy_step())
    for field in fields(DriftResult):
        assert len(getattr(result, field.name)) == 100
    assert result.breach.dtype == bool and result.alert.dtype == bool
    assert np.issubdtype(result.consecutive.dtype, np.integer)


def test_drift_baseline_is_the_trailing_windows_excluding_the_current_one():
    values = noisy_step()
    result = drift(values, baseline=12)
    assert result.baseline_mean[30] == pytest.approx(values[18:30].mean())
    assert result.baseline_std[30] == pytest.approx(values[18:30].std(ddof=1))
    assert result.z[30] == pytest.approx(
        (values[30] - values[18:30].mean()) / values[18:30].std(ddof=1)
    )
    # Until twelve earlier windows exist there is no baseline, and no verdict.
    assert np.isnan(result.baseline_mean[:12]).all() and np.isnan(result.z[:12]).all()
    assert result.baseline_mean[12] == pytest.approx(values[:12].mean())
    assert not result.breach[:12].any()
    # min_baseline scores earlier, from fewer windows.
    early = drift(values, baseline=12, min_baseline=4)
    assert early.baseline_mean[4] == pytest.approx(values[:4].mean())
    assert np.isnan(early.baseline_mean[3])


def test_drift_a_baseline_of_a_few_close_windows_is_not_a_yardstick():
    # Two windows that happen to agree closely would make every later window "breach".
    values = np.array([100.0, 100.1] + [100.0 + d for d in (3, -2, 4, -3, 2, -4, 3, -1) * 4])
    assert not drift(values, baseline=12, direction="both").breach.any()
    assert drift(values, baseline=12, min_baseline=2, direction="both").alert.any()


def test_drift_ewma_recursion_and_limits():
    values = np.array([10.0, 12.0, 11.0, 13.0])
    result = drift(values, ewma_alpha=0.5, ewma_width=2.0, min_baseline=2)
    assert result.ewma.tolist() == [10.0, 11.0, 11.0, 12.0]
    spread = 2.0 * result.baseline_std[3] * math.sqrt(0.5 / 1.5)
    assert result.ewma_upper[3] == pytest.approx(result.baseline_mean[3] + spread)
    assert result.ewma_lower[3] == pytest.approx(result.baseline_mean[3] - spread)


def test_drift_nan_windows_carry_the_ewma_and_leave_the_baseline():
    values = np.array([np.nan, 10.0, 12.0, np.nan, 11.0, 10.0])
    result = drift(values, ewma_alpha=0.5, min_baseline=2)
    assert np.isnan(result.ewma[0])
    assert result.ewma[1:].tolist() == [10.0, 11.0, 11.0, 11.0, 10.5]
    assert result.baseline_mean[5] == pytest.approx(np.mean([10.0, 12.0, 11.0]))
    assert np.isnan(result.z[3])
    assert not result.breach.any()


def test_drift_a_flat_baseline_gives_zero_or_infinite_z():
    values = np.array([5.0, 5.0, 5.0, 5.0, 6.0, 4.0])
    result = drift(values, baseline=3, direction="both")
    assert result.z[3] == 0.0 and not result.breach[3]
    assert result.z[4] == math.inf and result.breach[4]
    assert result.z[5] == -math.inf and result.breach[5]  # 6.0 breached: not in the baseline


def test_drift_direction_down_and_both():
    falling = noisy_step(shift=-10.0)
    assert not drift(falling, baseline=30, direction="up").breach.any()
    down = drift(falling, baseline=30, direction="down")
    assert down.breach[60:70].all() and not down.breach[:60].any()
    both = drift(falling, baseline=30, direction="both")
    np.testing.assert_array_equal(both.breach, down.breach)
    rising = drift(noisy_step(), baseline=30, direction="both")
    assert rising.breach[60:70].all()
    assert rising.ewma[62] > rising.ewma_upper[62]


def test_drift_consecutive_resets_after_a_quiet_window():
    values = np.random.default_rng(12).normal(100.0, 1.0, 50)
    values[[40, 41, 43]] += 50.0
    quiet_ewma = {"baseline": 30, "ewma_width": 1e9}
    result = drift(values, **quiet_ewma)
    assert result.consecutive[39:44].tolist() == [0, 1, 2, 0, 1]
    assert not result.alert.any()
    assert drift(values, alert_after=2, **quiet_ewma).alert.tolist().count(True) == 1


def test_drift_defaults_are_z_beyond_3_and_ewma_limits_3_sigma_wide_at_alpha_0_3():
    values = np.array([0.0, 1.0, 2.0] * 4 + [0.0])  # a 12-window baseline, then a probe
    spread = values[:12].std(ddof=1)
    values[12] = 1.0 + 3.5 * spread  # z = 3.5
    result = drift(values)
    assert np.isnan(result.z[11]) and result.z[12] == pytest.approx(3.5)
    assert result.ewma_upper[12] == pytest.approx(1.0 + 3.0 * spread * math.sqrt(0.3 / 1.7))
    assert result.ewma[12] < result.ewma_upper[12]  # so the z-score alone breaches
    assert result.breach[12]


def test_drift_a_z_exactly_at_the_threshold_does_not_breach():
    # Baseline 0, 1, 2: mean 1, sample sd 1, so 4 and -2 are exactly 3 sd away.
    quiet_ewma = {"baseline": 3, "ewma_width": 1e9, "direction": "both"}
    for probe, z in ((4.0, 3.0), (-2.0, -3.0)):
        result = drift(np.array([0.0, 1.0, 2.0, probe]), **quiet_ewma)
        assert result.z[3] == z and not result.breach[3]
        nudged = drift(np.array([0.0, 1.0, 2.0, probe + np.sign(z) * 1e-9]), **quiet_ewma)
        assert nudged.breach[3]


def test_drift_a_nan_window_after_a_flat_baseline_has_no_z_and_does_not_breach():
    result = drift(np.array([5.0, 5.0, 5.0, np.nan]), baseline=3, direction="both")
    assert np.isnan(result.z[3]) and not result.breach[3]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"baseline": 1}, "baseline"),
        ({"ewma_alpha": 0.0}, "ewma_alpha"),
        ({"ewma_alpha": 1.5}, "ewma_alpha"),
        ({"alert_after": 0}, "alert_after"),
        ({"baseline": 4, "min_baseline": 1}, "min_baseline"),
        ({"baseline": 4, "min_baseline": 5}, "min_baseline"),
        ({"min_change": -0.1}, "min_change"),
        ({"min_change": float("nan")}, "min_change"),
        ({"min_change": float("inf")}, "min_change"),
    ],
)
def test_drift_refuses_parameters_outside_their_ranges(arguments, named):
    with pytest.raises(ValueError, match=named):
        drift(np.ones(5), **arguments)


def test_drift_takes_the_edges_of_its_parameter_ranges():
    values = noisy_step(size=20, step_at=10)
    edges = drift(values, baseline=2, ewma_alpha=1.0, alert_after=1, min_baseline=2)
    assert edges.ewma.tolist() == values.tolist()  # alpha 1: the EWMA is the value
    assert edges.alert.tolist() == edges.breach.tolist()  # one breach is an alert
    assert edges.alert[10]


def test_quantile_difference_refuses_parameters_outside_their_ranges():
    a, b = np.arange(5.0), np.arange(5.0)
    for arguments, named in (
        ({"level": 0.0}, "level"),
        ({"level": 1.0}, "level"),
        ({"resamples": 0}, "resamples"),
        ({"max_sample": 0}, "max_sample"),
    ):
        with pytest.raises(ValueError, match=named):
            quantile_difference(a, b, 0.5, **arguments)
    one = quantile_difference(a, b, 0.5, resamples=1, max_sample=1)  # the least allowed
    assert one.low == one.high  # one resampled difference
    # Every resampled difference 0 counts on both sides: the p-value is capped at 1.
    assert quantile_difference(np.ones(5), np.ones(5), 0.5).p_value == 1.0


def test_drift_a_minimum_change_keeps_small_clear_rises_from_breaching():
    """A 6% rise over a tight baseline is statistically clear (z far past 3) and, with
    ``min_change=0.1``, no breach; a 20% rise breaches either way, up or down."""
    values = np.full(40, 100.0) + np.random.default_rng(5).normal(0, 0.5, 40)
    small, large = values.copy(), values.copy()
    small[20:30] += 6.0
    large[20:30] += 20.0
    assert drift(small).alert[22:30].all()
    assert not drift(small, min_change=0.1).breach.any()
    assert drift(large, min_change=0.1).alert[22:30].all()
    falling = values.copy()
    falling[20:30] -= 20.0
    assert drift(falling, direction="down", min_change=0.1).alert[22:30].all()
    assert not drift(falling, direction="down", min_change=0.25).breach.any()


@pytest.mark.parametrize(
    ("name", "floor"),
    [("p95_ttft_ms", 0.1), ("p999_e2e_ms", 0.1), ("avg_tpot_ms", 0.1), ("attainment", 0.0),
     ("error_rate", 0.0), ("kv_hit_ratio", 0.0), ("avg_prompt_tokens", 0.0)],
)  # fmt: skip
def test_a_latency_drifts_only_by_a_tenth_and_a_proportion_by_any_clear_change(name, floor):
    assert default_min_change(measure(name)) == floor


def test_drift_rejects_an_unknown_direction():
    with pytest.raises(ValueError, match="up, down, both"):
        drift(np.ones(5), direction="sideways")


def test_difference_and_drift_result_are_frozen():
    result = Difference(0.1, 0.0, 0.2, 0.95, 0.04, "newcombe-wilson")
    with pytest.raises(AttributeError):
        result.estimate = 1.0  # type: ignore[misc]
    drifted = drift(np.ones(3))
    with pytest.raises(AttributeError):
        drifted.z = np.zeros(3)  # type: ignore[misc]
