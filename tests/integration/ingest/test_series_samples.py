"""`series_samples`: remote-written samples with their labels, each once, merged or not.

Two receivers write the same series in two batches, the second repeating a sample of
the first (a retried write): `series` then holds each series twice and `samples` one
sample twice, until ClickHouse merges them (merges are stopped here, so they have not).
"""

from __future__ import annotations

import time
from datetime import datetime

import cramjam

from warehouse.wire.prometheus import V1

V1_TYPE = "application/x-protobuf"
NOW_MS = (int(time.time()) - 600) * 1000  # recent: older samples fall to the TTL
PODS = ("p0", "p1", "p2")


def body(first: int, last: int) -> bytes:
    """Each pod's `up` series, samples ``first`` to ``last`` (a second apart)."""
    request = V1.WriteRequest()
    for pod in PODS:
        series = request.timeseries.add()
        for name, value in (("__name__", "up"), ("job", "api"), ("pod", pod)):
            series.labels.add(name=name, value=value)
        for k in range(first, last + 1):
            series.samples.add(value=float(k), timestamp=NOW_MS + k * 1000)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def read_view(store) -> list[tuple]:
    answer = store.query_arrow(
        f"SELECT tenant, metric_name, labels, timestamp, value FROM {store.database}.series_samples"
    )
    return sorted(
        (r["tenant"], r["metric_name"], sorted(r["labels"]), ms(r["timestamp"]), r["value"])
        for r in answer.to_pylist()
    )


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def count(store, sql: str) -> int:
    return store.query_arrow(sql.format(db=store.database)).column(0)[0].as_py()


def test_each_sample_once_with_its_labels_before_and_after_merges(migrated, client_for):
    db = migrated.database
    clickhouse = migrated.capabilities.collapsing_engines
    if clickhouse:
        for table in ("series", "samples"):
            migrated.command(f"SYSTEM STOP MERGES {db}.{table}")
    # Two receivers, as after a restart: each writes the series rows it has not seen.
    for first, last in ((0, 4), (4, 9)):
        response = client_for(migrated).post(
            "/api/v1/write", body(first, last), content_type=V1_TYPE
        )
        assert response.status == 204, response.body
    assert count(migrated, "SELECT count() FROM {db}.series") == 2 * len(PODS)
    joined = "SELECT count() FROM {db}.samples AS s JOIN {db}.series AS r ON r.id = s.id"
    assert count(migrated, joined) > 10 * len(PODS)  # the trap the view avoids

    expected = sorted(
        ("", "up", [("job", "api"), ("pod", pod)], NOW_MS + k * 1000, float(k))
        for pod in PODS
        for k in range(10)
    )
    assert read_view(migrated) == expected
    if clickhouse:
        for table in ("series", "samples"):
            migrated.command(f"SYSTEM START MERGES {db}.{table}")
            migrated.command(f"OPTIMIZE TABLE {db}.{table} FINAL")
        assert count(migrated, "SELECT count() FROM {db}.series") == len(PODS)
        assert read_view(migrated) == expected
