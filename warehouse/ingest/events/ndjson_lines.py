"""NDJSON in, the slow path: one line at a time in Python, naming the first bad line."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from warehouse.errors import IngestError
from warehouse.ingest.events.fields import (
    _FIELDS,
    _KINDS,
    _MAP_TYPE,
    _TS_PROBLEM,
    _problem,
    _unknown_field,
)
from warehouse.ingest.events.pipeline import _finish
from warehouse.ingest.events.violations import _is_unicode, _show, _Violation
from warehouse.ingest.time_window import TimeWindow


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def _decode_lines(data: bytes, window: TimeWindow | None = None) -> pa.Table:
    """The slow path: one line at a time, in Python.

    Stops at the first line that is not a record (invalid JSON, not an object, an
    unknown field) or holds a value of the wrong JSON type; the records before it go
    through the same checks as the fast path, so whichever bad line comes first is the
    one named. A body with nothing wrong is decoded (bodies the fast reader cannot take,
    such as ``ts`` given as integers on some lines and as text on others).
    """
    names = [name for name in _FIELDS if name != "ts"]
    values: dict[str, list[Any]] = {name: [] for name in names}
    ts_ms: list[int | None] = []
    ts_text: list[str | None] = []
    line_numbers: list[int] = []
    stop: str | None = None
    wrong_type: _Violation | None = None
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip(b" \t\r"):
            continue
        record, stop = _json_record(line, number)
        if stop is not None:
            break
        row = len(line_numbers)
        line_numbers.append(number)
        ts = record.get("ts")
        if ts is None or (_is_int(ts) and -(2**63) <= ts < 2**63):
            ts_ms.append(ts)
            ts_text.append(None)
        elif isinstance(ts, str) and _is_unicode(ts):
            ts_ms.append(None)
            ts_text.append(ts)
        else:
            ts_ms.append(None)
            ts_text.append(None)
            wrong_type = _Violation(row, "ts", _TS_PROBLEM, ts)
        for name in names:
            value, ok = _json_value(_KINDS[name], record.get(name))
            if not ok and (wrong_type is None or _FIELDS[name] < _FIELDS[wrong_type.field]):
                wrong_type = _Violation(row, name, _problem(name), record.get(name))
            values[name].append(value if ok else None)
        if wrong_type is not None:
            break
    if not line_numbers and stop is None:
        raise IngestError("empty body: no records")
    table = _python_table(values, ts_ms)
    text = pa.array(ts_text, pa.string())
    result = _finish(
        table, lambda row: f"line {line_numbers[row]}", ts_text=text, extra=wrong_type,
        window=window,
    )  # fmt: skip
    if stop is not None:
        raise IngestError(stop)
    return result


def _json_record(line: bytes, number: int) -> tuple[dict[str, Any], str | None]:
    """One line as a record, or the reason it is none."""
    try:
        record = json.loads(line, object_pairs_hook=_unique_keys, strict=False)
    except _DuplicateKey as exc:
        return {}, f"line {number}: key {exc.key!r} appears twice in one object"
    except UnicodeDecodeError:
        return {}, f"line {number}: invalid JSON: not UTF-8 text"
    except json.JSONDecodeError as exc:
        return {}, f"line {number}: invalid JSON at column {exc.colno}: {exc.msg}"
    except (ValueError, RecursionError) as exc:
        return {}, f"line {number}: invalid JSON: {exc}"
    if not isinstance(record, dict):
        return {}, f"line {number}: a record must be a JSON object, got {_show(record)}"
    for key in record:
        if key not in _FIELDS:
            return {}, f"line {number}, field {key}: {_unknown_field(key)}"
    return record, None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_value(kind: str, value: Any) -> tuple[Any, bool]:
    """A parsed JSON value as the fast path's column type holds it, and whether it fits."""
    if value is None:
        return None, True
    if kind == "string":
        return value, isinstance(value, str) and _is_unicode(value)
    if kind == "uint":
        return value, _is_int(value) and -(2**63) <= value < 2**63
    if kind in ("latency", "number"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            return value, False
        try:
            return float(value), True
        except OverflowError:  # an integer beyond any float
            return value, False
    if kind == "bool":
        return value, isinstance(value, bool)
    if kind == "attrs":
        if not isinstance(value, dict):
            return value, False
        items = sorted((k, v) for k, v in value.items() if v is not None)
        ok = all(isinstance(v, str) and _is_unicode(v) and _is_unicode(k) for k, v in items)
        return items, ok
    raise AssertionError(kind)  # pragma: no cover


def _python_table(values: dict[str, list[Any]], ts_ms: list[int | None]) -> pa.Table:
    types = {"string": pa.string(), "uint": pa.int64(), "bool": pa.bool_(), "attrs": _MAP_TYPE}
    arrays = {"ts": pa.array(ts_ms, pa.int64())}
    for name, column in values.items():
        kind = _KINDS[name]
        arrays[name] = pa.array(column, types.get(kind, pa.float64()))
    return pa.table(arrays)
