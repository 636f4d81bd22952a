"""Tenants held apart by ClickHouse: SQL as a tenant runs under row policies.

Two tenants, acme and bravo, share every table, merged into the same parts (so a
predicate evaluated beside the tenant filter would see both). Each attack is first run
straight on the tenant's store, past the SQL rewriter, so that what holds is the engine
alone; then through `Warehouse.sql` and the CLI, behind both walls.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from stores import TENANCY_DATABASE

from warehouse.api import Warehouse
from warehouse.errors import QueryError, StoreError
from warehouse.store import open_store
from warehouse.store.embedded import start_server, stop_server
from warehouse.store.tenancy import TENANT_TABLES
from warehouse.synthetic import synthetic_requests

NOW = datetime.now(UTC).replace(microsecond=0)
START = max(NOW - timedelta(hours=2), NOW.replace(hour=0, minute=0, second=0))
"""The requests' hour starts here: within one day, so that they are one partition, which
OPTIMIZE merges into one part holding both tenants (an hour across midnight was two)."""
SECRET = "bravo-secret-model"


def _requests(tenant: str, model: str, n: int) -> pa.Table:
    rows = synthetic_requests(n, seed=len(tenant), start=START, span=timedelta(hours=1))
    for name, value in (("tenant", tenant), ("model", model)):
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, rows.schema.field(name), pa.repeat(value, n))
    ids = pa.array([f"{tenant}-req-{i}" for i in range(n)])
    return rows.set_column(rows.schema.get_field_index("request_id"), "request_id", ids)


def _series(tenant: str) -> tuple[pa.Table, pa.Table]:
    ids = [uuid.uuid4() for _ in range(3)]
    when = pa.array([NOW] * 3, pa.timestamp("ms", "UTC"))
    labels = [[("__name__", "up"), ("__tenant__", tenant), ("pod", f"{tenant}-pii-{k}")]
              for k in range(3)]  # fmt: skip
    series = pa.table({
        "id": pa.array([i.bytes for i in ids], pa.binary(16)),
        "metric_name": ["up"] * 3,
        "labels": pa.array(labels, pa.map_(pa.string(), pa.string())),
        "min_time": when, "max_time": when,
    })  # fmt: skip
    samples = pa.table({"id": series["id"], "timestamp": when, "value": [1.0, 2.0, 3.0]})
    return series, samples


@pytest.fixture(scope="module")
def shared(embedded_server):
    """acme (40 requests) and bravo (60), their series, merged into shared parts."""
    store = open_store(embedded_server.store_url(TENANCY_DATABASE))
    store.command(f"DROP DATABASE IF EXISTS {TENANCY_DATABASE} SYNC")
    store.close()
    store = open_store(embedded_server.store_url(TENANCY_DATABASE))
    wh = Warehouse(store)
    wh.migrate()
    for tenant, model, n in (("acme", "acme-model", 40), ("bravo", SECRET, 60)):
        wh.insert_requests(_requests(tenant, model, n))
        series, samples = _series(tenant)
        store.insert_arrow("series", series)
        store.insert_arrow("samples", samples)
    for table in TENANT_TABLES:
        store.command(f"OPTIMIZE TABLE {TENANCY_DATABASE}.{table} FINAL")
    parts = store.query_arrow(
        "SELECT count() AS n FROM system.parts WHERE database = {db:String} "
        "AND table = 'requests' AND active",
        {"db": TENANCY_DATABASE},
    )
    assert parts["n"][0].as_py() == 1  # both tenants in one part
    yield store
    store.command(f"DROP DATABASE IF EXISTS {TENANCY_DATABASE} SYNC")
    store.close()


@pytest.fixture(scope="module")
def acme(shared):
    return shared.as_tenant("acme")


FILLED = ("requests", "requests_1m", "requests_1h", "requests_sla_1h", "series", "samples")
"""The tenant tables the fixture fills (the others carry the same policies: see
test_reading_as_a_tenant_is_refused_where_no_policy_holds)."""


def test_every_tenant_table_shows_a_tenant_its_own_rows_only(shared, acme):
    for table in FILLED:
        everyone = shared.query_arrow(f"SELECT count() AS n FROM {table}")["n"][0].as_py()
        own = acme.query_arrow(f"SELECT count() AS n FROM {table}")["n"][0].as_py()
        assert everyone > own > 0, table
    tenants = acme.query_arrow("SELECT DISTINCT tenant FROM requests")["tenant"].to_pylist()
    assert tenants == ["acme"]
    pods = acme.query_arrow("SELECT DISTINCT labels['pod'] AS pod FROM series")["pod"]
    assert all(pod.startswith("acme-") for pod in pods.to_pylist())


ORACLES = [
    # A failing cast would print the row it failed on.
    "SELECT count() FROM requests WHERE if(model = 'acme-model', 0, "
    "toUInt8(concat(model, '|', request_id, '|', toString(attrs)))) = 1",
    "SELECT count() FROM requests WHERE throwIf(tenant != 'acme') = 0",
    "SELECT count() FROM requests PREWHERE throwIf(model != 'acme-model') = 0",
    "SELECT count() FROM (SELECT * FROM requests) WHERE throwIf(tenant != 'acme') = 0",
    "SELECT count() FROM requests_1m WHERE throwIf(tenant != 'acme') = 0",
    "SELECT count() FROM samples WHERE throwIf(value > 3) = 0",
    "SELECT count() FROM series WHERE throwIf(labels['__tenant__'] != 'acme') = 0",
    "SELECT count() FROM requests AS a JOIN requests AS b ON a.request_id = b.request_id "
    "WHERE throwIf(b.tenant != 'acme') = 0",
    # A range condition that would walk bravo's rows one by one.
    "SELECT count() FROM requests WHERE request_id > 'bravo-req-5' AND throwIf(1) = 0",
]


@pytest.mark.parametrize("sql", ORACLES)
def test_no_expression_ever_sees_another_tenants_row(acme, sql):
    try:
        answer = acme.query_arrow(sql)
    except StoreError as error:
        assert "bravo" not in str(error) and SECRET not in str(error)
    else:
        assert "bravo" not in str(answer.to_pylist())


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count() FROM requests SETTINGS allow_get_client_http_header = 0",
        "SELECT count() FROM requests SETTINGS readonly = 0",
        "SELECT count() FROM requests SETTINGS use_query_cache = 1",
        "SELECT count() FROM metric_metadata",
        "SELECT * FROM system.query_log",
        "SELECT * FROM system.parts",
        "SELECT * FROM file('/etc/passwd')",
        "SELECT * FROM url('http://127.0.0.1:1/x', CSV, 'a String')",
        "SELECT * FROM remote('127.0.0.1', system.one)",
        "SELECT * FROM mergeTreeIndex(currentDatabase(), 'requests')",
        "SELECT dictGet('nothing', 'a', 1)",
        "INSERT INTO requests (tenant) VALUES ('acme')",
        "CREATE TABLE x (a Int8) ENGINE = Memory",
    ],
)
def test_the_engine_refuses_what_would_reach_past_the_policies(acme, sql):
    with pytest.raises(StoreError):
        acme.query_arrow(sql)


def test_a_tenant_store_without_its_header_sees_nothing(shared, embedded_server):
    # As the reader, with no tenant named: the policies match no row.
    url = embedded_server.store_url(TENANCY_DATABASE).replace("http://", "http://llmwh_tenant@")
    reader = open_store(url)
    try:
        assert reader.query_arrow("SELECT count() AS n FROM requests")["n"][0].as_py() == 0
    finally:
        reader.close()


FINDINGS = [
    # An adversarial pass's reads across tenants (each once returned bravo's rows).
    "WITH (SELECT 1) AS requests SELECT tenant, request_id, model, attrs FROM requests "
    "WHERE tenant = 'bravo' LIMIT 3",
    "WITH (SELECT 1) AS series SELECT * FROM series",
    "SELECT count() FROM requests WHERE globalIn(model, samples)",
    "SELECT count() FROM requests WHERE notIn(model, metric_metadata)",
]


@pytest.mark.parametrize("sql", [*FINDINGS, *ORACLES])
def test_sql_as_a_tenant_returns_nothing_of_another(shared, sql):
    wh = Warehouse(shared, tenant="acme")
    try:
        answer = wh.sql(sql)
    except (QueryError, StoreError) as error:
        assert "bravo" not in str(error) and SECRET not in str(error)
    else:
        assert "bravo" not in str(answer.rows())


def test_a_tenant_reads_a_datetime_as_a_time(shared):
    """As for the warehouse's own reads (tests/integration/test_cli_query.py): the
    DateTime ClickHouse sends as UInt32 seconds comes back a time, under the policies."""
    answer = Warehouse(shared, tenant="acme").sql(
        "SELECT toStartOfHour(min(ts)) AS first_hour, toUInt32(7) AS n FROM requests;"
    )
    assert answer.schema["first_hour"].is_temporal() and answer["n"].to_list() == [7]


def test_reading_as_a_tenant_is_refused_where_no_policy_holds(embedded_server):
    other = open_store(embedded_server.store_url(f"nopolicy_{uuid.uuid4().hex[:8]}"))
    try:
        Warehouse(other).migrate()
        with pytest.raises(QueryError, match="needs ClickHouse row policies"):
            Warehouse(other, tenant="acme").sql("SELECT count() FROM requests")
        with pytest.raises(QueryError, match="needs ClickHouse row policies"):
            Warehouse(other, tenant="acme").drill(["tenant"])  # nor the warehouse's own
    finally:
        other.command(f"DROP DATABASE IF EXISTS {other.database} SYNC")
        other.close()


def test_the_cli_reads_as_its_tenant_under_the_policies(shared, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    env |= {"LLMWH_TENANT": "acme", "LLMWH_STORE": shared.url}

    def llmwh(*args):
        return subprocess.run([sys.executable, "-m", "warehouse", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip

    listed = llmwh("sql", "SELECT DISTINCT tenant FROM requests", "--format", "csv")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["tenant", "acme"]
    for sql in (FINDINGS[0], ORACLES[0]):
        done = llmwh("sql", sql, "--format", "csv")
        assert "bravo" not in done.stdout + done.stderr
    query = tmp_path / "peek.sql"
    query.write_text(
        f"-- name: peek\n-- answers: another tenant's rows, if it could\n{FINDINGS[0]}\n"
    )
    done = llmwh("query", "run", str(query), "--format", "csv")
    assert done.returncode == 1 and "WITH may not name requests" in done.stderr
    assert "bravo" not in done.stdout + done.stderr
    empty = subprocess.run([sys.executable, "-m", "warehouse", "sql", "SELECT 1"],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={**env, "LLMWH_TENANT": ""}, timeout=120)  # fmt: skip
    assert empty.returncode != 0 and "setting tenant is empty" in empty.stderr


def test_an_slo_rollup_is_read_as_a_tenant_once_the_server_covers_it(tmp_path):
    # The embedded server fixes its policies at start: a rollup built while it runs is
    # left to the base rollups for a tenant's reads, and read as the tenant once the
    # server has restarted. Its totals, which sum every tenant, are never readable.
    data = tmp_path / "server"
    server = start_server(data, http_port=0, tcp_port=0)
    try:
        with Warehouse(open_store(server.store_url())) as wh:
            wh.migrate()
            for tenant, model, n in (("acme", "acme-model", 400), ("bravo", SECRET, 600)):
                wh.insert_requests(_requests(tenant, model, n))
            (applied,) = wh.slo_apply(["chat-assistant"])
            everyone = wh.sla("chat-assistant", by=["tenant"], since="3h")
        rollup = applied.table

        def as_acme():
            with Warehouse(open_store(server.store_url()), tenant="acme") as acme:
                return acme.sla("chat-assistant", by=["tenant"], since="3h")

        before = as_acme()
        assert before["tenant"].to_list() == ["acme"]
        assert rollup not in str(before.plan)
        stop_server(data)
        server = start_server(data, http_port=0, tcp_port=0)
        after = as_acme()
        assert rollup in str(after.plan)
        (expected,) = everyone.filter(everyone["tenant"] == "acme").to_dicts()
        (got,) = after.to_dicts()
        # Float sums may be added in another order once the data is read again (1 ulp).
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            same = (
                math.isclose(got[key], value, rel_tol=1e-12)
                if isinstance(value, float)
                else got[key] == value
            )
            assert same, (key, got[key], value)
        assert after["count"].to_list() == before["count"].to_list()
        reader = open_store(server.store_url()).as_tenant("acme")
        counted = reader.query_arrow(f"SELECT DISTINCT tenant FROM {rollup}_1h")
        assert counted["tenant"].to_pylist() == ["acme"]
        with pytest.raises(StoreError, match="Not enough privileges"):
            reader.query_arrow(f"SELECT * FROM {rollup}_1h_total")
    finally:
        stop_server(data)
