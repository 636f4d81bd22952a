"""Every way a tenant reads, tried as a hostile tenant would: nothing of another leaves.

acme and bravo share one database on the embedded server (whose tables carry the row
policies), their requests and series merged into the same parts. acme then asks through
each surface (the Python API, named queries, the CLI, `/report`, `/`, `/slo/<name>`, remote
read and the SLA exporter) with every trick in the book: naming bravo in filters, parameters and
matchers, dimensions that shadow the tenant column, grouping by what would expose bravo's
values. Each answer, or each error, must hold nothing of bravo's: not its name, its
model, its request ids, its attributes or its series' labels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import cramjam
import pyarrow as pa
import pytest
from asgi import Client
from prometheus_client import CollectorRegistry, generate_latest
from stores import fresh_store, server_database

from warehouse.api import Warehouse
from warehouse.config import Config
from warehouse.errors import WarehouseError
from warehouse.exporters.sla import SLAExporter
from warehouse.query.slo import load_slo
from warehouse.serve import build_app
from warehouse.synthetic import synthetic_requests
from warehouse.wire.prometheus import READ, V1

NOW = datetime.now(UTC).replace(microsecond=0)
HEADER = "X-Scope-OrgID"
MARKS = ("bravo",)
"""Every value of bravo's carries its name: its tenant, model, request ids, attributes
and series labels. None may reach acme."""
VALUES = ("bravo-model", "bravo-req-", "bravo-pii-", "bravo-pod-")
"""bravo's values that acme never names: a refusal may repeat what acme asked for (the
tenant bravo), never these."""


def _requests(tenant: str, n: int) -> pa.Table:
    rows = synthetic_requests(n, seed=len(tenant), start=NOW - timedelta(hours=2),
                              span=timedelta(hours=2))  # fmt: skip
    columns = {
        "tenant": pa.repeat(tenant, n),
        "service": pa.repeat("chat", n),  # every request in chat-assistant's scope
        "model": pa.repeat(f"{tenant}-model", n),
        "request_id": pa.array([f"{tenant}-req-{i}" for i in range(n)]),
        # acme's own attributes name another tenant: a dimension read from them must
        # never become the column the tenant filter binds to.
        "attrs": pa.array(
            [[("tenant", "globex"), ("pii", f"{tenant}-pii-{i}")] for i in range(n)],
            pa.map_(pa.string(), pa.string()),
        ),
    }
    for name, values in columns.items():
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(
            index, rows.schema.field(name), values.cast(rows.schema.field(name).type)
        )
    return rows


def _write_body(tenant: str) -> bytes:
    request = V1.WriteRequest()
    for k in range(3):
        series = request.timeseries.add()
        labels = (("__name__", "up"), ("job", "vllm"), ("pod", f"{tenant}-pod-{k}"),
                  ("__tenant__", "bravo"))  # a spoofed label: the header decides  # fmt: skip
        for name, value in labels:
            series.labels.add(name=name, value=value)
        series.samples.add(value=float(k), timestamp=int(NOW.timestamp() * 1000) - 60_000)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


@pytest.fixture(scope="module")
def shared(embedded_server):
    """The store, and a multi-tenant receiver on it, with both tenants' data merged."""
    with fresh_store(embedded_server.store_url(server_database())) as store:
        wh = Warehouse(store)
        wh.migrate()
        for tenant, n in (("acme", 300), ("bravo", 500)):
            wh.insert_requests(_requests(tenant, n))
        # No write-ahead log: what a write stored is read back as soon as it is answered.
        config = Config(tenant_header=HEADER, slos="chat-assistant", wal=False)
        client = Client(build_app(store, config))
        try:
            for tenant in ("acme", "bravo"):
                written = client.post("/api/v1/write", _write_body(tenant),
                                      content_encoding="snappy", x_scope_orgid=tenant)  # fmt: skip
                assert written.status == 204, written.text
            for table in ("requests", "requests_1m", "requests_1h", "series", "samples"):
                store.command(f"OPTIMIZE TABLE {table} FINAL")
            yield store, client
        finally:
            client.close()


def _read(client: Client, *matchers: tuple[str, int, str]) -> str:
    query = READ.Query(
        start_timestamp_ms=int((NOW - timedelta(hours=1)).timestamp() * 1000),
        end_timestamp_ms=int(NOW.timestamp() * 1000),
        matchers=[READ.LabelMatcher(name=n, type=t, value=v) for n, t, v in matchers],
    )
    body = READ.ReadRequest(queries=[query]).SerializeToString()
    answer = client.post("/api/v1/read", bytes(cramjam.snappy.compress_raw(body)),
                         content_encoding="snappy", x_scope_orgid="acme")  # fmt: skip
    if answer.status != 200:
        return f"{answer.status} {answer.text}"
    return str(READ.ReadResponse.FromString(bytes(cramjam.snappy.decompress_raw(answer.body))))


def _exported(store, by: list[str]) -> str:
    exporter = SLAExporter(Warehouse(store, tenant="acme"), [load_slo("chat-assistant")], by)
    exporter.refresh()
    registry = CollectorRegistry()
    registry.register(exporter)
    return generate_latest(registry).decode()


