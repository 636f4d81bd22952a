"""SLO definitions: named sets of objectives read from TOML files.

An SLO file looks like this (every key but the objectives or thresholds is optional)::

    name = "chat-assistant"            # default: the file name without .toml
    description = "Interactive chat: fast first token, smooth streaming."
    target = 0.99                      # share of requests that must be good; budget = 1 - target
    window = "5m"                      # compliance window (default 5m)
    period = "30d"                     # error-budget period (default 30d)
    burn_windows = ["5m", "1h", "6h"]  # burn rates over these windows (default 5m, 1h, 6h)

    [scope]                            # only these requests count (default: all)
    service = ["chat"]                 # a string or a list of strings per dimension
    tenant = "acme"                    # attrs keys as "attrs['gpu']" = "h100" or gpu = "h100"

    [thresholds]                       # per-request: good = ok and under every threshold
    ttft_ms = 200                      # keys: the latency columns (ttft_ms, tpot_ms, e2e_ms,
    tpot_ms = 50                       # queue_ms, itl_p99_ms), values in milliseconds
    e2e_ms = 1800

    [[objectives]]                     # aggregates, evaluated per window and over the period
    objective = "p95(ttft_ms) <= 200"
    weight = 3                         # weight in the combined score (default 1)
    [[objectives]]
    objective = "error_rate <= 0.005"

An objective is ``<measure> <op> <number>`` with op one of ``<=``, ``<``, ``>=``, ``>``.
The measure is a measure name (``p95_ttft_ms``, ``error_rate``, ``decode_tps``,
``attainment``, ...) or a function of a column, normalised to that name:
``p95(ttft_ms)`` is ``p95_ttft_ms``, ``p99.9(e2e_ms)`` is ``p999_e2e_ms``,
``avg(ttft_ms)`` is ``avg_ttft_ms``, ``sum(output_tokens)`` is ``sum_output_tokens``.
Percentile levels: 50, 75, 90, 95, 99 and 99.9 (also written 999). An objective may also
be written as a plain string in an ``objectives = [...]`` array when its weight is 1.

Durations are a whole number and a unit, ``s``, ``m``, ``h``, ``d`` or ``w``, combined
largest first if needed (``30s``, ``5m``, ``1h30m``, ``7d``, ``4w``).

Loading checks the syntax and the ranges (target in (0, 1), positive weights and
thresholds, window shorter than period, no unknown keys). Whether a measure exists is the
query layer's business: pass its lookup as ``validate_measure``, a callable that raises on
an unknown name. Every problem is a :class:`~warehouse.errors.QueryError` naming the file
and the key, e.g. ``chat.toml: objectives[1]: cannot read "p95(ttft_ms) =< 200": ...``
(array indices count from 0).

A few SLOs ship with the package (:func:`shipped_slos`); ``load_slo("chat-assistant")``
loads one, ``load_slo("path/to/mine.toml")`` loads yours.
"""

from __future__ import annotations

import functools
import math
import operator
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, overload

from warehouse.errors import InvalidArgument, QueryError
from warehouse.model import LATENCY_COLUMNS
from warehouse.query.timerange import parse_duration

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

__all__ = [
    "DEFAULT_BURN_WINDOWS",
    "DEFAULT_PERIOD",
    "DEFAULT_TARGET",
    "DEFAULT_WINDOW",
    "OPERATORS",
    "PERCENTILE_LEVELS",
    "SLO",
    "Objective",
    "load_slo",
    "parse_objective",
    "parse_slo",
    "shipped_slos",
]

DEFAULT_TARGET = 0.99
DEFAULT_WINDOW = "5m"
DEFAULT_PERIOD = "30d"
DEFAULT_BURN_WINDOWS = ("5m", "1h", "6h")


class Compare(Protocol):
    """An objective's comparison (an :mod:`operator` function) of a value with its limit,
    or of every value of a column or an array at once."""

    @overload
    def __call__(self, value: float, limit: float, /) -> bool: ...
    @overload
    def __call__(self, value: pl.Expr, limit: float, /) -> pl.Expr: ...
    @overload
    def __call__(self, value: np.ndarray, limit: float, /) -> np.ndarray: ...


OPERATORS: dict[str, Compare] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
"""Comparison operators an objective may use."""

PERCENTILE_LEVELS = {"50": "50", "75": "75", "90": "90", "95": "95", "99": "99", "99.9": "999"}
"""Percentile levels as written in ``p<level>(column)`` and as they appear in measure names."""

TOP_LEVEL_KEYS = (
    "name",
    "description",
    "target",
    "window",
    "period",
    "burn_windows",
    "scope",
    "thresholds",
    "objectives",
)
OBJECTIVE_KEYS = ("objective", "weight")
SLOS_PACKAGE = "warehouse.query"
SLOS_DIR = "slos"

