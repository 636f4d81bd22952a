"""Where a command's result goes: stdout or ``--output``, in the ``--format`` asked for,
with the columns asked for (:class:`Columns`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO

import polars as pl
import typer

from warehouse.errors import ConfigError
from warehouse.query.result import Result
from warehouse.render import FORMATS, fitting_columns, footer_to_stderr, wrap_note, write_result

__all__ = ["Columns", "write"]


@dataclass(frozen=True)
class Columns:
    """Which columns of a result a command prints.

    ``asked`` (``--columns``) are printed in that order in every format. Otherwise the
    machine formats and a ``wide`` table (``--wide``) print every column, and a table
    prints the ``default`` ones (names, or patterns such as ``burn_rate_*``), in the
    result's order; a ``default`` of None takes the leftmost columns that fit
    :data:`~warehouse.render.TABLE_WIDTH` (for SQL, whose columns only its author knows).
    """

    asked: tuple[str, ...] = ()
    wide: bool = False
    default: tuple[str, ...] | None = ()
    """``()``: every column (a command whose columns are what its options asked for)."""
    wrap: tuple[str, ...] = ()
    """Free-text columns a table wraps rather than cuts (:func:`warehouse.render.render_table`)."""

    def pick(self, frame: pl.DataFrame, fmt: str) -> list[str]:
        """The columns of ``frame`` to print as ``fmt``."""
        if self.asked:
            unknown = [name for name in self.asked if name not in frame.columns]
            if unknown:
                raise ConfigError(
                    f"unknown column {unknown[0]!r} in --columns; this answer has "
                    f"{', '.join(frame.columns)}"
                )
            return list(dict.fromkeys(self.asked))
        if fmt != "table" or self.wide or self.default == ():
            return list(frame.columns)
        if self.default is None:
            return fitting_columns(frame)
        patterns = self.default
        return [c for c in frame.columns if any(fnmatchcase(c, p) for p in patterns)]


def write(
    result: pl.DataFrame,
    fmt: str,
    output: Path | None,
    columns: Columns | None = None,
    note: str | None = None,
) -> None:
    """Write ``result``'s ``columns`` as ``fmt`` to ``output`` (stdout when None).

    A :class:`Result`'s footer (where the answer came from), after ``note`` if given,
    goes with a table, else to stderr; both wrap at the table's width.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
    columns = columns or Columns()
    lines = [note] if note else []
    if isinstance(result, Result):
        lines.append(result.footer())
    footer = "\n".join(lines) or None
    if footer is not None and footer_to_stderr(fmt):
        typer.echo(wrap_note(footer), err=True)
        footer = None
    shown = columns.pick(result, fmt)
    frame = result if shown == result.columns else result.select(shown)
    hidden = 0 if columns.asked else result.width - frame.width
    if output is None:
        _write_to(frame, fmt, sys.stdout.buffer, footer, hidden, columns.wrap)
        return
    with output.open("wb") as stream:
        _write_to(frame, fmt, stream, footer, hidden, columns.wrap)


def _write_to(
    frame: pl.DataFrame,
    fmt: str,
    stream: BinaryIO,
    footer: str | None,
    hidden: int,
    wrap: Sequence[str],
) -> None:
    try:
        write_result(frame, fmt, stream, footer=footer, hidden=hidden, wrap=wrap)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
