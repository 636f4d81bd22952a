"""The Grafana provisioning files and dashboards in exporters/grafana/.

Every panel's SQL (and every variable's) is expanded as grafana-clickhouse-datasource
expands it (see grafana_macros.py), with its variables set to All and to a concrete
value, and run on the embedded ClickHouse server against generated traffic; its result
must have the shape its panel type needs. A panel rendered from a question of the query
builder answers as the Python API answers the same question, over a range that aligns
to no minute. (That the files are what the code builds: tests/unit/test_exporter_files.py.)
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from grafana_macros import ALL, QueryContext, Variable, interpolate

from warehouse.exporters import grafana_dashboards
from warehouse.query.ab import compare_groups
from warehouse.query.builder import Plan, compile_question
from warehouse.query.grafana import PanelQuestion, render
from warehouse.query.run import ask
from warehouse.query.timerange import TimeRange
from warehouse.store import Store, open_store
from warehouse.store.clickhouse import SERVER
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

GRAFANA = Path(__file__).resolve().parents[2] / "exporters" / "grafana"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "llmwh-clickhouse"}
END = datetime.now(UTC).replace(second=0, microsecond=0)
START = END - timedelta(hours=3)
CONTEXT = QueryContext(time_from=START, time_to=END, interval_seconds=60)

NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal.*)\)?$")
LABEL = re.compile(r"^(Nullable\()?(LowCardinality\()?(Nullable\()?String\)*$")


DASHBOARDS: dict[str, dict[str, Any]] = {
    path.name: json.loads(path.read_text())
    for path in sorted((GRAFANA / "dashboards").glob("*.json"))
}
PANELS = [
    pytest.param(name, p, id=f"{name[:-5]}:{p['title']}")
    for name, d in DASHBOARDS.items()
    for p in d["panels"]
]
QUESTIONS: dict[str, PanelQuestion] = grafana_dashboards.questions()
ASKED = [
    pytest.param(name, p, QUESTIONS[p["targets"][0]["rawSql"]], id=f"{name[:-5]}:{p['title']}")
    for name, d in DASHBOARDS.items()
    for p in d["panels"]
    if p["targets"][0]["rawSql"] in QUESTIONS
]
# Ragged at both ends: whole hours, whole minutes and raw rows all answer a part.
RAGGED = TimeRange(START + timedelta(seconds=17, milliseconds=250), END - timedelta(seconds=42.5))


# -- files ------------------------------------------------------------------------------


def test_datasource_provisioning():
    config = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "llmwh-clickhouse.yaml").read_text()
    )
    assert config["apiVersion"] == 1
    (source,) = config["datasources"]
    assert {"type": source["type"], "uid": source["uid"]} == DATASOURCE
    data = source["jsonData"]
    assert (data["host"], data["port"], data["protocol"]) == ("127.0.0.1", 8123, "http")
    assert data["defaultDatabase"] == "llmwh"


def test_dashboard_provider_provisioning():
    config = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "llmwh.yaml").read_text())
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"]


def test_dashboards_carry_what_grafana_requires():
    assert len(DASHBOARDS) >= 7
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(set(uids)) == len(uids)
    for name, d in DASHBOARDS.items():
        assert d["uid"].startswith("llmwh-") and len(d["uid"]) <= 40, name
        assert d["title"] and "llmwh" in d["tags"] and d["schemaVersion"] >= 36
        ids = [p["id"] for p in d["panels"]]
        assert len(set(ids)) == len(ids), name
        variables = {v["name"]: v for v in d["templating"]["list"]}
        for v in variables.values():
            if v["type"] == "query":
                assert v["datasource"] == DATASOURCE
                assert v["query"]["editorType"] == "sql" and v["query"]["rawSql"]
        for p in d["panels"]:
            grid = p["gridPos"]
            assert all(isinstance(grid[k], int) for k in "xywh") and grid["x"] + grid["w"] <= 24
            assert p["datasource"] == DATASOURCE
            (target,) = p["targets"]
            assert target["datasource"] == DATASOURCE and target["editorType"] == "sql"
            assert target["format"] == (0 if p["type"] in ("timeseries", "heatmap") else 1)
            used = re.findall(r"\$\{?(\w+)", target["rawSql"] + p["title"])
            unknown = {u for u in used if not u.startswith("__")} - set(variables)
            assert not unknown, (name, p["title"], unknown)


def test_drilldown_offers_every_dimension():
    variables = {v["name"] for v in DASHBOARDS["drilldown.json"]["templating"]["list"]}
    assert {
        "tenant", "service", "model", "model_version", "region", "zone", "node",
        "client_app", "client_os", "network", "ab_group", "request_type",
        "status", "error_class", "finish_reason",
    } <= variables  # fmt: skip


# -- the SQL on a real server -----------------------------------------------------------


@pytest.fixture(scope="module")
def warehouse(embedded_server) -> Iterator[Store]:
    store = open_store(embedded_server.store_url(f"test_grafana_{uuid.uuid4().hex[:10]}"))
    Migrator(store).up()
    store.insert_arrow(
        "requests", synthetic_requests(20_000, seed=7, start=START, span=END - START)
    )
    store.command(
        "INSERT INTO samples SELECT generateUUIDv4(), now64(3) - toIntervalSecond(number * 10), "
        "number FROM numbers(1000)"
    )
    yield store
    store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
    store.close()


@pytest.fixture(scope="module")
def selections(warehouse) -> dict[str, dict[str, dict[str, Variable]]]:
    """Per dashboard, its variables set to All and to a concrete value."""
    result = {}
    for name, d in DASHBOARDS.items():
        every, concrete = {}, {}
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                sql = interpolate(v["query"]["rawSql"], {}, CONTEXT)
                options = [str(x) for x in warehouse.query_arrow(sql).column(0).to_pylist()]
                assert options, (name, v["name"], sql)
            else:
                options = [o["value"] for o in v["options"]]
            default = v["current"]["value"]
            if v.get("multi"):
                every[v["name"]] = Variable(v["name"], [ALL], options)
                concrete[v["name"]] = Variable(v["name"], [options[0]], options)
            else:
                every[v["name"]] = concrete[v["name"]] = Variable(v["name"], default, options)
        result[name] = {"all": every, "value": concrete}
    return result


def _check_shape(kind: str, columns: list[tuple[str, str]], rows: list[dict], title: str):
    names = [c for c, _ in columns]
    types = dict(columns)
    if kind in ("timeseries", "heatmap"):
        assert names[0] == "time" and types["time"].startswith("DateTime"), (title, columns)
        values = [c for c in names[1:] if NUMERIC.match(types[c])]
        labels = [c for c in names[1:] if LABEL.match(types[c])]
        assert values and len(values) + len(labels) == len(names) - 1, (title, columns)
        times = [r["time"] for r in rows]
        assert times == sorted(times), title  # the plugin's long-to-wide needs it
        if kind == "heatmap":
            assert not labels
            bounds = [float(c) for c in names[1:-1]]
            assert bounds == sorted(bounds) and names[-1] == "+Inf", names
    elif kind == "stat":
        assert all(NUMERIC.match(t) for _, t in columns), (title, columns)
        assert len(rows) == 1, title
    else:
        assert kind == "table", kind


@pytest.mark.parametrize("mode", ["all", "value"])
@pytest.mark.parametrize(("dashboard", "panel"), PANELS)
def test_panel_sql_runs_and_has_its_shape(warehouse, selections, dashboard, panel, mode):
    variables = selections[dashboard][mode]
    sql = interpolate(panel["targets"][0]["rawSql"], variables, CONTEXT)
    if mode == "value":
        for v in variables.values():
            if isinstance(v.current, list) and f"${{{v.name}}}" in panel["targets"][0]["rawSql"]:
                assert f"IN ('{v.current[0]}')" in sql
    else:
        assert "$__conditionalAll" not in sql
    columns = [
        (r["name"], r["type"]) for r in warehouse.query_arrow(f"DESCRIBE TABLE ({sql})").to_pylist()
    ]
    rows = warehouse.query_arrow(sql).to_pylist()
    _check_shape(panel["type"], columns, rows, panel["title"])
    if mode == "all":
        assert rows, (panel["title"], sql)


# -- the same answers as the Python API ------------------------------------------------


def _defaults(dashboard: dict[str, Any]) -> tuple[dict[str, Variable], dict[str, Any]]:
    """A dashboard's variables at their defaults, for the expansion and for the API."""
    variables, values = {}, {}
    for v in dashboard["templating"]["list"]:
        current = v["current"]["value"]
        variables[v["name"]] = Variable(v["name"], current)
        values[v["name"]] = None if current == [ALL] else current
    return variables, values


