"""The ``llmwh`` command line: the typer app, and :func:`run`, which turns errors into one line.

A module per group of commands, each a thin shell over the package's functions:
:mod:`.serve`, :mod:`.ingest`, :mod:`.store` (``clickhouse ...``, ``migrate ...``),
:mod:`.token`, :mod:`.query` (drill, timeseries, sla, sql, root-cause, drift, ab),
:mod:`.report`, :mod:`.export` (export, alert-rules, ``exporters write``), :mod:`.slo`,
:mod:`.named` (``query ...``), :mod:`.generate` and :mod:`.compare`; what they share
(options, the store, output) in :mod:`.options` and :mod:`.output`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import typer

from warehouse.cli import (
    compare,
    export,
    generate,
    ingest,
    named,
    query,
    report,
    serve,
    slo,
    store,
    token,
)
from warehouse.errors import WarehouseError

__all__ = ["app", "main", "run"]

app = typer.Typer(
    name="llmwh",
    help="LLM inference SLA warehouse on ClickHouse (and DuckDB).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Help texts are wrapped to the terminal, not where the docstrings break lines.
    rich_markup_mode="markdown",
)
app.add_typer(ingest.app)
app.add_typer(serve.app)
app.add_typer(store.clickhouse_app, name="clickhouse")
app.add_typer(store.migrate_app, name="migrate")
app.add_typer(token.app, name="token")
app.add_typer(query.app)
app.add_typer(report.app)
app.add_typer(export.app)
app.add_typer(slo.app, name="slo")
app.add_typer(named.app, name="query")
app.add_typer(export.exporters_app, name="exporters")
app.add_typer(generate.app)
app.add_typer(compare.app)


# typer exports BadParameter only; its bases are click's errors (which typer may vendor).
_CLICK_ERROR: type[Any] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def main(argv: list[str] | None = None) -> None:
    """Console entry point (see :func:`run`)."""
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run one ``llmwh`` command line and return its exit code.

    Bad input ends in one ``llmwh: error:`` line on stderr, never a traceback: a usage
    error (exit 2), an error from the warehouse's error tree or a file that cannot be
    read (exit 1).
    """
    # Drivers log what they then raise; the raised error is the one line said.
    logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
    try:
        code = app(args=argv, prog_name="llmwh", standalone_mode=False)
    except _CLICK_ERROR as exc:
        return _fail(exc.format_message(), getattr(exc, "exit_code", 2))
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted", 130)
    except WarehouseError as exc:
        return _fail(str(exc), 1)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        return _fail(f"cannot use{name}: {exc.strerror or exc}", 1)
    except UnicodeDecodeError as exc:
        return _fail(f"not UTF-8 text: {exc}", 1)
    return code if isinstance(code, int) else 0


def _fail(message: str, code: int) -> int:
    typer.echo(f"llmwh: error: {' '.join(message.split())}", err=True)
    return code
