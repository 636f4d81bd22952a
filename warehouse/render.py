"""Writing a query result (a polars DataFrame) for ``llmwh`` in one of :data:`FORMATS`.

``table`` is for people: an aligned, psql-like table followed by a ``(N rows)`` line and
the optional footer (``source: rollup requests_1h · 12 ms``), wrapped at
:data:`TABLE_WIDTH`. ``json``, ``csv`` and ``parquet`` are for machines and never carry
the footer; the CLI writes it to stderr instead when :func:`footer_to_stderr` says so.

Which columns a table shows is the caller's choice (:func:`fitting_columns` finds the
leftmost that fit): the table says how many it leaves out, and cuts long text at a word.
Datetimes are ISO 8601 in UTC in every format, ``2026-12-05T20:31:00Z``; naive datetimes
are taken to be UTC already.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, BinaryIO

import polars as pl

from warehouse.errors import InvalidArgument

__all__ = [
    "FORMATS",
    "TABLE_WIDTH",
    "fitting_columns",
    "footer_to_stderr",
    "iso_time",
    "wrap_note",
    "write_result",
]

FORMATS = ("table", "json", "csv", "parquet")

TABLE_WIDTH = 100
"""The width a command's default table fits, and where footers and notes wrap: a fixed
number, not the terminal's, so that the same command always shows the same columns."""
MAX_CELL_CHARS = 60
"""Longer table cells (and column names) are cut to this many characters, at a word
where one ends late enough, ending in ``…``."""
MIN_WRAP_CHARS = 30
"""A column that wraps (:func:`render_table`'s ``wrap``) is never narrower than this."""

NULL_CELL = "-"
DIM, RESET = "\x1b[2m", "\x1b[0m"
ISO_MS = "%Y-%m-%dT%H:%M:%S%.3fZ"
"""The machine formats' datetime: ISO 8601, milliseconds, UTC (polars strftime syntax); a
table's too when a value of the column has milliseconds."""
ISO_SECONDS = "%Y-%m-%dT%H:%M:%SZ"
"""A table's datetime when no value of the column has milliseconds."""
_CONTROL = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def write_result(
    frame: pl.DataFrame,
    fmt: str,
    out: BinaryIO | None = None,
    footer: str | None = None,
    color: bool | None = None,
    hidden: int = 0,
    wrap: Sequence[str] = (),
) -> None:
    """Write ``frame`` to ``out`` (default: stdout) as ``fmt``, one of :data:`FORMATS`.

    ``footer`` is printed under a table only, and so are ``hidden`` (how many columns the
    caller left out) and ``wrap`` (see :func:`render_table`); ``color=True`` dims the row
    count and footer (``None`` and ``False`` write no ANSI codes). Parquet is refused on a
    terminal.
    """
    _check_format(fmt)
    out = sys.stdout.buffer if out is None else out
    if fmt == "table":
        text = render_table(frame, footer=footer, color=bool(color), hidden=hidden, wrap=wrap)
        out.write(text.encode())
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