def _comparable(frame: pl.DataFrame) -> pl.DataFrame:
    """Times as epoch seconds, numbers as floats, rows sorted by the text and time keys."""
    columns = []
    for name, dtype in frame.schema.items():
        if dtype.is_temporal():
            columns.append(pl.col(name).dt.epoch("s").alias(name))
        elif dtype.is_numeric() and name != "time":
            columns.append(pl.col(name).cast(pl.Float64))
        else:
            columns.append(pl.col(name))
    frame = frame.select(columns)
    keys = [c for c, t in frame.schema.items() if t == pl.String or c == "time"]
    return frame.sort(keys).select(sorted(frame.columns)) if keys else frame


def _assert_same(panel_frame: pl.DataFrame, api_frame: pl.DataFrame, title: str) -> None:
    got, expected = _comparable(panel_frame), _comparable(api_frame)
    assert got.columns == expected.columns, title
    assert got.height == expected.height > 0, title
    for name in got.columns:
        for a, b in zip(got[name].to_list(), expected[name].to_list(), strict=True):
            if isinstance(a, float) and isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-9, abs=1e-12, nan_ok=True), (title, name)
            else:
                assert a == b, (title, name)


def test_every_panel_of_a_measure_is_rendered_from_a_question():
    """Only what no measure holds is SQL of its own: system tables, Prometheus samples,
    and the A/B interval (built on a question, tested below against `llmwh ab`)."""
    own = {
        (name, p["title"])
        for name, d in DASHBOARDS.items()
        for p in d["panels"]
        if p["targets"][0]["rawSql"] not in QUESTIONS
    }
    assert own == {
        ("ingest-health.json", "Ingestion lag"),
        ("ingest-health.json", "Seconds since the last write"),
        ("ingest-health.json", "Tables"),
        ("ingest-health.json", "Prometheus samples per interval by sample time"),
        ("ab-comparison.json", "Attainment difference against the control arm"),
    }


