"""A comparison for people (side-by-side tables) and for machines (JSON)."""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from typing import Any

import numpy as np

from warehouse.compare.agreement import EXACT, ROLLUP
from warehouse.compare.runner import Report
from warehouse.compare.worker import BACKENDS, DEFAULT, Outcome
from warehouse.compare.worker import EXACT as EXACT_PATH
from warehouse.render import TABLE_WIDTH, format_float, iso_time, wrap_note

__all__ = ["MEMORY_NOTE", "render_json", "render_text", "summary_rows"]

MIB = 1024 * 1024
CAPABILITIES = {
    "materialized_views": "rollups kept up at insert",
    "concurrent_writers": "several writer processes",
    "insert_deduplication": "retried insert deduplicated",
    "ttl": "rows expire by TTL",
}
"""Store capabilities worth seeing beside the figures (``Capabilities`` fields)."""
MAX_DIFFERENCES_SHOWN = 50
MEMORY_NOTE = (
    "peak memory is the peak resident set (VmHWM) of the backend's own worker process "
    "(Python, the Arrow batches it inserts and, for chdb and DuckDB, the database engine), "
    "plus the embedded server process's for ClickHouse over HTTP"
)
OTHERS_NOTE = (
    "other processes' CPU is the share of the machine's CPU used by processes other than "
    "the backend's worker and server while it loaded or was timed: above a few percent, "
    "its figures were slowed by other work"
)
TIMING_NOTE = (
    "query times are wall-clock around each Python API call (SQL, round trip, conversion "
    "to polars), after one warm-up answer, over {repeat} rounds of the suite; exact (N): "
    "the N questions from raw rows; default plan (M): the M a rollup can answer, as the "
    "planner chooses"
)
LOAD_NOTE = (
    "load is the insert calls only ({batch:,}-row Arrow batches read from the data set's "
    "Parquet file); settle is the wait for ClickHouse's merges to stop (DuckDB: CHECKPOINT) "
    "before disk is measured"
)


COLUMN = {"clickhouse": "server", "chdb": "chdb", "duckdb": "DuckDB"}
"""Each backend's column in the tables: short, so that a table of three fits 100
columns (the header says which is which)."""


def summary_rows(report: Report) -> list[dict[str, Any]]:
    """The side-by-side figures: one dict per figure, one key per backend (None: n/a)."""
    rows: list[dict[str, Any]] = []
    rollup_questions = _rollup_questions(report)

    def add(figure: str, unit: str, value: Any) -> None:
        row: dict[str, Any] = {"figure": figure, "unit": unit}
        for name, outcome in report.outcomes.items():
            row[name] = value(outcome)
        rows.append(row)

    add("rows loaded", "rows", lambda o: o.rows)
    add("load rate", "rows/s", lambda o: o.rows / o.load_s if o.load_s else None)
    add("load time", "s", lambda o: o.load_s)
    add("load CPU (worker + server)", "s", lambda o: o.load_cpu_s)
    add("settle after load", "s", lambda o: o.settle_s)
    add("disk: requests table", "bytes/request", lambda o: o.requests_bytes / o.rows)
    add("disk: whole database (with rollups)", "bytes/request", lambda o: o.total_bytes / o.rows)
    add("disk: whole database", "MiB", lambda o: o.total_bytes / MIB)
    add(
        "disk: requests parts after settle",
        "parts",
        lambda o: o.tables.get("requests", {}).get("parts"),
    )
    exact = len(_questions(report))
    add(
        f"queries, exact ({exact}): median",
        "ms",
        lambda o: _stat(_runs(o, EXACT_PATH), 50),
    )
    add(f"queries, exact ({exact}): p95", "ms", lambda o: _stat(_runs(o, EXACT_PATH), 95))
    n = len(rollup_questions)
    add(
        f"queries, default plan ({n}): median",
        "ms",
        lambda o: _stat(_default_runs(o, rollup_questions), 50),
    )
    add(
        f"queries, default plan ({n}): p95",
        "ms",
        lambda o: _stat(_default_runs(o, rollup_questions), 95),
    )
    add("memory: worker peak RSS", "MiB", lambda o: o.peak_rss / MIB)
    add(
        "memory: server peak RSS",
        "MiB",
        lambda o: None if o.server_peak_rss is None else o.server_peak_rss / MIB,
    )
    add("memory: peak in all", "MiB", lambda o: (o.peak_rss + (o.server_peak_rss or 0)) / MIB)
    add("memory: worker at start", "MiB", lambda o: o.start_rss / MIB)
    add("answers vs reference", "differences", lambda o: _differences(report, o.backend))
    add("other processes' CPU, during load", "share", lambda o: _share(o.others_load))
    add("other processes' CPU, during queries", "share", lambda o: _share(o.others_queries))
    for name, label in CAPABILITIES.items():
        add(label, "", lambda o, name=name: _yes(o.capabilities.get(name)))
    return rows


