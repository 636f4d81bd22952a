"""Reading Prometheus series back: label matchers and a time range to SQL over `series`
and `samples`, the store side of remote read (docs/remote-read.md).

One query per selection: the series the matchers pick, joined to their samples in the
range, one row per series with its samples' times and values as arrays. Every label
name, value and pattern is a bound parameter. Matchers follow Prometheus: a label a
series lacks has the value ``""``; ``=~`` and ``!~`` are fully anchored RE2 patterns,
which ClickHouse's ``match`` and DuckDB's ``regexp_matches`` both are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import QueryError
from warehouse.query import dialects
from warehouse.query.builder import quote_identifier
from warehouse.store.base import Store

__all__ = ["OPERATORS", "Matcher", "Selection", "SeriesLimitExceeded", "read_series"]

OPERATORS = ("=", "!=", "=~", "!~")
_NAME = "__name__"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class Matcher:
    """``name op value``, as in a PromQL selector."""

    name: str
    op: str
    value: str

    def check(self) -> None:
        if self.op not in OPERATORS:
            raise QueryError(f"bad matcher operator {self.op!r}: one of {', '.join(OPERATORS)}")
        if not _LABEL_NAME.match(self.name):
            raise QueryError(f"bad label name {self.name!r} in a matcher")
        if self.op in ("=~", "!~"):
            try:  # Python's syntax is not RE2's; the store has the last word
                re.compile(self.value)
            except re.error as exc:
                raise QueryError(
                    f"bad regular expression {self.value!r} for {self.name}: {exc}"
                ) from None


@dataclass(frozen=True)
class Selection:
    """The series matching every matcher, and their samples in ``[start_ms, end_ms]``
    (both ends included, as a remote-read query's)."""

    matchers: Sequence[Matcher]
    start_ms: int
    end_ms: int


class SeriesLimitExceeded(QueryError):
    """A selection holds more samples or series than a read may return."""


def read_series(
    store: Store, selection: Selection, max_samples: int, max_series: int
) -> tuple[list[list[tuple[str, str]]], np.ndarray, np.ndarray, np.ndarray]:
    """The series of ``selection``, sorted as Prometheus sorts label sets, each with its
    labels (``__name__`` among them, sorted by name); and all their samples, series
    after series in time order: values, timestamps (ms) and ``len(labels) + 1`` offsets.
    """
    for matcher in selection.matchers:
        matcher.check()
    if selection.start_ms > selection.end_ms:
        raise QueryError(
            f"the range ends ({selection.end_ms}) before it starts ({selection.start_ms})"
        )
    sql, parameters = _sql(store, selection, max_samples + 1)
    table = store.query_arrow(sql, parameters)
    return _series(table, max_samples, max_series)


def _sql(store: Store, selection: Selection, cap: int) -> tuple[str, dict[str, Any]]:
    db = quote_identifier(store.database)
    parameters: dict[str, Any] = {
        "start_ms": selection.start_ms,
        "end_ms": selection.end_ms,
        "cap": cap,
    }
    conditions = []
    for k, matcher in enumerate(selection.matchers):
        if matcher.name == _NAME:
            value = "metric_name"
        else:
            parameters[f"n{k}"] = matcher.name
            value = f"coalesce(labels[{{n{k}:String}}], '')"
        # Anchored as Prometheus anchors a label regex.
        pattern = f"^(?:{matcher.value})$" if matcher.op in ("=~", "!~") else matcher.value
        parameters[f"v{k}"] = pattern
        bound = f"{{v{k}:String}}"
        conditions.append(
            {
                "=": f"{value} = {bound}",
                "!=": f"{value} != {bound}",
                "=~": f"match({value}, {bound})",
                "!~": f"NOT match({value}, {bound})",
            }[matcher.op]
        )
    where = " AND ".join(conditions) or "1 = 1"
    within = (
        "timestamp >= fromUnixTimestamp64Milli({start_ms:Int64}, 'UTC') "
        "AND timestamp <= fromUnixTimestamp64Milli({end_ms:Int64}, 'UTC')"
    )
    picked = f"id GLOBAL IN (SELECT id FROM {db}.series WHERE {where})"
    if store.capabilities.collapsing_engines:
        # A retried write's samples collapse into one row per (id, timestamp).
        samples = f"SELECT id, timestamp, value FROM {db}.samples FINAL WHERE {within} AND {picked}"
    else:
        samples = (
            f"SELECT id, timestamp, any(value) AS value FROM {db}.samples "
            f"WHERE {within} AND {picked} GROUP BY id, timestamp"
        )
    sql = (
        "SELECT se.series_name AS metric_name, se.series_labels AS labels, "
        "sa.timestamps AS timestamps, sa.sample_values AS sample_values FROM ("
        "SELECT id, groupArray(toUnixTimestamp64Milli(timestamp)) AS timestamps, "
        "groupArray(value) AS sample_values "
        f"FROM ({samples} LIMIT {{cap:UInt64}}) GROUP BY id"
        ") AS sa GLOBAL INNER JOIN ("
        # Aliases apart from the columns: ClickHouse would read the WHERE's names as them.
        "SELECT id, any(metric_name) AS series_name, any(labels) AS series_labels "
        f"FROM {db}.series WHERE {where} GROUP BY id"
        ") AS se ON se.id = sa.id"
    )
    dialect = store.capabilities.dialect
    return (sql if dialect == "clickhouse" else dialects.transpile(sql, dialect)), parameters


def _series(
    table: pa.Table, max_samples: int, max_series: int
) -> tuple[list[list[tuple[str, str]]], np.ndarray, np.ndarray, np.ndarray]:
    counts = pc.list_value_length(table.column("timestamps")).to_numpy(zero_copy_only=False)
    total = int(counts.sum())
    if total > max_samples:
        raise SeriesLimitExceeded(
            f"the query selects more than {max_samples:,} samples "
            "(remote_read_max_samples): narrow its matchers or its range"
        )
    if table.num_rows > max_series:
        raise SeriesLimitExceeded(
            f"the query selects {table.num_rows:,} series, more than {max_series:,} "
            "(remote_read_max_series): narrow its matchers"
        )
    names = table.column("metric_name").to_pylist()
    labels = []
    for name, pairs in zip(names, table.column("labels").to_pylist(), strict=True):
        every = dict(pairs or ())
        every[_NAME] = name
        labels.append(sorted((k, v) for k, v in every.items() if v != ""))
    # Series in label order, each one's samples in time order.
    order = sorted(range(len(labels)), key=labels.__getitem__)
    stamps = _flat(table.column("timestamps"), np.int64)
    values = _flat(table.column("sample_values"), np.float64)
    owner = np.repeat(np.arange(len(labels)), counts)
    rank = np.empty(len(labels), np.int64)
    rank[order] = np.arange(len(labels))
    by = np.lexsort((stamps, rank[owner]))
    offsets = np.zeros(len(labels) + 1, np.int64)
    np.cumsum(counts[order], out=offsets[1:])
    return [labels[i] for i in order], values[by], stamps[by], offsets


def _flat(column: pa.ChunkedArray, dtype: type) -> np.ndarray:
    flat = pc.list_flatten(column)
    return np.asarray(flat.to_numpy(zero_copy_only=False), dtype)