# Not a minute: a panel's buckets and rates must follow Grafana's interval.
INTERVAL = timedelta(minutes=2)


@pytest.mark.parametrize(("dashboard", "panel", "question"), ASKED)
def test_panel_answers_as_the_python_api(warehouse, dashboard, panel, question):
    variables, values = _defaults(DASHBOARDS[dashboard])
    seconds = INTERVAL.total_seconds()
    context = QueryContext(RAGGED.since, RAGGED.until, interval_seconds=seconds)
    values["__interval_s"] = seconds
    sql = interpolate(panel["targets"][0]["rawSql"], variables, context)
    shown = pl.from_arrow(warehouse.query_arrow(sql))
    rendered = render(question).plan
    # A panel reads raw rows where the planner would for some value of its variables
    # (it cannot change its tables by their values): its percentiles are then exact.
    asked = question.question(RAGGED, INTERVAL, values)
    if not rendered.rollup:
        asked = replace(asked, exact=True)
    answer = ask(warehouse, asked)
    _assert_same(shown, question.finish(pl.DataFrame(answer), values), panel["title"])
    # Panels read where the planner reads with every variable set: the same tables.
    every_set = {**values, **{name: ["a value"] for name in question.filters}}
    planned = compile_question(question.question(RAGGED, INTERVAL, every_set), SERVER, "llmwh").plan
    assert rendered.rollup == planned.rollup, (rendered.describe(), planned.describe())
    assert _tables(rendered) == _tables(planned)


def _tables(plan: Plan) -> list[str]:
    return list(dict.fromkeys(table for table, _ in plan.pieces))


@pytest.mark.parametrize(
    ("since", "until"),
    [
        pytest.param(
            timedelta(minutes=61, seconds=5), timedelta(minutes=61, seconds=50), id="seconds"
        ),
        pytest.param(
            timedelta(minutes=70, seconds=5), timedelta(minutes=118, seconds=30), id="minutes"
        ),
        pytest.param(timedelta(minutes=50, seconds=1), timedelta(minutes=130), id="across-an-hour"),
        pytest.param(timedelta(minutes=60), timedelta(minutes=120), id="aligned"),
        pytest.param(timedelta(seconds=1), timedelta(minutes=179, seconds=59), id="hours"),
    ],
)
def test_a_rollup_panel_counts_every_request_once_in_any_range(warehouse, since, until):
    """The cuts between a panel's pieces are SQL of the range's ends: whatever the range,
    the pieces tile it (a short range leaves the coarser pieces empty)."""
    question = PanelQuestion(["count", "error_count"], by=("model",))
    rendered = render(question)
    assert rendered.plan.pieces[0][0] == "requests_sla_1h"
    base = END.replace(minute=0) - timedelta(hours=2)
    window = TimeRange(base + since, base + until)
    sql = interpolate(rendered.sql, {}, QueryContext(window.since, window.until, 60))
    shown = pl.from_arrow(warehouse.query_arrow(sql))
    answer = ask(warehouse, question.question(window, timedelta(minutes=1), {}))
    _assert_same(shown, pl.DataFrame(answer), str(window))


