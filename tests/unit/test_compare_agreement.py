"""The agreement check of ``llmwh compare``: counts exactly, floats within tolerance,
rows matched on their keys, and a store that answers wrongly on purpose."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from warehouse.compare import EXACT, ROLLUP, Fault, compare
from warehouse.compare.faults import FaultyStore
from warehouse.store import open_store

KEYS = ("model", "region")


def frame(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"model": pl.Utf8, "region": pl.Utf8, "count": pl.Int64, "p95_ttft_ms": pl.Float64},
        orient="row",
    )


REFERENCE = frame([("a", "hz", 5000, 200.0), ("a", "sh", 10, 180.0), ("b", "hz", 3000, 0.0)])


def test_the_same_rows_in_another_order_agree() -> None:
    outcome = compare(REFERENCE.reverse(), REFERENCE, KEYS)
    assert outcome.agrees
    assert outcome.compared == 6


def test_a_count_off_by_one_is_a_difference_naming_key_column_and_values() -> None:
    wrong = REFERENCE.with_columns(
        pl.when(pl.col("region") == "sh").then(pl.col("count") + 1).otherwise(pl.col("count"))
    )
    outcome = compare(wrong, REFERENCE, KEYS)
    assert [(d.key, d.column, d.value, d.reference) for d in outcome.differences] == [
        ("model=a, region=sh", "count", 11, 10)
    ]


@pytest.mark.parametrize(
    ("got", "expected", "agrees"),
    [
        (200.0 * (1 + 5e-10), 200.0, True),  # within relative 1e-9
        (200.0 * (1 + 2e-9), 200.0, False),
        (1e-13, 0.0, True),  # within absolute 1e-12 near zero
        (1e-9, 0.0, False),
        (None, 200.0, False),
    ],
)
def test_floats_agree_within_the_stated_tolerance(
    got: float | None, expected: float, agrees: bool
) -> None:
    reference = frame([("a", "hz", 5000, expected)])
    outcome = compare(frame([("a", "hz", 5000, got)]), reference, KEYS)
    assert outcome.agrees is agrees


def test_missing_and_extra_rows_are_differences() -> None:
    answer = frame([("a", "hz", 5000, 200.0), ("a", "sh", 10, 180.0), ("c", "us-east", 1, 9.0)])
    found = {(d.key, d.value, d.reference) for d in compare(answer, REFERENCE, KEYS).differences}
    assert found == {
        ("model=b, region=hz", "(missing)", "present"),
        ("model=c, region=us-east", "present", "(missing)"),
    }


def test_a_missing_column_is_a_difference() -> None:
    outcome = compare(REFERENCE.drop("p95_ttft_ms"), REFERENCE, KEYS)
    assert [(d.column, d.value) for d in outcome.differences] == [("p95_ttft_ms", "(missing)")]


def test_rollup_rule_percentiles_within_two_percent_in_well_populated_rows() -> None:
    near = frame([("a", "hz", 5000, 203.0), ("a", "sh", 10, 300.0), ("b", "hz", 3000, 0.0)])
    outcome = compare(near, REFERENCE, KEYS, ROLLUP)
    assert outcome.agrees  # 1.5% off where 5,000 requests; the 10-request row is not checked
    assert outcome.skipped == 1
    far = near.with_columns(pl.col("p95_ttft_ms") * 1.02)  # 3.5% off
    assert [d.key for d in compare(far, REFERENCE, KEYS, ROLLUP).differences] == [
        "model=a, region=hz"
    ]
    assert not compare(far, REFERENCE, KEYS, EXACT).agrees


# A p95 of 1,010 requests in a 5.8% gap between neighbouring requests (like the one of
# the data set ending at 08:00 UTC: 76.01 and 80.41 around h = 952.85 of 1,004 TTFTs):
# the order statistics around the rank h = 0.95 * 1009 = 958.55 are 76.0 and 80.4, and
# the exact value interpolates between them.
GAP = (76.0, 80.4)
GAP_EXACT = 76.0 + 0.55 * (80.4 - 76.0)  # 78.42


@pytest.mark.parametrize(
    ("estimate", "agrees"),
    [
        (80.3, True),  # next to the upper statistic, 2.4% above the exact value
        (75.0, True),  # 1.3% below the lower one, 4.4% below the exact value
        (76.0 * 0.97, False),  # 3% below the lower one
        (80.4 * 1.03, False),  # 3% above the upper one
    ],
)
def test_rollup_rule_holds_a_percentile_to_the_order_statistics_around_the_exact_value(
    estimate: float, agrees: bool
) -> None:
    reference = frame([("a", "sh", 1010, GAP_EXACT)])
    around = (frame([("a", "sh", 1010, GAP[0])]), frame([("a", "sh", 1010, GAP[1])]))
    answer = frame([("a", "sh", 1010, estimate)])
    outcome = compare(answer, reference, KEYS, ROLLUP, around)
    assert outcome.agrees is agrees
    assert outcome.compared == 2  # the count and the percentile
    if agrees:
        assert outcome.worst["p95_ttft_ms"] < 0.02
    else:
        [difference] = outcome.differences
        assert (difference.column, difference.reference) == ("p95_ttft_ms", GAP_EXACT)
        assert difference.check == "rel 0.02 of [76, 80.4] (rows >= 1,000 requests)"


def test_without_order_statistics_a_percentile_is_held_to_the_exact_value() -> None:
    reference = frame([("a", "sh", 1010, GAP_EXACT)])
    answer = frame([("a", "sh", 1010, 80.3)])
    assert not compare(answer, reference, KEYS, ROLLUP).agrees
    # nor does the exact rule take them
    around = (frame([("a", "sh", 1010, GAP[0])]), frame([("a", "sh", 1010, GAP[1])]))
    assert not compare(answer, reference, KEYS, EXACT, around).agrees


def test_rollup_rule_checks_a_tail_percentile_only_with_enough_requests_beyond_it() -> None:
    reference = REFERENCE.rename({"p95_ttft_ms": "p99_ttft_ms"})
    answer = reference.with_columns(pl.col("p99_ttft_ms") * 1.05)
    outcome = compare(answer, reference, KEYS, ROLLUP)
    # p99 needs 5,000 requests (50 beyond it): only the first row is checked
    assert [d.key for d in outcome.differences] == ["model=a, region=hz"]
    assert outcome.skipped == 2


def test_rollup_rule_counts_stay_exact_and_derived_figures_are_reported() -> None:
    reference = REFERENCE.with_columns(pl.lit(0.9).alias("compliance"))
    answer = reference.with_columns(pl.lit(0.8).alias("compliance"))
    outcome = compare(answer, reference, KEYS, ROLLUP)
    assert outcome.agrees
    assert outcome.unchecked["compliance"] == pytest.approx(0.1 / 0.9)
    miscounted = answer.with_columns(pl.col("count") + 1)
    assert {d.column for d in compare(miscounted, reference, KEYS, ROLLUP).differences} == {"count"}


def test_fault_parse() -> None:
    assert Fault.parse("chdb:drill-2:count") == Fault("chdb", "drill-2", "count")
    with pytest.raises(ValueError, match="BACKEND:QUESTION:COLUMN"):
        Fault.parse("chdb:drill-2")


def test_faulty_store_perturbs_only_its_question(tmp_path: Path) -> None:
    store = FaultyStore(open_store(f"duckdb://{tmp_path / 'f.duckdb'}"), Fault("duckdb", "q", "n"))
    try:
        sql = "SELECT 41 AS n, CAST(2 AS DOUBLE) AS x"
        assert store.query_arrow(sql).to_pylist() == [{"n": 41, "x": 2.0}]
        store.question = "q"
        assert store.query_arrow(sql).to_pylist() == [{"n": 42, "x": 2.0}]
        store.fault = Fault("duckdb", "q", "x")
        assert store.query_arrow(sql).column("x").to_pylist() == [pytest.approx(2.02)]
        assert store.hits == 2
        assert isinstance(store.query_arrow(sql), pa.Table)
    finally:
        store.close()
