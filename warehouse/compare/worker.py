"""One backend's part of a comparison, run in a process of its own.

The worker opens a fresh store in its directory (for ``clickhouse`` it starts an
embedded server there), loads the data set file in batches, lets the database settle
(ClickHouse's merges finish; DuckDB checkpoints), measures what is on disk, answers
every question once (the answer that is compared) and then ``repeat`` times in rounds
(the timings), and reports its peak memory. Being alone in its process, its peak RSS is
this backend's: the worker's own (Python, Arrow batches, and for chdb and DuckDB the
database engine) plus, for the server, the server process's.
"""

from __future__ import annotations

import os
import pickle
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl

from warehouse.api import Warehouse
from warehouse.compare.dataset import read_batches
from warehouse.compare.faults import Fault, FaultyStore
from warehouse.compare.questions import Question, select
from warehouse.errors import InvalidArgument
from warehouse.query.order_statistics import SIDES, order_statistics
from warehouse.query.result import Result
from warehouse.store import Store, open_store
from warehouse.store.embedded import start_server, stop_server

__all__ = ["BACKENDS", "Answer", "Job", "Outcome", "main", "status_bytes"]

BACKENDS = {
    "clickhouse": "ClickHouse server (HTTP)",
    "chdb": "ClickHouse in-process (chdb)",
    "duckdb": "DuckDB",
}
EXACT, DEFAULT = "exact", "default"
"""Paths: ``exact=True`` (raw rows), and the planner's choice (``exact`` unset)."""


@dataclass(frozen=True)
class Job:
    """What one worker does."""

    backend: str
    workdir: str
    dataset: str
    """The Parquet file of the data set."""
    since: datetime
    until: datetime
    repeat: int
    batch_rows: int
    questions: tuple[str, ...] = ()
    fault: Fault | None = None
    settle_timeout_s: float = 900.0
    order_statistics: bool = False
    """Also answer each question a rollup may answer with the order statistics around
    each exact percentile (the reference's part, for the rollup rule)."""


@dataclass
class Answer:
    """One question answered one way on one backend: the answer and its timings."""

    question: str
    path: str
    source: str
    """Where the answer came from: ``requests`` (raw rows) or the rollup(s) read."""
    frame: pl.DataFrame
    first_ms: float = 0.0
    """The first (warm-up) answer's time: caches cold, plans not yet seen."""
    runs_ms: list[float] = field(default_factory=list)
    order_statistics: tuple[pl.DataFrame, pl.DataFrame] | None = None
    """With :attr:`Job.order_statistics`, of an exact answer: the answer again with each
    percentile the order statistic below it, and above it
    (:mod:`warehouse.query.order_statistics`); not timed."""


@dataclass
class Outcome:
    """Everything a worker measured."""

    backend: str
    rows: int = 0
    load_s: float = 0.0
    load_cpu_s: float = 0.0
    """CPU seconds the worker and (for the server) the server process used while loading."""
    inserts: int = 0
    settle_s: float = 0.0
    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per table: ``bytes`` on disk, ``rows``, ``parts`` (ClickHouse); DuckDB: the file."""
    answers: list[Answer] = field(default_factory=list)
    start_rss: int = 0
    """Bytes resident once the worker had imported everything, before the store opened."""
    peak_rss: int = 0
    server_peak_rss: int | None = None
    fault_hits: int = 0
    capabilities: dict[str, bool] = field(default_factory=dict)
    others_load: float | None = None
    """Share of the machine's CPU that other processes used while loading (None: unknown)."""
    others_queries: float | None = None
    """The same, during the timed rounds of questions."""

    @property
    def requests_bytes(self) -> int:
        return self.tables.get("requests", {}).get("bytes", 0)

    @property
    def total_bytes(self) -> int:
        return sum(t.get("bytes", 0) for t in self.tables.values())


