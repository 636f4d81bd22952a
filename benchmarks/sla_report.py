"""The SLA report by model x region over N requests on each backend, from raw rows and rollups.

    python benchmarks/sla_report.py [--rows 10000000] [--runs 5] [--chunk 1000000]
        [--backends clickhouse,chdb,duckdb] [--keep DIR]

The report is one ``Warehouse.drill`` call: count, p50/p95/p99 of TTFT, TPOT and E2E,
attainment of TTFT <= 200 ms and the error rate, by model and region, over a range
that covers the data (7 days ending at a whole hour). Each backend gets the same rows,
generated in chunks of ``--chunk`` (a seed and a consecutive slice of the 7 days each),
so memory stays bounded; load time is printed as a side figure.

Paths per backend:

* ``raw exact``: ``exact=True``, exact percentiles from raw rows.
* ``raw t-digest`` (ClickHouse only): ``exact=False`` with ``until`` one millisecond past
  the hour, so the range aligns to no grain and the planner cannot take a rollup; no row
  lies in that extra millisecond, so the rows read are the same.
* ``rollup`` (ClickHouse only): the aligned range with ``exact`` unset, answered from
  the narrowest rollup that covers model x region (``requests_sla_1h``). DuckDB keeps
  no materialized rollups, so it has the raw path only.

Each query runs once to warm up, then ``--runs`` rounds run every query in turn, so
that other work on the machine falls on all of them alike; the table's ``others``
column says how much of the machine's CPU other processes took meanwhile (from /proc).
Times are wall-clock around ``drill`` (SQL compile, round trip and conversion to
polars), with the store's own time (``Result.elapsed_ms``) alongside. ClickHouse
background merges are left to finish before anything is timed.

Answers are checked against each other: counts, error rates and every figure of an
exact path must agree across backends and paths (relative 1e-9), or the script exits
non-zero. Approximate percentiles (raw t-digest, rollups) report their largest relative
difference from the exact ones (t-digest's stated error is in rank, not value, so this
is reported, not enforced); rollup attainment, read from latency histograms, should be
within 0.005 of the exact one and is flagged when it is not.

With ``--keep DIR`` the stores live in DIR and stay there; a later run on the same DIR
with the same ``--rows``, ``--chunk`` and ``--seed`` reuses the loaded data.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

import warehouse
from warehouse import Warehouse
from warehouse.query.result import Result
from warehouse.store.embedded import start_server, stop_server
from warehouse.synthetic import synthetic_requests

BACKENDS = {
    "clickhouse": "ClickHouse server (HTTP)",
    "chdb": "ClickHouse in-process (chdb)",
    "duckdb": "DuckDB",
}
BY = ["model", "region"]
MEASURES = [
    "count",
    "p50_ttft_ms",
    "p95_ttft_ms",
    "p99_ttft_ms",
    "p50_tpot_ms",
    "p95_tpot_ms",
    "p99_tpot_ms",
    "p50_e2e_ms",
    "p95_e2e_ms",
    "p99_e2e_ms",
    "attainment",
    "error_rate",
]
PERCENTILE_MEASURES = [m for m in MEASURES if m.startswith("p")]
THRESHOLDS = {"ttft_ms": 200}
SPAN = timedelta(days=7)
ROLLUP_TARGET_MS = 100.0
EXACT_REL = 1e-9
PERCENTILE_GUIDE_REL = 0.02
ATTAINMENT_ABS = 0.005
SETTLE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Route:
    """One way of answering the report."""

    name: str
    exact: bool | None
    unaligned: bool
    """``until`` one millisecond past the hour, so that no rollup can answer."""
    rollup: bool
    exact_measures: tuple[str, ...]
    """Measures this path computes exactly (compared at relative 1e-9)."""


PATHS = (
    Route("raw exact", True, False, False, tuple(MEASURES)),
    Route(
        "raw t-digest",
        False,
        True,
        False,
        tuple(m for m in MEASURES if m not in PERCENTILE_MEASURES),
    ),
    Route("rollup", None, False, True, ("count", "error_rate")),
)


@dataclass
class Timing:
    """The timed runs of one path on one backend, and the answer it gave."""

    backend: str
    path: Route
    result: Result
    wall_ms: list[float] = field(default_factory=list)
    store_ms: list[float] = field(default_factory=list)
    others_cpu_s: float | None = 0.0
    """CPU seconds other processes used while the runs were timed (None: unknown)."""

    def add(self, wall_s: float, store_ms: float, others_cpu_s: float | None) -> None:
        self.wall_ms.append(wall_s * 1000)
        self.store_ms.append(store_ms)
        if self.others_cpu_s is not None and others_cpu_s is not None:
            self.others_cpu_s += others_cpu_s
        else:
            self.others_cpu_s = None

    @property
    def others(self) -> float | None:
        """The share of the machine's CPU that other processes used during the runs."""
        if self.others_cpu_s is None:
            return None
        capacity = sum(self.wall_ms) / 1000 * (os.cpu_count() or 1)
        return min(1.0, self.others_cpu_s / capacity) if capacity > 0 else None


