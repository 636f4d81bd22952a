"""Running compiled questions on a store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from warehouse.model import fold_histogram, histogram_quantiles
from warehouse.query.builder import Compiled, Question, RollupSource, compile_question
from warehouse.query.local_merge import merge_rows, too_many_requests
from warehouse.query.result import Result, normalize
from warehouse.store.base import Store

__all__ = ["ask", "execute", "execute_all", "fetch_values", "submit"]

T = TypeVar("T")


def ask(store: Store, question: Question, sources: Sequence[RollupSource] = ()) -> Result:
    """Answer ``question`` from ``store``; ``sources`` are further rollups (an SLO's)."""
    return execute(store, compile_question(question, store.capabilities, store.database, sources))


def execute(store: Store, compiled: Compiled) -> Result:
    """Run compiled SQL on ``store``; the result has the compiled column names and types."""
    sql = compiled.render(store.capabilities.dialect)
    started = time.perf_counter()
    table = store.query_arrow(sql, _used(compiled))
    if compiled.merge is not None:
        if compiled.fallback is not None and too_many_requests(table):
            return execute(store, compiled.fallback())
        frame = normalize(merge_rows(table, compiled.merge), compiled.columns)
    else:
        frame = normalize(_read_histograms(table, compiled), compiled.columns)
    if compiled.sort_after is not None:
        order_by, limit = compiled.sort_after
        frame = frame.sort(
            order_by.lstrip("-"), descending=order_by.startswith("-"), nulls_last=True
        )
        frame = frame.head(limit) if limit is not None else frame
    elapsed_ms = (time.perf_counter() - started) * 1000
    return Result.of(frame, compiled.plan, elapsed_ms)


def execute_all(store: Store, compiled: Sequence[Compiled]) -> list[Result]:
    """Run independent compiled questions, at once where the store takes concurrent
    queries (a server: the questions of an SLA report then cost the slowest of them,
    not their sum), else one after another."""
    if len(compiled) < 2 or not store.capabilities.concurrent_reads:
        return [execute(store, c) for c in compiled]
    return list(_pool().map(lambda c: execute(store, c), compiled))


def submit(call: Callable[..., T], *args: Any) -> Future[T]:
    """``call(*args)`` started on the questions' threads, to run beside them."""
    return _pool().submit(call, *args)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads questions run on, started once: starting two for each SLA report
    cost it 2-3 ms. Nothing run on them waits for the pool, so they cannot deadlock."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="llmwh-query")
        return _POOL


def fetch_values(store: Store, compiled: Compiled) -> np.ndarray:
    """The single column of a values query as a float64 numpy array."""
    table = store.query_arrow(compiled.render(store.capabilities.dialect), _used(compiled))
    return table.column(0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _read_histograms(table: pa.Table, compiled: Compiled) -> pa.Table:
    """The result's columns: percentiles read from the histogram columns, in order."""
    if not compiled.histograms:
        return table
    table = table.rename_columns(list(compiled.sql_columns))
    read: dict[str, pa.Array] = {}
    for column in dict.fromkeys(hist for _, hist, _ in compiled.histograms):
        asked = [(name, level) for name, hist, level in compiled.histograms if hist == column]
        maps = table.column(column).combine_chunks()
        offsets, buckets, counts = fold_histogram(
            maps.offsets.to_numpy(),
            maps.keys.to_numpy(zero_copy_only=False),
            maps.items.to_numpy(zero_copy_only=False),
        )
        values = histogram_quantiles(offsets, buckets, counts, [level for _, level in asked])
        for index, (name, _) in enumerate(asked):
            read[name] = pa.array(values[:, index], pa.float64(), from_pandas=True)
    return pa.table(
        {name: read[name] if name in read else table.column(name) for name in compiled.columns}
    )


def _used(compiled: Compiled) -> dict[str, Any]:
    # DuckDB refuses parameters a statement does not use.
    names = compiled.placeholders
    return {name: value for name, value in compiled.parameters.items() if name in names}
