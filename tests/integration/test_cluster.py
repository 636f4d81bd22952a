"""The warehouse on a real two-shard cluster of embedded servers, against one node.

`llmwh migrate up` applies the schema to both shards (no Keeper here: each shard runs
its statements itself), the same requests go in through the cluster and into a single
node, and every question must get the same answer from both. A shard that is down
makes writes fail loudly and queries fail naming it; once it is back, retried writes
land once and nothing acknowledged is missing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import cramjam
import numpy as np
import polars as pl
import pyarrow.compute as pc
import pytest
from polling import poll_until, well_inside_a_minute

from warehouse.api import Warehouse, connect
from warehouse.errors import StoreError
from warehouse.ingest.events import encode_ndjson
from warehouse.ingest.remote_write import decode_v1
from warehouse.query import remote_read
from warehouse.store import open_store, schema
from warehouse.store.local_cluster import shard_states, start_cluster, start_shard, stop_cluster
from warehouse.synthetic import Incident, synthetic_requests
from warehouse.synthetic.samples import remote_write_body
from warehouse.wire.prometheus import READ, V1

START = (datetime.now(UTC) - timedelta(hours=4)).replace(minute=0, second=0, microsecond=0)
SPAN = timedelta(hours=3)
UNTIL = START + SPAN


@pytest.fixture(scope="module")
def traffic():
    return synthetic_requests(
        40_000, seed=17, start=START, span=SPAN, incidents=[Incident("zone-ttft", at=0.5)]
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    started = start_cluster(root, shards=2, cluster="c2")
    try:  # a migration that fails must not leave the shards' servers running
        done = subprocess.run(
            [sys.executable, "-m", "warehouse", "migrate", "up", "--store", started.store_url()],
            capture_output=True, text=True, timeout=300, cwd=root,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "each shard runs the statements itself" in done.stdout
        yield root, started
    finally:
        stop_cluster(root)


@pytest.fixture(scope="module")
def both(cluster, embedded_server, traffic):
    """(cluster warehouse, single-node warehouse), holding the same requests."""
    _, started = cluster
    on_cluster = Warehouse(open_store(started.store_url()))
    single = Warehouse(open_store(embedded_server.store_url(f"single_{uuid.uuid4().hex[:8]}")))
    single.migrate()
    for wh in (on_cluster, single):
        for batch in traffic.to_batches(max_chunksize=10_000):
            wh.insert_requests(pl.from_arrow(batch).to_arrow())
    yield on_cluster, single
    single.store.command(f"DROP DATABASE IF EXISTS {single.store.database}")
    on_cluster.close()
    single.close()


def assert_same(a: pl.DataFrame, b: pl.DataFrame, keys: list[str]) -> None:
    a, b = a.sort(keys), b.sort(keys)
    assert a.columns == b.columns and a.height == b.height > 0
    for column in a.columns:
        x, y = a[column], b[column]
        if x.dtype.is_float():
            np.testing.assert_allclose(x.to_numpy(), y.to_numpy(), rtol=1e-9, equal_nan=True)
        else:
            assert x.to_list() == y.to_list(), column


def test_the_schema_is_on_both_shards_and_rows_are_spread_over_them(cluster, both):
    _, started = cluster
    shards = [open_store(url) for url in started.store_urls()]
    try:
        local = [
            s.query_arrow("SELECT count() AS n FROM requests_local")["n"][0].as_py() for s in shards
        ]
        engines = {
            row["name"]: row["engine"]
            for row in shards[1]
            .query_arrow("SELECT name, engine FROM system.tables WHERE database = 'llmwh'")
            .to_pylist()
        }
    finally:
        for s in shards:
            s.close()
    assert sum(local) == 40_000 and min(local) > 15_000  # by request id: about half each
    assert engines["requests"] == "Distributed" and engines["requests_local"] == "MergeTree"
    assert (
        engines["requests_1m"] == "Distributed" and engines["requests_1m_mv"] == "MaterializedView"
    )


def test_migrate_status_reports_every_shard(cluster):
    _, started = cluster
    done = subprocess.run(
        [sys.executable, "-m", "warehouse", "migrate", "status", "--store", started.store_url()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "shard 1: " in done.stdout and "shard 2: " in done.stdout
    assert "pending" not in done.stdout and done.stdout.count(" applied ") >= 20


@pytest.mark.parametrize("exact", [True, None])
def test_drill_downs_and_time_series_match_a_single_node(both, exact):
    on_cluster, single = both
    for by in (["model"], ["model", "region"], ["tenant", "zone"]):
        args = dict(
            by=by,
            measures=["count", "error_rate", "p50_ttft_ms", "p95_ttft_ms", "p99_e2e_ms",
                      "kv_hit_ratio", "attainment"],
            thresholds={"ttft_ms": 300},
            since=START, until=UNTIL, exact=exact,
        )  # fmt: skip
        first, second = on_cluster.drill(**args), single.drill(**args)
        assert first.plan.source == second.plan.source
        assert_same(first, second, by)
    series = [
        wh.timeseries(["count", "p95_ttft_ms"], by=["zone"], interval="15m", since=START,
                      until=UNTIL, exact=exact)
        for wh in both
    ]  # fmt: skip
    assert_same(*series, ["time", "zone"])


def test_sla_and_root_cause_match_a_single_node(both):
    sla = [wh.sla("chat-assistant", by=["model"], since=START, until=UNTIL) for wh in both]
    assert_same(*sla, ["model"])
    causes = [
        wh.root_cause(thresholds={"ttft_ms": 300}, since=START, until=UNTIL, limit=None)
        for wh in both
    ]
    assert_same(*causes, ["dimension", "value"])
    assert causes[0].row(0, named=True)["value"] == "sh-b"


def test_ab_and_drift_match_a_single_node(both):
    for measure in ("attainment", "p95_ttft_ms"):
        arms = [
            wh.compare_groups(measure, a="control", thresholds={"ttft_ms": 300}, since=START,
                              until=UNTIL)
            for wh in both
        ]  # fmt: skip
        assert_same(*arms, ["b"])
    drift = [
        wh.drift("p95_ttft_ms", by=["zone"], interval="5m", since=START, until=UNTIL) for wh in both
    ]
    assert_same(*drift, ["time", "zone"])
    assert drift[0].filter(zone="sh-b")["alert"].any()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_shard_that_missed_a_migration_backfills_its_own_rows_only(cluster, both):
    """0012 rebuilds the rollups and backfills them: a shard that missed it rebuilds
    its own from its own requests, and no shard's rows are rolled up twice."""
    _, started = cluster
    on_cluster, _ = both
    rolled_up = "SELECT sum(requests) AS n FROM requests_sla_1h"
    before = on_cluster.store.query_arrow(rolled_up)["n"][0].as_py()
    shard2 = open_store(started.store_urls()[1])
    try:
        shard2.command(
            "ALTER TABLE schema_migrations DELETE WHERE version = 12",
            settings={"mutations_sync": 2},
        )
    finally:
        shard2.close()
    done = subprocess.run(
        [sys.executable, "-m", "warehouse", "migrate", "up", "--store", started.store_url()],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "applied 0012_lean_rollups" in done.stdout
    assert on_cluster.store.query_arrow(rolled_up)["n"][0].as_py() == before == 40_000


def post(url: str, body: bytes, content_type: str = "application/x-ndjson") -> int:
    request = urllib.request.Request(url, body, {"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:
        return 0  # not listening (yet)


def shard_pids(root) -> list[int | None]:
    """The pid of each shard's server, None where it does not run."""
    return [info.pid if info else None for _, info in shard_states(root)[1]]


def test_a_shard_down_fails_writes_and_queries_loudly_and_loses_nothing(cluster, tmp_path):
    root, started = cluster
    url = started.store_url(f"down_{uuid.uuid4().hex[:8]}")
    migrated = subprocess.run(
        [sys.executable, "-m", "warehouse", "migrate", "up", "--store", url],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    port = free_port()
    # --no-wal: a 2xx means committed on the shards, so a write to a shard that is down
    # is refused (with the log, the default, it would wait in the log for the shard).
    serve = subprocess.Popen(
        [sys.executable, "-m", "warehouse", "serve", "--store", url, "--no-wal",
         "--listen", f"127.0.0.1:{port}"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    events = f"http://127.0.0.1:{port}/api/v1/requests"
    now = datetime.now(UTC) - timedelta(minutes=30)
    bodies = [
        encode_ndjson(synthetic_requests(500, seed=100 + k, start=now, span=timedelta(minutes=5)))
        for k in range(4)
    ]
    store = open_store(url)
    try:
        poll_until(  # the first write, retried while `llmwh serve` starts
            lambda: post(events, bodies[0]),
            "`llmwh serve` to acknowledge the first write",
            until=lambda status: status == 200,
            timeout=60,
            every=0.5,
        )
        os.kill(started.shards[1].pid, signal.SIGKILL)  # shard 2 dies
        pids = poll_until(
            lambda: shard_pids(root),
            "the killed shard 2 to be down",
            until=lambda pids: pids[1] is None,
            timeout=30,
            every=0.05,
        )
        assert pids == [started.shards[0].pid, None]  # shard 1 runs on
        assert post(events, bodies[1]) >= 500  # not acknowledged: the sender keeps it
        with pytest.raises(StoreError, match=f"127.0.0.1:{started.shards[1].tcp_port}"):
            store.query_arrow("SELECT count() FROM requests")
        back = start_shard(root, 2)
        assert shard_pids(root) == [started.shards[0].pid, back.pid]
        for body in bodies[1:]:  # the sender retries; the last one is new
            assert post(events, body) == 200
        assert post(events, bodies[1]) == 200  # a retry after a lost answer: no change
        count = store.query_arrow("SELECT count() AS n FROM requests")["n"][0].as_py()
        assert count == 4 * 500  # every acknowledged request, once
        # Remote write goes through the cluster too: twice the same body of per-request
        # metrics, each request one part row per write, collapsing to one; no series.
        metrics = synthetic_requests(50, seed=7, start=now, span=timedelta(minutes=5))
        well_inside_a_minute()  # a repeat collapses within its minute of receipt
        for _ in range(2):
            assert post(f"http://127.0.0.1:{port}/api/v1/write", remote_write_body(metrics),
                        "application/x-protobuf") == 204  # fmt: skip
        users = metrics.num_rows - sum(metrics.column("is_probe").to_pylist())
        written = store.query_arrow("SELECT count() AS n FROM request_parts")["n"][0].as_py()
        assert written == 2 * users  # one row a request a write, not one a sample
        parts = store.query_arrow(
            "SELECT count() AS n, count(ttft_ms) AS ttft FROM request_parts FINAL"
        ).to_pylist()
        sent = metrics.filter(pc.invert(metrics.column("is_probe")))
        assert parts == [{"n": users, "ttft": sent.num_rows - sent.column("ttft_ms").null_count}]
        samples = store.query_arrow("SELECT count() AS n FROM samples")["n"][0].as_py()
        assert samples == 0
    finally:
        store.close()
        serve.terminate()
        serve.wait(timeout=60)


def test_the_python_api_migrates_every_shard_of_a_cluster(cluster):
    """Warehouse.migrate() on a cluster URL is `llmwh migrate up`: every shard gets every
    migration, local tables with Distributed ones over them, and a second call is a no-op."""
    _, started = cluster
    database = f"api_{uuid.uuid4().hex[:8]}"
    with connect(started.store_url(database)) as warehouse:
        applied = warehouse.migrate()
        assert [m.version for m in applied] == list(range(1, len(applied) + 1))
        assert warehouse.migrate() == []
        plan = schema.plan(warehouse.store, warehouse.config, every=True)
    first_create = next(s for _, statements in plan for s in statements if "CREATE TABLE" in s)
    assert "_local" in first_create  # the URL's cluster, without --cluster
    for url in started.store_urls(database):
        shard = open_store(url)
        try:
            versions = shard.query_arrow(f"SELECT count() AS n FROM {database}.schema_migrations")[
                "n"
            ][0].as_py()
            engines = {
                row["name"]: row["engine"]
                for row in shard.query_arrow(
                    "SELECT name, engine FROM system.tables WHERE database = {db:String} "
                    "AND name IN ('requests', 'requests_local')",
                    {"db": database},
                ).to_pylist()
            }
            assert versions == len(applied)
            assert engines == {"requests": "Distributed", "requests_local": "MergeTree"}
        finally:
            shard.command(f"DROP DATABASE IF EXISTS {database}")
            shard.close()


def test_slo_rollups_are_built_on_every_shard_and_answer_exactly(cluster, both):
    """`llmwh slo apply` on a cluster: each shard rolls up its own requests into local
    tables behind Distributed ones, and the report read from them equals raw rows."""
    _, started = cluster
    on_cluster, single = both
    done = subprocess.run(
        [sys.executable, "-m", "warehouse", "slo", "apply", "--slo", "chat-assistant",
         "--store", started.store_url()],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "built" in done.stdout
    shards = [open_store(url) for url in started.store_urls()]
    try:
        [table] = [
            row["name"]
            for row in shards[0]
            .query_arrow("SELECT name FROM system.tables WHERE database = 'llmwh' "
                         "AND match(name, '^slo_chat_assistant_[0-9a-f]{10}$')")
            .to_pylist()
        ]  # fmt: skip
        local = [
            s.query_arrow(f"SELECT sum(requests) AS n FROM llmwh.{table}_local")["n"][0].as_py()
            for s in shards
        ]
    finally:
        for s in shards:
            s.close()
    chat = traffic_in_scope(single)
    assert sum(local) == chat and min(local) > chat // 4  # each shard its own half
    since, until = START + timedelta(minutes=7, seconds=13.5), UNTIL - timedelta(seconds=41.25)
    rollup = on_cluster.sla("chat-assistant", by=["model"], since=since, until=until)
    raw = single.sla("chat-assistant", by=["model"], since=since, until=until, exact=True)
    assert table in rollup.plan.describe() and "raw requests" in rollup.plan.describe()
    exact = ["model", "count", "attainment", "budget_remaining", "compliance", "windows", "score"]
    decided = [c for c in raw.columns if c.endswith("_ok") or c.startswith("burn_rate_")]
    assert_same(rollup.select(exact + decided), raw.select(exact + decided), ["model"])
    [status] = on_cluster.slo_status().to_dicts()
    assert status["table"] == table and status["state"] == "complete"
    assert status["rows"] > 0 and status["bytes"] > 0


def traffic_in_scope(wh: Warehouse) -> int:
    found = wh.store.query_arrow(
        f"SELECT count() AS n FROM {wh.store.database}.requests "
        "WHERE service = 'chat' AND NOT is_probe"
    )
    return found["n"][0].as_py()


def test_remote_read_answers_on_a_cluster_as_on_a_single_node(both):
    """Series and samples are spread over the shards by series id; a read selects the
    series on every shard and joins each to its samples."""
    request = V1.WriteRequest()
    t0 = int((datetime.now(UTC) - timedelta(hours=1)).timestamp()) * 1000
    for k in range(120):
        series = request.timeseries.add()
        series.labels.add(name="__name__", value="vllm:num_requests_running")
        series.labels.add(name="model", value=f"model-{k % 7}")
        series.labels.add(name="pod", value=f"pod-{k}")
        for i in range(30):
            series.samples.add(timestamp=t0 + i * 15_000, value=float(k * 1000 + i))
    decoded = decode_v1(request.SerializeToString())
    for wh in both:
        for table, data in (("series", decoded.series), ("samples", decoded.samples)):
            wh.store.insert_arrow(table, data)
    on_cluster, single = both
    types = {"=": 0, "!=": 1, "=~": 2, "!~": 3}
    read = READ.ReadRequest(
        queries=[
            READ.Query(
                start_timestamp_ms=t0 + 60_000,
                end_timestamp_ms=t0 + 300_000,
                matchers=[
                    READ.LabelMatcher(type=types[op], name=name, value=value)
                    for name, op, value in matchers
                ],
            )
            for matchers in (
                [("__name__", "=", "vllm:num_requests_running")],
                [("model", "=~", "model-[1-3]"), ("pod", "!~", ".*5")],
            )
        ]
    )
    body = bytes(cramjam.snappy.compress_raw(read.SerializeToString()))
    answers = [
        READ.ReadResponse.FromString(
            bytes(cramjam.snappy.decompress_raw(remote_read.answer(wh.store, body, 10**6, 10**4)))
        )
        for wh in (on_cluster, single)
    ]
    assert answers[0] == answers[1]
    every, some = answers[0].results
    assert len(every.timeseries) == 120 and len(every.timeseries[0].samples) == 17
    assert 0 < len(some.timeseries) < 120
    shards = on_cluster.store.shard_urls
    held = [open_store(url).query_arrow("SELECT count() AS n FROM samples")["n"][0].as_py()
            for url in shards]  # fmt: skip
    assert len(held) == 2 and all(n > 0 for n in held)


def test_series_samples_answers_on_a_cluster_as_on_a_single_node(both):
    """The view joins each shard's samples to its series (both sharded by series id),
    and a Distributed table over the shards' views asks them all: each sample once."""
    request = V1.WriteRequest()
    t0 = int((datetime.now(UTC) - timedelta(hours=1)).timestamp()) * 1000
    for k in range(60):
        series = request.timeseries.add()
        series.labels.add(name="__name__", value="vllm:gpu_cache_usage_perc")
        series.labels.add(name="pod", value=f"pod-{k}")
        for i in range(20):
            series.samples.add(timestamp=t0 + i * 15_000, value=float(k * 100 + i))
    decoded = decode_v1(request.SerializeToString())
    for wh in both:
        for _ in range(2):  # the series rows twice, as a refresh writes them again
            wh.store.insert_arrow("series", decoded.series)
        wh.store.insert_arrow("samples", decoded.samples)
    question = (
        "SELECT labels['pod'] AS pod, count() AS n, sum(value) AS total FROM {db}.series_samples "
        "WHERE metric_name = 'vllm:gpu_cache_usage_perc' GROUP BY pod"
    )
    on_cluster, single = (
        pl.from_arrow(wh.store.query_arrow(question.format(db=wh.store.database))) for wh in both
    )
    assert_same(on_cluster, single, ["pod"])
    assert on_cluster.height == 60 and on_cluster["n"].to_list() == [20] * 60
    shards = both[0].store.query_arrow(
        f"SELECT count(DISTINCT _shard_num) AS n FROM {both[0].store.database}.series_samples"
    )
    assert shards["n"][0].as_py() == 2