@dataclass
class Dataset:
    rows: int
    chunk: int
    seed: int
    start: datetime
    end: datetime
    loaded: dict[str, float] = field(default_factory=dict)
    """Backends already holding the rows -> seconds their load took."""


def main() -> None:
    args = _parse_args()
    with ExitStack() as stack:
        if args.keep:
            root = Path(args.keep).resolve()
            root.mkdir(parents=True, exist_ok=True)
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llmwh-sla-")))
        dataset = _dataset(root, args)
        warehouses, servers = _open(root, args.backends, stack)
        _load(warehouses, dataset, root)
        _settle(warehouses)
        timings = _measure(warehouses, dataset, args.runs, [os.getpid(), *servers])
    failures = _report(timings, dataset, args)
    if failures:
        sys.exit(f"\n{failures} MISMATCH(ES) in counts or exact figures: see above")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per query, after a warm-up")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="rows generated at once")
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: " + ", ".join(BACKENDS)
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR", help="keep (and reuse) the stores in DIR")
    args = parser.parse_args()
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(args.backends) - set(BACKENDS)
    if unknown or not args.backends:
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    if args.rows < 1 or args.runs < 1 or args.chunk < 1:
        parser.error("--rows, --runs and --chunk must be positive")
    return args


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- data ----------------------------------------------------------------------------------


def _dataset(root: Path, args: argparse.Namespace) -> Dataset:
    """The data set in ``root`` (``--keep``), or a new one ending at the last whole hour."""
    path = root / "dataset.json"
    if path.exists():
        saved = json.loads(path.read_text())
        if (saved["rows"], saved["chunk"], saved["seed"]) == (args.rows, args.chunk, args.seed):
            _log(f"reusing the data set in {root}")
            return Dataset(
                saved["rows"],
                saved["chunk"],
                saved["seed"],
                datetime.fromisoformat(saved["start"]),
                datetime.fromisoformat(saved["end"]),
                saved["loaded"],
            )
        sys.exit(
            f"{root} holds another data set ({saved['rows']:,} rows, chunk {saved['chunk']:,}, "
            f"seed {saved['seed']}); choose another --keep DIR"
        )
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return Dataset(args.rows, args.chunk, args.seed, end - SPAN, end)


def _save(dataset: Dataset, root: Path) -> None:
    payload = {
        "rows": dataset.rows,
        "chunk": dataset.chunk,
        "seed": dataset.seed,
        "start": dataset.start.isoformat(),
        "end": dataset.end.isoformat(),
        "loaded": dataset.loaded,
    }
    (root / "dataset.json").write_text(json.dumps(payload, indent=2) + "\n")


def _chunks(dataset: Dataset) -> Iterator[pa.Table]:
    """The rows, chunk by chunk: each its own seed and a consecutive slice of the span.

    Slice bounds are whole seconds, so every timestamp lies in ``[start, end)``.
    """
    k = math.ceil(dataset.rows / dataset.chunk)
    start_s = int(dataset.start.timestamp())
    span_s = int(SPAN.total_seconds())
    for i in range(k):
        n = min(dataset.chunk, dataset.rows - i * dataset.chunk)
        low = start_s + span_s * i // k
        high = start_s + span_s * (i + 1) // k
        yield synthetic_requests(
            n,
            seed=dataset.seed + i,
            start=datetime.fromtimestamp(low, UTC),
            span=timedelta(seconds=high - low),
        )


