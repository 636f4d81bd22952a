"""``llmwh report``: an SLA report as one self-contained HTML (or PDF) file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warehouse.cli.options import ConfigOption, DataOption, StoreOption, UntilOption, open_warehouse
from warehouse.errors import ConfigError
from warehouse.query.timerange import time_range

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")


@app.command("report")
def report(
    slo: Annotated[
        list[str],
        typer.Option("--slo", help="An SLO to report on: a shipped name or a TOML path (repeat)"),
    ],
    since: Annotated[str, typer.Option("--since", help="Start of the report's range")] = "7d",
    until: UntilOption = None,
    by: Annotated[
        str | None, typer.Option("--by", help="A dimension to rank the worst groups by")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="The file to write")] = Path("report.html"),
    fmt: Annotated[
        str, typer.Option("--format", help="html (self-contained) or pdf (needs the pdf extra)")
    ] = "html",
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Write an SLA report: one self-contained HTML file with charts, per SLO (its
    objectives, attainment, budget burn-down, worst groups, root cause, drift)."""
    from warehouse.exporters.report import gather, render  # matplotlib: only when asked
    from warehouse.exporters.report.pdf import to_pdf

    if fmt not in ("html", "pdf"):
        raise ConfigError(f"unknown --format {fmt!r}: use html or pdf")
    with open_warehouse(store, data, config_file, read_only=True) as wh:
        window = time_range(since, until)
        figures = [gather(wh, name, window, by) for name in slo]
    document = render(figures)
    if fmt == "pdf":
        out.write_bytes(to_pdf(document))
    else:
        out.write_text(document, encoding="utf-8")
    empty = [f.slo.name for f in figures if f.empty]
    note = f" (no request in range for {', '.join(empty)})" if empty else ""
    typer.echo(f"wrote {out}{note}")
