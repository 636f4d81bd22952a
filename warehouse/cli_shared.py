"""What every ``llmwh`` command shares: the store, data and config options, and the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warehouse.config import Config, setting_help
from warehouse.store import Store, discovery

__all__ = ["ConfigOption", "DataOption", "StoreOption", "store_for"]

StoreOption = Annotated[
    str | None, typer.Option("--store", help=setting_help("store"), show_default=False)
]
DataOption = Annotated[
    str | None, typer.Option("--data", help=setting_help("data_dir"), show_default=False)
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="TOML settings file [default: ./llmwh.toml]")
]


def store_for(config: Config, read_only: bool = False) -> Store:
    """The store ``config`` names, else the embedded server running on its data directory
    (:func:`warehouse.store.discovery.find_store`)."""
    return discovery.find_store(config, read_only)
