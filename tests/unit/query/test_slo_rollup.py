"""An SLO's rollup: its versioned name, its columns, and exact percentile objectives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import exp

from warehouse import dialects
from warehouse.aggregates import check_prefix
from warehouse.query.builder import Question, compile_question
from warehouse.query.slo import parse_objective, parse_slo
from warehouse.query.slo_rollup import SloRollup, percentile_verdicts
from warehouse.query.timerange import TimeRange
from warehouse.query.trees import placeholders
from warehouse.store.clickhouse import SERVER as CLICKHOUSE

CHAT = """
name = "chat"
target = 0.99
[scope]
service = ["chat"]
[thresholds]
ttft_ms = 300
tpot_ms = 50
[[objectives]]
objective = "p95(ttft_ms) <= 200"
[[objectives]]
objective = "error_rate <= 0.005"
[[objectives]]
objective = "kv_hit_ratio >= 0.2"
"""


THRESHOLDS = {"ttft_ms": 300.0, "tpot_ms": 50.0}


def interpolated(values: np.ndarray, level: float) -> float:
    """The percentile as ClickHouse's quantileExactInclusive computes it."""
    x = np.sort(values.astype(np.float64))
    h = level * (len(x) - 1) + 1
    rank = int(h)
    if rank >= len(x):
        return float(x[-1])
    return float(x[rank - 1] + (h - rank) * (x[rank] - x[rank - 1]))


def positions(groups: list[np.ndarray], limit: float) -> pl.DataFrame:
    """Position counts per group, merged as the rollup merges minutes."""
    p = check_prefix("ttft_ms", limit)
    rows = []
    for values in groups:
        below, above = values[values < limit], values[values > limit]
        rows.append(
            {
                f"{p}_n": len(values),
                f"{p}_lt": len(below),
                f"{p}_le": int((values <= limit).sum()),
                f"{p}_lo": float(below.max()) if len(below) else 0.0,
                f"{p}_hi": float(above.min()) if len(above) else float("inf"),
            }
        )
    minutes = pl.DataFrame(rows)
    return minutes.select(
        pl.col(f"{p}_n", f"{p}_lt", f"{p}_le").sum(),
        pl.col(f"{p}_lo").max(),
        pl.col(f"{p}_hi").min(),
    )


def test_the_version_changes_with_a_threshold_and_not_with_a_description():
    chat = SloRollup(parse_slo(CHAT))
    same = SloRollup(parse_slo(CHAT.replace("target = 0.99", "target = 0.995")))
    tighter = SloRollup(parse_slo(CHAT.replace("ttft_ms = 300", "ttft_ms = 250")))
    assert chat.table.startswith("slo_chat_") and chat.table == same.table
    assert tighter.table != chat.table


def test_the_rollup_keeps_what_the_objectives_need():
    names = {c.name for c in SloRollup(parse_slo(CHAT)).columns}
    assert {"requests", "errors", "rejections", "good", "ttft_ms_hist"} <= names
    assert {"cached_prompt_tokens_sum", "prompt_tokens_sum"} <= names
    assert {f"{check_prefix('ttft_ms', 200)}_{k}" for k in ("n", "lt", "le", "lo", "hi")} <= names
    assert "e2e_ms_hist" not in names


def test_rows_apply_the_scope_and_leave_out_probes():
    sql = dialects.render(SloRollup(parse_slo(CHAT)).rows("db"), "clickhouse").lower()
    assert "not is_probe" in sql and "service in ('chat')" in sql
    assert "coalesce(ttft_ms <= 300.0, false)" in sql and "coalesce(tpot_ms <= 50.0, true)" in sql


def test_questions_of_the_whole_scope_read_totals_and_groups_read_the_dimensions():
    rollup = SloRollup(parse_slo(CHAT))
    since = datetime(2026, 11, 2, 8, 0, 30, tzinfo=UTC)
    day = TimeRange(since, since + timedelta(days=1))

    def tables(by: list[str], **filters: str) -> list[str]:
        """The tables a question within the SLO's scope reads, coarsest first."""
        question = Question(
            measures=["attainment"],
            range=day,
            by=by,
            filters={"service": ["chat"], **filters},
            thresholds=THRESHOLDS,
        )
        plan = compile_question(question, CLICKHOUSE, "db", [rollup.source()]).plan
        return list(dict.fromkeys(table for table, _ in plan.pieces))

    # The whole scope: totals by the hour, the minute and (the 30 s at the start) the
    # second; the 5-minute window's totals would save a few rows for one more read.
    t = rollup.table
    assert tables([]) == [f"{t}_1h_total", f"{t}_total", f"{t}_1s_total"]
    totals = [table for _, table in rollup.totals]
    assert totals == [f"{t}_1s_total", f"{t}_total", f"{t}_5m_total", f"{t}_1h_total"]
    # Groups: every grain of the dimensions, the ragged start from raw rows.
    for read in (tables(["model"]), tables([], model="m-1")):
        assert read == [f"{t}_1h", f"{t}_5m", t, "requests"]


