"""An SLO compiled into a rollup answers the SLA report exactly as raw rows do.

Every figure that is a count or decided by one (counts, attainment, compliance, burn
rates, budget, whether each objective holds) must equal the raw computation exactly,
for ranges that start and end mid-minute (the rollup's whole minutes plus raw rows for
the ragged ends).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow.compute as pc
import pytest
from days import at
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from warehouse import dialects
from warehouse.aggregates import BUILT_IN, rollup_columns
from warehouse.api import Warehouse
from warehouse.cli import app
from warehouse.query import local_merge, run, slo_apply, trees
from warehouse.query.builder import Question, compile_question
from warehouse.query.rollup_rows import bucket_rows, request_rows
from warehouse.query.run import ask
from warehouse.query.slo import load_slo, parse_slo
from warehouse.query.slo_rollup import SloRollup
from warehouse.query.timerange import TimeRange
from warehouse.store.rollup_columns import REQUEST_COLUMN_TYPES
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.incidents import Incident

START = at(8)
SPAN = timedelta(hours=2)

ON_CLICKHOUSE = pytest.mark.parametrize("store", ["clickhouse", "chdb"], indirect=True)
"""Materialized rollups are ClickHouse's; on DuckDB an SLO's rollup is a view (minutes
only, no histograms), which answers the same questions with the same figures."""

EXACT = ["count", "attainment", "goodput_rps", "budget_remaining", "compliance", "windows"]


@pytest.fixture(scope="module")
def traffic():
    return synthetic_requests(
        30_000,
        seed=17,
        start=START,
        span=SPAN,
        incidents=[
            Incident("zone-ttft", at=0.3, length=0.2),
            Incident("tenant-errors", at=0.6, length=0.1),
        ],
    )


@pytest.fixture
def loaded(migrated, traffic) -> Warehouse:
    warehouse = Warehouse(migrated)
    warehouse.insert_requests(traffic)
    return warehouse


def both(wh: Warehouse, slo, **kw) -> tuple[pl.DataFrame, pl.DataFrame]:
    fast = wh.sla(slo, **kw)
    raw = wh.sla(slo, exact=True, **kw)
    return fast, raw


def reads(result, table: str) -> bool:
    """Whether any question behind ``result`` read the rollup ``table`` (any grain)."""
    plans = [result.plan, *result.parts.values()]
    read = {t for plan in plans for t, _ in plan.pieces or ((plan.source, None),)}
    return any(t == table or t.startswith(f"{table}_") for t in read)


def on_duckdb(wh: Warehouse) -> bool:
    return wh.store.capabilities.dialect == "duckdb"


def assert_same_figures(fast: pl.DataFrame, raw: pl.DataFrame, by: list[str]) -> None:
    assert fast.height == raw.height > 0
    fast, raw = fast.sort(by or "count"), raw.sort(by or "count")
    decided = [c for c in raw.columns if c.endswith("_ok") or c.startswith("burn_rate_")]
    for column in [*by, *EXACT, *decided, "score"]:
        assert fast[column].to_list() == raw[column].to_list(), column


@pytest.mark.parametrize("name", ["chat-assistant", "code-completion", "batch-summarization"])
def test_the_report_from_an_slos_rollup_equals_the_raw_report(loaded, name):
    slo = load_slo(name)
    [applied] = slo_apply.apply(loaded.store, [slo])
    assert applied.action == "built"
    since = START + timedelta(minutes=7, seconds=37, milliseconds=250)
    until = START + SPAN - timedelta(minutes=3, seconds=11, milliseconds=600)
    for by in ([], ["model"], ["region", "tenant"]):
        fast, raw = both(loaded, name, since=since, until=until, by=by, filters={})
        assert reads(fast, applied.table) and not reads(raw, applied.table)
        assert_same_figures(fast, raw, by)
    if on_duckdb(loaded):  # the view's whole minutes and raw ends; no histograms
        assert fast.parts["windows"].pieces[0][0] == applied.table
    elif name == "chat-assistant":
        report = loaded.sla(name, since=since, until=until)
        t = applied.table
        # The windows' question reads whole 5-minute windows of totals only.
        whole = TimeRange(START + timedelta(minutes=10), START + timedelta(minutes=115))
        assert report.parts["windows"].pieces == ((f"{t}_5m_total", whole),)
        # The period, its burn windows and the partial windows at its ends in one read,
        # cut where the 1h and 5m burn windows start (mid-second too) and where the whole
        # windows start and end: whole minutes and seconds of totals, and raw rows only
        # for the second around each cut.
        assert (
            f"source: {t}_total [08:08, 08:56) and [08:57, 09:51) and [09:52, 09:56) + "
            f"{t}_1s_total [08:07:38, 08:08) and [08:56, 08:56:48) and [08:56:49, 08:57) and "
            "[09:51, 09:51:48) and [09:51:49, 09:52) and [09:56, 09:56:48) + raw requests "
            "[08:07:37.250, 08:07:38) and [08:56:48, 08:56:49) and [09:51:48, 09:51:49) and "
            "[09:56:48, 09:56:48.400)"
        ) in report.plan.describe()
        assert report.parts["windows at the ends"] is report.plan
        assert report.parts["burn 1h"] is report.plan


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (timedelta(minutes=21, seconds=10), timedelta(minutes=23, seconds=20.5)),  # in one
        (timedelta(minutes=23, seconds=10), timedelta(minutes=26, seconds=20.5)),  # two
        (timedelta(minutes=20), timedelta(minutes=27, seconds=20.5)),  # one whole, one not
    ],
    ids=["inside-one-window", "two-partial-windows", "whole-then-partial"],
)
def test_ranges_with_few_or_no_whole_windows_report_what_raw_rows_do(loaded, since, until):
    slo_apply.apply(loaded.store, [load_slo("chat-assistant")])
    kw = {"since": START + since, "until": START + until, "filters": {}}
    for by in ([], ["model"]):
        fast, raw = both(loaded, "chat-assistant", by=by, **kw)
        assert_same_figures(fast, raw, by)
        assert fast["windows"].to_list() == raw["windows"].to_list()


def test_a_requests_written_after_apply_reach_the_rollup_once(loaded, traffic):
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    later = synthetic_requests(5_000, seed=18, start=START, span=SPAN)
    loaded.insert_requests(later)
    fast, raw = both(loaded, "chat-assistant", since=START, until=START + SPAN, filters={})
    assert_same_figures(fast, raw, [])
    everything = raw["count"][0]  # all the requests lie in the range
    # Mid-minute ends too: read from its table of requests, which its view keeps filled.
    ragged = {
        "since": START + timedelta(seconds=41.5),
        "until": START + SPAN - timedelta(seconds=9),
    }
    fast, raw = both(loaded, "chat-assistant", filters={}, **ragged)
    if not on_duckdb(loaded):  # there the period asks percentile values: raw rows
        assert fast.plan.pieces[-1][0] == "requests"
    assert_same_figures(fast, raw, [])
    assert slo_apply.apply(loaded.store, [slo])[0].action == "up to date"
    if not on_duckdb(loaded):  # every table of totals, the seconds' too, counts each once
        db = loaded.store.database
        counted = {
            table: loaded.store.query_arrow(f"SELECT sum(requests) AS n FROM {db}.{table}")
            .column("n")[0]
            .as_py()
            for _, table in SloRollup(slo).totals
        }
        assert counted == dict.fromkeys(counted, everything)


def test_new_thresholds_are_a_new_version_and_the_old_one_goes_once_it_is_complete(
    loaded, tmp_path
):
    text = Path(load_slo("chat-assistant").source).read_text()
    tighter = text.replace("ttft_ms = 300", "ttft_ms = 250")
    first, second = parse_slo(text, source="chat.toml"), parse_slo(tighter, source="chat.toml")
    old = slo_apply.apply(loaded.store, [first])[0]
    new = slo_apply.apply(loaded.store, [second])[0]
    assert new.table != old.table and new.dropped == (old.table,)
    listed = slo_apply.status(loaded.store)
    assert listed["table"].to_list() == [new.table]
    state = "view" if on_duckdb(loaded) else "complete"
    assert listed["state"].to_list() == [state] and listed["rows"][0] > 0
    assert SloRollup(second).version in listed["version"].to_list()
    path = tmp_path / "chat.toml"
    path.write_text(tighter)
    fast, raw = both(loaded, str(path), since=START, until=START + SPAN, filters={})
    assert reads(fast, new.table) and not reads(fast, old.table)
    if not on_duckdb(loaded):
        assert fast.plan.source == f"{new.table}_1h_total"  # whole hours, the whole scope
        left = loaded.store.query_arrow(
            "SELECT name FROM system.tables WHERE database = {db:String} "
            "AND startsWith(name, {old:String})",
            {"db": loaded.store.database, "old": old.table},
        )
        assert left.num_rows == 0  # its views, totals and table of requests too
    assert_same_figures(fast, raw, [])


def test_questions_the_rollup_does_not_cover_read_raw_rows(loaded):
    [applied] = slo_apply.apply(loaded.store, [load_slo("chat-assistant")])
    kw = {"since": START, "until": START + SPAN}
    assert not reads(loaded.sla("chat-assistant", by=["zone"], **kw), applied.table)
    assert not reads(
        loaded.sla("chat-assistant", filters={"client_app": "web"}, **kw), applied.table
    )
    narrowed = loaded.sla("chat-assistant", filters={"model": "llama-3-70b"}, **kw)
    assert reads(narrowed, applied.table)


def test_the_cli_applies_lists_and_reads_an_slos_rollup(loaded, monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("LLMWH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    url = loaded.store.url

    def run(*args: str) -> str:
        result = CliRunner().invoke(app, [*args, "--store", url])
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        return result.stdout if "json" in args else result.stdout + result.stderr

    said = run("slo", "apply", "--slo", "chat-assistant")
    table = SloRollup(load_slo("chat-assistant")).table
    assert f"chat-assistant: {table}: built" in said
    assert "up to date" in run("slo", "apply", "--slo", "chat-assistant")
    [listed] = json.loads(run("slo", "status", "--format", "json"))
    assert listed["table"] == table and listed["rows"] > 0
    if on_duckdb(loaded):
        assert listed["state"] == "view" and listed["lag_seconds"] == 0
        return
    assert listed["state"] == "complete"
    since = f"{START + timedelta(seconds=30):%Y-%m-%dT%H:%M:%SZ}"
    until = f"{START + SPAN:%Y-%m-%dT%H:%M:%SZ}"
    report = run("sla", "--slo", "chat-assistant", "--since", since, "--until", until)
    said = " ".join(report.split())
    # Whole windows from their totals; the partial one at the start, the burn windows
    # and the period in one read.
    assert f"windows: source: rollup {table}_5m_total (the rollup of SLO chat-assistant)" in said
    assert (
        "period, windows at the ends, burn 5m, burn 1h, burn 6h: source: "
        f"{table}_total [08:01, 10:00) + {table}_1s_total [08:00:30, 08:01) "
        "(the rollup of SLO chat-assistant)"
    ) in said


@ON_CLICKHOUSE
def test_a_rollup_without_its_view_is_building_lags_and_is_rebuilt_whole(loaded, traffic):
    slo = load_slo("chat-assistant")
    [applied] = slo_apply.apply(loaded.store, [slo])
    assert slo_apply.status(loaded.store)["lag_seconds"].to_list() == [0.0]
    loaded.store.command(f"DROP VIEW {loaded.store.database}.{applied.table}_mv SYNC")
    later = synthetic_requests(200, seed=19, start=START + SPAN + timedelta(minutes=10))
    loaded.insert_requests(later.filter(pc.equal(later.column("service"), "chat")))
    [row] = slo_apply.status(loaded.store).iter_rows(named=True)
    assert row["state"] == "building" and row["lag_seconds"] >= 600
    assert slo_apply.find(loaded.store, slo) is None  # sla reads raw rows meanwhile
    assert slo_apply.apply(loaded.store, [slo])[0].action == "built"
    until = START + SPAN + timedelta(hours=2)
    fast, raw = both(loaded, "chat-assistant", since=START, until=until, filters={})
    assert fast.plan.source == f"{applied.table}_1h_total"
    assert_same_figures(fast, raw, [])


@pytest.mark.parametrize("store", ["clickhouse"], indirect=True)
def test_a_rollup_found_before_is_checked_beside_the_questions_and_left_once_it_is_gone(
    loaded, monkeypatch
):
    # A store that takes concurrent queries asks whether a rollup it found complete
    # still is beside the report's questions: a rebuild or a drop since sends the report
    # back to raw rows, with the same figures.
    slo = load_slo("chat-assistant")
    [applied] = slo_apply.apply(loaded.store, [slo])
    db = loaded.store.database
    kw = {"since": START + timedelta(minutes=7, seconds=13), "until": START + SPAN, "filters": {}}
    raw = loaded.sla("chat-assistant", exact=True, **kw)
    assert reads(loaded.sla("chat-assistant", **kw), applied.table)
    assert slo_apply.found_before(loaded.store, slo) is not None
    checked: list[str] = []
    still_complete = slo_apply.still_complete

    def on_which_thread(store, rollup):
        checked.append(threading.current_thread().name)
        return still_complete(store, rollup)

    monkeypatch.setattr(slo_apply, "still_complete", on_which_thread)
    monkeypatch.setattr(slo_apply, "find", lambda *a: pytest.fail("asked before the questions"))
    again = loaded.sla("chat-assistant", **kw)
    assert reads(again, applied.table) and checked[0].startswith("llmwh-query")
    assert_same_figures(again, raw, [])
    monkeypatch.undo()

    loaded.store.command(f"DROP VIEW {db}.{applied.table}_mv SYNC")  # a rebuild began
    building = loaded.sla("chat-assistant", **kw)
    assert not reads(building, applied.table)
    assert_same_figures(building, raw, [])
    assert slo_apply.found_before(loaded.store, slo) is None

    assert slo_apply.apply(loaded.store, [slo])[0].action == "built"
    assert reads(loaded.sla("chat-assistant", **kw), applied.table)
    tables = SloRollup(slo).tables
    for name in [*(f"{t}_mv" for t in tables), *tables]:  # dropped whole, views first
        loaded.store.command(f"DROP TABLE IF EXISTS {db}.{name} SYNC")
    gone = loaded.sla("chat-assistant", **kw)  # its questions failed: no such table
    assert not reads(gone, applied.table)
    assert_same_figures(gone, raw, [])


@ON_CLICKHOUSE
def test_its_totals_keep_compact_parts_and_a_quiet_partition_becomes_one_part(loaded):
    # A report's cut reads every part of each partition it touches: the totals are kept
    # in few, compact parts (one file each), a day of seconds or a month of coarser rows
    # to a partition.
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    for grain, table in SloRollup(slo).totals:
        [found] = loaded.store.query_arrow(
            "SELECT partition_key, engine_full FROM system.tables "
            "WHERE database = {db:String} AND name = {name:String}",
            {"db": loaded.store.database, "name": table},
        ).to_pylist()
        assert found["partition_key"] == (
            "toDate(ts)" if grain.total_seconds() < 60 else "toYYYYMM(ts)"
        )
        assert "min_age_to_force_merge_seconds = 60" in found["engine_full"]
        assert "min_age_to_force_merge_on_partition_only = 1" in found["engine_full"]
        assert "min_bytes_for_wide_part = 1073741824" in found["engine_full"]
        kinds = (
            loaded.store.query_arrow(
                "SELECT DISTINCT part_type FROM system.parts WHERE database = {db:String} "
                "AND table = {name:String} AND active",
                {"db": loaded.store.database, "name": table},
            )
            .column("part_type")
            .to_pylist()
        )
        assert kinds == ["Compact"]


def test_root_cause_over_the_slos_dimensions_reads_its_rollup_and_agrees(loaded):
    [applied] = slo_apply.apply(loaded.store, [load_slo("chat-assistant")])
    kw = {
        "slo": "chat-assistant",
        "dimensions": ["model", "region", "zone"],
        "since": START + timedelta(minutes=3, seconds=5),
        "until": START + SPAN - timedelta(seconds=20),
        "limit": None,
        "min_share": 0.0,
    }
    fast, raw = loaded.root_cause(**kw), loaded.root_cause(exact=True, **kw)
    read = applied.table if on_duckdb(loaded) else f"{applied.table}_5m"
    assert fast.parts["model"].source == read == fast.parts["region"].source
    assert fast.parts["zone"].source == "requests"  # not a dimension the rollup keeps
    assert fast.sort("dimension", "value").equals(raw.sort("dimension", "value"))
    assert fast.filter(pl.col("dimension") == "zone")["bad"].sum() > 0


def test_a_range_without_requests_reports_one_row_of_nothing(loaded):
    slo_apply.apply(loaded.store, [load_slo("chat-assistant")])
    kw = {"since": START - timedelta(hours=5, seconds=30), "until": START - timedelta(hours=1)}
    fast, raw = both(loaded, "chat-assistant", filters={}, **kw)
    assert fast["count"].to_list() == raw["count"].to_list() == [0]
    assert fast["attainment"].to_list() == raw["attainment"].to_list() == [None]
    assert fast["burn_rate_1h"].to_list() == raw["burn_rate_1h"].to_list() == [None]


@ON_CLICKHOUSE
def test_spans_of_one_question_answer_as_separate_questions_do(loaded):
    """The burn windows of a report are spans of its period's question: one read, and
    each span's figures those of the span asked alone, from raw rows and from a rollup."""
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    whole = TimeRange(
        START + timedelta(minutes=7, seconds=37.25), START + SPAN - timedelta(seconds=72)
    )
    spans = [
        TimeRange(whole.until - timedelta(minutes=5), whole.until),
        TimeRange(whole.until - timedelta(minutes=47, seconds=13.5), whole.until),
        TimeRange(whole.since + timedelta(minutes=1), whole.since + timedelta(minutes=30)),
    ]
    question = Question(
        measures=["count", "attainment", "goodput_rps", "error_rate", "p95_ttft_ms"],
        range=whole,
        by=["model"],
        filters={"service": ["chat"]},
        thresholds=slo.thresholds,
        spans=spans,
    )
    for sources in ((), (SloRollup(slo).source(),)):
        together = pl.DataFrame(ask(loaded.store, question, sources))
        for k, span in enumerate([whole, *spans]):
            alone = ask(loaded.store, replace(question, range=span, spans=()), sources)
            mine = together.filter(pl.col("span") == k).drop("span").sort("model")
            assert_frame_equal(mine, pl.DataFrame(alone).sort("model"), check_exact=False)
            assert mine["count"].sum() > 0