# -- stores --------------------------------------------------------------------------------


def _open(
    root: Path, backends: list[str], stack: ExitStack
) -> tuple[dict[str, Warehouse], list[int]]:
    """The warehouses by backend, and the pids of the servers started for them."""
    warehouses = {}
    servers = []
    for name in backends:
        if name == "clickhouse":
            server = start_server(root / "server", http_port=0, tcp_port=0)
            stack.callback(stop_server, server.data_dir)
            servers.append(server.pid)
            url = server.store_url()
        elif name == "chdb":
            url = f"chdb://{root / 'chdb'}"
        else:
            url = f"duckdb://{root / 'sla.duckdb'}"
        wh = stack.enter_context(warehouse.connect(url))
        wh.migrate()
        warehouses[name] = wh
    return warehouses, servers


def _load(warehouses: dict[str, Warehouse], dataset: Dataset, root: Path) -> None:
    """Insert the rows into every store that does not hold them yet."""
    pending = [name for name in warehouses if name not in dataset.loaded]
    for name in pending:
        (held,) = warehouses[name].sql("SELECT count(*) AS n FROM requests")["n"]
        if held:
            sys.exit(f"{BACKENDS[name]} in {root} already holds {held:,} rows of unknown origin")
    if not pending:
        return
    seconds = dict.fromkeys(pending, 0.0)
    generated = 0
    started = time.perf_counter()
    for chunk in _chunks(dataset):
        for name in pending:
            t0 = time.perf_counter()
            warehouses[name].insert_requests(chunk)
            seconds[name] += time.perf_counter() - t0
        generated += chunk.num_rows
        _log(
            f"  loaded {generated:,} / {dataset.rows:,} rows ({time.perf_counter() - started:.0f}s)"
        )
    for name in pending:
        dataset.loaded[name] = round(seconds[name], 3)
    _save(dataset, root)


def _settle(warehouses: dict[str, Warehouse]) -> None:
    """Wait until ClickHouse has no merge running on the warehouse's tables, and
    checkpoint DuckDB, so that no background work runs while queries are timed."""
    for name, wh in warehouses.items():
        if not wh.store.capabilities.materialized_views:
            wh.store.command("CHECKPOINT")
            continue
        database = {"name": wh.store.database}
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        quiet = 0
        while quiet < 3 and time.monotonic() < deadline:
            merges = wh.sql(
                "SELECT count() AS n FROM system.merges WHERE database = {name:String}", database
            )["n"][0]
            quiet = quiet + 1 if merges == 0 else 0
            time.sleep(1.0)
        parts = wh.sql(
            "SELECT table, count() AS parts, sum(rows) AS rows FROM system.parts "
            "WHERE database = {name:String} AND active "
            "AND table IN ('requests', 'requests_1m', 'requests_1h', 'requests_sla_1h') "
            "GROUP BY table ORDER BY table",
            database,
        )
        summary = ", ".join(
            f"{row['table']} {row['parts']} parts / {row['rows']:,} rows"
            for row in parts.iter_rows(named=True)
        )
        _log(f"  {BACKENDS[name]}: {summary}")


# -- timing --------------------------------------------------------------------------------


