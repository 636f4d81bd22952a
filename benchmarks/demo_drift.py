"""Which zones `llmwh drift` alerts on over the demo, for demos started at several hours.

    python benchmarks/demo_drift.py [--hours 0,3,6,9,12,15,18,21] [--min-change X]

For each start hour (UTC, on 2026-11-02) it loads what `llmwh serve --demo` backfills
(``DemoTraffic.backfill``) into a scratch DuckDB file and asks the README's drift
question (p95 TTFT by zone, 5-minute windows, the last 3 hours), then prints when the
incident started, sh-b's first alert and every other zone that alerted. Without
``--min-change`` the drift's default floor for a latency applies (docs/querying.md).
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime, timedelta

import polars as pl

from warehouse.api import Warehouse
from warehouse.demo import DemoTraffic
from warehouse.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", default="0,3,6,9,12,15,18,21")
    parser.add_argument("--min-change", type=float, default=None)
    args = parser.parse_args()
    for hour in (int(h) for h in args.hours.split(",")):
        began = datetime(2026, 11, 2, hour, tzinfo=UTC)
        with tempfile.TemporaryDirectory() as scratch:
            wh = Warehouse(open_store(f"duckdb://{scratch}/demo.duckdb"))
            wh.migrate()
            traffic = DemoTraffic("http://127.0.0.1:9", wh.store)
            requests, batches = traffic.backfill(began)
            for batch in batches:
                wh.store.insert_arrow("requests", batch)
            drift = wh.drift(
                "p95_ttft_ms",
                by=["zone"],
                interval="5m",
                since=began - timedelta(hours=3),
                until=began,
                min_change=args.min_change,
            )
            wh.store.close()
        alerts = drift.filter(pl.col("alert"))
        incident = traffic.incident_from(began).at
        first = alerts.filter(pl.col("zone") == "sh-b")["time"].min()
        others = ", ".join(sorted(set(alerts.filter(pl.col("zone") != "sh-b")["zone"])))
        when = f"{first:%H:%M}Z" if isinstance(first, datetime) else "never"
        print(
            f"{began:%H:%M}Z: {requests:,} requests; incident {incident:%H:%M}Z, sh-b first "
            f"alerts {when}; other zones alerting: {others or 'none'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