def main(argv: list[str]) -> int:
    """Process entry point (``python -m warehouse.compare JOB OUTCOME``): run the pickled
    job, print progress lines on stdout, pickle the outcome; on failure, the traceback
    goes to stderr and the exit code is 1."""
    job_path, outcome_path = argv
    job = pickle.loads(Path(job_path).read_bytes())

    def progress(text: str) -> None:
        print(text, flush=True)

    try:
        outcome = _run(job, progress)
    except BaseException:
        traceback.print_exc()
        return 1
    Path(outcome_path).write_bytes(pickle.dumps(outcome))
    return 0


def _run(job: Job, progress: Callable[[str], None]) -> Outcome:
    outcome = Outcome(job.backend, start_rss=status_bytes("self", "VmRSS"))
    workdir = Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        if job.backend == "clickhouse":
            server = start_server(workdir / "server", http_port=0, tcp_port=0)
            url = server.store_url()
        elif job.backend == "chdb":
            url = f"chdb://{workdir / 'chdb'}"
        elif job.backend == "duckdb":
            url = f"duckdb://{workdir / 'warehouse.duckdb'}"
        else:
            raise InvalidArgument(f"unknown backend {job.backend!r}")
        store: Store = open_store(url)
        faulty = None
        if job.fault is not None and job.fault.backend == job.backend:
            store = faulty = FaultyStore(store, job.fault)
        with Warehouse(store) as wh:
            wh.migrate()
            outcome.capabilities = {
                k: v for k, v in vars(store.capabilities).items() if isinstance(v, bool)
            }
            pids = ["self"] if server is None else ["self", str(server.pid)]
            cpu, machine, started = _cpu_seconds(pids), _machine_cpu_seconds(), time.monotonic()
            _load(wh, job, outcome, progress)
            outcome.load_cpu_s = _cpu_seconds(pids) - cpu
            outcome.others_load = _others_share(
                machine, outcome.load_cpu_s, time.monotonic() - started
            )
            progress("settling (merges, checkpoint)")
            outcome.settle_s = _settle(wh, job.settle_timeout_s)
            outcome.tables = _disk(wh, workdir)
            _ask(wh, job, outcome, faulty, progress, pids)
            if faulty is not None:
                outcome.fault_hits = faulty.hits
            outcome.peak_rss = status_bytes("self", "VmHWM")
            if server is not None:
                outcome.server_peak_rss = status_bytes(str(server.pid), "VmHWM")
            if job.order_statistics:  # after every measurement: none of it counts
                _answer_order_statistics(wh, job, outcome, progress)
    finally:
        if server is not None:
            stop_server(server.data_dir)
    return outcome


def _load(wh: Warehouse, job: Job, outcome: Outcome, progress: Callable[[str], None]) -> None:
    """Insert the data set in batches; only the insert calls are timed."""
    for table in read_batches(Path(job.dataset), job.batch_rows):
        started = time.perf_counter()
        wh.insert_requests(table)
        outcome.load_s += time.perf_counter() - started
        outcome.rows += table.num_rows
        outcome.inserts += 1
        progress(f"loaded {outcome.rows:,} rows")


def _settle(wh: Warehouse, timeout_s: float) -> float:
    """Let background work finish before anything is measured; returns the seconds taken.

    ClickHouse: until no merge has run on the database for three polls in a row.
    DuckDB: a CHECKPOINT (the file then holds every row).
    """
    started = time.perf_counter()
    if not wh.store.capabilities.materialized_views:
        wh.store.command("CHECKPOINT")
        return time.perf_counter() - started
    quiet = 0
    deadline = time.monotonic() + timeout_s
    while quiet < 3 and time.monotonic() < deadline:
        merges = wh.sql(
            "SELECT count() AS n FROM system.merges WHERE database = {db:String}",
            {"db": wh.store.database},
        )["n"][0]
        quiet = quiet + 1 if merges == 0 else 0
        time.sleep(0.5)
    return time.perf_counter() - started


