"""Query results: polars DataFrames with the same types whichever store answered."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import pyarrow as pa

from warehouse.query.builder import Plan

__all__ = ["Result", "normalize"]


class Result(pl.DataFrame):
    """A polars DataFrame that also says how it was computed (:attr:`plan`)."""

    plan: Plan
    """How the main question was answered."""
    parts: dict[str, Plan]
    """For answers built from several questions: each part's plan, by what it computed."""
    elapsed_ms: float

    @classmethod
    def of(
        cls,
        frame: pl.DataFrame,
        plan: Plan,
        elapsed_ms: float = 0.0,
        parts: dict[str, Plan] | None = None,
    ) -> Result:
        result = cls(frame)
        result.plan = plan
        result.parts = dict(parts or {})
        result.elapsed_ms = elapsed_ms
        return result

    def footer(self) -> str:
        """One line for the end of a terminal table: the sources and the time taken."""
        described: dict[str, list[str]] = {}
        for label, plan in self.parts.items():
            described.setdefault(plan.describe(), []).append(label)
        if len(described) <= 1:
            return f"{self.plan.describe()} · {self.elapsed_ms:.0f} ms"
        text = "; ".join(f"{', '.join(labels)}: {d}" for d, labels in described.items())
        return f"{text} · {self.elapsed_ms:.0f} ms"


def normalize(table: pa.Table | pl.DataFrame, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The same column types from every backend (and from rows merged here).

    Strings (ClickHouse LowCardinality arrives dictionary-encoded) become plain strings,
    times millisecond UTC timestamps, integers Int64, other numbers Float64 with NaN as
    null (ClickHouse says NaN where DuckDB says NULL, for instance a percentile of no
    values).
    """
    frame = table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    if columns is not None and list(frame.columns) != list(columns):
        frame = frame.rename(dict(zip(frame.columns, columns, strict=True)))
    casts = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if dtype == pl.Categorical or dtype == pl.Enum:
            casts.append(column.cast(pl.Utf8))
        elif isinstance(dtype, pl.Datetime):
            casts.append(column.dt.convert_time_zone("UTC").dt.cast_time_unit("ms"))
        elif isinstance(dtype, pl.Decimal):
            casts.append(column.cast(pl.Int64 if dtype.scale == 0 else pl.Float64))
        elif dtype.is_integer():
            casts.append(column.cast(pl.Int64))
        elif dtype.is_float():
            casts.append(column.cast(pl.Float64).fill_nan(None))
    return frame.with_columns(casts) if casts else frame