def _measure(
    warehouses: dict[str, Warehouse], dataset: Dataset, runs: int, ours: list[int]
) -> list[Timing]:
    """Run every query once to warm up, then ``runs`` rounds of all queries in turn, so
    that anything else running on the machine meanwhile falls on all of them alike.

    ``ours`` are the pids whose CPU time is the benchmark's own (this process, servers).
    """
    queries: list[tuple[Callable[[], Result], Timing]] = []
    for name, wh in warehouses.items():
        paths = PATHS if wh.store.capabilities.materialized_views else PATHS[:1]
        for path in paths:
            until = dataset.end + timedelta(milliseconds=1) if path.unaligned else dataset.end
            drill = functools.partial(
                wh.drill,
                by=BY,
                measures=MEASURES,
                since=dataset.start,
                until=until,
                thresholds=THRESHOLDS,
                exact=path.exact,
            )
            first = drill()
            _check_plan(name, path, first)
            queries.append((drill, Timing(name, path, first)))
    for run in range(runs):
        for drill, timing in queries:
            before = _cpu_seconds(ours)
            started = time.perf_counter()
            result = drill()
            seconds = time.perf_counter() - started
            timing.add(seconds, result.elapsed_ms, _others_cpu(before, _cpu_seconds(ours)))
        _log(f"  timed round {run + 1} of {runs}")
    return [timing for _, timing in queries]


def _cpu_seconds(pids: list[int]) -> tuple[float, float] | None:
    """(CPU seconds the whole machine has used, those ``pids`` have used), from /proc;
    None where there is no /proc."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
        machine = (user + nice + system + irq + softirq + steal) / tick
        ours = 0.0
        for pid in pids:
            stat = Path(f"/proc/{pid}/stat").read_text()
            utime, stime = stat.rsplit(")", 1)[1].split()[11:13]
            ours += (int(utime) + int(stime)) / tick
    except (OSError, ValueError):
        return None
    return machine, ours


def _others_cpu(
    before: tuple[float, float] | None, after: tuple[float, float] | None
) -> float | None:
    """CPU seconds used by processes other than ours between two :func:`_cpu_seconds`."""
    if before is None or after is None:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1]))


def _check_plan(name: str, path: Route, result: Result) -> None:
    if path.rollup != result.plan.rollup:
        sys.exit(f"{BACKENDS[name]}, {path.name}: unexpected plan: {result.plan.describe()}")


# -- report --------------------------------------------------------------------------------


def _report(timings: list[Timing], dataset: Dataset, args: argparse.Namespace) -> int:
    """Print the timings, ratios and agreement checks; return the number of hard failures."""
    reference = _reference(timings)
    total = reference.result["count"].sum()
    print(
        f"\nSLA report by {' x '.join(BY)} over {dataset.rows:,} requests "
        f"({total:,} without probes), {dataset.start:%Y-%m-%d %H:%M} to "
        f"{dataset.end:%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores; "
        f"warm-up + {args.runs} runs per query"
    )
    print("\nLoad (a side figure; ClickHouse inserts also fill the rollups):")
    for name in args.backends:
        seconds = dataset.loaded[name]
        print(f"  {BACKENDS[name]:<30} {seconds:>8.1f} s {dataset.rows / seconds:>12,.0f} rows/s")

    print("\nPlans:")
    for t in timings:
        print(f"  {BACKENDS[t.backend]}, {t.path.name}: {t.result.plan.describe()}")
    if "duckdb" in args.backends:
        print("  DuckDB keeps no materialized rollups: raw exact only")

    print()
    header = (
        f"{'backend':<30} {'path':<13} {'median ms':>10} {'p95 ms':>9} {'min ms':>9} "
        f"{'store ms':>9} {'rows':>5} {'others':>7}"
    )
    print(header)
    print("-" * len(header))
    for t in timings:
        print(
            f"{BACKENDS[t.backend]:<30} {t.path.name:<13} {statistics.median(t.wall_ms):>10.1f} "
            f"{np.percentile(t.wall_ms, 95):>9.1f} {min(t.wall_ms):>9.1f} "
            f"{statistics.median(t.store_ms):>9.1f} {t.result.height:>5} "
            f"{'-' if t.others is None else f'{t.others:.0%}':>7}"
        )
    print(
        "(wall-clock around drill(); store ms: the round trip only, Result.elapsed_ms; others: "
        "the share of the machine's CPU other processes used while the runs were timed)"
    )

    _print_ratios(timings)
    failures = _check_answers(timings, reference)
    print(f"\nThe report ({BACKENDS[reference.backend]}, {reference.path.name}):")
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=250, float_precision=3):
        print(reference.result)
    return failures


def _reference(timings: list[Timing]) -> Timing:
    """The answer others are checked against: DuckDB's exact one, or the first exact one."""
    exact = [t for t in timings if t.path.name == "raw exact"]
    return next((t for t in exact if t.backend == "duckdb"), exact[0])