@pytest.mark.parametrize("minutes", [0, 7, 49, 50, 51, 59])
def test_a_window_read_from_rollups_counts_every_request_once_wherever_it_ends(warehouse, minutes):
    """A window's cuts meet in some templates (here its start lands a minute before an
    hour): the panel's pieces must still tile the window at every end."""
    question = PanelQuestion(["count"], by=("model",), window=timedelta(hours=1, minutes=11))
    rendered = render(question)
    assert rendered.plan.rollup
    end = END.replace(minute=0) - timedelta(minutes=60 - minutes, seconds=17)
    window = TimeRange(RAGGED.since, end)
    sql = interpolate(rendered.sql, {}, QueryContext(window.since, window.until, 60))
    shown = pl.from_arrow(warehouse.query_arrow(sql))
    answer = ask(warehouse, question.question(window, timedelta(minutes=1), {}))
    _assert_same(shown, pl.DataFrame(answer), str(end))


def test_a_panel_ordered_by_a_rollup_percentile_keeps_its_order_and_limit(warehouse):
    question = PanelQuestion(
        ["count", "p95_ttft_ms"], by=("model",), order_by="-p95_ttft_ms", limit=2
    )
    rendered = render(question)
    assert rendered.plan.rollup
    sql = interpolate(rendered.sql, {}, QueryContext(RAGGED.since, RAGGED.until, 60))
    shown = warehouse.query_arrow(sql).to_pylist()
    answer = ask(warehouse, question.question(RAGGED, timedelta(minutes=1), {}))
    assert [r["model"] for r in shown] == answer["model"].to_list()
    assert len(shown) == 2


def test_ab_difference_panel_agrees_with_llmwh_ab(warehouse):
    dashboard = DASHBOARDS["ab-comparison.json"]
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("Attainment difference")]
    variables, values = _defaults(dashboard)
    context = QueryContext(RAGGED.since, RAGGED.until, interval_seconds=60)
    shown = warehouse.query_arrow(interpolate(panel["targets"][0]["rawSql"], variables, context))
    thresholds = {"ttft_ms": float(values["ttft_ms"]), "tpot_ms": float(values["tpot_ms"])}
    ab = compare_groups(warehouse, RAGGED, "attainment", "ab_group", a=values["control"],
                        thresholds=thresholds)  # fmt: skip
    expected = {row["b"]: row for row in ab.iter_rows(named=True)}
    rows = shown.to_pylist()
    assert [r["ab_group"] for r in rows] == sorted(expected)
    for row in rows:
        arm = expected[row["ab_group"]]
        assert row["count"] == arm["n_b"]
        for column, name in [
            ("attainment", "value_b"),
            ("control_attainment", "value_a"),
            ("difference", "difference"),
            ("ci_low", "low"),
            ("ci_high", "high"),
        ]:
            assert row[column] == pytest.approx(arm[name], rel=1e-9), column


# -- the expansion itself ---------------------------------------------------------------


def test_macro_expansion_follows_the_plugin():
    ctx = QueryContext(
        time_from=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
        time_to=datetime(2026, 1, 2, 4, 4, 5, tzinfo=UTC),
        interval_seconds=0.5,
    )
    f, t = 1767323045, 1767326645
    v = {"m": Variable("m", [ALL], ["a", "b"]), "r": Variable("r", ["x"], ["x", "y"])}
    assert interpolate("$__timeFilter(ts)", {}, ctx) == (
        f"ts >= toDateTime({f}) AND ts <= toDateTime({t})"
    )
    assert interpolate("$__timeFilter_ms(ts)", {}, ctx) == (
        f"ts >= fromUnixTimestamp64Milli({f}678) AND ts <= fromUnixTimestamp64Milli({t}000)"
    )
    # intervals below a second round up to one
    assert interpolate("$__timeInterval(ts)", {}, ctx) == (
        "toStartOfInterval(toDateTime(ts), INTERVAL 1 second)"
    )
    # a macro without arguments keeps a later bracket out of its match
    assert interpolate("count() / $__interval_s AS n WHERE f(x)", {}, ctx) == (
        "count() / 1 AS n WHERE f(x)"
    )
    assert interpolate("$__fromTime < $__toTime", {}, ctx) == (f"toDateTime({f}) < toDateTime({t})")
    # All drops the condition; values are quoted and joined by the plugin's format
    assert interpolate("$__conditionalAll(m IN (${m}), $m) AND model IN ($m)", v, ctx) == (
        "1=1 AND model IN ('a','b')"
    )
    assert interpolate("$__conditionalAll(r IN (${r}), $r)", v, ctx) == "r IN ('x')"
    with pytest.raises(ValueError, match="not expanded"):
        interpolate("$__timeGroup(ts, hour)", {}, ctx)