def render_table(
    frame: pl.DataFrame,
    footer: str | None = None,
    color: bool = False,
    hidden: int = 0,
    wrap: Sequence[str] = (),
) -> str:
    """The table text: header, separator, rows, ``(N rows)``, then the footer if given.

    ``hidden`` columns left out are counted on the ``(N rows)`` line, with how to see
    them. A column named in ``wrap`` (free text) takes what :data:`TABLE_WIDTH` leaves
    beside the others, at least :data:`MIN_WRAP_CHARS`, its cells wrapped at words onto
    more lines; the footer wraps at :data:`TABLE_WIDTH`.
    """
    lines = []
    if frame.width:
        headers = [_clip(name) for name in frame.columns]
        cells = [_table_cells(frame.get_column(name)) for name in frame.columns]
        right = [dtype.is_numeric() for dtype in frame.dtypes]
        widths = [_width(h, col) for h, col in zip(headers, cells, strict=True)]
        wrapped = [k for k, name in enumerate(frame.columns) if name in wrap]
        if wrapped:
            fixed = [w for k, w in enumerate(widths) if k not in wrapped]
            room = TABLE_WIDTH - _table_width([*fixed, *(0 for _ in wrapped)])
            share = max(MIN_WRAP_CHARS, room // len(wrapped))
            for k in wrapped:
                texts = _texts(frame.get_column(frame.columns[k]))
                parts = [textwrap.wrap(t, share, break_on_hyphens=False) or [""] for t in texts]
                widths[k] = _width(headers[k], [line for p in parts for line in p])
                cells[k] = ["\n".join(p) for p in parts]

        def line(row: Sequence[str]) -> str:
            padded = (
                c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
            )
            return (" " + " | ".join(padded)).rstrip()

        lines.append(line(headers))
        lines.append("-" + "-+-".join("-" * w for w in widths) + "-")
        for row in zip(*cells, strict=True):
            parts = [cell.split("\n") for cell in row]  # one line, but for wrapped text
            for k in range(max(map(len, parts))):
                lines.append(line([p[k] if k < len(p) else "" for p in parts]))
    count = f"{frame.height} row{'' if frame.height == 1 else 's'}"
    if hidden:
        count += f"; {hidden} more column{'' if hidden == 1 else 's'} with --wide"
    trailer = [f"({count})"]
    if footer:
        trailer.extend(wrap_note(footer).splitlines())
    lines.extend(f"{DIM}{t}{RESET}" if color else t for t in trailer)
    return "\n".join(lines) + "\n"


def fitting_columns(frame: pl.DataFrame, width: int = TABLE_WIDTH) -> list[str]:
    """The leftmost columns of ``frame`` whose table is at most ``width`` characters wide
    (the first column at least, however wide)."""
    widths = [_width(_clip(name), _table_cells(frame.get_column(name))) for name in frame.columns]
    shown = 1
    while shown < len(widths) and _table_width(widths[: shown + 1]) <= width:
        shown += 1
    return frame.columns[:shown]


def wrap_note(text: str) -> str:
    """A footer or note wrapped at words to :data:`TABLE_WIDTH` (a word longer than that,
    a URL say, stays whole on a line of its own)."""
    return "\n".join(
        textwrap.fill(paragraph, TABLE_WIDTH, break_long_words=False, break_on_hyphens=False)
        for paragraph in text.splitlines()
    )


def iso_time(moment: dt.datetime) -> str:
    """A time in a text answer as tables print it: ISO 8601 in UTC, to the second,
    ``2026-12-05T20:31:00Z`` (a naive time is taken to be UTC already)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}Z"


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
        series = series.dt.strftime(ISO_MS if with_ms else ISO_SECONDS)
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


def _texts(series: pl.Series) -> list[str]:
    """Free text to wrap: control characters shown, nothing cut."""
    return [NULL_CELL if v is None else _text(v).translate(_CONTROL) for v in series.to_list()]


def _width(header: str, cells: list[str]) -> int:
    return max([len(header), *map(len, cells)])


def _table_width(widths: Sequence[int]) -> int:
    """A table's width, its separator line's: the cells, ``-+-`` between them and a ``-``
    each side (a row has a space on the left and is cut at its last character)."""
    return 2 + sum(widths) + 3 * (len(widths) - 1)


def _clip(text: str) -> str:
    """``text`` on one line, at most :data:`MAX_CELL_CHARS`: cut after its last word that
    fits, when that leaves most of it, and ``…`` added."""
    text = text.translate(_CONTROL)
    if len(text) <= MAX_CELL_CHARS:
        return text
    cut = text[: MAX_CELL_CHARS - 1]
    space = cut.rfind(" ")
    if text[len(cut)] != " " and space >= MAX_CELL_CHARS * 2 // 3:  # inside a word
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


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