@ON_CLICKHOUSE
def test_a_request_alone_makes_the_row_its_minute_would(loaded):
    """Each rollup column's per-request value, merged, equals its aggregate over the
    minute's requests: the ragged ends of a range, read as one-request rows, merge with
    rollup rows as the view's own rows would."""
    rollup = SloRollup(load_slo("chat-assistant"))
    columns = list(rollup.columns) + rollup_columns(BUILT_IN)
    columns = list({c.name: c for c in columns}.values())
    database = loaded.store.database
    keys = ", ".join(rollup.dimensions)
    merged = ", ".join(c.merge for c in columns)
    table = trees.table("requests", database)
    each = dialects.render(request_rows(table, rollup.dimensions, columns), "clickhouse")
    one_by_one = (
        f"SELECT toStartOfMinute(ts) AS minute, {keys}, {merged} "
        f"FROM ({each}) GROUP BY minute, {keys}"
    )
    aggregated = dialects.render(bucket_rows(table, rollup.dimensions, columns), "clickhouse")
    order = f"ORDER BY ts, {keys}"
    mine = loaded.store.query_arrow(f"SELECT * FROM ({one_by_one.replace('minute', 'ts')}) {order}")
    theirs = loaded.store.query_arrow(f"SELECT * FROM ({aggregated}) {order}")
    assert mine.num_rows == theirs.num_rows > 1000
    for c in columns:
        if c.type.endswith("Float64)"):  # sums of floats: the order of addition differs
            a, b = mine[c.name], theirs[c.name]
            # Equal is no gap: a bound with no request beyond it is infinite on both sides.
            gap = pc.if_else(pc.equal(a, b), 0.0, pc.abs(pc.subtract(a, b)))
            assert pc.max(gap).as_py() < 1e-6, c.name
        else:
            assert mine[c.name].equals(theirs[c.name]), c.name


