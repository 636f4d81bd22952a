"""SLO evaluation: objectives, attainment, window compliance, score, budget and burn rates.

The traffic is laid out window by window so every expected figure can be read off it:
24 five-minute windows of 100 requests; TTFT is slow in windows 0-5 and errors run at
10% in windows 20-23. Probes with absurd latencies sit in every window and must not
count.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pytest
from known_data import START, known_requests, with_columns

from warehouse import Warehouse
from warehouse.errors import QueryError
from warehouse.model import REQUESTS_SCHEMA

WINDOWS, PER_WINDOW = 24, 100
SINCE, UNTIL = START, START + timedelta(minutes=5 * WINDOWS)

SLO_TEXT = """
name = "test-chat"
target = 0.9
window = "5m"
period = "2h"
burn_windows = ["30m", "1h"]

[scope]
service = "chat"

[thresholds]
ttft_ms = 200

[[objectives]]
objective = "p95(ttft_ms) <= 200"
weight = 3

[[objectives]]
objective = "error_rate <= 0.05"
"""


def window_traffic() -> tuple[pa.Table, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    n = WINDOWS * PER_WINDOW
    window = np.repeat(np.arange(WINDOWS), PER_WINDOW)
    start_ms = int(START.timestamp() * 1000)
    slow = window < 6
    ttft = np.where(slow, rng.uniform(150, 450, n), rng.uniform(50, 190, n)).astype(np.float32)
    error = np.zeros(n, bool)
    error[np.tile(np.arange(PER_WINDOW) == 0, WINDOWS)] = True  # 1% everywhere
    error[(window >= 20) & (np.tile(np.arange(PER_WINDOW), WINDOWS) < 10)] = True  # 10% late
    ticks = np.tile(np.arange(PER_WINDOW), WINDOWS)
    table = with_columns(
        known_requests(n, seed=1),
        ts=pa.array(start_ms + window * 300_000 + ticks * 2_900, pa.timestamp("ms", tz="UTC")),
        ttft_ms=ttft,
        status=np.where(error, "error", "ok"),
        is_probe=np.zeros(n, bool),
        service=np.full(n, "chat"),
    )
    probes = with_columns(
        known_requests(WINDOWS, seed=2),
        ts=pa.array(start_ms + np.arange(WINDOWS) * 300_000 + 1, pa.timestamp("ms", tz="UTC")),
        ttft_ms=np.full(WINDOWS, 9e4, np.float32),
        is_probe=np.ones(WINDOWS, bool),
        service=np.full(WINDOWS, "chat"),
    )
    # Another service, outside the SLO's scope.
    other = with_columns(known_requests(500, seed=3), service=np.full(500, "batch"))
    arrays = {"window": window, "ttft": ttft.astype(np.float64), "error": error}
    return pa.concat_tables([table, probes, other]).cast(REQUESTS_SCHEMA), arrays


@pytest.fixture
def loaded(migrated, tmp_path):
    table, arrays = window_traffic()
    migrated.insert_arrow("requests", table)
    path = tmp_path / "test-chat.toml"
    path.write_text(SLO_TEXT)
    return Warehouse(migrated), path, arrays


def expected(arrays: dict[str, np.ndarray], windows: range) -> dict[str, float]:
    keep = np.isin(arrays["window"], list(windows))
    good = (~arrays["error"][keep]) & (arrays["ttft"][keep] <= 200)
    return {"attainment": good.mean(), "good": good.sum(), "n": keep.sum()}


def test_an_slo_is_evaluated_window_by_window(loaded):
    wh, path, arrays = loaded
    result = wh.sla(path, since=SINCE, until=UNTIL, exact=True)
    assert result.height == 1
    row = result.row(0, named=True)

    whole = expected(arrays, range(WINDOWS))
    assert row["count"] == WINDOWS * PER_WINDOW  # no probes, no other service
    assert row["attainment"] == pytest.approx(whole["attainment"], rel=1e-12)
    assert row["goodput_rps"] == pytest.approx(whole["good"] / 7200, rel=1e-12)
    assert row["p95_ttft_ms"] == pytest.approx(np.percentile(arrays["ttft"], 95), rel=1e-9)
    assert row["error_rate"] == pytest.approx(arrays["error"].mean())
    assert row["p95_ttft_ms_ok"] is (row["p95_ttft_ms"] <= 200)
    assert row["error_rate_ok"] is True

    ttft_held = np.array(
        [np.percentile(arrays["ttft"][arrays["window"] == w], 95) <= 200 for w in range(WINDOWS)]
    )
    errors_held = np.array(
        [arrays["error"][arrays["window"] == w].mean() <= 0.05 for w in range(WINDOWS)]
    )
    assert ttft_held.sum() == 18 and errors_held.sum() == 20  # the layout above
    assert row["windows"] == WINDOWS
    assert row["compliance"] == pytest.approx((ttft_held & errors_held).mean())
    assert row["score"] == pytest.approx((3 * ttft_held.mean() + errors_held.mean()) / 4)

    budget = 1 - 0.9
    assert row["budget_remaining"] == pytest.approx(1 - (1 - whole["attainment"]) / budget)
    last_30m = expected(arrays, range(WINDOWS - 6, WINDOWS))
    last_1h = expected(arrays, range(WINDOWS - 12, WINDOWS))
    assert row["burn_rate_30m"] == pytest.approx((1 - last_30m["attainment"]) / budget)
    assert row["burn_rate_1h"] == pytest.approx((1 - last_1h["attainment"]) / budget)
    assert row["burn_rate_30m"] > row["burn_rate_1h"]  # the errors are recent


GAPS_SLO = """
name = "gaps"
target = 0.9
window = "5m"
period = "2h"
burn_windows = ["30m"]

