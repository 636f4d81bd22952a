"""``llmwh compare``: the same data set and questions on ClickHouse (server over HTTP,
in-process) and DuckDB; load rate, bytes on disk, query times, peak memory, and whether
the answers agree.

- :mod:`~warehouse.compare.dataset`: the data set, generated once to Parquet;
- :mod:`~warehouse.compare.questions`: the suite of questions;
- :mod:`~warehouse.compare.worker`: one backend's load, measurements and answers, in a
  process of its own;
- :mod:`~warehouse.compare.agreement`: whether two answers agree, and the tolerances;
- :mod:`~warehouse.compare.runner`: the whole comparison; :mod:`~warehouse.compare.report`:
  tables and JSON; :mod:`~warehouse.compare.faults`: a wrong answer on purpose.
"""

from warehouse.compare.agreement import EXACT, ROLLUP, Comparison, Difference, compare
from warehouse.compare.faults import Fault
from warehouse.compare.questions import SUITE
from warehouse.compare.report import render_json, render_text
from warehouse.compare.runner import Options, Report, run_compare
from warehouse.compare.worker import BACKENDS

__all__ = [
    "BACKENDS",
    "EXACT",
    "ROLLUP",
    "SUITE",
    "Comparison",
    "Difference",
    "Fault",
    "Options",
    "Report",
    "compare",
    "render_json",
    "render_text",
    "run_compare",
]