@ON_CLICKHOUSE
def test_a_report_in_pieces_is_plain_reads_merged_in_the_client(loaded):
    """On ClickHouse an SLO's rollup answers a ragged range with one query of plain
    reads (no aggregate to plan per piece), merged here; a measure the client cannot
    compute (counts under a latency, read in proportion from histograms) keeps the SQL
    path, with the same answer either way for what both compute."""
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    source = SloRollup(slo).source()
    question = Question(
        measures=["count", "attainment", "error_rate", "p95_ttft_ms", "count_ttft_ms"],
        range=TimeRange(START + timedelta(seconds=97.5), START + SPAN - timedelta(seconds=31)),
        by=["model"],
        filters={"service": ["chat"]},
        thresholds=slo.thresholds,
        checks=[("ttft_ms", 200.0)],
    )
    compiled = compile_question(question, loaded.store.capabilities, "db", [source])
    assert compiled.merge is not None and "GROUP BY" not in compiled.sql
    assert compiled.plan.pieces[-1][0] == "requests"
    here = pl.DataFrame(ask(loaded.store, question, [source]))
    sql = replace(question, measures=[*question.measures, "count_ttft_ms_le_150"])
    assert compile_question(sql, loaded.store.capabilities, "db", [source]).merge is None
    there = pl.DataFrame(ask(loaded.store, sql, [source]))  # in the same order
    assert_frame_equal(here, there.select(here.columns), check_exact=False, rel_tol=1e-9)
    raw = pl.DataFrame(ask(loaded.store, replace(question, exact=True, checks=()))).sort("model")
    assert here.height == raw.height == 4  # the four models the synthetic fleet's chat runs on
    here = here.sort("model")
    assert here["count"].to_list() == raw["count"].to_list()
    assert here["attainment"].to_list() == raw["attainment"].to_list()
    assert here["count_ttft_ms"].to_list() == raw["count_ttft_ms"].to_list()


