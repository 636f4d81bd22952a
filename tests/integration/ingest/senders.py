"""Helpers shared by the tests in which real senders (Prometheus, vmagent) write to
`llmwh serve`."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import struct
import urllib.request

import pytest
from polling import poll_until

from warehouse.store import open_store

RUN_SECONDS = 20
STALE_NAN = struct.pack("<Q", 0x7FF0000000000002)


def comparable(value: float) -> float | str:
    """NaN never equals itself; the API spells every NaN the same, so compare it as a word."""
    return "NaN" if math.isnan(value) else value


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("LLMWH_REQUIRE_SYSTEM_DEPS"):
            pytest.fail(f"{name} is required here (CI) but not installed")
        pytest.skip(f"{name} is not installed: `make system-deps` (root) installs it")
    return path


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(url: str, timeout: float = 30) -> None:
    """Wait until ``url`` answers 2xx (a server is up and ready)."""
    poll_until(
        lambda: urllib.request.urlopen(url, timeout=1).close() or True,
        f"{url} to answer",
        timeout=timeout,
        ignoring=(OSError,),
    )


def warehouse_samples(url: str, start: float, end: float) -> set[tuple]:
    store = open_store(url)
    try:
        rows = store.query_arrow(
            f"""
            SELECT s.metric_name AS name, s.labels AS labels,
                   toUnixTimestamp64Milli(p.timestamp) AS ms, p.value AS value
            FROM {store.database}.samples AS p FINAL
            INNER JOIN (SELECT id, any(metric_name) AS metric_name, any(labels) AS labels
                        FROM {store.database}.series GROUP BY id) AS s ON s.id = p.id
            WHERE p.timestamp BETWEEN fromUnixTimestamp64Milli({int(start * 1000)})
                                  AND fromUnixTimestamp64Milli({int(end * 1000)})
            """
        ).to_pylist()
    finally:
        store.close()
    samples = set()
    for row in rows:
        if struct.pack("<d", row["value"]) == STALE_NAN:
            continue  # staleness markers: stored, but Prometheus's query API never shows them
        labels = tuple(sorted([*dict(row["labels"]).items(), ("__name__", row["name"])]))
        samples.add((labels, row["ms"], comparable(row["value"])))
    return samples
