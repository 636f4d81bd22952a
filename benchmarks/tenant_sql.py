"""What ClickHouse's row policies cost a tenant's SQL, against the same query filtered by hand.

    python benchmarks/tenant_sql.py [--rows 10000000] [--repeat 15] [--json]

An embedded server on a temporary directory, its `llmwh` database migrated and loaded
with ``--rows`` synthetic requests of nine tenants. Each query runs ``--repeat`` times
three ways, and the table prints the median milliseconds of each:

* ``by hand``: as the admin, with ``tenant = 'acme'`` written into the query (what the
  SQL rewriter alone did before the row policies);
* ``policy``: straight on the tenant's store, under the row policy alone;
* ``warehouse``: the policy behind the rewriter, as ``llmwh sql`` and
  ``Warehouse.sql`` run a tenant's query (``run_read_only``).

The answers of the three are compared before any timing: a run whose answers differ
fails.

Then the questions of ``llmwh compare``'s suite (an SLA report, drill-downs, a time
series, root cause: ``warehouse/compare/questions.py``) are asked as the tenant two ways,
over the loaded span, and timed the same way:

* ``filter``: the warehouse's own reads as its own user, with the tenant a bound
  filter (how they ran before the row policies);
* ``policy``: as ``Warehouse(store, tenant=...)`` asks them now, as the tenant under the
  row policies, the filter kept as a second wall.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta

from warehouse.api import Warehouse
from warehouse.compare.questions import SUITE
from warehouse.query.readonly import run_read_only
from warehouse.store import open_store
from warehouse.store.embedded import start_server, stop_server
from warehouse.synthetic import synthetic_requests

TENANT = "acme"
QUERIES = {
    "count": "SELECT count() AS n FROM requests{where}",
    "p95 TTFT by model": (
        "SELECT model, quantileExact(0.95)(ttft_ms) AS p95 FROM requests{where} "
        "GROUP BY model ORDER BY model"
    ),
    "errors by zone": (
        "SELECT zone, avg(status = 'error') AS error_rate FROM requests{where} "
        "GROUP BY zone ORDER BY zone"
    ),
    "minute rollup": (
        "SELECT toString(toStartOfHour(ts)) AS hour, sum(requests) AS n FROM requests_1m{where} "
        "GROUP BY hour ORDER BY hour"
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = start_server(folder, http_port=0, tcp_port=0)
        try:
            results = _run(server.store_url(), args.rows, args.repeat)
        finally:
            stop_server(folder)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    _print(results, "query", ("by_hand", "policy", "warehouse"))
    print()
    _print(results, "compare question", ("filter", "policy"))


def _print(results: dict[str, dict[str, float]], what: str, ways: tuple[str, ...]) -> None:
    """The rows timed ``ways``, in ms, and the last way's time over the first's."""
    print(f"{what:<20}" + "".join(f" {way.replace('_', ' ') + ' ms':>13}" for way in ways)
          + f" {'ratio':>6}")  # fmt: skip
    for name, row in results.items():
        if ways[0] in row:
            times = "".join(f" {row[way]:>13.1f}" for way in ways)
            print(f"{name:<20}{times} {row[ways[-1]] / row[ways[0]]:>6.2f}")


def _run(url: str, rows: int, repeat: int) -> dict[str, dict[str, float]]:
    store = open_store(url)
    warehouse = Warehouse(store)
    warehouse.migrate()
    end = datetime.now(UTC).replace(microsecond=0)
    loaded, chunk = 0, 1_000_000
    started = time.perf_counter()
    while loaded < rows:
        n = min(chunk, rows - loaded)
        span = timedelta(days=2)
        warehouse.insert_requests(synthetic_requests(n, seed=loaded, start=end - span, span=span))
        loaded += n
    print(f"loaded {rows:,} requests in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    store.command(f"OPTIMIZE TABLE {store.database}.requests FINAL")
    results = _time_sql(store, repeat)
    results.update(_time_questions(store, end - timedelta(days=2), end, repeat))
    return results


class _FilterOnly(Warehouse):
    """The warehouse's reads for a tenant as they ran before the row policies: as its
    own user, the tenant a bound filter only."""

    @property
    def reader(self):
        return self.store


def _time_questions(store, since, until, repeat: int) -> dict[str, dict[str, float]]:
    ways = {"filter": _FilterOnly(store, tenant=TENANT), "policy": Warehouse(store, tenant=TENANT)}
    questions = [q for q in SUITE if q.name != "sql"]  # raw SQL: timed above
    for question in questions:
        answers = [question.ask(wh, since, until, None) for wh in ways.values()]
        if not answers[0].equals(answers[1]):
            raise SystemExit(f"{question.name}: the answers differ:\n{answers[0]}\n{answers[1]}")
    seconds: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat):  # every way of every question once a round
        for question in questions:
            for way, wh in ways.items():
                began = time.perf_counter()
                question.ask(wh, since, until, None)
                seconds.setdefault((question.name, way), []).append(time.perf_counter() - began)
    results: dict[str, dict[str, float]] = {}
    for (name, way), taken in seconds.items():
        results.setdefault(name, {})[way] = statistics.median(taken) * 1000
    return results


def _time_sql(store, repeat: int) -> dict[str, dict[str, float]]:
    tenant_store = store.as_tenant(TENANT)
    ways = {
        "by_hand": lambda sql: store.query_arrow(sql.format(where=f" WHERE tenant = '{TENANT}'")),
        "policy": lambda sql: tenant_store.query_arrow(sql.format(where="")),
        "warehouse": lambda sql: run_read_only(store, sql.format(where=""), tenant=TENANT),
    }
    results = {}
    for name, sql in QUERIES.items():
        answers = [way(sql).to_pylist() for way in ways.values()]
        if not answers[0] == answers[1] == answers[2]:
            raise SystemExit(f"{name}: the three answers differ: {[a[:3] for a in answers]}")
        timings = {}
        for way_name, way in ways.items():
            seconds = []
            for _ in range(repeat):
                began = time.perf_counter()
                way(sql)
                seconds.append(time.perf_counter() - began)
            timings[way_name] = statistics.median(seconds) * 1000
        results[name] = timings
    return results


if __name__ == "__main__":
    main()
