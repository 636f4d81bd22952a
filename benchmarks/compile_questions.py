"""What compiling and rendering a question costs, before any store is asked.

    python benchmarks/compile_questions.py [--repeat 200]

Three kinds of question, each compiled by the query builder and rendered for its
target, timed per question (the median of ``--repeat`` rounds, after a warm-up):

* ``drill``: `llmwh drill`'s question (p95 TTFT, error rate, count by model and region,
  one model filtered) from raw rows, rendered for ClickHouse and for DuckDB;
* ``sla``: the measures of each shipped SLO's objectives over 7 days with ragged ends,
  answered from its rollup (whole hours, minutes and seconds and raw rows, merged in
  the client), rendered for ClickHouse;
* ``grafana``: every panel of the shipped dashboards that is a question, rendered for
  Grafana's ClickHouse data source.

The budget (docs/benchmarks.md): at most 2 ms a question on the project's 2-core
machine. The script prints each kind's median and worst, and exits non-zero when a
median is over ``--budget-ms``.

``--cold`` forgets the builder's shapes and the rendered panels before each call, so
that each is timed as the first question of its shape (the builder builds and renders
a tree once per shape, then binds values into its text; a panel, which binds nothing,
is rendered once).

``--from-trees`` times instead what rendering each question's SQL from a sqlglot tree
costs (the tree parsed once beforehand, only ``tree.sql(dialect)`` timed, and the SQL
path's fallback of a client merge too): the least a builder that composes trees pays
per question unless it keeps rendered text, for the question of whether a tree-built
builder fits the budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import sqlglot

from warehouse import dialects
from warehouse.exporters import grafana_dashboards
from warehouse.query import grafana
from warehouse.query.builder import Compiled, Question, compile_question, forget_shapes
from warehouse.query.slo import SLO, load_slo
from warehouse.query.slo_rollup import SloRollup
from warehouse.query.timerange import TimeRange
from warehouse.store.clickhouse import SERVER
from warehouse.store.duckdb import CAPABILITIES as DUCKDB

SHIPPED_SLOS = ("chat-assistant", "code-completion", "batch-summarization")
END = datetime(2026, 12, 4, 17, 41, 23, 417000, tzinfo=UTC)
"""Mid-second, so that a rollup answers in pieces down to raw rows."""


def timed(work: Callable[[], object], repeat: int) -> float:
    """The median seconds of one call of ``work`` over ``repeat`` calls, after a warm-up."""
    for _ in range(3):
        work()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def drill(dialect: str) -> Callable[[], str]:
    question = Question(
        ["p95_ttft_ms", "error_rate", "count"],
        TimeRange(END - timedelta(hours=6), END),
        by=["model", "region"],
        filters={"model": "llama-3-70b"},
    )
    capabilities = SERVER if dialect == "clickhouse" else DUCKDB
    return lambda: compile_question(question, capabilities, "llmwh").render(dialect)


def sla(slo: SLO) -> Callable[[], str]:
    rollup = SloRollup(slo)
    question = Question(
        list(slo.measures),
        TimeRange(END - timedelta(days=7, seconds=41.2), END),
        filters=dict(slo.scope),
        thresholds={k: float(v) for k, v in slo.thresholds.items()},
    )
    source = rollup.source(SERVER)
    SLA_COMPILED[slo.name] = compile_question(question, SERVER, "llmwh", [source])
    return lambda: compile_question(question, SERVER, "llmwh", [source]).render("clickhouse")


SLA_COMPILED: dict[str, Compiled] = {}
"""Each SLO's question compiled, for its fallback SQL (``--from-trees``)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--budget-ms", type=float, default=2.0)
    parser.add_argument("--from-trees", action="store_true", help="time rendering from trees")
    parser.add_argument("--cold", action="store_true", help="each call the first of its shape")
    args = parser.parse_args()

    kinds: dict[str, dict[str, Callable[[], str]]] = {
        "drill": {"clickhouse": drill("clickhouse"), "duckdb": drill("duckdb")},
        "sla": {name: sla(load_slo(name)) for name in SHIPPED_SLOS},
        "grafana": {
            f"panel {i}: {', '.join(question.measures)}": (lambda q=question: grafana.render(q).sql)
            for i, question in enumerate(grafana_dashboards.questions().values(), start=1)
        },
    }
    if args.cold:
        kinds = {kind: {n: cold(w) for n, w in works.items()} for kind, works in kinds.items()}
    if args.from_trees:
        # A panel's SQL holds Grafana's macros, which sqlglot does not read: its
        # builder SQL is a drill's or an SLO question's, timed above.
        del kinds["grafana"]
        kinds = {kind: from_trees(kind, works) for kind, works in kinds.items()}
    over = False
    print(f"{'kind':<8} {'questions':>9} {'median ms':>10} {'worst ms':>9}  worst")
    for kind, works in kinds.items():
        each = {name: timed(work, args.repeat) * 1000 for name, work in works.items()}
        worst = max(each, key=each.__getitem__)
        median = statistics.median(each.values())
        over |= median > args.budget_ms
        label = worst if len(worst) <= 48 else worst[:45] + "..."
        print(f"{kind:<8} {len(each):>9} {median:>10.3f} {each[worst]:>9.3f}  {label}")
    if over:
        print(f"a median is over the budget of {args.budget_ms} ms a question", file=sys.stderr)
    return 1 if over else 0


def cold(work: Callable[[], str]) -> Callable[[], str]:
    def first_of_its_shape() -> str:
        forget_shapes()
        grafana.forget_panels()
        return work()

    return first_of_its_shape


def from_trees(kind: str, works: dict[str, Callable[[], str]]) -> dict[str, Callable[[], str]]:
    """Each question's rendering from its tree, for its target: ``works`` compiled once,
    parsed once; the SLO questions' fallback SQL (merged by ClickHouse) as questions too."""
    rendered: dict[str, Callable[[], str]] = {}
    for name, work in works.items():
        target = "duckdb" if name == "duckdb" else "clickhouse"
        texts = {name: work()}
        if kind == "sla":
            compiled = SLA_COMPILED[name]
            if compiled.fallback is not None:
                texts[f"{name} fallback"] = compiled.fallback().sql
        dialect = dialects.dialect_for(target)
        for label, text in texts.items():
            tree = sqlglot.parse_one(text, read=dialect)
            rendered[label] = lambda t=tree, d=dialect: t.sql(dialect=d)
    return rendered


if __name__ == "__main__":
    sys.exit(main())
