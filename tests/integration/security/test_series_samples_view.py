"""A tenant reading `series_samples` sees its own samples only, merged or not.

The view is ``SQL SECURITY INVOKER``: ClickHouse reads `samples` and `series` as the
tenant, under their row policies (a definer's view would read them as `default`, every
tenant's rows). acme and bravo each remote-write the same series names through two
receivers, so `series` holds each series twice until merged; bravo's labels carry a
secret. acme reads the view straight on its store (the policies alone), through
`Warehouse.sql` (both walls), and with an expression that would fail on a bravo row.
"""

from __future__ import annotations

import time

import cramjam
import pytest
from asgi import Client
from stores import fresh_store, server_database

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import QueryError, StoreError
from warehouse.serve import build_app
from warehouse.store.migrations import Migrator
from warehouse.wire.prometheus import V1

V1_TYPE = "application/x-protobuf"
NOW_MS = (int(time.time()) - 600) * 1000
SECRET = "bravo-secret-pod"
SAMPLES = 6
"""Per series: 0-3 in the first write, 3-5 in the second (3 twice, a retry)."""


def body(tenant: str, first: int, last: int) -> bytes:
    request = V1.WriteRequest()
    for k in range(2):
        series = request.timeseries.add()
        pod = f"{SECRET}-{k}" if tenant == "bravo" else f"acme-pod-{k}"
        for name, value in (("__name__", "up"), ("job", "api"), ("pod", pod)):
            series.labels.add(name=name, value=value)
        for i in range(first, last + 1):
            value = 100.0 + i if tenant == "bravo" else float(i)
            series.samples.add(value=value, timestamp=NOW_MS + i * 1000)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


@pytest.fixture
def written(embedded_server):
    """acme's and bravo's series, each written by two receivers, with merges stopped."""
    with fresh_store(embedded_server.store_url(server_database())) as store:
        Migrator(store).up()
        for table in ("series", "samples"):
            store.command(f"SYSTEM STOP MERGES {store.database}.{table}")
        for first, last in ((0, 3), (3, SAMPLES - 1)):
            # No write-ahead log: each write is read back as soon as it is answered.
            client = Client(build_app(store, Config(tenant_header="X-Scope-OrgID", wal=False)))
            try:
                for tenant in ("acme", "bravo"):
                    answer = client.post("/api/v1/write", body(tenant, first, last),
                                         content_type=V1_TYPE, x_scope_orgid=tenant)  # fmt: skip
                    assert answer.status == 204, answer.body
            finally:
                client.close()
        series = store.query_arrow(f"SELECT count() AS n FROM {store.database}.series")
        assert series["n"][0].as_py() == 2 * 2 * 2  # two tenants, two series, two rows each
        yield store


def assert_acme_sees_its_own_only(store) -> None:
    acme = store.as_tenant("acme")
    rows = acme.query_arrow(
        "SELECT tenant, labels['pod'] AS pod, value FROM series_samples ORDER BY pod, value"
    ).to_pylist()
    assert rows == [
        {"tenant": "acme", "pod": f"acme-pod-{k}", "value": float(i)}
        for k in range(2)
        for i in range(SAMPLES)
    ]
    try:  # an expression that would fail on, and print, one of bravo's rows
        acme.query_arrow(
            "SELECT count() FROM series_samples "
            "WHERE throwIf(tenant != 'acme', toString(labels)) = 0"
        )
    except StoreError as error:
        assert "bravo" not in str(error), error
    answer = Warehouse(store, tenant="acme").sql(
        "SELECT tenant, count() AS n, max(value) AS top FROM series_samples GROUP BY tenant"
    )
    assert answer.to_dicts() == [{"tenant": "acme", "n": 2 * SAMPLES, "top": SAMPLES - 1.0}]
    with pytest.raises(QueryError, match="is not tenant-scoped"):
        Warehouse(store, tenant="acme").sql("SELECT * FROM series_samples_local")


def test_a_tenant_reads_its_own_samples_through_the_view_merged_or_not(written):
    everyone = written.query_arrow(
        f"SELECT DISTINCT tenant FROM {written.database}.series_samples ORDER BY tenant"
    )
    assert everyone["tenant"].to_pylist() == ["acme", "bravo"]  # the view holds both
    assert_acme_sees_its_own_only(written)
    for table in ("series", "samples"):
        written.command(f"SYSTEM START MERGES {written.database}.{table}")
        written.command(f"OPTIMIZE TABLE {written.database}.{table} FINAL")
    series = written.query_arrow(f"SELECT count() AS n FROM {written.database}.series")
    assert series["n"][0].as_py() == 2 * 2  # merged: one row a series
    assert_acme_sees_its_own_only(written)
