"""Named queries (`sql/`): each runs on every store with the same answer, its parameters
are checked with errors that name them, a file that writes is refused, and the file runs
unchanged with ClickHouse's own query parameters, as clickhouse-client sends them."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from days import DAY, at
from grafana_macros import QueryContext, Variable, interpolate
from stores import BACKENDS, fresh_store, store_url
from typer.testing import CliRunner

from warehouse.api import Warehouse
from warehouse.cli import app
from warehouse.errors import QueryError
from warehouse.ingest.remote_write import DecodedWrite, decode_v1
from warehouse.query.named import bind, for_grafana, named_queries, read_query
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.incidents import Incident
from warehouse.wire.prometheus import V1

START = at(8)
SPAN = timedelta(hours=3)
WINDOW = {"since": START.isoformat(), "until": (START + SPAN).isoformat()}
TODAY = datetime.now(UTC).replace(microsecond=0)
RECENT = {"since": (TODAY - timedelta(days=1)).isoformat(), "until": TODAY.isoformat()}
"""The window of the parts' arrival (ingest_lag_by_node): the last day."""
NODES_LAG_MS = {"gpu-node-1": 400, "gpu-node-2": 2_500, "gpu-node-3": 9_000}
"""How late each node's remote-written parts arrive, for ingest_lag_by_node."""


def parts() -> pa.Table:
    """Per-request parts as the receiver lands them in the last hours (they are kept two
    days), each node's later than the last."""
    recent = TODAY - timedelta(hours=3)
    rows = [
        (node, recent + timedelta(seconds=7 * k), lag + k)
        for node, lag in NODES_LAG_MS.items()
        for k in range(50)
    ]
    return pa.table(
        {
            "tenant": ["acme"] * len(rows),
            "request_id": [f"{node}-{k}" for k, (node, _, _) in enumerate(rows)],
            "first_ts": pa.array([t for _, t, _ in rows], pa.timestamp("ms", "UTC")),
            "received": pa.array(
                [t + timedelta(milliseconds=lag) for _, t, lag in rows], pa.timestamp("ms", "UTC")
            ),
            "node": [node for node, _, _ in rows],
            "status_rank": pa.array([0] * len(rows), pa.uint8()),
            "attrs": pa.array([[]] * len(rows), pa.map_(pa.string(), pa.string())),
        }
    )


DOWN_POD = "pod-2"
"""Of the `up` series (latest_by_series), the one whose last scrape failed."""


def scrapes() -> DecodedWrite:
    """Four pods' `up` over the window, a scrape every 15 s, each pod at its own offset
    (its last scrape the later the higher its number); pod-2's last scrape failed."""
    request = V1.WriteRequest()
    for k in range(4):
        series = request.timeseries.add()
        for name, value in (("__name__", "up"), ("job", "vllm"), ("pod", f"pod-{k}")):
            series.labels.add(name=name, value=value)
        first = int(START.timestamp() * 1000) + k * 1000
        times = range(first, int((START + SPAN).timestamp() * 1000), 15_000)
        for n, ms in enumerate(times):
            down = f"pod-{k}" == DOWN_POD and n == len(times) - 1
            series.samples.add(timestamp=ms, value=0.0 if down else 1.0)
    return decode_v1(request.SerializeToString())


@pytest.fixture(scope="module")
def loaded(embedded_server, chdb_path, tmp_path_factory):
    """The same requests and parts on every store."""
    traffic = synthetic_requests(
        20_000,
        seed=23,
        start=START,
        span=SPAN,
        incidents=[
            Incident("tenant-errors", at=0.3, length=0.2),
            Incident("zone-ttft", at=0.6, length=0.2),
        ],
    )
    folder = tmp_path_factory.mktemp("named")
    stores = {}
    with (
        fresh_store(store_url("clickhouse", embedded_server, chdb_path, folder)) as clickhouse,
        fresh_store(store_url("chdb", embedded_server, chdb_path, folder)) as chdb,
        fresh_store(store_url("duckdb", embedded_server, chdb_path, folder)) as duckdb,
    ):
        for name, store in zip(BACKENDS, (clickhouse, chdb, duckdb), strict=True):
            Migrator(store).up()
            if store.capabilities.dialect == "clickhouse":
                # The parts stay parts: sealing them into requests is not what this tests.
                store.command(f"SYSTEM STOP VIEW {store.database}.request_parts_seal")
            store.insert_arrow("requests", traffic)
            store.insert_arrow("request_parts", parts())
            written = scrapes()
            for _ in range(2):  # a series row again, as a refresh writes it: unmerged
                store.insert_arrow("series", written.series)
            store.insert_arrow("samples", written.samples)
            stores[name] = Warehouse(store)
        yield stores


