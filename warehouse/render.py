"""Writing a query result (a polars DataFrame) for ``llmwh`` in one of :data:`FORMATS`.

``table`` is for people: an aligned, psql-like table followed by a ``(N rows)`` line and
the optional footer (``source: rollup requests_1h · 12 ms``). ``json``, ``csv`` and
``parquet`` are for machines and never carry the footer; the CLI writes it to stderr
instead when :func:`footer_to_stderr` says so.

Datetimes are always shown in UTC; naive datetimes are taken to be UTC already.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
from decimal import Decimal
from typing import Any, BinaryIO

import polars as pl

from warehouse.errors import InvalidArgument

__all__ = ["FORMATS", "footer_to_stderr", "write_result"]

FORMATS = ("table", "json", "csv", "parquet")

MAX_CELL_CHARS = 60
"""Longer table cells (and column names) are cut to this many characters, ending in ``…``."""

NULL_CELL = "-"
DIM, RESET = "\x1b[2m", "\x1b[0m"
ISO_MS = "%Y-%m-%dT%H:%M:%S%.3fZ"
"""The machine formats' datetime: ISO 8601, milliseconds, UTC (polars strftime syntax)."""
_CONTROL = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def write_result(
    frame: pl.DataFrame,
    fmt: str,
    out: BinaryIO | None = None,
    footer: str | None = None,
    color: bool | None = None,
) -> None:
    """Write ``frame`` to ``out`` (default: stdout) as ``fmt``, one of :data:`FORMATS`.

    ``footer`` is printed under a table only; ``color=True`` dims the row count and footer
    (``None`` and ``False`` write no ANSI codes). Parquet is refused on a terminal.
    """
    _check_format(fmt)
    out = sys.stdout.buffer if out is None else out
    if fmt == "table":
        out.write(render_table(frame, footer=footer, color=bool(color)).encode())
    elif fmt == "json":
        out.write(render_json(frame).encode())
    elif fmt == "csv":
        _csv_ready(frame).write_csv(out, datetime_format=ISO_MS)
    else:
        isatty = getattr(out, "isatty", None)
        if isatty is not None and isatty():
            raise InvalidArgument(
                "refusing to write Parquet to a terminal: redirect to a file or use --output"
            )
        frame.write_parquet(out)
    flush = getattr(out, "flush", None)
    if flush is not None:
        flush()


def footer_to_stderr(fmt: str) -> bool:
    """Whether the CLI should write the footer to stderr: every format but ``table``."""
    _check_format(fmt)
    return fmt != "table"


def render_table(frame: pl.DataFrame, footer: str | None = None, color: bool = False) -> str:
    """The table text: header, separator, rows, ``(N rows)``, then the footer if given."""
    lines = []
    if frame.width:
        headers = [_clip(name) for name in frame.columns]
        cells = [_table_cells(frame.get_column(name)) for name in frame.columns]
        right = [dtype.is_numeric() for dtype in frame.dtypes]
        widths = [max([len(h), *map(len, col)]) for h, col in zip(headers, cells, strict=True)]

        def line(row: list[str] | tuple[str, ...]) -> str:
            padded = (
                c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
            )
            return (" " + " | ".join(padded)).rstrip()

        lines.append(line(headers))
        lines.append("-" + "-+-".join("-" * w for w in widths) + "-")
        lines.extend(line(row) for row in zip(*cells, strict=True))
    trailer = [f"({frame.height} row{'' if frame.height == 1 else 's'})"]
    if footer:
        trailer.append(footer)
    lines.extend(f"{DIM}{t}{RESET}" if color else t for t in trailer)
    return "\n".join(lines) + "\n"


def render_json(frame: pl.DataFrame) -> str:
    """A JSON array with one object per row (one per line); NaN and infinities become null."""
    rows = [
        json.dumps(
            {name: _jsonable(value) for name, value in row.items()},
            ensure_ascii=False,
            allow_nan=False,
            default=str,
        )
        for row in frame.iter_rows(named=True)
    ]
    return "[\n" + ",\n".join(rows) + "\n]\n" if rows else "[]\n"


def format_float(x: float) -> str:
    """A float for people: 4 significant digits below 1 (``0.00423``), else 2 decimals."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if abs(x) >= 1:
        return f"{x:.2f}"
    if abs(x) < 1e-6:
        return f"{x:.4g}"
    text = f"{x:.{3 - math.floor(math.log10(abs(x)))}f}".rstrip("0").rstrip(".")
    return f"{x:.2f}" if abs(float(text)) >= 1 else text  # 0.99996 rounds up to 1.00


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidArgument(
            f"unknown output format {fmt!r}: expected one of {', '.join(FORMATS)}"
        )


def _table_cells(series: pl.Series) -> list[str]:
    dtype = series.dtype
    if isinstance(dtype, pl.Datetime):
        series = _utc_naive_series(series)
        with_ms = bool((series.dt.millisecond() != 0).any())
        series = series.dt.strftime("%Y-%m-%d %H:%M:%S" + ("%.3f" if with_ms else ""))
    values = series.to_list()
    if dtype.is_float() or isinstance(dtype, pl.Decimal):
        return [NULL_CELL if v is None else format_float(float(v)) for v in values]
    if dtype.is_integer():
        return [NULL_CELL if v is None else str(v) for v in values]
    if dtype == pl.Boolean:
        return [NULL_CELL if v is None else ("true" if v else "false") for v in values]
    return [NULL_CELL if v is None else _clip(_text(v)) for v in values]


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list | dict | bytes):
        return json.dumps(_jsonable(value), ensure_ascii=False, default=str)
    return str(value)


def _clip(text: str) -> str:
    text = text.translate(_CONTROL)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="milliseconds") + "Z"
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _utc_naive_series(series: pl.Series) -> pl.Series:
    if isinstance(series.dtype, pl.Datetime) and series.dtype.time_zone is not None:
        return series.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
    return series


def _csv_ready(frame: pl.DataFrame) -> pl.DataFrame:
    """For CSV: datetimes in naive UTC (so the ``Z`` is true), nested values as JSON text."""
    columns = []
    for series in frame.get_columns():
        if series.dtype.is_nested():
            text = [None if v is None else _text(v) for v in series.to_list()]
            series = pl.Series(series.name, text, dtype=pl.String)
        columns.append(_utc_naive_series(series))
    return pl.DataFrame(columns) if columns else frame
