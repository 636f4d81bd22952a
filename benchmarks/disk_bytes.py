"""Bytes on disk of what a receiver stored, after its merges: llmwh, Prometheus and
VictoriaMetrics as benchmarks/remote_write.py starts them (a data directory under
``root``, an HTTP port). Used by remote_write.py and bytes_per_sample.py.

* llmwh: ``OPTIMIZE ... FINAL`` of the tables, then the active parts' ``bytes_on_disk``
  (``system.parts``) and, per column, ``system.parts_columns``.
* Prometheus (run with ``--web.enable-admin-api``): the admin API's snapshot with
  ``skip_head=false`` writes the head as a block beside the blocks already compacted;
  the snapshot's block directories (chunks, index, meta.json, tombstones), whose
  ``meta.json`` count the samples.
* VictoriaMetrics: ``/internal/force_flush`` and ``/internal/force_merge`` (every
  partition), then ``/metrics`` polled until no merge is active and the parts stop
  changing; its ``data/`` and ``indexdb/``.

Bytes are file sizes (not blocks allocated), each inode once.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from warehouse.store import open_store
from warehouse.store.base import Store
from warehouse.store.embedded import server_status

MERGE_TIMEOUT_S = 600.0


def get(url: str, method: str = "GET", timeout: float = 600) -> bytes:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def file_bytes(path: Path) -> int:
    """Sizes of the files under ``path`` (each inode once); 0 when it is missing."""
    seen, total = set(), 0
    for f in path.rglob("*"):
        if f.is_file() and not f.is_symlink():
            st = f.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def wait_committed(port: int, timeout: float = 300) -> None:
    """With a write-ahead log (when this llmwh has one on), wait until it is inserted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = get(f"http://127.0.0.1:{port}/metrics", timeout=10).decode().splitlines()
        # One line, or one a receiver process (--workers: labelled worker="i").
        pending = [ln for ln in lines if ln.startswith("llmwh_receiver_wal_pending_bytes")]
        if all(float(ln.split()[-1]) == 0 for ln in pending):
            return
        time.sleep(0.2)
    raise RuntimeError("the write-ahead log still held writes")


def llmwh_store(root: Path) -> Store:
    info = server_status(root / "data")
    if info is None:
        raise RuntimeError("the embedded ClickHouse is not running")
    return open_store(info.store_url())


def table_bytes(store: Store, tables: tuple[str, ...] | None = None) -> dict[str, dict[str, int]]:
    """Active parts per table of the store's database (``tables``: only those)."""
    rows = store.query_arrow(
        "SELECT table, sum(bytes_on_disk) AS bytes, sum(rows) AS rows, count() AS parts, "
        "sum(data_compressed_bytes) AS compressed, sum(data_uncompressed_bytes) AS raw "
        "FROM system.parts WHERE active AND database = {db:String} "
        "AND (empty({t:Array(String)}) OR has({t:Array(String)}, table)) GROUP BY table",
        {"db": store.database, "t": list(tables or ())},
    ).to_pylist()
    return {r.pop("table"): {k: int(v) for k, v in r.items()} for r in rows}


def column_bytes(store: Store, tables: tuple[str, ...]) -> list[dict[str, Any]]:
    """Active parts per column of ``tables`` (wide parts only: compact parts report 0)."""
    rows = store.query_arrow(
        "SELECT table, column, any(type) AS type, "
        "sum(column_data_compressed_bytes) AS compressed, "
        "sum(column_data_uncompressed_bytes) AS raw, sum(column_bytes_on_disk) AS bytes "
        "FROM system.parts_columns WHERE active AND database = {db:String} "
        "AND has({t:Array(String)}, table) GROUP BY table, column ORDER BY table, column",
        {"db": store.database, "t": list(tables)},
    ).to_pylist()
    return [
        {**r, "compressed": int(r["compressed"]), "raw": int(r["raw"]), "bytes": int(r["bytes"])}
        for r in rows
    ]


def llmwh(root: Path, port: int, tables: tuple[str, ...] | None = None) -> dict[str, Any]:
    """``tables`` (default: every table of the database) merged, and their bytes."""
    wait_committed(port)
    store = llmwh_store(root)
    try:
        names = tables or tuple(table_bytes(store))
        for table in names:
            store.command(f"OPTIMIZE TABLE {store.database}.`{table}` FINAL")
        measured = table_bytes(store, names)
        return {"bytes": sum(t["bytes"] for t in measured.values()), "tables": measured}
    finally:
        store.close()


def prometheus(root: Path, port: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    answer = json.loads(get(f"{base}/api/v1/admin/tsdb/snapshot?skip_head=false", "POST"))
    snapshot = root / "data" / "snapshots" / answer["data"]["name"]
    blocks = [d for d in sorted(snapshot.iterdir()) if (d / "meta.json").exists()]
    samples = series = chunks = index = 0
    for block in blocks:
        meta = json.loads((block / "meta.json").read_text())
        samples += meta["stats"].get("numSamples", 0)
        series += meta["stats"].get("numSeries", 0)
        chunks += file_bytes(block / "chunks")
        index += (block / "index").stat().st_size
    return {
        "bytes": file_bytes(snapshot),
        "stored_samples": samples,
        "blocks": len(blocks),
        "block_series": series,
        "chunks_bytes": chunks,
        "index_bytes": index,
    }


def _vm_metrics(base: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in get(f"{base}/metrics", timeout=30).decode().splitlines():
        if line.startswith(("vm_active_merges", "vm_parts", "vm_rows{", "vm_pending_rows")):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def victoria_metrics(root: Path, port: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    get(f"{base}/internal/force_flush")
    get(f"{base}/internal/force_merge")  # every partition
    deadline = time.monotonic() + MERGE_TIMEOUT_S
    previous: dict[str, float] = {}
    calm = 0
    while calm < 3:
        if time.monotonic() > deadline:
            raise RuntimeError("VictoriaMetrics kept merging")
        time.sleep(2)
        now = _vm_metrics(base)
        active = sum(v for k, v in now.items() if k.startswith("vm_active_merges"))
        calm = calm + 1 if active == 0 and now == previous else 0
        previous = now
    data = root / "data"
    rows = sum(v for k, v in previous.items() if k.startswith("vm_rows{") and "storage/" in k)
    return {
        "bytes": file_bytes(data / "data") + file_bytes(data / "indexdb"),
        "stored_samples": int(rows),
        "data_bytes": file_bytes(data / "data"),
        "indexdb_bytes": file_bytes(data / "indexdb"),
    }


def measure(
    name: str, root: Path, port: int, tables: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The bytes on disk of receiver ``name`` (llmwh's variants: every table, or ``tables``)."""
    if name.startswith("llmwh"):
        return llmwh(root, port, tables)
    if name == "prometheus":
        return prometheus(root, port)
    return victoria_metrics(root, port)