def same(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.columns == b.columns and a.height == b.height
    for column in a.columns:
        x, y = a[column], b[column]
        if x.dtype.is_temporal():
            x, y = x.dt.epoch("ms"), y.dt.epoch("ms")
        if x.dtype.is_float() or y.dtype.is_float():
            np.testing.assert_allclose(
                x.cast(pl.Float64).to_numpy(), y.cast(pl.Float64).to_numpy(), rtol=1e-6,
                equal_nan=True, err_msg=column,
            )  # fmt: skip
        else:
            assert x.to_list() == y.to_list(), column


@pytest.mark.parametrize("name", [q.name for q in named_queries()])
def test_every_named_query_gives_the_same_answer_on_every_store(loaded, name):
    window = RECENT if name == "ingest_lag_by_node" else WINDOW
    answers = {backend: wh.named_query(name, **window) for backend, wh in loaded.items()}
    first = answers["clickhouse"]
    assert first.height > 0, f"{name} found nothing in the generated data"
    for backend in ("chdb", "duckdb"):
        same(first, answers[backend])


def test_the_queries_find_what_the_data_holds(loaded):
    wh = loaded["duckdb"]
    lag = wh.named_query("ingest_lag_by_node", **RECENT)
    assert lag["node"].to_list() == ["gpu-node-3", "gpu-node-2", "gpu-node-1"]  # latest first
    assert lag["max_lag_ms"].to_list() == [9_049, 2_549, 449]
    slowest = wh.named_query("slowest_requests", limit="5", **WINDOW)
    assert slowest.height == 5 and slowest["e2e_ms"].is_sorted(descending=True)
    burned = wh.named_query("tenants_by_budget_burned", ttft_ms="300", target="0.99", **WINDOW)
    assert burned["budget_burned"].is_sorted(descending=True)
    last = int((START + SPAN).timestamp() * 1000) - 1
    for backend in ("clickhouse", "duckdb"):
        up = loaded[backend].named_query("latest_by_series", **WINDOW)
        pods = up["labels"].to_list()
        assert [p["pod"] for p in pods] == [DOWN_POD, "pod-0", "pod-1", "pod-3"]
        assert up["value"].to_list() == [0.0, 1.0, 1.0, 1.0]
        stamps = up["last_sample"].dt.epoch("ms").to_list()
        assert all(last - 15_000 < t <= last for t in stamps)


def test_the_file_runs_unchanged_with_clickhouse_query_parameters(loaded, embedded_server):
    """What `clickhouse-client --param_since=... --param_until=...` sends: the file's text
    and each parameter as text, bound by the server itself."""
    wh = loaded["clickhouse"]
    query = read_query("threshold_breaches_by_region")
    text = {
        "since": f"{DAY:%Y-%m-%d} 08:00:00",
        "until": f"{DAY:%Y-%m-%d} 11:00:00",
        "ttft_ms": "250",
    }
    url = f"http://127.0.0.1:{embedded_server.http_port}/?" + urllib.parse.urlencode(
        {"database": wh.store.database, "default_format": "JSONCompact"}
        | {f"param_{k}": v for k, v in text.items()}
    )
    with urllib.request.urlopen(urllib.request.Request(url, data=query.text.encode())) as r:
        served = json.loads(r.read())["data"]
    ours = wh.named_query("threshold_breaches_by_region", **text)
    # JSON carries 64-bit integers as strings.
    assert [[str(v) for v in row[:3]] for row in served] == [
        [str(v) for v in row] for row in ours.select("region", "requests", "breaches").rows()
    ]
    assert len(served) == 3


@pytest.mark.parametrize("name", [q.name for q in named_queries()])
def test_a_grafana_panel_runs_the_same_file_with_the_dashboards_range(loaded, name):
    """`llmwh query show NAME --grafana`: the dashboard's time range and variables (at
    the parameters' defaults) in place of the parameters, expanded as the ClickHouse
    data source expands them, give the answer `llmwh query run` gives."""
    window = RECENT if name == "ingest_lag_by_node" else WINDOW
    wh = loaded["clickhouse"]
    query = read_query(name)
    variables = {
        p.name: Variable(p.name, p.default or "")
        for p in query.parameters
        if p.name not in ("since", "until")
    }
    since, until = (datetime.fromisoformat(window[end]) for end in ("since", "until"))
    context = QueryContext(time_from=since, time_to=until)
    panel = wh.sql(interpolate(for_grafana(query), variables, context))
    same(panel, wh.named_query(name, **window))
    assert panel.height > 0


def test_parameters_are_checked_and_named_in_the_error():
    query = read_query("slowest_requests")
    with pytest.raises(QueryError, match="slowest_requests has no parameter 'limt'"):
        bind(query, {"limt": "3"})
    with pytest.raises(QueryError, match="parameter limit is a UInt32, not '-3'"):
        bind(query, {"limit": "-3"})
    with pytest.raises(QueryError, match="parameter limit is a UInt32, not 'ten'"):
        bind(query, {"limit": "ten"})
    with pytest.raises(QueryError, match="parameter since: bad time 'yesterday'"):
        bind(query, {"since": "yesterday"})
    with pytest.raises(QueryError, match="parameter ttft_ms is a Float64, not 'nan'"):
        bind(read_query("threshold_breaches_by_region"), {"ttft_ms": "nan"})
    values = bind(query, {"since": "2h"}, now=START + timedelta(microseconds=1500))
    since, until = START - timedelta(hours=2), START + timedelta(milliseconds=1)
    assert values == {"since": since + timedelta(milliseconds=1), "until": until, "limit": 20}


def test_a_parameter_without_a_default_must_be_given(tmp_path):
    path = tmp_path / "by_tenant.sql"
    path.write_text(
        "-- name: by_tenant\n-- answers: One tenant's requests.\n"
        "-- param tenant String: the tenant\n"
        "SELECT count() FROM requests WHERE tenant = {tenant:String}\n"
    )
    with pytest.raises(QueryError, match=r"by_tenant needs parameter tenant \(String\)"):
        bind(read_query(path), {})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("INSERT INTO requests SELECT * FROM requests", "INSERT is refused"),
        ("DROP TABLE requests", "DROP is refused"),
        ("SELECT {n:UInt32}", r"\{n:UInt32\} is not declared"),
        ("-- param n UInt32 = 1: unused\nSELECT 1", "n is declared but not used"),
        ("-- param n Decimal(9, 2) = 1: a number\nSELECT {n:Decimal(9, 2)}", "has type"),
    ],
)
def test_a_bad_query_file_is_refused_before_it_runs(tmp_path, body, message):
    path = tmp_path / "mine.sql"
    path.write_text(f"-- name: mine\n-- answers: Something.\n{body}\n")
    with pytest.raises(QueryError, match=message):
        read_query(path)


