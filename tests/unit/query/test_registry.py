"""The registry: what each measure and dimension name means, the levels of percentiles
and the good-request rule of attainment."""

from __future__ import annotations

import pytest
from sqlglot import exp

from warehouse.aggregates import BUILT_IN
from warehouse.errors import QueryError
from warehouse.model import LATENCY_COLUMNS, ROLLUP_LATENCIES, TOKEN_COLUMNS
from warehouse.query.registry import PERCENTILES, Measure, dimension, good_count, measure


@pytest.mark.parametrize("digits", ["50", "75", "90", "95", "99", "999"])
def test_a_percentile_measure_is_the_quantile_its_digits_name(digits):
    level = float(f"0.{digits}")  # p95 is the 0.95 quantile, p999 the 0.999
    assert PERCENTILES[digits] == level
    for column in LATENCY_COLUMNS:
        asked = measure(f"p{digits}_{column}")
        assert (asked.level, asked.column, asked.is_percentile) == (level, column, True)
        assert asked.rollup_columns == (f"{column}_hist",)
        assert built_in(asked) == (column in ROLLUP_LATENCIES)


def built_in(m: Measure) -> bool:
    """Whether the built-in rollups keep every column ``m`` reads."""
    return set(m.rollup_columns) <= set(BUILT_IN)


def test_averages_and_sums_read_the_aggregates_of_their_own_column():
    for column in LATENCY_COLUMNS:
        average = measure(f"avg_{column}")
        # The count of requests with a latency comes from its histogram.
        assert average.rollup_columns == (f"{column}_sum", f"{column}_hist")
        assert built_in(average) == (column in ROLLUP_LATENCIES)
    for column in TOKEN_COLUMNS:
        assert measure(f"avg_{column}").rollup_columns == (f"{column}_sum", f"{column}_count")
        total = measure(f"sum_{column}")
        assert total.rollup_columns == (f"{column}_sum",)
        # The built-in rollups keep sums of every token count but the context window.
        assert built_in(total) == (column != "max_context_tokens")
    assert not measure("avg_ttft_ms").is_percentile and not measure("count").needs_thresholds


def test_counts_of_requests_with_a_latency_and_under_a_limit_read_its_histogram():
    assert measure("count_ttft_ms").rollup_columns == ("ttft_ms_hist",)
    assert not measure("count_ttft_ms").counts_below
    below = measure("count_e2e_ms_le_2500")
    assert below.rollup_columns == ("e2e_ms_hist",) and below.counts_below
    # every status, not only successful requests' odd keys
    assert not list(below.tree(rollup=True).find_all(exp.Mod))
    assert not built_in(measure("count_itl_p99_ms_le_40"))  # the rollups keep no ITL


def test_a_formula_naming_no_aggregate_is_an_error():
    with pytest.raises(QueryError, match="measure broken: no aggregate 'status'"):
        Measure("broken", "status / nullIf(requests, 0)").tree(rollup=False)


@pytest.mark.parametrize(
    "name",
    [
        "avg_status",
        "sum_ttft_ms",
        "avg_",
        "p95_status",
        "count_status",
        "count_ttft_ms_le_x",
        "count_ttft_ms_le_",
        "count_ttft_ms_le_2.5",  # a result column's name has no dot
    ],
)
def test_a_name_that_only_looks_like_a_measure_is_unknown(name):
    with pytest.raises(QueryError, match="unknown measure"):
        measure(name)


def test_an_attrs_key_is_a_dimension_that_no_rollup_keeps():
    for spelled in ("attrs['gpu']", 'attrs["gpu"]', "attrs.gpu"):
        gpu = dimension(spelled)
        assert (gpu.name, gpu.in_rollup) == ("gpu", False)
        # a missing key is '' on every store (NULL in DuckDB's maps otherwise)
        assert gpu.value.sql("clickhouse") == "coalesce(attrs['gpu'], '')"
        assert [c.name for c in gpu.tree.find_all(exp.Column)] == ["attrs"]
    assert [c.name for c in dimension("zone").tree.find_all(exp.Column)] == ["zone"]
    assert dimension("is_probe").in_rollup and not dimension("http_status").in_rollup


def test_a_good_request_is_ok_and_within_every_threshold_a_missing_tpot_meets_its_own():
    """As in vLLM's serving benchmark: a request with one output token has no TPOT and
    meets a TPOT threshold; a request missing any other latency fails its threshold."""
    sql = good_count({"ttft_ms": "300", "tpot_ms": "50"}, rollup=False)
    assert sql == (
        "countIf(status = 'ok' AND coalesce(ttft_ms <= 300, false)"
        " AND coalesce(tpot_ms <= 50, true))"
    )
