"""OpenTelemetry metric and attribute names as Prometheus names.

The rules of the OpenTelemetry specification's "Prometheus and OpenMetrics
Compatibility" (OTLP metric points to Prometheus), as docs/otlp.md lists them:

* characters outside ``[a-zA-Z0-9_:]`` become ``_``, runs of ``_`` become one, and a
  name that starts with a digit gets a leading ``_``;
* the unit, written as Prometheus writes it (``s`` -> ``seconds``, ``By`` -> ``bytes``,
  ``{request}`` dropped, ``1`` -> ``ratio`` for gauges, ``m/s`` -> ``meters_per_second``),
  is appended unless the name already holds it;
* a monotonic sum (a counter) ends in ``_total``.

So ``gen_ai.server.time_to_first_token`` with unit ``s`` is
``gen_ai_server_time_to_first_token_seconds``, the family a Prometheus scrape of the same
histogram gives.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

__all__ = ["label_name", "le_value", "metric_name", "prometheus_unit"]

_UNITS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "µs": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "%": "percent",
}
"""UCUM units (as OpenTelemetry writes them) -> Prometheus unit words."""
_PER_UNITS = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}
"""The denominator of ``x/y`` units: ``m/s`` is ``meters_per_second``."""
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_:]+")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]+")
_UNDERSCORES = re.compile(r"__+")
_ANNOTATION = re.compile(r"\{[^}]*\}")


_CACHED = 256
"""Names up to this long are remembered (a sender's names repeat in every export);
longer ones, rare and refused by the write limits soon after, are not kept."""


def prometheus_unit(unit: str, gauge: bool) -> str:
    """The unit words of an OTLP ``unit`` (empty when it has none for Prometheus)."""
    return _unit(unit, gauge) if len(unit) <= _CACHED else _unit.__wrapped__(unit, gauge)


def metric_name(name: str, unit: str, *, gauge: bool, counter: bool) -> str:
    """The Prometheus metric name of an OTLP metric (the family's name, before the
    ``_bucket``, ``_sum`` and ``_count`` of histograms and summaries)."""
    if len(name) + len(unit) <= _CACHED:
        return _metric_name(name, unit, gauge, counter)
    return _metric_name.__wrapped__(name, unit, gauge, counter)


def label_name(key: str) -> str:
    """The Prometheus label name of an attribute key (``http.route`` -> ``http_route``)."""
    return _label_name(key) if len(key) <= _CACHED else _label_name.__wrapped__(key)


@lru_cache(maxsize=4096)
def _unit(unit: str, gauge: bool) -> str:
    unit = _ANNOTATION.sub("", unit).strip()
    if unit == "1":
        return "ratio" if gauge else ""
    main, _, per = unit.partition("/")
    words = [_word(_UNITS.get(main, main))]
    if per:
        words += ["per", _word(_PER_UNITS.get(per, per))]
    return "_".join(word for word in words if word)


@lru_cache(maxsize=4096)
def _metric_name(name: str, unit: str, gauge: bool, counter: bool) -> str:
    result = _UNDERSCORES.sub("_", _NOT_NAME.sub("_", name))
    if result[:1].isdigit():
        result = f"_{result}"
    if counter and result.endswith("_total"):  # the unit goes before it
        result = result.removesuffix("_total")
    suffix = prometheus_unit(unit, gauge)
    tokens = result.split("_")
    if suffix and not _holds(tokens, suffix.split("_")):
        result = f"{result.rstrip('_')}_{suffix}"
    if counter and not result.endswith("_total"):
        result = f"{result.rstrip('_')}_total"
    return result or "_"


@lru_cache(maxsize=4096)
def _label_name(key: str) -> str:
    result = _UNDERSCORES.sub("_", _NOT_LABEL.sub("_", key))
    if result[:1].isdigit():
        result = f"key_{result}"
    return result or "_"


def le_value(bound: float) -> str:
    """A bucket bound as the ``le`` label writes it: shortest decimal, no exponent,
    ``+Inf`` for infinity (``0.005``, ``1``, ``2.5``)."""
    if bound == float("inf"):
        return "+Inf"
    if bound == float("-inf"):
        return "-Inf"
    text = format(Decimal(repr(float(bound))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def _word(unit: str) -> str:
    return _UNDERSCORES.sub("_", _NOT_LABEL.sub("_", unit)).strip("_")


def _holds(tokens: list[str], words: list[str]) -> bool:
    """Whether ``words`` appear, in order and adjacent, among a name's ``tokens``."""
    n = len(words)
    return any(tokens[i : i + n] == words for i in range(len(tokens) - n + 1))