DIMENSIONS = ["tenant", "model", "request_id", "attrs['tenant']", "attrs['pii']", "ab_group"]
API = {
    **{f"drill by {d}": lambda wh, d=d: wh.drill([d], since="3h") for d in DIMENSIONS},
    **{
        f"exact drill by {d}": lambda wh, d=d: wh.drill([d], since="3h", exact=True)
        for d in DIMENSIONS
    },
    "drill filtered to bravo": lambda wh: wh.drill(
        ["model"], filters={"tenant": "bravo"}, since="3h"
    ),
    "drill filtered to bravo's model": lambda wh: wh.drill(
        [], ["count"], {"model": "bravo-model"}, "3h"
    ),
    "drill by a shadowing attribute, filtered": lambda wh: wh.drill(
        ["attrs['tenant']"], filters={"attrs['tenant']": "bravo"}, since="3h"
    ),
    "timeseries by tenant": lambda wh: wh.timeseries(["count"], ["tenant"], "30m", since="3h"),
    "sla by tenant": lambda wh: wh.sla("chat-assistant", ["tenant"], since="3h"),
    "sla by model": lambda wh: wh.sla("chat-assistant", ["model"], since="3h"),
    "root cause": lambda wh: wh.root_cause(
        thresholds={"ttft_ms": 1},
        since="3h",
        limit=None,
        dimensions=["tenant", "model"],
        min_share=0,
    ),
    "A/B by tenant": lambda wh: wh.compare_groups("count", "tenant", "acme", since="3h"),
    "A/B against bravo": lambda wh: wh.compare_groups(
        "count", "tenant", "acme", "bravo", since="3h"
    ),
    "drift by model": lambda wh: wh.drift("count", ["model"], "10m", since="3h", baseline=3),
    "sql": lambda wh: wh.sql("SELECT DISTINCT tenant, model FROM requests"),
    "sql with a shadowing CTE": lambda wh: wh.sql(
        "WITH (SELECT 1) AS requests SELECT request_id FROM requests WHERE tenant = 'bravo'"
    ),
    "sql error oracle": lambda wh: wh.sql(
        "SELECT count() FROM requests WHERE throwIf(tenant != 'acme', request_id) = 0"
    ),
    "sql series": lambda wh: wh.sql("SELECT labels FROM series"),
    "named query": lambda wh: wh.named_query("slowest_requests", since="3h"),
}
PAGES = {
    "report by tenant": "/report?slo=chat-assistant&since=3h&by=tenant",
    "report by model": "/report?slo=chat-assistant&since=3h&by=model",
    "report by a shadowing attribute": "/report?slo=chat-assistant&since=3h&by=attrs['tenant']",
    "overview": "/",
    "an SLO's page": "/slo/chat-assistant",
}
READS = {
    "every series": [("__name__", 0, "up")],
    "bravo's tenant label": [("__tenant__", 0, "bravo")],
    "bravo's pods by pattern": [("pod", 2, "bravo.*")],
    "every name by pattern": [("__name__", 2, ".+")],
}
EXPORTS = {
    "by tenant": ["tenant"],
    "by model": ["model"],
    "by tenant and model": ["tenant", "model"],
}


def _attempts() -> dict[str, Callable]:
    attempts: dict[str, Callable] = {}
    for name, ask in API.items():
        attempts[f"api: {name}"] = lambda store, client, ask=ask: ask(
            Warehouse(store, tenant="acme")
        )
    for name, path in PAGES.items():
        attempts[f"page: {name}"] = lambda store, client, path=path: (
            client.get(path, x_scope_orgid="acme").text
        )
    for name, matchers in READS.items():
        attempts[f"remote read: {name}"] = lambda store, client, m=matchers: _read(client, *m)
    for name, by in EXPORTS.items():
        attempts[f"exporter: {name}"] = lambda store, client, by=by: _exported(store, by)
    return attempts


ATTEMPTS = _attempts()


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_nothing_of_another_tenant_leaves_through_any_surface(shared, attempt):
    store, client = shared
    try:
        answer = ATTEMPTS[attempt](store, client)
    except WarehouseError as refused:
        assert not any(value in str(refused) for value in VALUES), str(refused)
        return
    shown = str(answer.rows() if hasattr(answer, "rows") else answer)
    assert not any(mark in shown for mark in MARKS), shown[:2000]
    if attempt in ("api: drill by tenant", "api: sla by tenant", "page: report by tenant"):
        assert "acme" in shown  # the tenant's own data does come back


@pytest.mark.parametrize("dimension", ["tenant", "attrs['tenant']", "model"])
def test_the_cli_drills_as_its_tenant(shared, dimension, tmp_path):
    store, _ = shared
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    env |= {"LLMWH_TENANT": "acme", "LLMWH_STORE": store.url}
    done = subprocess.run(
        [sys.executable, "-m", "warehouse", "drill", "--by", dimension, "--since", "3h",
         "--format", "csv"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "acme" in done.stdout or "globex" in done.stdout
    assert not any(mark in done.stdout + done.stderr for mark in MARKS)
