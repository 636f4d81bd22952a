"""What ``llmwh`` commands share: their options as ``Annotated`` aliases, the store or
warehouse a command uses, and the parsing of list and ``KEY=VALUE`` option values."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from warehouse.api import Warehouse
from warehouse.cli.output import Columns
from warehouse.config import Config, load_config, setting_help
from warehouse.errors import ConfigError, InvalidArgument
from warehouse.render import FORMATS
from warehouse.store import Store, discovery

__all__ = [
    "DEFAULT_MEASURES",
    "ByOption",
    "ColumnsOption",
    "ConfigOption",
    "DataOption",
    "ExactOption",
    "FormatOption",
    "HttpPortOption",
    "MeasureOption",
    "OutputOption",
    "SinceOption",
    "StoreOption",
    "TcpPortOption",
    "ThresholdOption",
    "UntilOption",
    "WhereOption",
    "WideOption",
    "columns",
    "comma_list",
    "filters",
    "key_values",
    "nonempty",
    "open_warehouse",
    "store_for",
    "thresholds",
]

T = TypeVar("T")

# -- the store ----------------------------------------------------------------------------

StoreOption = Annotated[
    str | None, typer.Option("--store", help=setting_help("store"), show_default=False)
]
DataOption = Annotated[
    str | None, typer.Option("--data", help=setting_help("data_dir"), show_default=False)
]
ConfigOption = Annotated[
    Path | None, typer.Option("--config", help="TOML settings file [default: ./llmwh.toml]")
]
HttpPortOption = Annotated[
    int, typer.Option("--http-port", help="HTTP port on 127.0.0.1 (0 picks a free one)")
]
TcpPortOption = Annotated[
    int, typer.Option("--tcp-port", help="Native TCP port on 127.0.0.1 (0 picks a free one)")
]


def store_for(config: Config, read_only: bool = False) -> Store:
    """The store ``config`` names, else the embedded server running on its data directory
    (:func:`warehouse.store.discovery.find_store`)."""
    return discovery.find_store(config, read_only)


@contextmanager
def open_warehouse(
    store: str | None, data: str | None, config_file: Path | None, read_only: bool = False
) -> Iterator[Warehouse]:
    """The warehouse over the store that ``--store``, ``--data`` and ``--config`` name."""
    config = load_config(config_file, store=store, data_dir=data)
    with Warehouse(store_for(config, read_only=read_only), config) as wh:
        yield wh


# -- questions ----------------------------------------------------------------------------

DEFAULT_MEASURES = "count,error_rate,p95_ttft_ms,p95_tpot_ms,p95_e2e_ms"

ByOption = Annotated[
    list[str] | None,
    typer.Option("--by", "-b", help="Dimensions to group by, comma-separated or repeated"),
]
MeasureOption = Annotated[
    list[str] | None,
    typer.Option(
        "--measure",
        "-m",
        help=f"Measures, comma-separated or repeated [default: {DEFAULT_MEASURES}]",
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        "-w",
        help="Filter DIMENSION=VALUE[,VALUE...]; repeat for several dimensions",
    ),
]
SinceOption = Annotated[
    str, typer.Option("--since", help="Start: a duration back from now (15m, 7d) or ISO time")
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="End (exclusive) [default: now]", show_default=False)
]
ThresholdOption = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold",
        "-t",
        help="Per-request limit LATENCY=MS for attainment/goodput, e.g. ttft_ms=200",
    ),
]
ExactOption = Annotated[
    bool | None,
    typer.Option(
        "--exact/--approx",
        help="Exact percentiles from raw rows, or approximate ones [default: fastest source]",
        show_default=False,
    ),
]
FormatOption = Annotated[
    str, typer.Option("--format", "-f", help=f"Output format: {'|'.join(FORMATS)}")
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout")
]
ColumnsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--columns",
        "-c",
        help="Columns to print, in this order, comma-separated or repeated (every format) "
        "[default: a table's own, which fit 100 characters; every column for json, csv "
        "and parquet]",
        show_default=False,
    ),
]
WideOption = Annotated[
    bool, typer.Option("--wide", help="A table with every column, not only the default ones")
]


def columns(
    asked: list[str] | None,
    wide: bool,
    default: Iterable[str] | None,
    wrap: Iterable[str] = (),
) -> Columns:
    """What ``--columns`` and ``--wide`` ask of a command whose table shows ``default``
    (None: the leftmost columns that fit)."""
    return Columns(
        tuple(comma_list(asked)),
        wide,
        None if default is None else tuple(default),
        tuple(wrap),
    )


# -- option values ------------------------------------------------------------------------


def nonempty(text: str) -> str:
    """``text`` stripped; :class:`~warehouse.errors.InvalidArgument` when nothing is left
    (a :func:`key_values` value)."""
    if not text.strip():
        raise InvalidArgument(f"an empty value: {text!r}")
    return text.strip()


def comma_list(values: list[str] | None) -> list[str]:
    """Items of a repeated option whose values may also be comma-separated."""
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def key_values(
    items: Iterable[str] | None,
    option: str,
    form: str,
    *,
    value: Callable[[str], T],
    sep: str = "=",
) -> list[tuple[str, T]]:
    """Each ``KEY=VALUE`` (``sep`` between) of a repeated ``option``, as ``(key, value)``.

    The key is stripped and may not be empty; ``value`` converts the value (``str``,
    ``float``, :func:`nonempty`...) and raises ``ValueError`` when it cannot. Anything
    else is a :class:`ConfigError`, ``bad OPTION 'ITEM': expected FORM``.
    """
    pairs = []
    for item in items or ():
        key, found, text = item.partition(sep)
        try:
            if found and key.strip():
                pairs.append((key.strip(), value(text)))
                continue
        except ValueError:
            pass
        raise ConfigError(f"bad {option} {item!r}: expected {form}")
    return pairs


def filters(where: list[str] | None) -> dict[str, list[str]]:
    """``--where DIMENSION=VALUE[,VALUE...]`` (repeated) as dimension -> values."""
    found: dict[str, list[str]] = {}
    for key, values in key_values(where, "--where", "DIMENSION=VALUE[,VALUE...]", value=nonempty):
        found.setdefault(key, []).extend(v.strip() for v in values.split(","))
    return found


def thresholds(given: list[str] | None) -> dict[str, float]:
    """``--threshold LATENCY=MILLISECONDS`` (repeated) as latency -> milliseconds."""
    return dict(key_values(given, "--threshold", "LATENCY=MILLISECONDS", value=float))
