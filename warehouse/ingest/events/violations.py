"""Violations: rules over whole columns, of which the first bad (row, field) wins.

A :class:`_Check` marks every row that breaks one rule; :func:`_first_violation` picks the
first by row, then by field order, and its message quotes the value as the sender wrote it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events.fields import _FIELDS


@dataclass(frozen=True)
class _Check:
    """A rule over whole columns: ``bad`` is true on each row that breaks it."""

    field: str
    bad: pa.Array | pa.ChunkedArray
    problem: str
    shown: pa.Array | pa.ChunkedArray | None
    """The values quoted after "got" (None: quote nothing)."""


@dataclass(frozen=True)
class _Violation:
    row: int
    field: str
    problem: str
    value: Any = None
    show: bool = True

    def key(self) -> tuple[int, int]:
        return self.row, _FIELDS.get(self.field, -1)

    def message(self, where: str) -> str:
        text = f"{where}, field {self.field}: {self.problem}"
        return f"{text}, got {_show(self.value)}" if self.show else text


def _first_violation(checks: Iterable[_Check], extra: _Violation | None) -> _Violation | None:
    best = extra
    for check in checks:
        row = pc.index(check.bad, True).as_py()
        if row < 0 or (best is not None and (row, _FIELDS[check.field]) >= best.key()):
            continue
        shown = check.shown
        value = None if shown is None else _as_py(shown[row])
        best = _Violation(row, check.field, check.problem, value, shown is not None)
    return best


def _as_py(scalar: pa.Scalar) -> Any:
    try:
        return scalar.as_py()
    except (OverflowError, ValueError):  # a timestamp beyond Python's datetime
        return scalar.cast(pa.int64()).as_py()


def _show(value: Any) -> str:
    """A value as its sender wrote it (JSON), cut short when long."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    if hasattr(value, "isoformat"):
        value = value.isoformat()
    try:
        text = json.dumps(value, ensure_ascii=False)
        if not _is_unicode(text):  # a lone surrogate: quote it escaped
            text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _is_unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
        return False
    return True