def _median(timings: list[Timing], backend: str, path: str) -> float | None:
    for t in timings:
        if t.backend == backend and t.path.name == path:
            return statistics.median(t.wall_ms)
    return None


def _print_ratios(timings: list[Timing]) -> None:
    print("\nRatios (of medians):")
    duckdb = _median(timings, "duckdb", "raw exact")
    for backend in ("clickhouse", "chdb"):
        for path in ("raw exact", "raw t-digest"):
            ms = _median(timings, backend, path)
            if ms is None or duckdb is None:
                continue
            verdict = ""
            if path == "raw exact":
                verdict = " (target <= 1.0: " + ("met)" if ms <= duckdb else "NOT met)")
            print(f"  {BACKENDS[backend]} {path} / DuckDB raw exact: {ms / duckdb:.2f}{verdict}")
    for backend in ("clickhouse", "chdb"):
        ms = _median(timings, backend, "rollup")
        if ms is None:
            continue
        verdict = "met" if ms < ROLLUP_TARGET_MS else "NOT met"
        print(
            f"  {BACKENDS[backend]} rollup: {ms:.1f} ms vs target {ROLLUP_TARGET_MS:.0f} ms: "
            f"{verdict} ({ms / ROLLUP_TARGET_MS:.2f} of the target)"
        )
        exact = _median(timings, backend, "raw exact")
        if exact is not None:
            print(f"  {BACKENDS[backend]} rollup speed-up over raw exact: {exact / ms:.1f}x")


def _check_answers(timings: list[Timing], reference: Timing) -> int:
    """Compare every answer with the reference; print the findings, return hard failures."""
    print(f"\nAgreement with {BACKENDS[reference.backend]} {reference.path.name}:")
    expected = _sorted(reference.result)
    failures = 0
    for t in timings:
        label = f"{BACKENDS[t.backend]}, {t.path.name}"
        got = _sorted(t.result)
        if got.select(BY).rows() != expected.select(BY).rows():
            print(f"  !!! MISMATCH {label}: groups differ")
            failures += 1
            continue
        bad = [m for m in t.path.exact_measures if _max_rel(got[m], expected[m]) > EXACT_REL]
        for m in bad:
            print(f"  !!! MISMATCH {label}: {m} max rel diff {_max_rel(got[m], expected[m]):.3g}")
        failures += len(bad)
        notes = [f"{', '.join(t.path.exact_measures)} equal" if not bad else "exact: see above"]
        approx = [m for m in PERCENTILE_MEASURES if m not in t.path.exact_measures]
        if approx:
            worst = max(approx, key=lambda m: _max_rel(got[m], expected[m]))
            rel = _max_rel(got[worst], expected[worst])
            flag = "" if rel <= PERCENTILE_GUIDE_REL else " (above the ~2% guide)"
            notes.append(f"percentiles max rel diff {rel:.2%} ({worst}){flag}")
        if "attainment" not in t.path.exact_measures:
            diff = (got["attainment"] - expected["attainment"]).abs().max()
            if diff > ATTAINMENT_ABS:
                print(f"  !!! MISMATCH {label}: attainment off by {diff:.4f} > {ATTAINMENT_ABS}")
            notes.append(f"attainment max abs diff {diff:.4f}")
        reference_note = " (the reference)" if t is reference else ""
        print(f"  {label}{reference_note}: " + "; ".join(notes))
    return failures


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(BY)


def _max_rel(got: pl.Series, expected: pl.Series) -> float:
    """The largest relative difference; a null on one side only counts as infinite."""
    worst = 0.0
    for a, b in zip(got.to_list(), expected.to_list(), strict=True):
        if a is None or b is None:
            if (a is None) != (b is None):
                return math.inf
            continue
        if a != b:
            worst = max(worst, abs(a - b) / max(abs(a), abs(b)))
    return worst


if __name__ == "__main__":
    main()
