"""The SLA report of an SLO over N requests: from its rollup, from raw rows, and on DuckDB.

    python benchmarks/slo_report.py [--rows 10000000] [--runs 5] [--chunk 1000000]
        [--slo chat-assistant] [--backends clickhouse,duckdb]

The report is ``Warehouse.sla(slo)`` over 7 days, twice: ending now, as
``llmwh sla --since 7d`` asks it (the clock's next whole second: mid-minute, so a rollup
answers it in pieces, whole hours, whole windows, whole minutes and whole seconds), and
ending mid-second (the same less 563 ms, as a caller that gives its own ``until`` may
ask: the parts of a second at the ends are then read from raw rows). The requests span
the 7 days before now, generated in chunks of ``--chunk`` (a seed and a consecutive
slice each), with a TTFT incident.

Paths:

* ``slo rollup`` (ClickHouse): after ``slo apply``, the default plan;
* ``raw exact`` (ClickHouse): ``exact=True``, every figure from raw rows;
* ``duckdb raw`` (DuckDB): the same report from raw rows (DuckDB keeps no rollups);
* ``one tenant`` (ClickHouse): the rollup's report of ``--tenant`` only, asked by the
  warehouse's own connection with the tenant as a filter;
* ``as tenant`` (ClickHouse): the same report asked as the tenant, under ClickHouse's
  row policies (docs/security.md). The server is restarted after ``slo apply`` so that
  its policies cover the rollup, as a tenant's reads of it need.

It prints the load rate with and without the SLO's rollup (the rollup's insert cost),
the build time of ``slo apply`` over the loaded rows, the rollup's size against
`requests`, how long ClickHouse's merges of the load ran on (the reports are timed once
they are done), and the report's median time per path over ``--runs`` rounds (every path
once a round, so other work on the machine falls on all alike); then the rollup's report
asked ``4 x --runs`` times in a row, as the exporter asks it, with no scan of raw rows
between. The exact figures
(count, attainment, compliance, budget, burn rates, objective verdicts) must agree
between the paths (the two of one tenant between themselves), or the script exits
non-zero.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from warehouse.api import Warehouse
from warehouse.query.slo import load_slo
from warehouse.query.slo_rollup import SloRollup
from warehouse.query.timerange import time_range
from warehouse.store import open_store
from warehouse.store.embedded import start_server, stop_server
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.incidents import Incident

SPAN = timedelta(days=7)
BENCH = "bench"
ALL_TENANTS = ("slo rollup", "raw exact", "duckdb raw")
ONE_TENANT = ("one tenant", "as tenant")
EXACT = ["count", "attainment", "budget_remaining", "compliance", "windows", "score"]


def chunks(rows: int, chunk: int, now: datetime):
    count = -(-rows // chunk)
    for k in range(count):
        n = min(chunk, rows - k * chunk)
        start = now - SPAN + SPAN * k / count
        yield synthetic_requests(
            n,
            seed=k,
            start=start,
            span=SPAN / count,
            incidents=[Incident("zone-ttft", at=0.5, length=0.2)],
        )


def load(wh: Warehouse, rows: int, chunk: int, now: datetime) -> tuple[float, int]:
    """Insert the requests; the rate counts the inserts only, not the generating."""
    spent, loaded = 0.0, 0
    for table in chunks(rows, chunk, now):
        started = time.perf_counter()
        wh.insert_requests(table)
        spent += time.perf_counter() - started
        loaded += table.num_rows
    return loaded / spent, loaded


def table_bytes(wh: Warehouse, prefix: str) -> int:
    found = wh.store.query_arrow(
        "SELECT sum(bytes_on_disk) AS b FROM system.parts WHERE active "
        "AND database = {db:String} AND startsWith(table, {p:String})",
        {"db": wh.store.database, "p": prefix},
    )
    return int(found.column("b")[0].as_py() or 0)


def report_seconds(wh: Warehouse, slo: str, until: datetime) -> float:
    """Seconds the report over the 7 days before ``until`` took."""
    started = time.perf_counter()
    wh.sla(slo, since=until - SPAN, until=until)
    return time.perf_counter() - started


def settle(wh: Warehouse, totals: Sequence[str], timeout: float = 900.0) -> float:
    """Seconds until the store's background merges are done (none running in three polls
    a second apart) and every partition of the SLO's ``totals`` is one part (as a
    partition is a minute after its last write), so that the report is timed on a
    settled store, not beside the merges of a bulk load; the timing goes ahead anyway
    after ``timeout``."""
    started = time.monotonic()
    quiet = 0
    while quiet < 3 and time.monotonic() - started < timeout:
        busy = wh.store.query_arrow(
            "SELECT (SELECT count() FROM system.merges WHERE database = {db:String}) + "
            "(SELECT count() FROM (SELECT table, partition FROM system.parts "
            "WHERE database = {db:String} AND active AND has({totals:Array(String)}, table) "
            "GROUP BY table, partition HAVING count() > 1)) AS n",
            {"db": wh.store.database, "totals": list(totals)},
        )
        quiet = quiet + 1 if busy.column("n")[0].as_py() == 0 else 0
        time.sleep(1.0)
    return time.monotonic() - started


def figures(frame: pl.DataFrame) -> pl.DataFrame:
    decided = [c for c in frame.columns if c.endswith("_ok") or c.startswith("burn_rate_")]
    return frame.select([*EXACT, *decided])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slo", default="chat-assistant")
    parser.add_argument("--backends", default="clickhouse,duckdb")
    parser.add_argument("--tenant", default="acme")
    args = parser.parse_args()
    backends = args.backends.split(",")
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="slo-report-") as tmp:
        root = Path(tmp)
        try:
            return run(args, backends, now, root)
        finally:
            stop_server(root / "clickhouse")


def serve(root: Path):
    return start_server(root / "clickhouse", http_port=0, tcp_port=0, tenant_databases=(BENCH,))


def run(args, backends, now, root) -> int:
    server = serve(root)
    stores: dict[str, Warehouse] = {}
    if "clickhouse" in backends:
        bare = Warehouse(open_store(server.store_url("bare")))
        bare.migrate()
        rate_bare, _ = load(bare, min(args.rows, 2 * args.chunk), args.chunk, now)
        bare.store.command("DROP DATABASE bare SYNC")
        wh = Warehouse(open_store(server.store_url(BENCH)))
        wh.migrate()
        [applied] = wh.slo_apply([args.slo])  # before the load: its view fills it
        rate_slo, _ = load(wh, min(args.rows, 2 * args.chunk), args.chunk, now)
        wh.store.command(f"DROP DATABASE {wh.store.database} SYNC")
        wh = Warehouse(open_store(server.store_url(BENCH)))
        wh.migrate()
        rate, loaded = load(wh, args.rows, args.chunk, now)
        started = time.perf_counter()
        [applied] = wh.slo_apply([args.slo])
        build = time.perf_counter() - started
        rollup, raw = table_bytes(wh, applied.table), table_bytes(wh, "requests")
        print(
            f"clickhouse: {loaded:,} requests loaded at {rate:,.0f} rows/s; over the first "
            f"{min(args.rows, 2 * args.chunk):,}: {rate_bare:,.0f} rows/s without the SLO's "
            f"rollup, {rate_slo:,.0f} with it ({rate_slo / rate_bare:.2f}x)"
        )
        print(
            f"slo apply: {build:.1f} s; rollup {rollup / 1e6:.1f} MB on disk against "
            f"{raw / 1e6:.1f} MB of requests ({rollup / raw:.1%})"
        )
        stores["slo rollup"] = wh
        stores["raw exact"] = wh
    if "duckdb" in backends:
        duck = Warehouse(open_store(f"duckdb://{root / 'warehouse.duckdb'}"))
        duck.migrate()
        rate, loaded = load(duck, args.rows, args.chunk, now)
        print(f"duckdb: {loaded:,} requests loaded at {rate:,.0f} rows/s")
        stores["duckdb raw"] = duck
    if "slo rollup" in stores:
        totals = [table for _, table in SloRollup(load_slo(args.slo)).totals]
        settled = settle(stores["slo rollup"], totals)
        print(
            f"clickhouse: background merges of the load finished {settled:.0f} s later, "
            "the SLO's totals one part a partition"
        )
        stores["slo rollup"].close()
        stop_server(root / "clickhouse")
        server = serve(root)  # its tenant's policies now cover the rollup
        wh = Warehouse(open_store(server.store_url(BENCH)))
        stores["slo rollup"] = stores["raw exact"] = stores["one tenant"] = wh
        stores["as tenant"] = Warehouse(wh.store, tenant=args.tenant)
    # Two ranges of 7 days, each the same instant for every path and round, so that every
    # path answers the same question: ending now as `llmwh sla --since 7d` asks it (the
    # clock's next whole second), and ending at a given millisecond.
    ending_now = time_range("7d").until
    ranges = {"ending now": ending_now, "mid-second": ending_now - timedelta(milliseconds=563)}
    times: dict[tuple[str, str], list[float]] = {}
    answers: dict[tuple[str, str], pl.DataFrame] = {}
    plans: dict[tuple[str, str], str] = {}
    for round_ in range(args.runs + 1):
        for shape, until in ranges.items():
            for path, wh in stores.items():
                started = time.perf_counter()
                exact = True if path == "raw exact" else None
                scope = {"tenant": args.tenant} if path == "one tenant" else None
                result = wh.sla(args.slo, filters=scope, since=until - SPAN, until=until,
                                exact=exact)  # fmt: skip
                if round_:  # the first round warms up
                    times.setdefault((shape, path), []).append(time.perf_counter() - started)
                answers[shape, path] = figures(result)
                plans[shape, path] = result.plan.describe()
    for shape in ranges:
        print(f"\nthe {args.slo} report over the 7 days {shape} (median of {args.runs}):")
        median = {p: statistics.median(t) for (s, p), t in times.items() if s == shape}
        for path, seconds in median.items():
            print(f"  {path:<11} {seconds * 1000:9.1f} ms   {plans[shape, path][:110]}")
        if "slo rollup" in median and "duckdb raw" in median:
            ratio = median["duckdb raw"] / median["slo rollup"]
            print(f"  rollup vs duckdb raw: {ratio:.1f}x faster")
        if "as tenant" in median:
            ratio = median["as tenant"] / median["one tenant"]
            print(
                f"  {args.tenant}'s report under the row policies: {ratio:.2f}x "
                "its time as a filter"
            )
        if "slo rollup" in median:
            # As the exporter asks it: again and again, with no scan of raw rows between.
            rollup, until = stores["slo rollup"], ranges[shape]
            alone = [report_seconds(rollup, args.slo, until) for _ in range(4 * args.runs + 1)]
            seconds = statistics.median(alone[1:])  # the first warms up
            print(f"  slo rollup, {4 * args.runs} times in a row: {seconds * 1000:.1f} ms")
        for group in (ALL_TENANTS, ONE_TENANT):
            shaped = {p: a for (s, p), a in answers.items() if s == shape and p in group}
            first = next(iter(shaped.values()), None)
            disagree = [p for p, a in shaped.items() if not a.equals(first)]
            if disagree:
                print(f"the exact figures differ on {', '.join(disagree)}:", file=sys.stderr)
                for path, answer in shaped.items():
                    print(path, answer, file=sys.stderr)
                return 1
    print("exact figures agree on every path")
    return 0


if __name__ == "__main__":
    sys.exit(main())
