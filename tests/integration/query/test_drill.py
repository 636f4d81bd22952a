"""Drill-downs answer as docs/querying.md defines each measure, on every backend.

Expected figures come from the :class:`Oracle` (numpy over the inserted arrays). Exact
answers (``exact=True``) must match it to floating-point precision on ClickHouse and on
DuckDB alike; answers from the rollups match counts exactly and percentiles and
attainment within the error the plan states.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import polars as pl
import pytest
from days import DAY
from known_data import SINCE, SPAN, START, UNTIL

from warehouse import Warehouse
from warehouse.errors import QueryError
from warehouse.model import bucket_bounds, latency_bucket
from warehouse.query.order_statistics import SIDES, order_statistics

END = START + SPAN
GROUPS = [("alpha", "hz"), ("alpha", "sh"), ("beta", "hz"), ("beta", "sh")]


@pytest.fixture(scope="module")
def wh(module_migrated, requests_table) -> Warehouse:
    """The known requests, written once per backend: every test here only reads."""
    module_migrated.insert_arrow("requests", requests_table)
    return Warehouse(module_migrated)


def rows(result: pl.DataFrame) -> dict[tuple[str, str], dict]:
    return {(r["model"], r["region"]): r for r in result.iter_rows(named=True)}


def test_exact_percentiles_equal_numpys_linear_percentiles(wh, oracle):
    measures = ["count", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "p999_e2e_ms", "p90_tpot_ms"]
    result = wh.drill(["model", "region"], measures, since=SINCE, until=UNTIL, exact=True)
    assert result.plan.source == "requests" and result.plan.percentiles == "exact"
    got = rows(result)
    assert sorted(got) == GROUPS
    for model, region in GROUPS:
        row, where = got[(model, region)], {"model": model, "region": region}
        assert row["count"] == len(oracle.group(**where)["ttft_ms"])
        for q, name in [(50, "p50_ttft_ms"), (95, "p95_ttft_ms"), (99, "p99_ttft_ms")]:
            assert row[name] == pytest.approx(oracle.percentile("ttft_ms", q, **where), rel=1e-9)
        assert row["p999_e2e_ms"] == pytest.approx(
            oracle.percentile("e2e_ms", 99.9, **where), rel=1e-9
        )
        # TPOT statistics leave out requests without a TPOT (one output token).
        assert row["p90_tpot_ms"] == pytest.approx(
            oracle.percentile("tpot_ms", 90, **where), rel=1e-9
        )


@pytest.mark.parametrize("side", SIDES)
def test_order_statistics_around_exact_percentiles_are_those_at_the_ranks_floor_and_ceiling(
    wh, oracle, side
):
    """As ``llmwh compare`` asks its reference: the order statistics an exact percentile
    interpolates between, at the floor (``low``) and ceiling (``high``) of h = q (n - 1)."""
    asked = [
        ("p50_ttft_ms", "ttft_ms", 0.5),
        ("p95_ttft_ms", "ttft_ms", 0.95),
        ("p99_ttft_ms", "ttft_ms", 0.99),
        ("p999_e2e_ms", "e2e_ms", 0.999),
        ("p90_tpot_ms", "tpot_ms", 0.9),  # TPOT leaves out requests without one
    ]
    measures = ["count", *(name for name, _, _ in asked)]
    with order_statistics(side):
        result = wh.drill(["model", "region"], measures, since=SINCE, until=UNTIL, exact=True)
    assert result.plan.source == "requests" and result.plan.percentiles == side
    rounding = np.floor if side == "low" else np.ceil
    got = rows(result)
    assert sorted(got) == GROUPS
    for (model, region), row in got.items():
        group = oracle.group(model=model, region=region)
        for name, column, q in asked:
            values = np.sort(oracle.floats(group[column]))
            assert row[name] == values[int(rounding(q * (len(values) - 1)))], (name, model)
    # Outside the context, the same question's percentiles are exact again.
    again = wh.drill(["model", "region"], measures, since=SINCE, until=UNTIL, exact=True)
    assert again.plan.percentiles == "exact"


def test_rates_ratios_and_averages_follow_the_definitions(wh, oracle):
    measures = [
        "error_rate",
        "rejection_rate",
        "error_count",
        "kv_hit_ratio",
        "decode_tps",
        "avg_ttft_ms",
        "avg_tpot_ms",
        "sum_output_tokens",
        "rps",
    ]
    got = rows(wh.drill(["model", "region"], measures, since=SINCE, until=UNTIL, exact=True))
    for model, region in GROUPS:
        g, row = oracle.group(model=model, region=region), got[(model, region)]
        n = len(g["status"])
        assert row["error_rate"] == pytest.approx((g["status"] == "error").sum() / n, rel=1e-12)
        assert row["rejection_rate"] == pytest.approx((g["status"] == "rejected").sum() / n)
        assert row["error_count"] == (g["status"] == "error").sum()
        # A ratio of sums, never a mean of ratios.
        kv = g["cached_prompt_tokens"].astype(float).sum() / g["prompt_tokens"].astype(float).sum()
        assert row["kv_hit_ratio"] == pytest.approx(kv, rel=1e-9)
        out, e2e, ttft = (g[c].astype(np.float64) for c in ("output_tokens", "e2e_ms", "ttft_ms"))
        decoding = (out > 1) & (e2e > ttft)
        tps = 1000 * (out[decoding] - 1).sum() / (e2e[decoding] - ttft[decoding]).sum()
        assert row["decode_tps"] == pytest.approx(tps, rel=1e-6)
        assert row["avg_ttft_ms"] == pytest.approx(ttft.mean(), rel=1e-6)
        assert row["avg_tpot_ms"] == pytest.approx(oracle.floats(g["tpot_ms"]).mean(), rel=1e-6)
        assert row["sum_output_tokens"] == out.sum()
        assert row["rps"] == pytest.approx(n / 7200)


def test_attainment_and_goodput_count_a_request_good_only_within_every_threshold(wh, oracle):
    thresholds = {"ttft_ms": 200.0, "tpot_ms": 30.0, "e2e_ms": 4000.0}
    result = wh.drill(
        ["model", "region"],
        ["attainment", "goodput_rps"],
        since=SINCE,
        until=UNTIL,
        thresholds=thresholds,
    )
    assert result.plan.source == "requests"  # several thresholds need raw rows
    for (model, region), row in rows(result).items():
        share, good = oracle.attainment(thresholds, model=model, region=region)
        assert row["attainment"] == pytest.approx(share, rel=1e-12)
        assert row["goodput_rps"] == pytest.approx(good / 7200, rel=1e-12)


def test_filters_probes_and_attrs(wh, oracle):
    result = wh.drill(
        ["attrs['gpu']"], ["count"], {"region": ["sh"]}, since=SINCE, until=UNTIL, exact=True
    )
    got = {r["gpu"]: r["count"] for r in result.iter_rows(named=True)}
    assert got == {
        "h100": len(oracle.group(model="alpha", region="sh")["status"]),
        "a100": len(oracle.group(model="beta", region="sh")["status"]),
    }
    everything = wh.drill([], ["count"], since=SINCE, until=UNTIL, include_probes=True)
    assert everything["count"].item() == len(oracle.columns["status"])
    probes = wh.drill([], ["count"], {"is_probe": True}, since=SINCE, until=UNTIL)
    assert probes["count"].item() == oracle.columns["is_probe"].sum()


def test_the_range_is_half_open(wh, oracle):
    ts = oracle.columns["ts"]
    cut = ts[len(ts) // 2]
    before = wh.drill([], ["count"], since=SINCE, until=cut.item(), include_probes=True)
    after = wh.drill([], ["count"], since=cut.item(), until=UNTIL, include_probes=True)
    assert before["count"].item() == (ts < cut).sum()
    assert before["count"].item() + after["count"].item() == len(ts)


def test_timeseries_buckets_add_up_to_the_drill(wh):
    series = wh.timeseries(["count"], ["model"], "10m", since=SINCE, until=UNTIL, exact=True)
    assert series.columns == ["time", "model", "count"]
    assert series["time"].dtype == pl.Datetime("ms", "UTC")
    assert series["time"].dt.minute().unique().sort().to_list() == [0, 10, 20, 30, 40, 50]
    totals = wh.drill(["model"], ["count"], since=SINCE, until=UNTIL)
    summed = series.group_by("model").agg(pl.col("count").sum()).sort("model")
    assert summed.equals(pl.DataFrame(totals).sort("model"))


def test_order_by_and_limit(wh):
    result = wh.drill(
        ["model", "region"], ["count"], since=SINCE, until=UNTIL, order_by="-count", limit=2
    )
    assert result.height == 2
    assert result["count"].to_list() == sorted(result["count"].to_list(), reverse=True)
    # A percentile read from a rollup's histograms is sorted once it is read.
    everything = wh.drill(["model", "region"], ["p95_ttft_ms"], since=SINCE, until=UNTIL)
    top = wh.drill(
        ["model", "region"],
        ["p95_ttft_ms"],
        since=SINCE,
        until=UNTIL,
        order_by="-p95_ttft_ms",
        limit=2,
    )
    assert top["p95_ttft_ms"].to_list() == sorted(everything["p95_ttft_ms"].to_list())[:-3:-1]


def test_rollups_agree_with_raw_rows_within_the_stated_error(wh, oracle):
    if not wh.store.capabilities.materialized_views:
        pytest.skip("DuckDB keeps no materialized rollups: every answer comes from raw rows")
    measures = ["count", "error_rate", "p50_ttft_ms", "p95_ttft_ms", "p99_e2e_ms", "attainment"]
    kw = {"since": SINCE, "until": UNTIL, "thresholds": {"ttft_ms": 200.0}}
    fast = wh.drill(["model", "region"], measures, **kw)
    exact = wh.drill(["model", "region"], measures, exact=True, **kw)
    assert fast.plan.source == "requests_sla_1h" and fast.plan.percentiles == "histogram"
    assert fast.plan.attainment == "histogram"
    assert "2%-wide latency buckets" in fast.footer()
    assert exact.plan.source == "requests"
    raw, rolled = rows(exact), rows(fast)
    for key in GROUPS:
        where = dict(zip(("model", "region"), key, strict=True))
        assert rolled[key]["count"] == raw[key]["count"]
        assert rolled[key]["error_rate"] == pytest.approx(raw[key]["error_rate"], rel=1e-12)
        for name, column, q in [
            ("p50_ttft_ms", "ttft_ms", 0.50),
            ("p95_ttft_ms", "ttft_ms", 0.95),
            ("p99_e2e_ms", "e2e_ms", 0.99),
        ]:
            # From the histogram: inside the 2%-wide bucket of the order statistic at the
            # rank's floor, next to the exact value.
            values = np.sort(oracle.floats(oracle.group(**where)[column]))
            below = values[int(np.floor(q * (len(values) - 1)))]
            low, high = bucket_bounds(int(latency_bucket(np.array([below]))[0]))
            assert low <= rolled[key][name] <= high, name
            assert rolled[key][name] == pytest.approx(raw[key][name], rel=0.03)
        # Attainment from the ok-histogram: off by at most the threshold bucket's share.
        g = oracle.group(**where)
        ok_ttft = g["ttft_ms"][g["status"] == "ok"]
        bucket = latency_bucket(np.array([200.0]))[0]
        low, high = bucket_bounds(int(bucket))
        in_bucket = ((ok_ttft >= low) & (ok_ttft < high)).sum() / len(g["status"])
        assert abs(rolled[key]["attainment"] - raw[key]["attainment"]) <= in_bucket + 1e-9


def test_the_plan_says_why_it_reads_raw_rows(wh):
    if not wh.store.capabilities.materialized_views:
        result = wh.drill(["model"], ["count"], since=SINCE, until=UNTIL)
        assert result.plan.reason == "this store keeps no materialized rollups"
        return
    cases = [
        ({"by": ["client_app"]}, "the rollups do not keep client_app"),
        ({"filters": {"status": "ok"}}, "the rollups do not keep status"),
        ({"measures": ["p95_itl_p99_ms"]}, "the rollups cannot answer p95_itl_p99_ms"),
        ({"since": f"{DAY:%Y-%m-%d}T09:00:30Z", "by": ["zone"]}, "do not align to whole minutes"),
        ({"exact": True}, "exact percentiles asked"),
    ]
    for change, reason in cases:
        kw = {"by": ["model"], "measures": ["count"], "since": SINCE, "until": UNTIL, **change}
        result = wh.drill(**kw)
        assert result.plan.source == "requests"
        assert reason in result.plan.reason
    minute = wh.drill(["model"], ["count"], since=f"{DAY:%Y-%m-%d}T09:01:00Z", until=UNTIL)
    assert minute.plan.source == "requests_1m"
    series = wh.timeseries(["count"], interval="5m", since=SINCE, until=UNTIL)
    assert series.plan.source == "requests_1m"


def test_a_range_that_ends_mid_minute_reads_rollups_and_raw_ragged_ends(wh, oracle):
    if not wh.store.capabilities.materialized_views:
        pytest.skip("DuckDB keeps no materialized rollups: every answer comes from raw rows")
    since, until = START + timedelta(minutes=7, seconds=37), END - timedelta(seconds=48)
    kw = {"since": since, "until": until, "thresholds": {"ttft_ms": 200.0}}
    measures = ["count", "error_rate", "sum_output_tokens", "p95_ttft_ms", "attainment"]
    fast = wh.drill(["model", "region"], measures, **kw)
    exact = wh.drill(["model", "region"], measures, exact=True, **kw)
    assert fast.plan.source.startswith("requests_") and "+ raw requests [" in fast.footer()
    raw, rolled = rows(exact), rows(fast)
    assert rolled.keys() == raw.keys()
    for key in raw:
        for name in ("count", "error_rate", "sum_output_tokens"):
            assert rolled[key][name] == pytest.approx(raw[key][name], rel=1e-12), name
        assert rolled[key]["p95_ttft_ms"] == pytest.approx(raw[key]["p95_ttft_ms"], rel=0.03)
        assert abs(rolled[key]["attainment"] - raw[key]["attainment"]) < 0.02
    series = wh.timeseries(["count"], interval="5m", since=since, until=until)
    exact_series = wh.timeseries(["count"], interval="5m", since=since, until=until, exact=True)
    assert "+ raw requests [" in series.footer()
    assert series.equals(exact_series)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda wh: wh.drill(["model; DROP TABLE requests"]), "unknown dimension"),
        (lambda wh: wh.drill(["model"], ["count); DROP TABLE requests; --"]), "unknown measure"),
        (lambda wh: wh.drill(["attrs['x'] OR 1=1"]), "unknown dimension"),
        (lambda wh: wh.drill(["model"], ["p42_ttft_ms"]), "unknown measure"),
        (lambda wh: wh.drill(["model"], order_by="count; DROP TABLE x"), "cannot order by"),
        (lambda wh: wh.drill(["model"], since="yesterday"), "bad time 'yesterday'"),
        (lambda wh: wh.drill(["model"], since="1h", until="2h"), "is not before until"),
        (lambda wh: wh.drill(["model"], filters={"nope": "x"}), "unknown dimension 'nope'"),
        (lambda wh: wh.drill(["model"], filters={"model": []}), "empty list"),
        (lambda wh: wh.drill(["model"], ["attainment"], thresholds={"ttft_ms": -1}), "positive"),
        (lambda wh: wh.drill(["model"], ["attainment"], thresholds={"tokens": 5}), "bad threshold"),
        (lambda wh: wh.timeseries(interval="0s"), "longer than zero"),
        (lambda wh: wh.drill(["model", "model"]), "asked twice"),
    ],
)
def test_bad_questions_fail_with_a_clear_error(wh, call, message):
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(wh)
    assert wh.drill([], ["count"], since=SINCE, until=UNTIL)["count"].item() > 0


def test_a_filter_value_is_data_never_sql(wh):
    hostile = "acme' OR 1=1 --"
    result = wh.drill([], ["count"], {"tenant": hostile}, since=SINCE, until=UNTIL)
    assert result["count"].item() == 0
    assert wh.drill([], ["count"], {"tenant": "acme"}, since=SINCE, until=UNTIL)["count"].item()


def test_an_empty_range_gives_no_groups(wh):
    result = wh.drill(["model"], ["count", "p95_ttft_ms"], since="2020-01-01", until="2020-01-02")
    assert result.height == 0 and result.columns == ["model", "count", "p95_ttft_ms"]
    series = wh.timeseries(["count"], interval="1h", since=SINCE, until=UNTIL)
    assert series["count"].sum() > 0
    assert (series["time"].diff().drop_nulls() == timedelta(hours=1)).all()


def test_values_not_kept_are_grouped_as_other(wh, oracle):
    from warehouse.query.builder import Question
    from warehouse.query.run import ask
    from warehouse.query.timerange import time_range

    question = Question(
        measures=["count", "p50_ttft_ms"],
        by=["model", "attrs['gpu']"],
        range=time_range(SINCE, UNTIL),
        keep={"model": ["alpha"], "gpu": ["a100"]},
        exact=True,
    )
    got = {
        (r["model"], r["gpu"]): r["count"] for r in ask(wh.store, question).iter_rows(named=True)
    }
    alpha = len(oracle.group(model="alpha")["status"])
    beta = len(oracle.group(model="beta")["status"])
    # alpha runs on h100 only, beta on a100 only (see known_requests).
    assert got == {("alpha", "other"): alpha, ("other", "a100"): beta}


def test_a_tpot_threshold_read_from_a_rollup_counts_requests_without_a_tpot_as_good(wh, oracle):
    """Requests of one output token have no TPOT and meet a TPOT threshold: from raw
    rows by definition, from a rollup as the ok requests outside the TPOT histogram."""
    thresholds = {"tpot_ms": 30.0}
    exact = wh.drill(
        ["model"], ["good_count"], since=SINCE, until=UNTIL, thresholds=thresholds, exact=True
    )
    fast = wh.drill(["model"], ["good_count"], since=SINCE, until=UNTIL, thresholds=thresholds)
    for row in exact.iter_rows(named=True):
        g = oracle.group(model=row["model"])
        tpot = np.asarray(g["tpot_ms"], dtype=np.float64)
        ok = g["status"] == "ok"
        assert (ok & np.isnan(tpot)).any()  # the known data has some, or this proves nothing
        assert row["good_count"] == (ok & np.isnan(tpot)).sum() + (ok & (tpot <= 30.0)).sum()
        assert row["good_count"] == oracle.attainment(thresholds, model=row["model"])[1]
    assert fast.plan.rollup == wh.store.capabilities.materialized_views
    if fast.plan.rollup:
        # From the ok-histogram: off by at most the ok requests in the threshold's bucket.
        low, high = bucket_bounds(int(latency_bucket(np.array([30.0]))[0]))
        for r, e in zip(
            fast.sort("model").iter_rows(), exact.sort("model").iter_rows(), strict=True
        ):
            g = oracle.group(model=e[0])
            tpot = np.asarray(g["tpot_ms"], dtype=np.float64)
            in_bucket = ((tpot >= low) & (tpot < high) & (g["status"] == "ok")).sum()
            assert abs(r[1] - e[1]) <= in_bucket


def test_spans_answer_as_one_question_per_span_does(wh):
    """An SLA report's burn windows come back in one read, each row tagged with its
    span (0 the whole range), each rate per second of its own span's length."""
    from warehouse.query.builder import Question
    from warehouse.query.run import ask
    from warehouse.query.timerange import TimeRange, time_range

    whole = time_range(SINCE, UNTIL)
    late = TimeRange(END - timedelta(minutes=12, seconds=47.5), END)
    early = TimeRange(START, START + timedelta(minutes=30))
    measures = ["count", "error_rate", "goodput_rps", "p95_ttft_ms"]
    thresholds = {"ttft_ms": 200.0}

    def one(range_: TimeRange) -> dict:
        question = Question(measures, range_, by=["model"], thresholds=thresholds, exact=True)
        return {r["model"]: r for r in ask(wh.store, question).iter_rows(named=True)}

    question = Question(
        measures, whole, by=["model"], thresholds=thresholds, exact=True, spans=[late, early]
    )
    if not wh.store.capabilities.array_join:
        with pytest.raises(QueryError, match="ClickHouse only"):
            ask(wh.store, question)
        return
    together = ask(wh.store, question)
    assert together.columns[:2] == ["span", "model"]
    for span, range_ in enumerate([whole, late, early]):
        expected = one(range_)
        got = {r["model"]: r for r in together.filter(pl.col("span") == span).iter_rows(named=True)}
        assert got.keys() == expected.keys()
        for model, row in got.items():
            for name in measures:
                assert row[name] == pytest.approx(expected[model][name], rel=1e-12), (span, name)
