"""What every ``llmwh`` command shares: the store, data and config options, and the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from warehouse.config import Config
from warehouse.errors import ConfigError
from warehouse.store import Store, embedded, local_cluster, open_store

__all__ = ["ConfigOption", "DataOption", "StoreOption", "store_for"]

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL (http://host:8123/db, chdb:///path, duckdb:///file.duckdb). "
        "Default: $LLMWH_STORE, else the embedded server on --data.",
        show_default=False,
    ),
]
DataOption = Annotated[
    str | None,
    typer.Option("--data", help="Data directory of the embedded server [default: ./llmwh-data]"),
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="TOML settings file [default: ./llmwh.toml]")
]


def store_for(config: Config, read_only: bool = False) -> Store:
    """The store ``config`` names, else the embedded server running on its data directory.

    ``read_only`` opens DuckDB files read-only (ClickHouse enforces it per query).
    """
    if config.store:
        url = config.store
        if read_only and url.startswith("duckdb:"):
            url += ("&" if "?" in url else "?") + "read_only=true"
        return open_store(url)
    cluster = local_cluster.cluster_status(config.data_dir)
    if cluster is not None:
        return open_store(cluster.store_url())
    info = embedded.server_status(config.data_dir)
    if info is None:
        raise ConfigError(
            f"no --store given and no embedded ClickHouse runs on {config.data_dir}: start one "
            "with `llmwh clickhouse start` (or `llmwh serve`), or pass --store URL"
        )
    return open_store(info.store_url())
