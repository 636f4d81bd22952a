"""The builder: SQL from registry pieces and placeholders, and the plan behind it.

What a question answers is tested on every store (tests/integration/query/test_drill.py);
here, what holds whatever the SQL's spelling: values travel as parameters, one pass per
latency's percentiles, the plan's choice of source, the errors of bad questions.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlglot
from sqlglot import exp

from warehouse import dialects
from warehouse.errors import QueryError
from warehouse.query.builder import Question, compile_question
from warehouse.query.timerange import time_range
from warehouse.store.base import Capabilities

CLICKHOUSE = Capabilities("clickhouse", *[True] * 8, array_join=True)
DUCKDB = Capabilities("duckdb", *[False] * 8)
HOURS = time_range("2026-11-30T00:00Z", "2026-11-30T02:00Z")
LATE = time_range("2026-11-30T01:47:12.5Z", "2026-11-30T02:00Z")


def compile(caps: Capabilities = CLICKHOUSE, **question):
    question.setdefault("range", HOURS)
    question.setdefault("measures", ["count"])
    return compile_question(Question(**question), caps, "llmwh")


def test_values_are_placeholders_never_sql_text():
    compiled = compile(
        filters={"tenant": "acme' OR 1=1 --", "region": ["hz", "sh"]},
        thresholds={"ttft_ms": 200},
        measures=["attainment"],
    )
    assert "acme" not in compiled.sql and "200" not in compiled.sql
    assert placeholders(dialects.parse(compiled.sql)) <= set(compiled.parameters)
    assert compiled.parameters["f0_0"] == "acme' OR 1=1 --"
    assert compiled.parameters["f1_1"] == "sh"
    duck = compile(
        DUCKDB,
        filters={"tenant": "acme' OR 1=1 --"},
        thresholds={"ttft_ms": 200},
        measures=["attainment"],
    )
    rendered = duck.render("duckdb")
    assert "acme" not in rendered
    assert placeholders(sqlglot.parse_one(rendered, read="duckdb")) <= set(duck.parameters)


def placeholders(tree: exp.Expr) -> set[str]:
    return {p.name for p in tree.find_all(exp.Placeholder)}


def test_percentiles_of_one_column_share_one_pass():
    compiled = compile(measures=["p50_ttft_ms", "p99_ttft_ms", "p95_e2e_ms"], exact=True)
    passes = [
        (f.name, tuple(c.name for c in f.args["params"]), tuple(e.name for e in f.expressions))
        for f in dialects.parse(compiled.sql).find_all(exp.ParameterizedAgg)
    ]
    # Each measure reads its level from its column's pass (ClickHouse shares identical
    # expressions), one pass per latency column.
    assert set(passes) == {
        ("quantilesExactInclusive", ("ttft_ms",), ("0.5", "0.99")),
        ("quantilesExactInclusive", ("e2e_ms",), ("0.95",)),
    }


@pytest.mark.parametrize(
    ("question", "source"),
    [
        ({}, "requests_sla_1h"),
        ({"by": ["model", "region"], "filters": {"tenant": "acme"}}, "requests_sla_1h"),
        ({"by": ["zone"]}, "requests_1h"),
        ({"filters": {"ab_group": "b"}}, "requests_1h"),
        ({"range": time_range("2026-11-30T00:05Z", "2026-11-30T02:00Z")}, "requests_1m"),
        # Whole hours, then whole minutes, from rollups; the ragged 30 s from raw rows.
        ({"range": time_range("2026-11-30T00:05:30Z", "2026-11-30T02:00Z")}, "requests_sla_1h"),
        ({"range": time_range("2026-11-30T00:05:30Z", "2026-11-30T00:05:50Z")}, "requests"),
        (
            {"by": ["zone"], "range": time_range("2026-11-30T00:05:30Z", "2026-11-30T02:00Z")},
            "requests",
        ),
        ({"interval": timedelta(minutes=5)}, "requests_1m"),
        ({"interval": timedelta(hours=2)}, "requests_sla_1h"),
        ({"interval": timedelta(seconds=30)}, "requests"),
        ({"by": ["node"]}, "requests"),
        ({"by": ["attrs['gpu']"]}, "requests"),
        ({"filters": {"error_class": "timeout"}}, "requests"),
        ({"measures": ["avg_prompt_tokens"]}, "requests"),
        ({"measures": ["attainment"], "thresholds": {"ttft_ms": 200}}, "requests_sla_1h"),
        ({"measures": ["attainment"], "thresholds": {"ttft_ms": 200, "e2e_ms": 900}}, "requests"),
        ({"measures": ["attainment"]}, "requests_sla_1h"),
        ({"measures": ["p95_ttft_ms"], "exact": True}, "requests"),
        ({"measures": ["p95_ttft_ms"], "exact": False}, "requests_sla_1h"),
    ],
)
def test_the_plan_reads_a_rollup_only_when_it_covers_the_question(question, source):
    assert compile(**question).plan.source == source
    assert compile(DUCKDB, **question).plan.source == "requests"


@pytest.mark.parametrize(
    ("question", "message"),
    [
        ({"measures": []}, "no measures"),
        ({"by": ["model", "model"]}, "asked twice"),
        ({"order_by": "p95_ttft_ms"}, "cannot order by"),
        ({"limit": 0}, "bad limit"),
        ({"filters": {"is_probe": "maybe"}}, "bad value"),
        ({"filters": {"http_status": "5xx"}}, "bad value"),
        ({"interval": timedelta(milliseconds=1500)}, "whole seconds"),
        ({"thresholds": {"ttft_ms": float("nan")}, "measures": ["attainment"]}, "positive"),
        ({"spans": [LATE], "interval": timedelta(minutes=5)}, "spans and interval"),
        ({"spans": [time_range("2026-11-30T01:00Z", "2026-11-30T03:00Z")]}, "not inside"),
    ],
)
def test_bad_questions_are_errors(question, message):
    with pytest.raises(QueryError, match=message):
        compile(**question)


def test_spans_are_answered_in_one_read_with_a_span_column_first():
    compiled = compile(spans=[LATE], measures=["count", "goodput_rps"], by=["model"])
    assert compiled.columns[:2] == ("span", "model")
    assert compiled.plan.source == "requests"  # the built-in rollups have no cuts
    with pytest.raises(QueryError, match="ClickHouse only"):
        compile(DUCKDB, spans=[LATE])
