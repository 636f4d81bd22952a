"""Where a command's result goes: stdout or ``--output``, in the ``--format`` asked for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import polars as pl
import typer

from warehouse.errors import ConfigError
from warehouse.query.result import Result
from warehouse.render import FORMATS, footer_to_stderr, write_result

__all__ = ["write"]


def write(result: pl.DataFrame, fmt: str, output: Path | None) -> None:
    """Write ``result`` as ``fmt`` to ``output`` (stdout when None); a :class:`Result`'s
    footer (where the answer came from) goes with a table, else to stderr."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
    footer = result.footer() if isinstance(result, Result) else None
    if footer is not None and footer_to_stderr(fmt):
        typer.echo(footer, err=True)
        footer = None
    if output is None:
        _write_to(result, fmt, sys.stdout.buffer, footer)
        return
    with output.open("wb") as stream:
        _write_to(result, fmt, stream, footer)


def _write_to(result: pl.DataFrame, fmt: str, stream: BinaryIO, footer: str | None) -> None:
    try:
        write_result(result, fmt, stream, footer=footer)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
