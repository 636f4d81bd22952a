"""The Grafana provisioning files and dashboards in integrations/grafana/.

Every panel's SQL (and every variable's) is expanded as grafana-clickhouse-datasource
expands it (see grafana_macros.py), with its variables set to All and to a concrete
value, and run on the embedded ClickHouse server against generated traffic; its result
must have the shape its panel type needs.
"""

from __future__ import annotations

import importlib.util
import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_macros import ALL, QueryContext, Variable, interpolate

from warehouse.store import Store, open_store
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

GRAFANA = Path(__file__).resolve().parents[2] / "integrations" / "grafana"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "llmwh-clickhouse"}
END = datetime.now(UTC).replace(second=0, microsecond=0)
START = END - timedelta(hours=3)
CONTEXT = QueryContext(time_from=START, time_to=END, interval_seconds=60)

NUMERIC = re.compile(r"^(Nullable\()?(U?Int\d+|Float\d+|Decimal.*)\)?$")
LABEL = re.compile(r"^(Nullable\()?(LowCardinality\()?(Nullable\()?String\)*$")


def _load_build():
    spec = importlib.util.spec_from_file_location("llmwh_grafana_build", GRAFANA / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DASHBOARDS: dict[str, dict[str, Any]] = {
    path.name: json.loads(path.read_text())
    for path in sorted((GRAFANA / "dashboards").glob("*.json"))
}
PANELS = [
    pytest.param(name, p, id=f"{name[:-5]}:{p['title']}")
    for name, d in DASHBOARDS.items()
    for p in d["panels"]
]


# -- files ------------------------------------------------------------------------------


def test_dashboard_files_are_built_from_build_py():
    assert _load_build().render() == {
        name: (GRAFANA / "dashboards" / name).read_text() for name in DASHBOARDS
    }, "run: python integrations/grafana/build.py"


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
