"""The suite: the questions every backend answers, each the way a user would ask it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from warehouse.api import Warehouse
from warehouse.errors import InvalidArgument

__all__ = ["SUITE", "Question", "select"]

Ask = Callable[[Warehouse, datetime, datetime, bool | None], pl.DataFrame]


@dataclass(frozen=True)
class Question:
    """One question of the suite.

    ``keys`` identify a row (answers are compared row by row on them); ``rollup`` says
    whether a ClickHouse rollup may answer it when exact figures are not demanded.
    """

    name: str
    summary: str
    keys: tuple[str, ...]
    ask: Ask
    rollup: bool


SQL = (
    "SELECT model, count() AS requests, countIf(status = 'error') AS errors, "
    "sum(output_tokens) AS output_tokens, quantileExactInclusive(0.99)(ttft_ms) AS p99_ttft_ms, "
    "avg(e2e_ms) AS avg_e2e_ms FROM requests GROUP BY model ORDER BY model"
)

SUITE: tuple[Question, ...] = (
    Question(
        "sla",
        "SLA report: SLO chat-assistant by model and region",
        ("model", "region"),
        lambda wh, since, until, exact: wh.sla(
            "chat-assistant", by=["model", "region"], since=since, until=until, exact=exact
        ),
        rollup=True,
    ),
    Question(
        "drill-1",
        "drill by model: counts, p50/p95/p99 TTFT, p95 TPOT, averages, KV hits, tokens",
        ("model",),
        lambda wh, since, until, exact: wh.drill(
            by=["model"],
            measures=[
                "count",
                "error_rate",
                "p50_ttft_ms",
                "p95_ttft_ms",
                "p99_ttft_ms",
                "p95_tpot_ms",
                "avg_e2e_ms",
                "kv_hit_ratio",
                "decode_tps",
                "sum_output_tokens",
            ],
            since=since,
            until=until,
            exact=exact,
        ),
        rollup=True,
    ),
    Question(
        "drill-2",
        "drill by model x region: p95 TTFT, p99 E2E, attainment of TTFT <= 300 ms",
        ("model", "region"),
        lambda wh, since, until, exact: wh.drill(
            by=["model", "region"],
            measures=["count", "error_rate", "p95_ttft_ms", "p99_e2e_ms", "attainment"],
            thresholds={"ttft_ms": 300},
            since=since,
            until=until,
            exact=exact,
        ),
        rollup=True,
    ),
    Question(
        "drill-4",
        "drill by tenant x service x model x zone: p95 TTFT, error rate, rps",
        ("tenant", "service", "model", "zone"),
        lambda wh, since, until, exact: wh.drill(
            by=["tenant", "service", "model", "zone"],
            measures=["count", "error_rate", "rps", "p95_ttft_ms"],
            since=since,
            until=until,
            exact=exact,
        ),
        rollup=True,
    ),
    Question(
        "drill-raw",
        "drill by client_app where region = sh (a dimension no rollup keeps)",
        ("client_app",),
        lambda wh, since, until, exact: wh.drill(
            by=["client_app"],
            measures=["count", "error_rate", "p90_ttft_ms", "p99_tpot_ms"],
            filters={"region": "sh"},
            since=since,
            until=until,
            exact=exact,
        ),
        rollup=False,
    ),
    Question(
        "timeseries",
        "time series: count, error rate, p95 TTFT per 15 min by region",
        ("time", "region"),
        lambda wh, since, until, exact: wh.timeseries(
            ["count", "error_rate", "p95_ttft_ms"],
            by=["region"],
            interval="15m",
            since=since,
            until=until,
            exact=exact,
        ),
        rollup=True,
    ),
    Question(
        "root-cause",
        "root cause of chat-assistant's bad requests over every label dimension",
        ("dimension", "value"),
        lambda wh, since, until, exact: wh.root_cause(
            slo="chat-assistant", since=since, until=until, limit=None, exact=exact
        ),
        rollup=True,
    ),
    Question(
        "sql",
        "raw `sql`: count, errors, tokens, exact p99 TTFT, mean E2E by model",
        ("model",),
        lambda wh, since, until, exact: wh.sql(SQL),
        rollup=False,
    ),
)


def select(names: list[str] | None) -> tuple[Question, ...]:
    """The suite, or the questions named (in suite order); unknown names are an error."""
    if not names:
        return SUITE
    known = {q.name for q in SUITE}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InvalidArgument(
            f"unknown question(s) {', '.join(unknown)}: choose from {', '.join(sorted(known))}"
        )
    return tuple(q for q in SUITE if q.name in names)