def _disk(wh: Warehouse, workdir: Path) -> dict[str, dict[str, int]]:
    """Bytes on disk: active parts per table (ClickHouse), or the database file (DuckDB,
    whose rollups are views and take no space)."""
    if not wh.store.capabilities.materialized_views:
        files = [workdir / "warehouse.duckdb", workdir / "warehouse.duckdb.wal"]
        size = sum(f.stat().st_size for f in files if f.exists())
        return {"requests": {"bytes": size}}
    parts = wh.sql(
        "SELECT table, sum(bytes_on_disk) AS bytes, sum(rows) AS rows, count() AS parts "
        "FROM system.parts WHERE database = {db:String} AND active GROUP BY table",
        {"db": wh.store.database},
    )
    return {
        row["table"]: {"bytes": row["bytes"], "rows": row["rows"], "parts": row["parts"]}
        for row in parts.iter_rows(named=True)
    }


def _ask(
    wh: Warehouse,
    job: Job,
    outcome: Outcome,
    faulty: FaultyStore | None,
    progress: Callable[[str], None],
    pids: list[str],
) -> None:
    """Each question once per path (the answer), then ``repeat`` timed rounds of all."""
    paths = [EXACT, DEFAULT] if wh.store.capabilities.materialized_views else [EXACT]
    runs: list[tuple[Question, str, Answer]] = []
    for question in select(list(job.questions)):
        for path in paths:
            if path == DEFAULT and not question.rollup:
                continue
            progress(f"answering {question.name} ({path})")
            frame, first_ms = _timed(wh, job, question, path, faulty)
            answer = Answer(question.name, path, _source(frame), pl.DataFrame(frame), first_ms)
            outcome.answers.append(answer)
            runs.append((question, path, answer))
    cpu, machine, started = _cpu_seconds(pids), _machine_cpu_seconds(), time.monotonic()
    for round_ in range(job.repeat):
        progress(f"timing round {round_ + 1} of {job.repeat}")
        for question, path, answer in runs:
            _, ms = _timed(wh, job, question, path, faulty)
            answer.runs_ms.append(ms)
    outcome.others_queries = _others_share(
        machine, _cpu_seconds(pids) - cpu, time.monotonic() - started
    )


def _timed(
    wh: Warehouse, job: Job, question: Question, path: str, faulty: FaultyStore | None
) -> tuple[pl.DataFrame, float]:
    if faulty is not None:
        faulty.question = question.name
    started = time.perf_counter()
    try:
        frame = question.ask(wh, job.since, job.until, True if path == EXACT else None)
    finally:
        if faulty is not None:
            faulty.question = None
    return frame, (time.perf_counter() - started) * 1000


def _answer_order_statistics(
    wh: Warehouse, job: Job, outcome: Outcome, progress: Callable[[str], None]
) -> None:
    """Give each exact answer of a question a rollup may answer the same answer again with
    each percentile the order statistic below, then above, it (untimed: they hold every
    value of a group, so they come after the times and the peak memory are taken)."""
    rollup = {q.name: q for q in select(list(job.questions)) if q.rollup}
    for answer in outcome.answers:
        question = rollup.get(answer.question)
        if question is None or answer.path != EXACT:
            continue
        progress(f"answering {question.name} (order statistics around percentiles)")
        sides = []
        for side in SIDES:
            with order_statistics(side):
                sides.append(pl.DataFrame(question.ask(wh, job.since, job.until, True)))
        answer.order_statistics = (sides[0], sides[1])


def _source(frame: pl.DataFrame) -> str:
    if not isinstance(frame, Result):
        return "requests"
    plans = list(frame.parts.values()) or [frame.plan]
    sources = sorted({p.source for p in plans}, key=lambda s: (s == "requests", s))
    return "+".join(sources)


def _cpu_seconds(pids: list[str]) -> float:
    """User + system CPU seconds of these processes (``self`` or pids), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def _machine_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy (from /proc/stat), None without /proc."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _others_share(machine_before: float | None, ours_s: float, wall_s: float) -> float | None:
    """The share of the machine's CPU other processes used over ``wall_s`` seconds."""
    machine_after = _machine_cpu_seconds()
    if machine_before is None or machine_after is None or wall_s <= 0:
        return None
    others = max(0.0, machine_after - machine_before - ours_s)
    return min(1.0, others / (wall_s * (os.cpu_count() or 1)))


def status_bytes(pid: str, field_name: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` in bytes (0 where there is no /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
