"""Which span attributes fill which `requests` columns: the span mapping, as data.

``span_mapping.toml`` beside this module holds the defaults (the OpenTelemetry GenAI
semantic conventions and vLLM's ``llm_request`` span); a file of the same shape
replaces it (``span_mapping`` setting). See that file for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from warehouse.config import read_toml
from warehouse.errors import ConfigError
from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA

__all__ = ["DEFAULT_SPAN_MAPPING", "Source", "SpanMapping", "load_span_mapping"]

DEFAULT_SPAN_MAPPING = Path(__file__).with_name("span_mapping.toml")

_DERIVED = {"ts", "status", "error_class", "attrs", "is_probe", "tpot_ms"}
"""Columns a span gives by other means than one attribute (status, its times ...)."""
_COLUMNS = {field.name for field in REQUESTS_SCHEMA} - _DERIVED


@dataclass(frozen=True)
class Source:
    """An attribute to read, and the factor its value is multiplied by."""

    attribute: str
    scale: float = 1.0


@dataclass(frozen=True)
class SpanMapping:
    """What makes a span an LLM request, and where its attributes go."""

    request_prefix: str
    columns: dict[str, tuple[Source, ...]]
    """Column -> the attributes that may fill it, the first present winning."""
    attrs: dict[str, tuple[Source, ...]]
    """``attrs`` key -> the attributes that may fill it."""
    error_types: dict[str, str]
    """``error.type`` value -> error class."""


def load_span_mapping(path: str | Path | None = None) -> SpanMapping:
    """Read a span mapping file (default: the built-in one); unknown names are refused."""
    source = Path(path) if path else DEFAULT_SPAN_MAPPING
    data = read_toml(source, "span mapping")

    def sources(where: str, key: str, spec: object) -> tuple[Source, ...]:
        entries = spec if isinstance(spec, list) else [spec]
        found = []
        for entry in entries:
            if isinstance(entry, str):
                found.append(Source(entry))
            elif isinstance(entry, dict) and isinstance(entry.get("attribute"), str):
                scale = entry.get("scale", 1)
                if not isinstance(scale, int | float) or isinstance(scale, bool):
                    raise ConfigError(f"span mapping {source}: {where}.{key}: scale {scale!r}")
                found.append(Source(entry["attribute"], float(scale)))
            else:
                raise ConfigError(
                    f"span mapping {source}: {where}.{key}: {entry!r} is neither an attribute "
                    "name nor {{ attribute = ..., scale = ... }}"
                )
        return tuple(found)

    columns = {}
    for column, spec in data.get("columns", {}).items():
        if column not in _COLUMNS:
            known = ", ".join(sorted(_COLUMNS))
            raise ConfigError(f"span mapping {source}: no column {column!r}; known: {known}")
        columns[column] = sources("columns", column, spec)
    attrs = {key: sources("attrs", key, spec) for key, spec in data.get("attrs", {}).items()}
    error_types = dict(data.get("error_types", {}))
    for name, error_class in error_types.items():
        if error_class not in ERROR_CLASSES:
            raise ConfigError(
                f"span mapping {source}: error_types.{name} is {error_class!r}; known: "
                + ", ".join(ERROR_CLASSES)
            )
    return SpanMapping(
        request_prefix=str(data.get("request_prefix", "gen_ai.")),
        columns=columns,
        attrs=attrs,
        error_types=error_types,
    )