def render_text(report: Report) -> str:
    """The comparison as terminal tables: data set, figures, per question, agreement."""
    out = [_header(report), ""]
    names = list(report.outcomes)
    figures = summary_rows(report)
    out.append(
        _table(
            ["figure", "unit", *(COLUMN[n] for n in names)],
            [[r["figure"], r["unit"], *(_cell(r[n]) for n in names)] for r in figures],
            right_from=2,
        )
    )
    out.append("")
    out.append("Per question (ms: median / p95 of the timed runs; source: what answered):")
    out.append(_table(*_question_table(report), right_from=3))
    out.append("")
    out.append(_agreement_text(report))
    notes = [
        TIMING_NOTE.format(repeat=report.options.repeat),
        LOAD_NOTE.format(batch=report.options.batch_rows),
        MEMORY_NOTE,
        OTHERS_NOTE,
        "DuckDB keeps no rollups: its default plan is its exact path, so its default-plan "
        "figures are its exact times for the same questions",
    ]
    out.append("")
    out.extend(wrap_note(f"({note})") for note in notes)
    return "\n".join(out) + "\n"


def render_json(report: Report) -> str:
    """The whole comparison as one JSON document."""
    checks = [
        {
            "question": c.question,
            "backend": c.backend,
            "path": c.path,
            "rule": c.rule,
            "agrees": c.comparison.agrees,
            "cells_checked": c.comparison.compared,
            "cells_skipped": c.comparison.skipped,
            "largest_relative_difference": _finite(c.comparison.worst),
            "unchecked_largest_difference": _finite(c.comparison.unchecked),
        }
        for c in report.checks
    ]
    document = {
        "dataset": _dataset(report),
        "reference": report.reference,
        "agrees": report.agrees,
        "rules": {EXACT.name: EXACT.text, ROLLUP.name: ROLLUP.text},
        "backends": {
            name: _backend_json(report, outcome) for name, outcome in report.outcomes.items()
        },
        "figures": summary_rows(report),
        "questions": [
            {
                "question": a.question,
                "path": a.path,
                "backend": name,
                "source": a.source,
                "rows": a.frame.height,
                "first_ms": round(a.first_ms, 3),
                "median_ms": _stat(a.runs_ms, 50),
                "p95_ms": _stat(a.runs_ms, 95),
                "runs_ms": [round(ms, 3) for ms in a.runs_ms],
            }
            for name, outcome in report.outcomes.items()
            for a in outcome.answers
        ],
        "checks": checks,
        "differences": [
            {
                "question": c.question,
                "backend": c.backend,
                "path": c.path,
                "key": d.key,
                "column": d.column,
                "value": _plain(d.value),
                "reference": _plain(d.reference),
                "check": d.check,
            }
            for c in report.checks
            for d in c.comparison.differences
        ],
        "notes": {
            "timing": TIMING_NOTE.format(repeat=report.options.repeat),
            "load": LOAD_NOTE.format(batch=report.options.batch_rows),
            "memory": MEMORY_NOTE,
            "others_cpu": OTHERS_NOTE,
        },
    }
    return json.dumps(document, indent=2, default=str, allow_nan=False) + "\n"