[scope]
service = "chat"

[[objectives]]
objective = "p95(tpot_ms) <= 1000"

[[objectives]]
objective = "p95(ttft_ms) <= 200"

[[objectives]]
objective = "p95(ttft_ms) <= 1000"
"""


def test_a_window_without_a_measure_is_no_evidence_against_its_objective(migrated, tmp_path):
    """Windows 12-23 answer in one token each, so have no TPOT: they still comply with
    the TPOT objective. Two objectives on one measure get a column each."""
    table, arrays = window_traffic()
    chat = arrays["window"] < 12
    tpot = np.concatenate([np.where(chat, 10.0, np.nan), np.full(table.num_rows - chat.size, 10.0)])
    migrated.insert_arrow(
        "requests", with_columns(table, tpot_ms=pa.array(tpot, mask=np.isnan(tpot)))
    )
    path = tmp_path / "gaps.toml"
    path.write_text(GAPS_SLO)
    row = Warehouse(migrated).sla(path, since=SINCE, until=UNTIL, exact=True).row(0, named=True)
    ttft_held = np.array(
        [np.percentile(arrays["ttft"][arrays["window"] == w], 95) <= 200 for w in range(WINDOWS)]
    )
    assert ttft_held.sum() == 18  # the layout of window_traffic
    assert row["windows"] == WINDOWS
    assert row["compliance"] == pytest.approx(ttft_held.mean())  # TPOT never counts against
    assert row["score"] == pytest.approx((1 + ttft_held.mean() + 1) / 3)
    assert (row["p95_tpot_ms_ok"], row["p95_ttft_ms_ok"], row["p95_ttft_ms_ok_2"]) == (
        True,
        row["p95_ttft_ms"] <= 200,
        True,
    )


def test_a_range_without_traffic_has_no_compliance_and_no_score(loaded):
    """No window had traffic: nothing is known, which is not a score of 0 (that would
    read as every objective missed on a dashboard)."""
    wh, path, _ = loaded
    quiet = UNTIL + timedelta(hours=1)
    row = wh.sla(path, since=quiet, until=quiet + timedelta(hours=1), exact=True).row(0, named=True)
    assert row["windows"] == 0
    assert row["compliance"] is None
    assert row["score"] is None


def test_groups_and_filters_narrow_the_scope(loaded):
    wh, path, _ = loaded
    by_model = wh.sla(path, by=["model"], since=SINCE, until=UNTIL, exact=True)
    assert by_model["count"].sum() == WINDOWS * PER_WINDOW
    assert {"compliance", "score", "budget_remaining", "burn_rate_1h"} <= set(by_model.columns)
    with pytest.raises(QueryError, match="outside the SLO's scope"):
        wh.sla(path, filters={"service": "batch"}, since=SINCE, until=UNTIL)


def test_shipped_slos_evaluate(loaded):
    wh = loaded[0]
    for name in ("chat-assistant", "batch-summarization", "code-completion"):
        result = wh.sla(name, since=SINCE, until=UNTIL, filters={})
        assert "budget_remaining" in result.columns
        assert any(c.startswith("burn_rate_") for c in result.columns)


def test_an_unknown_slo_names_the_shipped_ones(loaded):
    with pytest.raises(QueryError, match="chat-assistant"):
        loaded[0].sla("no-such-slo")
