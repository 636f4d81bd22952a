"""Copying a query's tree (warehouse.dialects.copy) and rendering one without changing it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types

from warehouse import dialects
from warehouse.dialects.nodes import _NODE_FIELDS
from warehouse.query.builder import Compiled, Question, compile_question
from warehouse.query.slo import load_slo
from warehouse.query.slo_rollup import SloRollup
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Capabilities
from warehouse.store.clickhouse import SERVER
from warehouse.store.duckdb import CAPABILITIES as DUCKDB

QUERY = """
SELECT model, /* the group */ quantileTDigest(0.95)(ttft_ms) AS p95,
       countIf(status >= 500) / nullIf(count(), 0) AS error_rate
FROM "llmwh".requests
WHERE ts >= fromUnixTimestamp64Milli({since_ms:Int64}, 'UTC') AND model IN ('a', 'b')
GROUP BY model
ORDER BY p95 DESC
LIMIT 10
"""


def nodes(tree: exp.Expr) -> list[exp.Expr]:
    return list(tree.walk())


def test_a_copy_is_the_same_tree_made_of_new_nodes() -> None:
    tree = dialects.parse(QUERY)
    copied = dialects.copy(tree)

    assert copied == tree
    assert copied.sql(dialect="clickhouse") == tree.sql(dialect="clickhouse")
    assert not {id(n) for n in nodes(copied)} & {id(n) for n in nodes(tree)}


def test_a_copy_links_each_node_to_its_parent_as_sqlglot_does() -> None:
    tree = dialects.parse(QUERY)
    ours, theirs = nodes(dialects.copy(tree)), nodes(tree.copy())

    assert [type(n) for n in ours] == [type(n) for n in theirs]
    for mine, reference in zip(ours, theirs, strict=True):
        assert (mine.arg_key, mine.index) == (reference.arg_key, reference.index)
        assert type(mine.parent) is type(reference.parent)
        assert mine.comments == reference.comments
    assert ours[0].parent is None
    assert all(n.parent is not None and n in n.parent.iter_expressions() for n in ours[1:])


def test_changing_a_copy_leaves_the_original_as_it_was() -> None:
    tree = dialects.parse(QUERY)
    before = tree.sql(dialect="clickhouse")
    copied = dialects.copy(tree)

    copied.find(exp.Column).set("this", exp.to_identifier("region"))
    copied.find(exp.Limit).set("expression", exp.Literal.number(5))

    assert tree.sql(dialect="clickhouse") == before
    assert copied.sql(dialect="clickhouse") != before


def test_types_and_comments_are_copied_not_shared() -> None:
    tree = annotate_types(dialects.parse(QUERY))
    copied = dialects.copy(tree)

    typed = [(a, b) for a, b in zip(nodes(tree), nodes(copied), strict=True) if a._type]
    assert typed
    assert all(b._type == a._type and b._type is not a._type for a, b in typed)
    commented = [(a, b) for a, b in zip(nodes(tree), nodes(copied), strict=True) if a.comments]
    assert commented
    assert all(b.comments == a.comments and b.comments is not a.comments for a, b in commented)


def test_a_node_holds_nothing_the_copy_leaves_out() -> None:
    """The copy sets each field of a node by name: a sqlglot that adds one fails here."""
    tree = annotate_types(dialects.parse(QUERY))
    tree.meta["marked"] = True
    held = set().union(*(vars(n) for n in nodes(tree)))

    assert held <= _NODE_FIELDS
    assert dialects.copy(tree).meta == {"marked": True}


END = datetime(2026, 12, 4, 17, 41, 23, 417000, tzinfo=UTC)
"""Mid-second: a rollup answers in pieces, whole hours down to raw rows."""


def drill(capabilities: Capabilities) -> Compiled:
    question = Question(
        ["p95_ttft_ms", "error_rate", "count"],
        TimeRange(END - timedelta(hours=6), END),
        by=["model", "region"],
        filters={"model": ["llama-3-70b", "qwen-2.5-72b"]},
    )
    return compile_question(question, capabilities, "llmwh")


def timeseries(capabilities: Capabilities) -> Compiled:
    question = Question(
        ["p99_e2e_ms", "rps", "attainment"],
        TimeRange(END - timedelta(days=2), END),
        by=["region"],
        interval=timedelta(minutes=15),
        thresholds={"ttft_ms": 300.0},
    )
    return compile_question(question, capabilities, "llmwh")


def slo_question(name: str) -> Compiled:
    slo = load_slo(name)
    question = Question(
        list(slo.measures),
        TimeRange(END - timedelta(days=7, seconds=41.2), END),
        filters=dict(slo.scope),
        thresholds={k: float(v) for k, v in slo.thresholds.items()},
    )
    return compile_question(question, SERVER, "llmwh", [SloRollup(slo).source(SERVER)])


QUESTIONS = {
    "drill on ClickHouse": (lambda: drill(SERVER), "clickhouse"),
    "drill on DuckDB": (lambda: drill(DUCKDB), "duckdb"),
    "time series on ClickHouse": (lambda: timeseries(SERVER), "clickhouse"),
    "time series on DuckDB": (lambda: timeseries(DUCKDB), "duckdb"),
    **{
        f"SLO {name}": (lambda name=name: slo_question(name), "clickhouse")
        for name in ("chat-assistant", "code-completion", "batch-summarization")
    },
}


@pytest.mark.parametrize("name", QUESTIONS)
def test_rendering_a_question_leaves_its_tree_as_it_was(name: str) -> None:
    """ClickHouse's generator renders the builder's tree itself (no copy): it must not
    change it, or a shape's cached tree would drift from what it first rendered."""
    compile, dialect = QUESTIONS[name]
    compiled = compile()
    trees = [compiled.tree]
    if compiled.fallback is not None:
        trees.append(compiled.fallback().tree)

    for tree in trees:
        before = dialects.copy(tree)
        first = dialects.render(tree, dialect)

        assert tree == before
        assert dialects.render(tree, dialect) == first


def test_a_tree_deeper_than_pythons_recursion_limit_is_copied() -> None:
    """A tenant's SQL of two thousand ORs parses as a chain that deep."""
    tree = dialects.parse("SELECT 1 FROM t WHERE " + " OR ".join(f"x = {i}" for i in range(2000)))

    copied = dialects.copy(tree)

    assert copied == tree
    assert sum(1 for _ in copied.walk()) == sum(1 for _ in tree.walk())