_MEASURE = re.compile(r"^[a-z][a-z0-9_]*$")
_OBJECTIVE = re.compile(
    r"""^\s*
    (?: (?P<fn>[a-z][a-z0-9.]*) \s*\(\s* (?P<arg>[^()\s]*) \s*\)   # p95(ttft_ms)
      | (?P<name>[^\s()<>=!]+) )                                  # p95_ttft_ms
    \s* (?P<op><=|>=|<|>) \s*
    (?P<value>[^\s<>=!]+)
    \s*$""",
    re.VERBOSE,
)
_SCOPE_KEY = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*|attrs\['[^'\]]+'\])$")
_OBJECTIVE_SYNTAX = "expected <measure> <=|<|>=|> <number>"


@dataclass(frozen=True)
class Objective:
    """One aggregate objective: ``measure op value``, e.g. ``p95_ttft_ms <= 200``."""

    measure: str
    op: str
    value: float
    weight: float = 1.0
    text: str = ""

    def holds(self, x: float | None) -> bool:
        """Whether a measured value meets the objective; a missing (None, NaN) value does not."""
        if x is None or math.isnan(x):
            return False
        return OPERATORS[self.op](x, self.value)

    def __str__(self) -> str:
        return self.text or f"{self.measure} {self.op} {self.value:g}"


def parse_objective(text: str, weight: float = 1.0) -> Objective:
    """Read ``"p95(ttft_ms) <= 200"`` into an Objective; ValueError when it cannot."""
    if not isinstance(text, str):
        raise InvalidArgument(f"an objective is a string like 'p95(ttft_ms) <= 200', not {text!r}")
    match = _OBJECTIVE.match(text)
    if match is None:
        raise _unreadable(text, _OBJECTIVE_SYNTAX)
    if match["fn"] is not None:
        measure = _function_measure(match["fn"], match["arg"], text)
    else:
        measure = match["name"]
    if not _MEASURE.match(measure):
        raise _unreadable(
            text,
            f"{measure!r} is not a measure name "
            "(lower-case letters, digits and '_', starting with a letter)",
        )
    try:
        value = float(match["value"])
    except ValueError:
        raise _unreadable(
            text, f"{match['value']!r} is not a number; {_OBJECTIVE_SYNTAX}"
        ) from None
    if not math.isfinite(value):
        raise _unreadable(text, "the value must be a finite number")
    return Objective(measure, match["op"], value, float(weight), text.strip())


def _function_measure(fn: str, arg: str, text: str) -> str:
    if not _MEASURE.match(arg):
        raise _unreadable(text, f"{arg!r} is not a column name")
    if fn in ("avg", "sum"):
        return f"{fn}_{arg}"
    if fn.startswith("p"):
        level = "99.9" if fn[1:] == "999" else fn[1:]
        if level in PERCENTILE_LEVELS:
            return f"p{PERCENTILE_LEVELS[level]}_{arg}"
        levels = ", ".join(f"p{level}" for level in PERCENTILE_LEVELS)
        raise _unreadable(text, f"percentile {fn!r} is not one of {levels}")
    raise _unreadable(text, f"unknown function {fn!r}; use p<level>(column), avg or sum")


def _unreadable(text: str, why: str) -> ValueError:
    return ValueError(f'cannot read "{text.strip()}": {why}')


@dataclass(frozen=True)
class SLO:
    """A service-level objective as read from its TOML file.

    ``burn_windows`` pairs each window's label as written (``"1h"``, which names the
    ``burn_rate_1h`` column) with its length. ``scope`` maps dimensions to the values the
    SLO applies to; ``thresholds`` maps latency columns to per-request limits in ms.
    """

    name: str
    description: str = ""
    target: float = DEFAULT_TARGET
    window: timedelta = field(default_factory=lambda: parse_duration(DEFAULT_WINDOW))
    period: timedelta = field(default_factory=lambda: parse_duration(DEFAULT_PERIOD))
    burn_windows: tuple[tuple[str, timedelta], ...] = tuple(
        (label, parse_duration(label)) for label in DEFAULT_BURN_WINDOWS
    )
    scope: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    thresholds: dict[str, float] = field(default_factory=dict, hash=False)
    objectives: tuple[Objective, ...] = ()
    source: str = ""

    @property
    def error_budget(self) -> float:
        """The share of requests allowed to be bad: ``1 - target``."""
        return 1.0 - self.target

    @property
    def measures(self) -> tuple[str, ...]:
        """The measures the objectives use, each once, in order."""
        return tuple(dict.fromkeys(o.measure for o in self.objectives))

    def filters(self) -> dict[str, list[str]]:
        """The scope in the shape a drill-down's ``filters`` argument takes."""
        return {key: list(values) for key, values in self.scope.items()}