def test_every_shipped_query_says_what_it_answers_and_what_its_parameters_mean():
    for query in named_queries():
        assert query.path.stem == query.name and len(query.answers) > 40
        for parameter in query.parameters:
            assert parameter.default is not None and parameter.help, (query.name, parameter)


def test_the_cli_lists_shows_and_runs_named_queries(loaded, monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("LLMWH_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    url = loaded["clickhouse"].store.url

    def run(*args: str) -> tuple[int, str]:
        """Exit code, and the output or the error `llmwh` would print."""
        result = CliRunner().invoke(app, ["query", *args])
        error = "" if result.exception is None else str(result.exception)
        return result.exit_code, result.stdout + error

    code, listed = run("list", "--format", "json")
    assert code == 0
    assert {row["name"] for row in json.loads(listed)} == {q.name for q in named_queries()}
    code, shown = run("show", "tokens_by_tenant")
    assert code == 0 and shown == read_query("tokens_by_tenant").text
    window = ["-p", f"since={WINDOW['since']}", "-p", f"until={WINDOW['until']}"]
    code, out = run("run", "tokens_by_tenant", *window, "--format", "json", "--store", url)
    assert code == 0
    expected = loaded["clickhouse"].named_query("tokens_by_tenant", **WINDOW)
    assert [r["requests"] for r in json.loads(out)] == expected["requests"].to_list()
    code, out = run("run", "tokens_by_tenant", "-p", "limit=3", "--store", url)
    assert code == 1 and "tokens_by_tenant has no parameter 'limit'" in out
    code, out = run("run", "no_such_query", "--store", url)
    assert code == 1 and "no named query 'no_such_query'" in out
    writes = Path(tmp_path / "w.sql")
    writes.write_text("-- name: w\n-- answers: Nothing good.\nTRUNCATE TABLE requests\n")
    code, out = run("run", str(writes), "--store", url)
    assert code == 1 and "refused" in out
    assert loaded["clickhouse"].sql("SELECT count() AS n FROM requests")["n"][0] == 20_000