# -- pieces ------------------------------------------------------------------------------


def _header(report: Report) -> str:
    d = report.dataset
    incidents = "; ".join(d.describe_incidents()) or "none"
    return wrap_note(
        f"Data set: {d.rows:,} requests (seed {d.seed}) from {iso_time(d.since)} to "
        f"{iso_time(d.until)}; incident: {incidents}\n"
        f"Parquet (zstd) {report.dataset_bytes / MIB:.1f} MiB = "
        f"{report.dataset_bytes / d.rows:.1f} bytes/request, generated in "
        f"{report.generate_s:.1f} s. Reference answers: {BACKENDS[report.reference]}, exact.\n"
        "Backends: "
        + "; ".join(f"{COLUMN[name]} = {BACKENDS[name]}" for name in report.outcomes)
        + "."
    )


def _question_table(report: Report) -> tuple[list[str], list[list[str]]]:
    names = list(report.outcomes)
    order: list[tuple[str, str]] = []
    found: dict[tuple[str, str, str], Any] = {}
    for name, outcome in report.outcomes.items():
        for a in outcome.answers:
            if (a.question, a.path) not in order:
                order.append((a.question, a.path))
            found[(a.question, a.path, name)] = a
    order.sort(key=lambda qp: (_questions(report).index(qp[0]), qp[1] != EXACT_PATH))
    rows = []
    for question, path in order:
        sources = sorted(
            {found[(question, path, n)].source for n in names if (question, path, n) in found}
        )
        cells = []
        for n in names:
            answer = found.get((question, path, n))
            cells.append(
                "-"
                if answer is None
                else f"{_cell(_stat(answer.runs_ms, 50))} / {_cell(_stat(answer.runs_ms, 95))}"
            )
        rows.append([question, path, ", ".join(sources), *cells])
    return ["question", "path", "source", *(COLUMN[n] for n in names)], rows


def _agreement_text(report: Report) -> str:
    lines = [
        f"Agreement (every answer against {BACKENDS[report.reference]}'s exact one):",
        *(
            textwrap.fill(text, TABLE_WIDTH, initial_indent="  ", subsequent_indent="    ")
            for text in (
                f"exact answers: {EXACT.text}",
                f"default plan read from rollups: {ROLLUP.text}",
            )
        ),
    ]
    headers = ["question", "backend", "path", "rule", "cells", "skipped", "max rel diff", "result"]
    rows = []
    for c in report.checks:
        comparison = c.comparison
        worst = max(comparison.worst.values(), default=0.0)
        verdict = "agrees" if comparison.agrees else f"{len(comparison.differences)} DIFFER"
        rows.append(
            [
                c.question,
                c.backend,
                c.path,
                c.rule,
                f"{comparison.compared:,}",
                f"{comparison.skipped:,}",
                _cell(worst),
                verdict,
            ]
        )
    lines.append(_table(headers, rows, right_from=4))
    differing = [(c, d) for c in report.checks for d in c.comparison.differences]
    if not differing:
        lines.append(f"All {len(report.checks)} answers agree.")
        return "\n".join(lines)
    lines.append("")
    lines.append(
        f"DISAGREEMENT: {len(differing)} differing cells or rows"
        + (
            f" (first {MAX_DIFFERENCES_SHOWN} shown)"
            if len(differing) > MAX_DIFFERENCES_SHOWN
            else ""
        )
        + ":"
    )
    lines.append(
        _table(
            ["question", "backend", "path", "key", "column", "value", "reference", "check"],
            [
                [
                    c.question,
                    c.backend,
                    c.path,
                    d.key,
                    d.column,
                    _cell(d.value),
                    _cell(d.reference),
                    d.check,
                ]
                for c, d in differing[:MAX_DIFFERENCES_SHOWN]
            ],
            right_from=99,
        )
    )
    return "\n".join(lines)