def test_a_table_read_in_several_pieces_lists_their_buckets_and_one_piece_is_a_range():
    """Listed buckets plan in half the time of OR'd ranges; the SLO's table of requests is
    ordered by time, so its ragged ends name no hours."""
    rollup = SloRollup(parse_slo(CHAT))
    since = datetime(2026, 11, 2, 8, 0, 30, 250_000, tzinfo=UTC)
    until = datetime(2026, 11, 2, 11, 0, 2, 500_000, tzinfo=UTC)
    question = Question(
        measures=["attainment"],
        range=TimeRange(since, until),
        spans=[TimeRange(until - timedelta(hours=1), until)],
        filters={"service": ["chat"]},
        thresholds=THRESHOLDS,
    )
    compiled = compile_question(question, CLICKHOUSE, "db", [rollup.source()])
    reads = {
        select.find(exp.From).this.name: select
        for select in compiled.tree.find_all(exp.Select)
        if select.find(exp.From)
    }
    t = rollup.table
    # 08:00:30.25 to 11:00:02.5, cut at 10:00:02.5: whole seconds at four cuts.
    assert placeholders(reads[f"{t}_1s_total"]) == {f"buckets_{t}_1s_total"}
    starts = compiled.parameters[f"buckets_{t}_1s_total"]
    second = 1000
    at = TimeRange(since, until)
    assert starts[:2] == [at.since_ms + 750, at.since_ms + 750 + second]
    assert len(starts) == 29 + 2 + 57 + 2 and len(set(starts)) == len(starts)
    assert all(start % second == 0 for start in starts)
    # The minutes at the start and around the cut; one piece of hours, one range.
    assert placeholders(reads[f"{t}_total"]) == {f"buckets_{t}_total"}
    assert placeholders(reads[f"{t}_1h_total"]) == {"p0_since_ms", "p0_until_ms"}
    raw = reads[f"{t}_requests"]
    assert not any(raw.find_all(exp.TimestampTrunc))  # no hours named


def test_buckets_of_seconds_read_raw_rows_and_buckets_of_minutes_the_totals_per_second():
    """On the SQL path the ragged ends are rows per minute: in 30-second buckets they would
    land in the wrong bucket, so such a question reads no piece of the rollup."""
    rollup = SloRollup(parse_slo(CHAT))
    since = datetime(2026, 11, 2, 8, 0, 45, 300_000, tzinfo=UTC)

    def pieces(interval: timedelta) -> list[str]:
        question = Question(
            measures=["attainment"],
            range=TimeRange(since, since + timedelta(hours=2)),
            interval=interval,
            filters={"service": ["chat"]},
            thresholds=THRESHOLDS,
            order_by="time",  # the SQL path, not the client's merge
        )
        plan = compile_question(question, CLICKHOUSE, "db", [rollup.source()]).plan
        return [table for table, _ in plan.pieces] or [plan.source]

    assert pieces(timedelta(seconds=30)) == ["requests"]
    assert pieces(timedelta(seconds=90)) == ["requests"]
    in_windows = pieces(timedelta(minutes=5))
    assert f"{rollup.table}_1s_total" in in_windows and in_windows[-1] == "requests"


def test_an_objective_on_any_measure_is_kept_by_the_aggregates_its_formula_names():
    """avg(prompt_tokens) is no column of the built-in rollups: the SLO's rollup keeps
    the sum and the count its formula reads."""
    slo = parse_slo(CHAT + '\n[[objectives]]\nobjective = "avg(prompt_tokens) <= 900"\n')
    kept = [c.name for c in SloRollup(slo).columns]
    assert {"prompt_tokens_sum", "prompt_tokens_count"} <= set(kept)
    assert "prompt_tokens_count" not in {c.name for c in SloRollup(parse_slo(CHAT)).columns}


# Values on a coarse grid, so that ties with each other and with the limit are common.
latencies = st.lists(st.integers(0, 40).map(lambda k: k * 12.5), min_size=1, max_size=60)


@settings(max_examples=400, deadline=None)
@given(
    groups=st.lists(latencies, min_size=1, max_size=4),
    level=st.sampled_from(["50", "75", "90", "95", "99", "99.9"]),
    op=st.sampled_from(["<=", "<", ">=", ">"]),
    limit=st.integers(0, 40).map(lambda k: k * 12.5),
)
def test_percentile_objectives_are_decided_as_the_exact_percentile_decides_them(
    groups, level, op, limit
):
    arrays = [np.array(g, np.float32) for g in groups]
    objective = parse_objective(f"p{level}(ttft_ms) {op} {limit}")
    value = interpolated(np.concatenate(arrays), float(level) / 100)
    holds, known = percentile_verdicts(positions(arrays, limit), objective)
    assert known.tolist() == [True] and holds.tolist() == [objective.holds(value)]


def test_a_group_without_values_has_no_verdict():
    objective = parse_objective("p95(ttft_ms) <= 200")
    p = check_prefix("ttft_ms", 200)
    frame = pl.DataFrame(
        {f"{p}_n": [0], f"{p}_lt": [0], f"{p}_le": [0], f"{p}_lo": [0.0], f"{p}_hi": [np.inf]}
    )
    assert percentile_verdicts(frame, objective)[1].tolist() == [False]
