"""Adding a measure is one edit: a formula in the registry, and every target answers it.

The entry here, ``ok_share`` (the share of requests that succeeded), exists only in
this test. With nothing else changed it is answered on every store from raw rows, from
the built-in rollups (ClickHouse), in the client merge of a range read in pieces, and
in a Grafana panel whose SQL the server runs after the plugin's expansion.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow as pa
import pytest
from grafana_macros import QueryContext, interpolate

from warehouse.errors import QueryError
from warehouse.query import local_merge, registry
from warehouse.query.builder import Question, compile_question
from warehouse.query.grafana import PanelQuestion, render
from warehouse.query.run import ask
from warehouse.query.timerange import TimeRange
from warehouse.store import Store
from warehouse.synthetic import synthetic_requests

START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
END = START + timedelta(hours=3)
RAGGED = TimeRange(START + timedelta(minutes=7, seconds=13.5), END - timedelta(seconds=41))

OK_SHARE = "(requests - errors - rejections) / nullIf(requests, 0)"
"""One formula over aggregates of requests (warehouse/aggregates.py): read over raw rows
and over rollup rows alike."""


@pytest.fixture(autouse=True)
def ok_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.MEASURES, "ok_share", OK_SHARE)


@pytest.fixture(scope="module")
def requests_table() -> pa.Table:
    return synthetic_requests(30_000, seed=11, start=START, span=END - START)


@pytest.fixture(scope="module")
def store(module_migrated: Store, requests_table: pa.Table) -> Iterator[Store]:
    module_migrated.insert_arrow("requests", requests_table)
    yield module_migrated


def expected(table: pa.Table, since: datetime, until: datetime) -> dict[str, float]:
    """ok / all of the valid requests in ``[since, until)``, per model (numpy)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    picked = frame.filter(~pl.col("is_probe") & (pl.col("ts") >= since) & (pl.col("ts") < until))
    shares = picked.group_by("model").agg((pl.col("status") == "ok").mean().alias("share"))
    return dict(zip(shares["model"], shares["share"], strict=True))


def shares(frame: pl.DataFrame) -> dict[str, float]:
    return dict(zip(frame["model"], frame["ok_share"], strict=True))


def test_a_new_measure_is_answered_from_raw_rows_on_every_store(store, requests_table):
    want = expected(requests_table, RAGGED.since, RAGGED.until)
    got = ask(store, Question(["ok_share"], RAGGED, by=["model"], exact=True))
    assert got.plan.source == "requests"
    assert shares(got) == pytest.approx(want, rel=1e-12)


def test_a_new_measure_is_answered_from_rollups_where_they_keep_what_it_reads(
    store, requests_table
):
    """Whole hours from the hourly rollup, whole minutes from the minute one, the
    ragged ends from raw rows: the same shares as the raw rows give."""
    want = expected(requests_table, RAGGED.since, RAGGED.until)
    got = ask(store, Question(["ok_share"], RAGGED, by=["model"]))
    assert got.plan.rollup == store.capabilities.materialized_views
    assert shares(got) == pytest.approx(want, rel=1e-12)
    hours = TimeRange(START, END)
    whole = ask(store, Question(["ok_share"], hours, by=["model"]))
    assert whole.plan.rollup == store.capabilities.materialized_views
    assert shares(whole) == pytest.approx(expected(requests_table, START, END), rel=1e-12)


def test_a_new_measure_is_merged_in_the_client_from_rollup_rows():
    """The client merge walks the measure's rollup tree into a polars aggregate."""
    tree = registry.measure("ok_share").tree(rollup=True)
    rows = pl.DataFrame(
        {"requests": [10, 5, 1], "errors": [1, 0, 1], "rejections": [2, 0, 0]},
        schema={"requests": pl.UInt64, "errors": pl.UInt64, "rejections": pl.UInt64},
    )
    found = rows.select(local_merge.aggregate(tree)).item()
    assert found == pytest.approx((16 - 2 - 2) / 16)


def test_a_new_measure_is_a_grafana_panel_that_answers_as_the_api_does(store, requests_table):
    if not store.capabilities.materialized_views:
        pytest.skip("Grafana panels run on ClickHouse: DuckDB has no Grafana data source")
    question = PanelQuestion(["ok_share"], by=("model",))
    rendered = render(question)
    sql = interpolate(rendered.sql, {}, QueryContext(RAGGED.since, RAGGED.until, 60))
    shown = pl.from_arrow(store.query_arrow(sql))
    assert isinstance(shown, pl.DataFrame)
    want = expected(requests_table, RAGGED.since, RAGGED.until)
    assert shares(shown) == pytest.approx(want, rel=1e-12)
    plan = compile_question(
        question.question(RAGGED, timedelta(minutes=1), {}), store.capabilities, store.database
    ).plan
    assert rendered.plan.rollup and plan.rollup


def test_without_its_entry_the_measure_is_unknown(monkeypatch):
    monkeypatch.delitem(registry.MEASURES, "ok_share")
    with pytest.raises(QueryError, match="unknown measure 'ok_share'"):
        registry.measure("ok_share")
