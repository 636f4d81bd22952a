"""Migration 0023 on a real two-shard cluster: every row rekeyed lands on the shard of its
new id, where later writes of its series land too, and every answer stays the same."""

from __future__ import annotations

import hashlib
import time

import pyarrow as pa
import pytest

from warehouse.config import Config
from warehouse.errors import MigrationError
from warehouse.ingest.remote_write import decode_v1
from warehouse.ingest.remote_write_tables import series_key
from warehouse.store import open_store, schema
from warehouse.store.cluster_migrations import ClusterMigrator
from warehouse.store.local_cluster import start_cluster, stop_cluster
from warehouse.wire.prometheus import V1

T0 = (int(time.time()) // 3600 - 2) * 3_600_000  # within the samples' TTL


def body() -> bytes:
    request = V1.WriteRequest()
    for target in range(6):
        for metric in ("up", "node_cpu_seconds_total", "http_requests_total"):
            for cpu in range(4):
                series = request.timeseries.add()
                for name, value in (
                    ("__name__", metric),
                    ("job", "node"),
                    ("instance", f"host-{target}:9100"),
                    ("cpu", str(cpu)),
                ):
                    series.labels.add(name=name, value=value)
                for i in range(5):
                    series.samples.add(timestamp=T0 + i * 15_000, value=float(target * 100 + i))
    return request.SerializeToString()


def old_ids(table: pa.Table, series: pa.Table) -> pa.Table:
    """``table`` with the ids the code before 0023 gave its series."""
    renamed = {}
    for new, metric, labels in zip(
        series.column("id").to_pylist(),
        series.column("metric_name").to_pylist(),
        series.column("labels").to_pylist(),
        strict=True,
    ):
        digest = hashlib.md5(series_key(metric, dict(labels))).digest()
        renamed[new.bytes] = digest[7::-1] + digest[15:7:-1]
    ids = [renamed[u.bytes] for u in table.column("id").to_pylist()]
    return table.set_column(0, table.schema.field(0), pa.array(ids, pa.binary(16)).cast(pa.uuid()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    started = start_cluster(root, shards=2, cluster="c2")
    try:
        yield started
    finally:
        stop_cluster(root)


def test_a_cluster_upgrade_moves_each_row_to_the_shard_of_its_new_id(cluster):
    store = open_store(cluster.store_url())
    shards = [open_store(url) for url in cluster.store_urls()]
    try:
        schema.migrate(store, Config())
        decoded = decode_v1(body())
        # Written as before 0023 (its tables then differed only in codecs).
        store.insert_arrow("series", old_ids(decoded.series, decoded.series))
        store.insert_arrow("samples", old_ids(decoded.samples, decoded.series))
        store.command("SYSTEM FLUSH DISTRIBUTED series")
        store.command("SYSTEM FLUSH DISTRIBUTED samples")
        read = (
            "SELECT metric_name, labels, timestamp, value FROM series_samples "
            "ORDER BY metric_name, toString(labels), timestamp"
        )
        before = store.query_arrow(read)
        assert before.num_rows == 72 * 5
        held = [s.query_arrow("SELECT count() AS n FROM samples")["n"][0].as_py() for s in shards]
        assert all(held)
        for shard in shards:  # as if 0023 had not been applied yet
            shard.command(
                "ALTER TABLE schema_migrations DELETE WHERE version = 23",
                settings={"mutations_sync": 2},
            )

        update = schema.migrate(store, Config())

        assert [m.version for m in update.applied] == [23]
        assert store.query_arrow(read).equals(before)
        # The same series written now land where the rekeyed rows are: one shard each.
        store.insert_arrow("series", decoded.series)
        store.insert_arrow("samples", decoded.samples)
        store.command("SYSTEM FLUSH DISTRIBUTED series")
        store.command("SYSTEM FLUSH DISTRIBUTED samples")
        spread = store.query_arrow(
            "SELECT max(n) AS most, count() AS ids FROM "
            "(SELECT id, uniqExact(_shard_num) AS n FROM samples GROUP BY id)"
        ).to_pylist()[0]
        assert spread == {"most": 1, "ids": 72}
        series = store.query_arrow(
            "SELECT count() AS n FROM "
            "(SELECT id FROM series GROUP BY id HAVING uniqExact(_shard_num) > 1)"
        )
        assert series["n"][0].as_py() == 0
        assert store.query_arrow(read).num_rows == 72 * 5  # FINAL: written again, once
        for shard in shards:
            assert not shard.query_arrow(
                "SELECT name FROM system.tables WHERE database = currentDatabase() "
                "AND name LIKE '%rekey%'"
            ).num_rows
        # A shard that took it alone would move rows to shards that dropped their copies.
        shards[1].command(
            "ALTER TABLE schema_migrations DELETE WHERE version = 23",
            settings={"mutations_sync": 2},
        )
        with pytest.raises(MigrationError, match="every shard must take it together"):
            ClusterMigrator(shards, "c2", Config()).up()
    finally:
        for s in (store, *shards):
            s.close()