def _table(headers: list[str], rows: list[list[str]], right_from: int) -> str:
    """A psql-like table; columns from ``right_from`` on are right-aligned."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        padded = (
            c.rjust(w) if i >= right_from else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )
        return (" " + " | ".join(padded)).rstrip()

    return "\n".join(
        [line(headers), "-" + "-+-".join("-" * w for w in widths) + "-", *(line(r) for r in rows)]
    )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isfinite(value) and abs(value) >= 1000:
            return f"{value:,.0f}"
        return format_float(value)
    return str(value)


def _share(value: float | None) -> str | None:
    return None if value is None else f"{value:.0%}"


def _yes(value: bool | None) -> str | None:
    return None if value is None else ("yes" if value else "no")


def _stat(runs: list[float], q: float) -> float | None:
    if not runs:
        return None
    return statistics.median(runs) if q == 50 else float(np.percentile(runs, q))


def _runs(outcome: Outcome, path: str) -> list[float]:
    return [ms for a in outcome.answers if a.path == path for ms in a.runs_ms]


def _default_runs(outcome: Outcome, questions: list[str]) -> list[float]:
    """The default plan's runs; a backend without rollups answers those by its exact path."""
    has_default = any(a.path == DEFAULT for a in outcome.answers)
    path = DEFAULT if has_default else EXACT_PATH
    return [
        ms
        for a in outcome.answers
        if a.path == path and a.question in questions
        for ms in a.runs_ms
    ]


def _questions(report: Report) -> list[str]:
    seen: list[str] = []
    for outcome in report.outcomes.values():
        for a in outcome.answers:
            if a.question not in seen:
                seen.append(a.question)
    return seen


def _rollup_questions(report: Report) -> list[str]:
    return sorted(
        {a.question for o in report.outcomes.values() for a in o.answers if a.path == DEFAULT}
    )


def _differences(report: Report, backend: str) -> str:
    if backend == report.reference:
        ours = [c for c in report.checks if c.backend == backend]
        if not ours:
            return "reference"
    count = sum(len(c.comparison.differences) for c in report.checks if c.backend == backend)
    label = "reference; " if backend == report.reference else ""
    return f"{label}{count}" if count else f"{label}none"


def _dataset(report: Report) -> dict[str, Any]:
    d = report.dataset
    return {
        "rows": d.rows,
        "seed": d.seed,
        "since": d.since.isoformat(),
        "until": d.until.isoformat(),
        "incidents": d.describe_incidents(),
        "parquet_bytes": report.dataset_bytes,
        "generate_s": round(report.generate_s, 3),
        "batch_rows": report.options.batch_rows,
        "repeat": report.options.repeat,
        "workdir": report.workdir,
    }


def _backend_json(report: Report, outcome: Outcome) -> dict[str, Any]:
    return {
        "label": BACKENDS[outcome.backend],
        "rows": outcome.rows,
        "inserts": outcome.inserts,
        "load_s": round(outcome.load_s, 3),
        "load_cpu_s": round(outcome.load_cpu_s, 3),
        "capabilities": outcome.capabilities,
        "load_rows_per_s": round(outcome.rows / outcome.load_s) if outcome.load_s else None,
        "settle_s": round(outcome.settle_s, 3),
        "tables": outcome.tables,
        "bytes_per_request_requests": outcome.requests_bytes / outcome.rows,
        "bytes_per_request_total": outcome.total_bytes / outcome.rows,
        "start_rss_bytes": outcome.start_rss,
        "worker_peak_rss_bytes": outcome.peak_rss,
        "server_peak_rss_bytes": outcome.server_peak_rss,
        "fault_hits": outcome.fault_hits,
        "others_cpu_share_load": outcome.others_load,
        "others_cpu_share_queries": outcome.others_queries,
    }


def _finite(values: dict[str, float]) -> dict[str, float | None]:
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value
