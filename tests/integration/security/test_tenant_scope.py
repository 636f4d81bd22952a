"""Reading as a tenant: the Python API, `llmwh sql` and the CLI see that tenant's requests only."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import QueryError
from warehouse.store import open_store
from warehouse.synthetic import Incident, synthetic_requests

START = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
SPAN = timedelta(hours=2)
UNTIL = START + SPAN
TENANT = "globex"


@pytest.fixture(scope="module")
def traffic():
    # globex has an error burst: its figures differ from everyone's.
    return synthetic_requests(
        20_000,
        seed=6,
        start=START,
        span=SPAN,
        incidents=[Incident("tenant-errors", at=0.0, length=1.0)],
    )


@pytest.fixture(scope="module")
def loaded(module_migrated, traffic):
    """The traffic, written once per backend: the tests that take it only read."""
    Warehouse(module_migrated).insert_requests(traffic)
    return module_migrated


def own(traffic):
    mine = traffic.filter(pc.equal(traffic.column("tenant"), TENANT))
    return mine.filter(pc.invert(mine.column("is_probe")))


def test_every_measure_is_computed_over_the_tenants_requests_only(loaded, traffic):
    wh = Warehouse(loaded, Config(tenant=TENANT))
    everyone = Warehouse(loaded)
    mine = own(traffic)
    drilled = wh.drill(by=["model"], measures=["count", "error_rate"], since=START, until=UNTIL)
    assert drilled["count"].sum() == mine.num_rows
    by_tenant = wh.drill(by=["tenant"], since=START, until=UNTIL)
    assert by_tenant["tenant"].to_list() == [TENANT]
    series = wh.timeseries(["count"], interval="1h", since=START, until=UNTIL)
    assert series["count"].sum() == mine.num_rows
    causes = wh.root_cause(thresholds={"ttft_ms": 300}, since=START, until=UNTIL, limit=None)
    assert "tenant" not in causes.filter(causes["value"] != TENANT)["dimension"].to_list()
    assert causes.filter(dimension="model")["count"].sum() == mine.num_rows
    errors = everyone.drill(by=["tenant"], measures=["error_rate"], since=START, until=UNTIL)
    own_rate = wh.drill(measures=["error_rate"], since=START, until=UNTIL)["error_rate"].item()
    assert own_rate == pytest.approx(errors.filter(tenant=TENANT)["error_rate"].item())
    assert (
        own_rate
        > 2 * everyone.drill(measures=["error_rate"], since=START, until=UNTIL)["error_rate"].item()
    )


def test_asking_for_another_tenant_is_refused(loaded):
    wh = Warehouse(loaded, tenant=TENANT)
    with pytest.raises(QueryError, match="reads tenant 'globex' only; tenant acme is not readable"):
        wh.drill(filters={"tenant": ["globex", "acme"]}, since=START, until=UNTIL)
    assert wh.drill(filters={"tenant": TENANT}, since=START, until=UNTIL)["count"].item() > 0


def test_sql_as_a_tenant_needs_row_policies_and_is_refused_without(loaded):
    # Where no row policy holds (DuckDB, chdb in-process, a database the server has no
    # policies for), arbitrary SQL cannot be held to a tenant: it is refused, never run.
    # Under the policies: test_row_policies.py.
    reason = {
        "clickhouse": "needs ClickHouse row policies",
        "chdb": "no users, so no row policies",
        "duckdb": "DuckDB has no row policies",
    }
    kind = "chdb" if loaded.url.startswith("chdb") else loaded.capabilities.dialect
    with pytest.raises(QueryError, match=reason[kind]):
        Warehouse(loaded, tenant=TENANT).sql("SELECT count() FROM requests")


def test_a_dimension_named_like_a_column_never_unbinds_the_tenant(loaded, traffic):
    # attrs['tenant'] once came back as a column `tenant`, to which the tenant filter
    # then bound: every tenant's rows.
    wh = Warehouse(loaded, tenant=TENANT)
    drilled = wh.drill(by=["attrs['tenant']", "zone"], since=START, until=UNTIL)
    assert "attr_tenant" in drilled.columns
    assert drilled["count"].sum() == own(traffic).num_rows


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("SELECT name FROM system.tables", "system.tables is not tenant-scoped"),
        ("SELECT * FROM numbers(3)", "table functions are refused"),
        ("SHOW TABLES", "SHOW is refused when reading as a tenant"),
    ],
)
def test_sql_refuses_what_carries_no_tenant(loaded, sql, refusal):
    with pytest.raises(QueryError, match=refusal):
        Warehouse(loaded, tenant=TENANT).sql(sql)


def test_the_cli_reads_as_the_configured_tenant(embedded_server, traffic, tmp_path):
    url = embedded_server.store_url(f"tenant_{uuid.uuid4().hex[:10]}")
    with Warehouse(open_store(url)) as wh:
        wh.migrate()
        wh.insert_requests(traffic)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    env |= {"LLMWH_TENANT": TENANT, "LLMWH_STORE": url}
    done = subprocess.run(
        [sys.executable, "-m", "warehouse", "drill", "--by", "tenant", "--since", START.isoformat(),
         "--until", UNTIL.isoformat(), "--format", "csv"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [line.split(",")[0] for line in done.stdout.splitlines()[1:]] == [TENANT]
    refused = subprocess.run(
        [sys.executable, "-m", "warehouse", "sql", "SELECT name FROM system.tables"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 1 and "system.tables is not tenant-scoped" in refused.stderr
    store = open_store(url)
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()
