"""`llmwh clickhouse start --shards N`: a real local cluster of embedded servers.

Every shard carries the same ``<remote_servers>``: a Distributed table on any shard
spreads inserts over all of them and answers from all.
"""

from __future__ import annotations

import pytest
from test_cli import llmwh

from warehouse.api import Warehouse
from warehouse.errors import QueryError
from warehouse.store import open_store
from warehouse.store.local_cluster import (
    cluster_status,
    remote_servers_xml,
    start_cluster,
    stop_cluster,
)


@pytest.fixture
def cluster(tmp_path):
    started = start_cluster(tmp_path / "cluster", shards=2, cluster="c2")
    yield started
    stop_cluster(tmp_path / "cluster")


def test_a_distributed_table_spreads_rows_over_both_shards_and_reads_them_all(cluster):
    shards = [open_store(url) for url in cluster.store_urls("default")]
    try:
        for shard in shards:
            shard.command("CREATE TABLE t_local (k UInt64, v String) ENGINE = MergeTree ORDER BY k")
        shards[0].command("CREATE TABLE t AS t_local ENGINE = Distributed(c2, default, t_local, k)")
        shards[0].command(
            "INSERT INTO t SELECT number, toString(number) FROM numbers(1000)",
            settings={"distributed_foreground_insert": 1},
        )
        local = [s.query_arrow("SELECT count() AS n FROM t_local")["n"][0].as_py() for s in shards]
        assert sum(local) == 1000 and min(local) > 300  # by k: about half each
        total = shards[0].query_arrow("SELECT count() AS n, sum(k) AS s FROM t")
        assert (total["n"][0].as_py(), total["s"][0].as_py()) == (1000, 499_500)
        clusters = shards[1].query_arrow(
            "SELECT count() AS n FROM system.clusters WHERE cluster = 'c2'"
        )
        assert clusters["n"][0].as_py() == 2
    finally:
        for shard in shards:
            shard.close()


def test_status_sees_the_cluster_and_a_shard_that_is_down(cluster, tmp_path):
    assert cluster_status(tmp_path / "cluster") == cluster
    status = llmwh("clickhouse", "status", "--data", str(tmp_path / "cluster"))
    assert status.returncode == 0 and "running: cluster c2, 2 shards" in status.stdout
    from warehouse.store.embedded import stop_server

    stop_server(cluster.shards[1].data_dir)
    assert cluster_status(tmp_path / "cluster") is None
    degraded = llmwh("clickhouse", "status", "--data", str(tmp_path / "cluster"))
    assert degraded.returncode == 1
    assert "degraded: cluster c2" in degraded.stdout and "shard 2: NOT RUNNING" in degraded.stdout


def test_the_cli_starts_and_stops_a_cluster(tmp_path):
    data = str(tmp_path / "cli")
    started = llmwh("clickhouse", "start", "--shards", "2", "--data", data,
                    "--http-port", "0", "--tcp-port", "0")  # fmt: skip
    try:
        assert started.returncode == 0, started.stderr
        assert "cluster llmwh: 2 shards" in started.stdout
        assert started.stdout.count("store URL http://127.0.0.1:") == 2
    finally:
        stopped = llmwh("clickhouse", "stop", "--data", data)
    assert stopped.stdout.count("stopped shard") == 2
    assert cluster_status(data) is None


def test_the_remote_servers_section_names_every_shard():
    xml = remote_servers_xml("c2", [9001, 9002])
    assert xml.count("<shard>") == 2 and "<port>9002</port>" in xml and "<c2>" in xml


def test_tenant_sql_on_a_cluster_is_refused_not_run_past_the_shards(cluster):
    # The shards would read as the user remote_servers names, where the tenant reader's
    # row policies do not apply.
    store = open_store(cluster.store_url())
    try:
        with pytest.raises(QueryError, match="cluster c2 is refused"):
            Warehouse(store, tenant="acme").sql("SELECT count() FROM requests")
    finally:
        store.close()