def shipped_slos() -> list[str]:
    """Names of the example SLOs that ship with the package, sorted."""
    folder = resources.files(SLOS_PACKAGE) / SLOS_DIR
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in folder.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    )


def load_slo(
    name_or_path: str | Path, validate_measure: Callable[[str], object] | None = None
) -> SLO:
    """Load an SLO from a TOML file, or a shipped one by name (``"chat-assistant"``).

    A bare name (no directory, no ``.toml``) means a shipped SLO, whatever the current
    directory holds; anything else is a path. ``validate_measure`` is called with each
    objective's measure name and should raise on an unknown one; a text already loaded
    with the same validator is not parsed (nor validated) again.
    """
    if isinstance(name_or_path, str) and _is_bare_name(name_or_path):
        shipped = shipped_slos()
        if name_or_path not in shipped:
            raise QueryError(
                f"unknown SLO {name_or_path!r}: give a path to a .toml file or one of the "
                f"shipped SLOs: {', '.join(shipped)}"
            )
        entry = resources.files(SLOS_PACKAGE) / SLOS_DIR / f"{name_or_path}.toml"
        text = entry.read_text(encoding="utf-8")
        return _parsed(text, str(entry), entry.name, validate_measure)
    path = Path(name_or_path)
    if not path.is_file():
        raise QueryError(f"{path}: no such SLO file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QueryError(f"{path}: cannot read the SLO file: {exc}") from exc
    return _parsed(text, str(path), str(path), validate_measure)


def _parsed(
    text: str, source: str, label: str, validate_measure: Callable[[str], object] | None
) -> SLO:
    """:func:`parse_slo`, once per text and validator: the exporter and the API load an
    SLO for each report, and reading the TOML cost 1-1.5 ms of a 50 ms report. The file
    is still read each time, so an edit takes effect at the next load. Each caller gets
    its own ``scope`` and ``thresholds`` dicts, so none can change another's SLO."""
    try:
        hash(validate_measure)
    except TypeError:  # a validator that cannot key a cache: parsed every time
        return parse_slo(text, source=source, label=label, validate_measure=validate_measure)
    slo = _parsed_once(text, source, label, validate_measure)
    return replace(slo, scope=dict(slo.scope), thresholds=dict(slo.thresholds))


@functools.lru_cache(maxsize=64)
def _parsed_once(
    text: str, source: str, label: str, validate_measure: Callable[[str], object] | None
) -> SLO:
    return parse_slo(text, source=source, label=label, validate_measure=validate_measure)


def parse_slo(
    text: str,
    source: str = "<string>",
    *,
    label: str | None = None,
    validate_measure: Callable[[str], object] | None = None,
) -> SLO:
    """Read an SLO from TOML text; ``source`` is its path (the default name is its stem).

    ``label`` is how error messages name the file (default: ``source``).
    """
    return _Reader(source, label or source, validate_measure).read(text)


def _is_bare_name(text: str) -> bool:
    return not text.endswith(".toml") and Path(text).name == text and text not in ("", ".", "..")


class _Reader:
    """Turns one file's TOML document into an SLO, failing with file and key named."""

    def __init__(
        self, source: str, label: str, validate_measure: Callable[[str], object] | None
    ) -> None:
        self.source = source
        self.label = label
        self.validate_measure = validate_measure

    def fail(self, key: str, message: str) -> QueryError:
        return QueryError(f"{self.label}: {key}: {message}")

    def read(self, text: str) -> SLO:
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise QueryError(f"{self.label}: not valid TOML: {exc}") from exc
        unknown = [key for key in doc if key not in TOP_LEVEL_KEYS]
        if unknown:
            raise self.fail(
                unknown[0], f"unknown key; an SLO file takes {', '.join(TOP_LEVEL_KEYS)}"
            )
        name = self.name(doc.get("name"))
        description = self.string("description", doc.get("description", ""))
        target = self.target(doc.get("target", DEFAULT_TARGET))
        window = self.duration("window", doc.get("window", DEFAULT_WINDOW))
        period = self.duration("period", doc.get("period", DEFAULT_PERIOD))
        if window >= period:
            raise self.fail("window", "must be shorter than the period")
        burn_windows = self.burn_windows(doc.get("burn_windows", DEFAULT_BURN_WINDOWS), period)
        scope = self.scope(doc.get("scope", {}))
        thresholds = self.thresholds(doc.get("thresholds", {}))
        objectives = self.objectives(doc.get("objectives", []))
        if not thresholds and not objectives:
            raise QueryError(
                f"{self.label}: an SLO needs [thresholds], [[objectives]] or both; it has neither"
            )
        return SLO(
            name=name,
            description=description,
            target=target,
            window=window,
            period=period,
            burn_windows=burn_windows,
            scope=scope,
            thresholds=thresholds,
            objectives=objectives,
            source=self.source,
        )

    def misplaced(self, table: str, key: str) -> None:
        """A top-level key written below ``[table]`` lands in that table: say so."""
        if key in TOP_LEVEL_KEYS:
            raise self.fail(
                f"{table}.{key}",
                f"{key} is a top-level key: move it above the first [table] of the file",
            )

    def string(self, key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, not {value!r}")
        return value

    def number(self, key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, not {value!r}")
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, not {value!r}")
        return float(value)

    def name(self, value: Any) -> str:
        if value is None:
            if self.source.startswith("<"):
                raise self.fail("name", "required when the SLO is not read from a file")
            return Path(self.source).stem
        name = self.string("name", value).strip()
        if not name:
            raise self.fail("name", "must not be empty")
        return name

    def target(self, value: Any) -> float:
        target = self.number("target", value)
        if not 0.0 < target < 1.0:
            raise self.fail(
                "target", f"must be between 0 and 1 exclusive (e.g. 0.99), not {value!r}"
            )
        return target

    def duration(self, key: str, value: Any) -> timedelta:
        if not isinstance(value, str):
            raise self.fail(key, f"must be a duration string like '5m', not {value!r}")
        try:
            return parse_duration(value)
        except QueryError as exc:
            raise self.fail(key, str(exc)) from exc

    def burn_windows(self, value: Any, period: timedelta) -> tuple[tuple[str, timedelta], ...]:
        if not isinstance(value, list | tuple):
            raise self.fail("burn_windows", f"must be a list like ['5m', '1h'], not {value!r}")
        windows: list[tuple[str, timedelta]] = []
        for i, item in enumerate(value):
            key = f"burn_windows[{i}]"
            length = self.duration(key, item)
            label = item.strip()
            if length > period:
                raise self.fail(key, f"{label!r} is longer than the period")
            for other, other_length in windows:
                if other_length == length:
                    raise self.fail(key, f"{label!r} repeats {other!r}")
            windows.append((label, length))
        return tuple(windows)

    def scope(self, value: Any) -> dict[str, tuple[str, ...]]:
        if not isinstance(value, dict):
            raise self.fail("scope", "must be a table ([scope] with dimension = values)")
        scope: dict[str, tuple[str, ...]] = {}
        for key, values in value.items():
            where = f"scope.{key}"
            self.misplaced("scope", key)
            if not _SCOPE_KEY.match(key):
                raise self.fail(where, "not a dimension name (e.g. service, or \"attrs['gpu']\")")
            items = [values] if isinstance(values, str) else values
            if not isinstance(items, list) or not items:
                raise self.fail(where, "must be a string or a non-empty list of strings")
            for item in items:
                if not isinstance(item, str):
                    raise self.fail(where, f"values must be strings, not {item!r}")
            scope[key] = tuple(dict.fromkeys(items))
        return scope

    def thresholds(self, value: Any) -> dict[str, float]:
        if not isinstance(value, dict):
            raise self.fail("thresholds", "must be a table ([thresholds] with column = ms)")
        thresholds: dict[str, float] = {}
        for key, limit in value.items():
            where = f"thresholds.{key}"
            self.misplaced("thresholds", key)
            if key not in LATENCY_COLUMNS:
                raise self.fail(
                    where, f"not a latency column; thresholds take {', '.join(LATENCY_COLUMNS)}"
                )
            thresholds[key] = self.number(where, limit)
            if thresholds[key] <= 0:
                raise self.fail(where, f"must be above zero (milliseconds), not {limit!r}")
        return thresholds

    def objectives(self, value: Any) -> tuple[Objective, ...]:
        if not isinstance(value, list):
            raise self.fail("objectives", "must be an array ([[objectives]] tables)")
        return tuple(self.objective(f"objectives[{i}]", item) for i, item in enumerate(value))

    def objective(self, key: str, item: Any) -> Objective:
        if isinstance(item, str):
            item = {"objective": item}
        if not isinstance(item, dict):
            raise self.fail(key, f"must be a table with objective = '...', not {item!r}")
        self.known_keys(key, item, OBJECTIVE_KEYS)
        if "objective" not in item:
            raise self.fail(key, "missing objective = '<measure> <op> <number>'")
        weight = self.number(f"{key}.weight", item.get("weight", 1))
        if weight <= 0:
            raise self.fail(f"{key}.weight", f"must be above zero, not {item['weight']!r}")
        try:
            objective = parse_objective(item["objective"], weight)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from exc
        if self.validate_measure is not None:
            try:
                self.validate_measure(objective.measure)
            except Exception as exc:
                raise self.fail(key, f"{objective.text!r}: {exc}") from exc
        return objective

    def known_keys(self, where: str, table: dict[str, Any], allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                raise self.fail(f"{where}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
