"""Running a comparison: the data set once, each backend in a worker process in turn,
then every answer checked against the reference backend's."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from warehouse.compare.agreement import EXACT, ROLLUP, Comparison, compare
from warehouse.compare.dataset import Dataset, write_dataset
from warehouse.compare.faults import Fault
from warehouse.compare.questions import select
from warehouse.compare.worker import BACKENDS, DEFAULT, Job, Outcome
from warehouse.errors import InvalidArgument, WorkerFailed
from warehouse.store.embedded import stop_server

__all__ = ["Check", "Options", "Report", "WorkerFailed", "run_compare"]


@dataclass(frozen=True)
class Options:
    """What to compare, on how much data, how often."""

    rows: int = 200_000
    seed: int = 0
    repeat: int = 5
    backends: tuple[str, ...] = tuple(BACKENDS)
    questions: tuple[str, ...] = ()
    batch_rows: int = 100_000
    keep: Path | None = None
    fault: Fault | None = None
    until: datetime | None = None
    """The end of the data set's day (a whole hour); None: the last whole hour. The
    data set's daily shape moves with it, so a fixed one gives the same rows every run."""


@dataclass
class Check:
    """One answer checked against the reference answer."""

    question: str
    backend: str
    path: str
    rule: str
    comparison: Comparison


@dataclass
class Report:
    """A comparison's data set, per-backend outcomes and agreement checks."""

    options: Options
    dataset: Dataset
    dataset_bytes: int
    generate_s: float
    reference: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    workdir: str | None = None

    @property
    def agrees(self) -> bool:
        return all(c.comparison.agrees for c in self.checks)


def run_compare(options: Options, progress: Callable[[str], None] = lambda _: None) -> Report:
    """Generate the data set, run every backend in its own process, check agreement."""
    unknown = [b for b in options.backends if b not in BACKENDS]
    if unknown or not options.backends:
        raise InvalidArgument(
            f"unknown backend(s) {', '.join(unknown) or '(none given)'}: "
            f"choose from {', '.join(BACKENDS)}"
        )
    if options.rows < 1 or options.repeat < 1 or options.batch_rows < 1:
        raise InvalidArgument("rows, repeat and batch rows must be positive")
    questions = select(list(options.questions))
    root = _workdir(options.keep)
    try:
        dataset = (
            Dataset(options.rows, options.seed)
            if options.until is None
            else Dataset(options.rows, options.seed, options.until)
        )
        path = root / "requests.parquet"
        progress(f"generating {options.rows:,} requests into {path}")
        generate_s = write_dataset(dataset, path)
        reference = "duckdb" if "duckdb" in options.backends else options.backends[0]
        report = Report(
            options,
            dataset,
            path.stat().st_size,
            generate_s,
            reference,
            workdir=str(root) if options.keep else None,
        )
        for backend in options.backends:
            job = Job(
                backend=backend,
                workdir=str(root / backend),
                dataset=str(path),
                since=dataset.since,
                until=dataset.until,
                repeat=options.repeat,
                batch_rows=options.batch_rows,
                questions=tuple(q.name for q in questions),
                fault=options.fault,
                order_statistics=backend == reference,
            )
            report.outcomes[backend] = _in_worker(job, progress)
            if options.keep is None:
                shutil.rmtree(root / backend, ignore_errors=True)
        report.checks = _checks(report, {q.name: q.keys for q in questions})
        return report
    finally:
        if options.keep is None:
            shutil.rmtree(root, ignore_errors=True)


def _workdir(keep: Path | None) -> Path:
    if keep is None:
        return Path(tempfile.mkdtemp(prefix="llmwh-compare-"))
    keep = keep.resolve()
    if keep.exists() and any(keep.iterdir()):
        raise InvalidArgument(f"--keep {keep}: the directory is not empty")
    keep.mkdir(parents=True, exist_ok=True)
    return keep


def _in_worker(job: Job, progress: Callable[[str], None]) -> Outcome:
    """Run ``job`` in a fresh Python process (``python -m warehouse.compare``), relaying
    its progress lines; the job and its outcome travel as pickles in its directory."""
    workdir = Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    job_path, outcome_path = workdir / "job.pickle", workdir / "outcome.pickle"
    job_path.write_bytes(pickle.dumps(job))
    label = BACKENDS[job.backend]
    with tempfile.TemporaryFile(mode="w+") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "warehouse.compare", str(job_path), str(outcome_path)],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        try:
            assert process.stdout is not None
            for line in process.stdout:
                progress(f"{label}: {line.rstrip()}")
            code = process.wait()
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait()
            if job.backend == "clickhouse":
                stop_server(workdir / "server")  # if the worker could not
        if code != 0:
            errors.seek(0)
            raise WorkerFailed(f"{label} failed (exit code {code}):\n{errors.read().strip()}")
    return pickle.loads(outcome_path.read_bytes())


def _checks(report: Report, keys: dict[str, tuple[str, ...]]) -> list[Check]:
    """Every answer against the reference backend's exact one: exact answers under the
    exact rule, default-plan answers under the rollup rule (with the order statistics
    around the reference's percentiles)."""
    references = [a for a in report.outcomes[report.reference].answers if a.path == "exact"]
    expected = {a.question: a.frame for a in references}
    around = {a.question: a.order_statistics for a in references}
    checks = []
    for backend, outcome in report.outcomes.items():
        for answer in outcome.answers:
            if backend == report.reference and answer.path == "exact":
                continue
            # a default plan that read raw rows answers exactly: hold it to the exact rule
            rollup = answer.path == DEFAULT and answer.source != "requests"
            rule = ROLLUP if rollup else EXACT
            comparison = compare(
                answer.frame,
                expected[answer.question],
                keys[answer.question],
                rule,
                around[answer.question] if rollup else None,
            )
            checks.append(Check(answer.question, backend, answer.path, rule.name, comparison))
    return checks