@ON_CLICKHOUSE
def test_its_table_of_requests_holds_its_scope_in_the_types_of_requests(loaded, traffic):
    """The ragged ends are read from the SLO's own table of requests: every valid
    request in its scope, once, its columns typed as in `requests`."""
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    rollup = SloRollup(slo)
    types = loaded.store.query_arrow(
        "SELECT table, name, type, compression_codec FROM system.columns "
        "WHERE database = {db:String} AND table IN ('requests', {mine:String})",
        {"db": loaded.store.database, "mine": rollup.requests_table},
    ).to_pylist()

    def typed(table: str) -> dict[str, tuple[str, str]]:
        return {
            c["name"]: (c["type"], c["compression_codec"]) for c in types if c["table"] == table
        }

    mine, of_requests = typed(rollup.requests_table), typed("requests")
    assert list(mine) == list(rollup.request_columns)
    assert {n: t for n, (t, _) in mine.items()} == {n: of_requests[n][0] for n in mine}
    # Its codecs stay 0001's (REQUEST_COLUMN_TYPES): they are part of the SLO's version,
    # and 0025's codecs for `requests` would rebuild every SLO's rollups to change none
    # of its rows.
    written = {n: REQUEST_COLUMN_TYPES[n].partition(" CODEC")[2] for n in mine}
    assert {n: codec for n, (_, codec) in mine.items()} == {
        n: f"CODEC{codec}" if codec else "" for n, codec in written.items()
    }
    expected = pc.sum(
        pc.and_(pc.equal(traffic["service"], "chat"), pc.invert(traffic["is_probe"]))
    ).as_py()
    counted = loaded.store.query_arrow(
        f"SELECT count() AS n FROM {loaded.store.database}.{rollup.requests_table}"
    )
    assert counted["n"][0].as_py() == expected > 1000


@ON_CLICKHOUSE
def test_ragged_ends_too_busy_to_ship_request_by_request_are_merged_by_clickhouse(
    loaded, monkeypatch
):
    slo = load_slo("chat-assistant")
    slo_apply.apply(loaded.store, [slo])
    since = START + timedelta(minutes=7, seconds=37, milliseconds=250)
    until = START + SPAN - timedelta(minutes=3, seconds=12)
    merged_here = loaded.sla("chat-assistant", since=since, until=until, by=["model"])
    merges = []
    monkeypatch.setattr(local_merge, "MAX_REQUESTS", 10)
    monkeypatch.setattr(
        run, "merge_rows", lambda *a: merges.append(a) or local_merge.merge_rows(*a)
    )
    merged_there = loaded.sla("chat-assistant", since=since, until=until, by=["model"])
    assert merges == []  # every question took the SQL path
    assert_same_figures(merged_here, merged_there, ["model"])
