"""Running compiled questions on a store."""

from __future__ import annotations

import re
import time
from typing import Any

import numpy as np

from warehouse.query.builder import Compiled, Question, compile_question
from warehouse.query.result import Result, normalize
from warehouse.store.base import Store

__all__ = ["ask", "execute", "fetch_values"]

_PLACEHOLDER = re.compile(r"\{(\w+):[^}]+\}")


def ask(store: Store, question: Question) -> Result:
    """Answer ``question`` from ``store``."""
    return execute(store, compile_question(question, store.capabilities, store.database))


def execute(store: Store, compiled: Compiled) -> Result:
    """Run compiled SQL on ``store``; the result has the compiled column names and types."""
    sql = compiled.render(store.capabilities.dialect)
    started = time.perf_counter()
    table = store.query_arrow(sql, _used(compiled))
    elapsed_ms = (time.perf_counter() - started) * 1000
    return Result.of(normalize(table, compiled.columns), compiled.plan, elapsed_ms)


def fetch_values(store: Store, compiled: Compiled) -> np.ndarray:
    """The single column of a values query as a float64 numpy array."""
    table = store.query_arrow(compiled.render(store.capabilities.dialect), _used(compiled))
    return table.column(0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _used(compiled: Compiled) -> dict[str, Any]:
    # DuckDB refuses parameters a statement does not use.
    names = set(_PLACEHOLDER.findall(compiled.sql))
    return {name: value for name, value in compiled.parameters.items() if name in names}
