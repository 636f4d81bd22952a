"""Every number the report and the overview show, in one format with its unit:
``99.2 %``, ``412 ms``, ``15.4k req``, ``3.2x`` (a burn rate), ``38 tok/s``.

A measure's unit follows from its name, as the registry names measures
(docs/querying.md): ``*_ms`` are milliseconds, ``*_rate``, ``*_ratio``, ``attainment``,
``compliance`` and ``budget_remaining`` are shares, ``decode_tps`` tokens per second,
``goodput_rps`` and ``rps`` requests per second, ``count*`` requests, ``sum_*_tokens``
tokens. The charts' axes use the same functions, so a tick reads as the table beside it.
"""

from __future__ import annotations

import math

__all__ = ["DASH", "burn", "count", "measure", "ms", "number", "pct", "unit_of"]

DASH = "&ndash;"
"""What an absent number shows (HTML)."""
_SHARES = ("attainment", "compliance", "budget_remaining", "score", "contribution")
_SUFFIXES = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def unit_of(name: str) -> str:
    """The unit of the measure (or report column) ``name``: ``%``, ``ms``, ``req``,
    ``req/s``, ``tok``, ``tok/s`` or ``""`` (a plain number, a lift)."""
    if name in _SHARES or name.endswith(("_rate", "_ratio")):
        return "%"
    if name.endswith("_ms"):
        return "ms"
    if name in ("decode_tps",):
        return "tok/s"
    if name.endswith("rps"):
        return "req/s"
    if name.startswith("sum_") and name.endswith("tokens"):
        return "tok"
    if name in ("count", "bad", "windows") or name.startswith("count_") or name.endswith("_count"):
        return "req"
    return ""


def measure(value: float | None, name: str) -> str:
    """``value`` of the measure ``name``, with its unit."""
    return number(value, unit_of(name))


def number(value: float | None, unit: str) -> str:
    """``value`` in ``unit`` (one of :func:`unit_of`'s)."""
    if unit == "%":
        return pct(value)
    if unit == "ms":
        return ms(value)
    if unit in ("req", "tok"):
        return count(value, unit)
    return _plain(value, unit)


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal (``99.2 %``); two below 1 % (an error
    rate of ``0.04 %`` is not ``0.0 %``) and where one would round a share below 100 %
    up to it (``99.96 %``, never ``100.0 %``)."""
    if value is None or math.isnan(value):
        return DASH
    size = abs(value)
    digits = 2 if 0 < size < 0.01 or (size < 1 and round(size * 100, 1) >= 100) else 1
    return f"{value * 100:.{digits}f} %"


def ms(value: float | None) -> str:
    """Milliseconds: three significant digits (``41.2 ms``, ``412 ms``), seconds from
    10 s up (``60.0 s``)."""
    if value is None or math.isnan(value):
        return DASH
    if abs(value) >= 10_000:
        return f"{_sig(value / 1000)} s"
    return f"{_sig(value)} ms"


def count(value: float | None, unit: str = "req") -> str:
    """A count, shortened past a thousand: ``950 req``, ``15.4k req``, ``2.1M tok``."""
    if value is None or math.isnan(value):
        return DASH
    for size, suffix in _SUFFIXES:
        if abs(value) >= size:
            return f"{_sig(value / size)}{suffix} {unit}"
    return f"{value:,.0f} {unit}"


def burn(value: float | None) -> str:
    """A burn rate, a multiple of the sustainable rate: ``0x``, ``0.24x``, ``1.6x``,
    ``14.4x``, ``120x``."""
    if value is None or math.isnan(value):
        return DASH
    if value == 0:
        return "0x"
    digits = 0 if abs(value) >= 100 else (1 if abs(value) >= 1 else 2)
    return f"{value:,.{digits}f}x"


def _plain(value: float | None, unit: str) -> str:
    if value is None or math.isnan(value):
        return DASH
    return f"{_sig(value)} {unit}".rstrip()


def _sig(value: float) -> str:
    """Three significant digits, no exponent, no trailing zeros past them: 0.0412,
    41.2, 412, 4,120."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    decimals = 2 - math.floor(math.log10(size))
    return f"{value:.{max(decimals, 0)}f}"
