"""``llmwh compare``: the same dataset and questions on ClickHouse and DuckDB, side by side."""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer()
