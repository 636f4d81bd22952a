"""One node against a local two-shard cluster: ingest rate and SLA report time.

    python benchmarks/cluster.py [--rows 1000000] [--repeat 5]

Both run on this machine: a fresh embedded server, and a fresh two-shard cluster of
embedded servers (``llmwh clickhouse start --shards 2``) migrated by ``llmwh migrate
up``. The same synthetic requests are inserted in 100,000-row batches (through the
Distributed table on the cluster, waiting for both shards), then the SLA report of
``benchmarks/sla_report.py``'s shape is timed, exact from raw rows and from the
rollups. On 2 cores two shards cannot be faster than one: the point is the shape of
the cost, and that both give the same answers.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from warehouse.api import Warehouse
from warehouse.store import open_store
from warehouse.store.embedded import start_server, stop_server
from warehouse.store.local_cluster import start_cluster, stop_cluster
from warehouse.synthetic import request_batches

MEASURES = ["count", "p50_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "p95_tpot_ms", "error_rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="llmwh-cluster-bench-"))
    until = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    since = until - timedelta(days=1)

    single = start_server(root / "single", http_port=0, tcp_port=0)
    cluster = start_cluster(root / "cluster", shards=2, cluster="bench")
    try:
        subprocess.run(
            [sys.executable, "-m", "warehouse", "migrate", "up", "--store", cluster.store_url()],
            check=True,
            capture_output=True,
        )
        results = {}
        for name, url in (("one node", single.store_url()), ("two shards", cluster.store_url())):
            wh = Warehouse(open_store(url))
            if name == "one node":
                wh.migrate()
            started = time.perf_counter()
            for batch in request_batches(args.rows, seed=1, start=since, span=timedelta(days=1)):
                wh.insert_requests(batch)
            load = time.perf_counter() - started
            timings = {}
            for label, exact in (("exact", True), ("rollup", None)):
                runs = []
                for _ in range(args.repeat + 1):
                    began = time.perf_counter()
                    answer = wh.drill(
                        by=["model", "region"], measures=MEASURES, since=since, until=until,
                        exact=exact,
                    )  # fmt: skip
                    runs.append(time.perf_counter() - began)
                timings[label] = (statistics.median(runs[1:]) * 1000, answer.plan.source)
            results[name] = (args.rows / load, timings)
            wh.close()
    finally:
        stop_cluster(root / "cluster")
        stop_server(root / "single")

    print(
        f"{args.rows:,} requests over a day; SLA report by model x region, median of {args.repeat}"
    )
    print(f"{'':<12} {'insert rows/s':>14} {'exact ms':>10} {'rollup ms':>10}  rollup source")
    for name, (rate, timings) in results.items():
        exact_ms, _ = timings["exact"]
        rollup_ms, source = timings["rollup"]
        print(f"{name:<12} {rate:>14,.0f} {exact_ms:>10.1f} {rollup_ms:>10.1f}  {source}")


if __name__ == "__main__":
    main()
