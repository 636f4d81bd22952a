"""What each rollup, each of its columns and each dimension costs: at insert and on disk.

    python benchmarks/rollup_costs.py [--rows 1000000] [--span-hours 24] [--json]

Generates ``--rows`` synthetic requests over ``--span-hours`` and, on ClickHouse
in-process (chdb, a fresh migrated database each time), prints:

1. **Rows per request** a rollup would hold, for each grain (minute, five minutes,
   hour) and each set of dimensions: all nine, the nine less each one in turn (what
   that dimension costs), the SLA set, the SLA set with zone. A rollup is "much smaller
   than what it summarises" when this is small.
2. **Insert rate** (rows/s, 100k-row inserts) into `requests` with no rollup view, with
   each shipped rollup alone, and with all of them (as shipped), in one run: compare
   ratios, not absolute figures (the machine is shared).
3. **Bytes on disk** after the parts are merged: `requests`, each rollup table, and the
   ten largest rollup columns.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from warehouse.model import ROLLUP_DIMENSIONS, SLA_ROLLUP_DIMENSIONS
from warehouse.store import open_store
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

ROLLUPS = {  # table -> the views that fill it (a cascade fills requests_sla_1h)
    "requests_1m": ["requests_1m_mv", "requests_sla_1h_mv"],
    "requests_1h": ["requests_1h_mv"],
}
GRAINS = {"minute": "toStartOfMinute(ts)", "5 minutes": "toStartOfFiveMinutes(ts)"}
GRAINS["hour"] = "toStartOfHour(ts)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--span-hours", type=float, default=24)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = synthetic_requests(args.rows, seed=1, span=timedelta(hours=args.span_hours))
    batches = [data.slice(i, args.batch) for i in range(0, args.rows, args.batch)]
    with tempfile.TemporaryDirectory(prefix="llmwh-rollup-costs-") as tmp:
        result = {
            "rows": args.rows,
            "span_hours": args.span_hours,
            "rows_per_request": _rows_per_request(Path(tmp) / "grains", batches, args.rows),
            "insert": _insert_rates(Path(tmp), batches, args.rows),
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)


_STORES: dict[str, object] = {}


def _store(path: Path, keep_views: list[str] | None = None):
    """A fresh migrated database; with ``keep_views``, the other rollup views dropped.
    (ClickHouse in-process takes one data directory per process: each configuration
    gets the database anew in it.)"""
    store = _STORES.get("store")
    if store is None:
        store = _STORES["store"] = open_store(f"chdb://{path.parent / 'chdb'}")
    store.command(f"DROP DATABASE IF EXISTS {store.database} SYNC")
    Migrator(store).up()
    if keep_views is not None:
        for views in ROLLUPS.values():
            for view in views:
                if view not in keep_views:
                    store.command(f"DROP VIEW IF EXISTS {store.database}.{view}")
    return store


def _rows_per_request(path: Path, batches, n: int) -> list[dict]:
    store = _store(path, keep_views=[])
    for batch in batches:
        store.insert_arrow("requests", batch)
    sets = {"all nine": ROLLUP_DIMENSIONS}
    for dim in ROLLUP_DIMENSIONS[:-1]:
        sets[f"nine less {dim}"] = tuple(d for d in ROLLUP_DIMENSIONS if d != dim)
    sets["SLA (tenant, service, model, region)"] = SLA_ROLLUP_DIMENSIONS
    sets["SLA and zone"] = (*SLA_ROLLUP_DIMENSIONS, "zone")
    out = []
    for grain, expression in GRAINS.items():
        for name, dims in sets.items():
            rows = store.query_arrow(
                f"SELECT uniqExact({expression}, {', '.join(dims)}) AS n "
                f"FROM {store.database}.requests"
            )["n"][0].as_py()
            out.append({"grain": grain, "dimensions": name, "per_request": rows / n})
    return out


def _insert_rates(root: Path, batches, n: int) -> list[dict]:
    configurations = {
        "no rollup": [],
        **{f"{table} alone": views for table, views in ROLLUPS.items()},
        "all, as shipped": [v for views in ROLLUPS.values() for v in views],
    }
    out = []
    for index, (name, views) in enumerate(configurations.items()):
        store = _store(root / f"insert-{index}", keep_views=views)
        started = time.perf_counter()
        for batch in batches:
            store.insert_arrow("requests", batch)
        seconds = time.perf_counter() - started
        db = store.database
        for table in ("requests", *ROLLUPS, "requests_sla_1h"):
            store.command(f"OPTIMIZE TABLE {db}.{table} FINAL")
        tables = store.query_arrow(
            f"SELECT table, sum(data_compressed_bytes) AS bytes FROM system.parts "
            f"WHERE database = '{db}' AND active AND table LIKE 'requests%' GROUP BY table"
        ).to_pylist()
        columns = store.query_arrow(
            f"SELECT table, name, data_compressed_bytes AS bytes FROM system.columns "
            f"WHERE database = '{db}' AND table LIKE 'requests_%' AND data_compressed_bytes > 0 "
            "ORDER BY bytes DESC LIMIT 10"
        ).to_pylist()
        out.append(
            {
                "configuration": name,
                "rows_per_s": round(n / seconds),
                "bytes": {t["table"]: t["bytes"] for t in tables},
                "largest_columns": columns,
            }
        )
    return out


def _print(result: dict) -> None:
    print(f"{result['rows']:,} requests over {result['span_hours']:g} hours\n")
    print("rows a rollup would hold, per request")
    for row in result["rows_per_request"]:
        print(f"  {row['grain']:>10}  {row['dimensions']:42s} {row['per_request']:.4f}")
    print("\ninsert rate (100k-row inserts into requests) and bytes after merging")
    for row in result["insert"]:
        size = row["bytes"]
        raw = size.get("requests", 0)
        rollups = sum(b for t, b in size.items() if t != "requests")
        print(
            f"  {row['configuration']:22s} {row['rows_per_s']:>9,} rows/s   requests "
            f"{raw / 1e6:6.1f} MB  rollups {rollups / 1e6:6.1f} MB "
            f"({rollups / raw if raw else 0:.2f}x)"
        )
    shipped = result["insert"][-1]
    print("\nlargest rollup columns (as shipped)")
    for column in shipped["largest_columns"]:
        print(f"  {column['table']:18s} {column['name']:26s} {column['bytes'] / 1e6:6.2f} MB")


if __name__ == "__main__":
    main()
