"""Reading as a tenant: the Python API, `llmwh sql` and the CLI see that tenant's requests only."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import polars as pl
import pyarrow.compute as pc
import pytest
from stores import fresh_store, server_database

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import QueryError
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


def test_on_the_server_the_engine_holds_the_tenant_without_the_warehouses_filter(
    loaded, traffic, monkeypatch
):
    # The warehouse's reads carry the tenant as a filter; on the server they also run as
    # the tenant, under row policies. With the filter gone, the policies still hold.
    monkeypatch.setattr(Warehouse, "scoped", lambda self, filters: dict(filters or {}))
    wh = Warehouse(loaded, tenant=TENANT)
    window = {"since": START, "until": UNTIL}
    seen = {
        "drill": wh.drill(["tenant"], **window)["tenant"],
        "timeseries": wh.timeseries(["count"], by=["tenant"], interval="1h", **window)["tenant"],
        "sla": wh.sla("chat-assistant", by=["tenant"], **window)["tenant"],
        "root cause": wh.root_cause(
            thresholds={"ttft_ms": 300}, dimensions=["tenant"], limit=None, min_share=0, **window
        ).filter(pl.col("dimension") == "tenant")["value"],
    }
    for read, tenants in seen.items():
        if loaded.capabilities.row_policies:
            assert set(tenants) <= {TENANT} and len(tenants), read
        else:  # no row policies (DuckDB, chdb in-process): the filter is the only wall
            assert len(set(tenants)) > 1, read


def test_asking_for_another_tenant_is_refused(loaded):
    wh = Warehouse(loaded, tenant=TENANT)
    with pytest.raises(QueryError, match="reads tenant 'globex' only; tenant acme is not readable"):
        wh.drill(filters={"tenant": ["globex", "acme"]}, since=START, until=UNTIL)
    assert wh.drill(filters={"tenant": TENANT}, since=START, until=UNTIL)["count"].item() > 0


def test_sql_as_a_tenant_runs_under_row_policies_and_is_refused_without(loaded, traffic):
    # Where no row policy holds (DuckDB, chdb in-process; a database the server has no
    # policies for: test_row_policies.py), arbitrary SQL cannot be held to a tenant: it is
    # refused, never run.
    wh = Warehouse(loaded, tenant=TENANT)
    if loaded.capabilities.row_policies:
        counted = wh.sql("SELECT count() AS n FROM requests")["n"].item()
        assert counted == pc.sum(pc.equal(traffic.column("tenant"), TENANT)).as_py()
        return
    reason = "no users, so no row policies" if loaded.url.startswith("chdb") else "DuckDB has"
    with pytest.raises(QueryError, match=reason):
        wh.sql("SELECT count() FROM requests")


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
    url = embedded_server.store_url(server_database())
    with fresh_store(url) as store:
        Warehouse(store).migrate()
        Warehouse(store).insert_requests(traffic)
        _read_as_the_configured_tenant(url, tmp_path)


def _read_as_the_configured_tenant(url, tmp_path):
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
