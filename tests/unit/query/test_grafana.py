"""The query builder's Grafana target: a panel's question as SQL with macros and variables.

What the SQL answers is tested on a real server with the plugin's expansion, against the
Python API (tests/integration/test_grafana_dashboards.py); here, how it is written.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from warehouse.errors import QueryError
from warehouse.query.grafana import PanelQuestion, render
from warehouse.query.sla import burn_rate

BOUND = re.compile(r"\{\w+:\w+\}")


def test_a_rollup_question_reads_hours_minutes_and_raw_ends_cut_at_the_range_ends():
    rendered = render(PanelQuestion(["count", "p95_ttft_ms"], by=("model",)))
    assert [table for table, _ in rendered.plan.pieces] == [
        "requests_sla_1h",
        "requests_1m",
        "requests_1m",
        "requests",
        "requests",
    ]
    sql = rendered.sql
    assert sql.startswith(
        "WITH (toUnixTimestamp64Milli($__toTime_ms)) AS to_ms, "
        "(toUnixTimestamp64Milli($__fromTime_ms)) AS from_ms, "
    )
    for cut in ("minutes_from_ms", "minutes_to_ms", "hours_from_ms", "hours_to_ms"):
        assert f"AS {cut}" in sql and f"fromUnixTimestamp64Milli({cut}, 'UTC')" in sql
    assert not BOUND.search(sql), "every bound value is replaced"
    assert "sumMap(arrayMap(k -> intDiv(k, 2), mapKeys(ttft_ms_hist))" in sql  # p95 in SQL
    assert "grafana_default_database" not in sql and "FROM requests_1m " in sql


def test_a_raw_question_defines_only_the_range_ends():
    rendered = render(PanelQuestion(["p95_ttft_ms"], by=("client_app",)))
    assert not rendered.plan.rollup
    assert rendered.sql.startswith(
        "WITH (toUnixTimestamp64Milli($__toTime_ms)) AS to_ms, "
        "(toUnixTimestamp64Milli($__fromTime_ms)) AS from_ms SELECT "
    )
    assert "quantilesExactInclusive(0.95)(ttft_ms)" in rendered.sql


def test_filters_thresholds_and_buckets_become_macros_and_variables():
    sql = render(
        PanelQuestion(
            ["attainment", "rps"],
            filters=("tenant", "model"),
            thresholds={"ttft_ms": "ttft_ms", "tpot_ms": "tpot_limit"},
            timeseries=True,
        )
    ).sql
    assert "$__conditionalAll(tenant IN (${tenant}), $tenant)" in sql
    assert "$__conditionalAll(model IN (${model}), $model)" in sql
    assert "ttft_ms <= ${ttft_ms}" in sql and "tpot_ms <= ${tpot_limit}" in sql
    assert "$__timeInterval(ts) AS time" in sql
    assert "count() / $__interval_s" in sql
    assert not BOUND.search(sql)


def test_a_rate_without_buckets_divides_by_the_range_length():
    sql = render(PanelQuestion(["rps"])).sql
    assert "((to_ms - from_ms) / 1000)" in sql


def test_fixed_filter_values_are_quoted_literals():
    sql = render(PanelQuestion(["count"], fixed={"error_class": ["it's"]})).sql
    assert "error_class IN ('it''s')" in sql


def test_a_window_ends_at_the_end_of_the_range():
    rendered = render(PanelQuestion(["attainment"], window=timedelta(hours=1)))
    assert "(to_ms - 3600000) AS from_ms" in rendered.sql


def test_derived_columns_are_written_from_the_same_formula():
    sql = render(
        PanelQuestion(
            ["attainment"],
            derived={"burn": lambda col, var: burn_rate(col("attainment"), 1 - var("target"))},
        )
    ).sql
    assert '(1 - attainment) / (1 - $target) AS "burn"' in sql


def test_grouping_by_a_variable_needs_a_plan_that_does_not_depend_on_it():
    raw = render(PanelQuestion(["count"], filters=("node",), by_variable="group_by")).sql
    assert '${group_by} AS "${group_by}"' in raw and 'GROUP BY "${group_by}"' in raw
    with pytest.raises(QueryError, match="must read raw rows"):
        render(PanelQuestion(["count"], by_variable="group_by"))


def test_a_variable_filters_text_columns_only():
    with pytest.raises(QueryError, match="plain text columns"):
        render(PanelQuestion(["count"], filters=("http_status",)))


def test_a_window_whose_cuts_meet_in_the_template_is_written_from_another():
    """A 71-minute window ending at the template's end starts a minute before an hour,
    where its first whole minute and first whole hour are one moment."""
    rendered = render(PanelQuestion(["count"], window=timedelta(hours=1, minutes=11)))
    assert rendered.plan.rollup
    assert "(to_ms - 4260000) AS from_ms" in rendered.sql
