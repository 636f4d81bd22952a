"""Insert N realistic request rows as Arrow into each store; print rows/s and bytes per row.

    python benchmarks/insert_requests.py [--rows 1000000] [--batch 100000] [--json]

Each store starts empty and migrated, so inserts into ClickHouse also feed the
per-minute and per-hour rollups through their materialized views (DuckDB computes
its rollups at query time); a second ClickHouse run into a copy of the table without
views shows what the rollups cost. Bytes are measured after the data is settled:
ClickHouse parts merged (OPTIMIZE FINAL), DuckDB checkpointed (the whole file).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from warehouse.store import Store, open_store
from warehouse.store.embedded import start_server, stop_server
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    started = time.perf_counter()
    data = synthetic_requests(args.rows, seed=args.seed)
    batches = [data.slice(i, args.batch) for i in range(0, args.rows, args.batch)]
    arrow_bytes = data.nbytes
    print(
        f"generated {args.rows:,} rows ({arrow_bytes / args.rows:.0f} Arrow bytes/row) "
        f"in {time.perf_counter() - started:.1f}s",
        flush=True,
    )

    results = []
    with tempfile.TemporaryDirectory(prefix="llmwh-bench-") as tmp:
        root = Path(tmp)
        server = start_server(root / "server", http_port=0, tcp_port=0)
        try:
            backends = [
                ("ClickHouse server (HTTP)", server.store_url()),
                ("ClickHouse in-process (chdb)", f"chdb://{root / 'chdb'}"),
                ("DuckDB", f"duckdb://{root / 'bench.duckdb'}"),
            ]
            for name, url in backends:
                store = open_store(url)
                Migrator(store).up()
                seconds = _insert(store, batches, "requests")
                raw, rollups = _bytes_on_disk(store, root / "bench.duckdb")
                results.append(
                    {
                        "store": name,
                        "rows": args.rows,
                        "seconds": round(seconds, 3),
                        "rows_per_s": round(args.rows / seconds),
                        "bytes_per_row": round(raw / args.rows, 2),
                        "rollup_bytes": rollups,
                    }
                )
                if store.capabilities.materialized_views:
                    # The same rows into a copy of the table with no views on it: what
                    # the rollups cost at insert time.
                    store.command(
                        f"CREATE TABLE {store.database}.requests_bare AS {store.database}.requests"
                    )
                    bare = _insert(store, batches, "requests_bare")
                    results.append(
                        {
                            "store": f"{name}, no rollups",
                            "rows": args.rows,
                            "seconds": round(bare, 3),
                            "rows_per_s": round(args.rows / bare),
                            "bytes_per_row": round(raw / args.rows, 2),
                            "rollup_bytes": 0,
                        }
                    )
                store.close()
                print(f"  {name}: done", flush=True)
        finally:
            stop_server(server.data_dir)

    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"\n{args.rows:,} rows in batches of {args.batch:,}, Arrow in memory "
        f"{arrow_bytes / args.rows:.0f} B/row, {os.cpu_count()} cores"
    )
    header = f"{'store':<42} {'rows/s':>10} {'seconds':>8} {'bytes/row':>10} {'rollups':>10}"
    print(header)
    print("-" * len(header))
    for r in results:
        rollups = f"{r['rollup_bytes'] / 1e6:.1f} MB" if r["rollup_bytes"] else "-"
        print(
            f"{r['store']:<42} {r['rows_per_s']:>10,} {r['seconds']:>8.2f} "
            f"{r['bytes_per_row']:>10.2f} {rollups:>10}"
        )


def _insert(store: Store, batches: list[pa.Table], table: str) -> float:
    started = time.perf_counter()
    for batch in batches:
        store.insert_arrow(table, batch)
    return time.perf_counter() - started


def _bytes_on_disk(store: Store, duckdb_file: Path) -> tuple[int, int]:
    """(bytes of the raw requests table, bytes of the rollup tables) on disk."""
    if store.capabilities.dialect == "duckdb":
        store.command("CHECKPOINT")
        return duckdb_file.stat().st_size, 0
    for table in ("requests", "requests_1m", "requests_1h"):
        store.command(f"OPTIMIZE TABLE {store.database}.{table} FINAL")
    sizes = store.query_arrow(
        "SELECT table, sum(bytes_on_disk) AS bytes FROM system.parts "
        f"WHERE database = '{store.database}' AND active GROUP BY table"
    ).to_pylist()
    by_table = {row["table"]: row["bytes"] for row in sizes}
    return by_table.get("requests", 0), by_table.get("requests_1m", 0) + by_table.get(
        "requests_1h", 0
    )


if __name__ == "__main__":
    main()
