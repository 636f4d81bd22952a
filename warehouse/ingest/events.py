"""Per-request events: NDJSON, Arrow IPC and Parquet in, validated `requests` rows out.

Pure functions, bytes in and Arrow out: every decoder returns a table with exactly
:data:`warehouse.model.REQUESTS_SCHEMA`, ready for ``store.insert_arrow("requests", t)``,
or raises :class:`~warehouse.errors.IngestError` naming the first bad record and field
(``line 3, field ttft_ms: must be a finite number >= 0, got -4``). Nothing partial: one
bad record refuses the whole body.

A record holds the ``requests`` columns by name (units are in the names):

- ``ts`` (required): epoch milliseconds as an integer, or an RFC 3339 timestamp with an
  offset (``2024-05-01T12:00:00.123Z``, ``...+02:00``); stored as UTC milliseconds
  (finer fractions are truncated). 1970 to 2106, ClickHouse's DateTime range.
- ``request_id`` (required, not empty), ``status`` (required, one of ``STATUSES``).
- dimensions: strings, absent or null -> ``''``; ``error_class`` is ``''`` or one of
  ``ERROR_CLASSES``; ``http_status`` 0-65535, default 0; ``is_probe`` default false.
- measures: absent or null -> NULL. Latencies are finite numbers >= 0, token counts
  integers in UInt32 range, ``cached_prompt_tokens <= prompt_tokens`` when both are
  known, quality scores finite numbers.
- ``attrs``: an object of string values (further labels); a null value is no label.
  Keys are stored sorted, whatever order they came in.
- ``tpot_ms``, when absent, is derived by :func:`derive_tpot_ms`.

Unknown field names are refused (a typo such as ``ttft_sec`` must not vanish), with the
nearest known name suggested.

The NDJSON happy path is vectorized end to end: ``pyarrow.json`` parses with an explicit
schema (pieces of the body in parallel), ``pyarrow.compute`` checks every rule over whole
columns, and a bad value's line comes from a vectorized scan of line starts. Only a body
the fast reader cannot take (a JSON type error, invalid JSON, an unknown field, records
mixing integer and text ``ts``) goes through a per-line Python pass, which names the
first offending line, or decodes the body if nothing was wrong after all. Arrow and
Parquet input go through the same column checks.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from warehouse.errors import IngestError
from warehouse.model import ERROR_CLASSES, LATENCY_COLUMNS, REQUESTS_SCHEMA, STATUSES

__all__ = [
    "FILE_SUFFIXES",
    "REQUIRED",
    "decode_arrow_stream",
    "decode_arrow_table",
    "decode_ndjson",
    "derive_tpot_ms",
    "encode_ndjson",
    "read_file",
]

FILE_SUFFIXES = (".ndjson", ".jsonl", ".parquet", ".arrow", ".arrows", ".feather")
"""File name endings :func:`read_file` takes."""

REQUIRED = ("ts", "request_id", "status")
TS_MAX_MS = (2**32) * 1000 - 1
"""2106-02-07T06:28:15.999Z, the end of ClickHouse's DateTime (TTL and partition keys)."""

_FIELDS = {field.name: index for index, field in enumerate(REQUESTS_SCHEMA)}
_MAP_TYPE = REQUESTS_SCHEMA.field("attrs").type
_ENTRIES_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
_UTC_MS = pa.timestamp("ms", tz="UTC")


# --- the record's fields, as data --------------------------------------------------------


def _kind(field: pa.Field) -> str:
    if pa.types.is_timestamp(field.type):
        return "ts"
    if pa.types.is_string(field.type):
        return "string"
    if pa.types.is_unsigned_integer(field.type):
        return "uint"
    if pa.types.is_boolean(field.type):
        return "bool"
    if pa.types.is_floating(field.type):
        return "latency" if field.name in LATENCY_COLUMNS else "number"
    if pa.types.is_map(field.type):
        return "attrs"
    raise AssertionError(f"no ingest rule for {field}")  # pragma: no cover


_KINDS = {field.name: _kind(field) for field in REQUESTS_SCHEMA}
_UINT_MAX = {
    field.name: 2**field.type.bit_width - 1
    for field in REQUESTS_SCHEMA
    if _KINDS[field.name] == "uint"
}
_TS_PROBLEM = (
    "must be epoch milliseconds (an integer) or an RFC 3339 timestamp with an offset "
    "(Z or +hh:mm), from 1970 to 2106"
)
_PROBLEMS = {
    "ts": _TS_PROBLEM,
    "string": "must be a string",
    "bool": "must be true or false",
    "latency": "must be a finite number >= 0",
    "number": "must be a finite number",
    "attrs": "must be an object whose values are strings",
}


def _problem(name: str) -> str:
    """What a value of field ``name`` must be, as error messages say it."""
    if name in _UINT_MAX:
        return f"must be an integer from 0 to {_UINT_MAX[name]}"
    return _PROBLEMS[_KINDS[name]]


def _unknown_field(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), list(_FIELDS), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "extra labels go in attrs"
    return f"unknown field, {hint}"


# --- violations: the first bad (row, field) wins -----------------------------------------


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


# --- tpot ---------------------------------------------------------------------------------


def derive_tpot_ms(e2e_ms: Any, ttft_ms: Any, output_tokens: Any) -> pa.ChunkedArray | pa.Array:
    """Time per output token as DESIGN.md defines it, over whole columns.

    ``(e2e_ms - ttft_ms) / (output_tokens - 1)`` where ``output_tokens > 1``, NULL
    otherwise (undefined, not zero) and wherever an input is NULL. Computed in float64
    from the latencies as stored (Float32), so it equals what a query over the stored
    columns computes; returned as Float32.
    """
    e2e = pc.cast(pc.cast(e2e_ms, pa.float32(), safe=False), pa.float64())
    ttft = pc.cast(pc.cast(ttft_ms, pa.float32(), safe=False), pa.float64())
    tokens = pc.cast(output_tokens, pa.float64())
    tpot = pc.divide(pc.subtract(e2e, ttft), pc.subtract(tokens, 1.0))
    defined = pc.greater(tokens, 1.0)
    return pc.cast(pc.if_else(defined, tpot, pa.scalar(None, pa.float64())), pa.float32())


# --- column rules: any accepted Arrow type -> the REQUESTS_SCHEMA type, plus checks --------


class _ColumnTypeError(Exception):
    """A whole column has a type that cannot become its field's (Arrow input)."""


def _is_text(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        return _is_text(type_.value_type)
    return pa.types.is_string(type_) or pa.types.is_large_string(type_) or _is_view(type_)


def _is_view(type_: pa.DataType) -> bool:
    is_string_view = getattr(pa.types, "is_string_view", None)
    return bool(is_string_view and is_string_view(type_))


def _is_numeric(type_: pa.DataType) -> bool:
    return pa.types.is_integer(type_) or pa.types.is_floating(type_)


def _required(name: str, column: Any) -> list[_Check]:
    if name not in REQUIRED:
        return []
    return [_Check(name, pc.is_null(column), "is required", None)]


def _string_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        column = pa.nulls(n, pa.string())
    elif not _is_text(column.type):
        raise _ColumnTypeError(f"{column.type} cannot be read as a string")
    column = pc.cast(column, pa.string())
    checks = _required(name, column)
    if name == "request_id":
        checks.append(_Check(name, pc.equal(column, ""), "must not be empty", column))
    elif name == "status":
        checks.append(
            _Check(name, _not_in(column, STATUSES), f"must be one of {', '.join(STATUSES)}", column)
        )
    elif name == "error_class":
        problem = f"must be empty or one of {', '.join(ERROR_CLASSES)}"
        checks.append(_Check(name, _not_in(column, ("", *ERROR_CLASSES)), problem, column))
    return pc.fill_null(column, ""), checks


def _not_in(column: Any, allowed: tuple[str, ...]) -> Any:
    known = pc.is_in(column, value_set=pa.array(allowed, pa.string()))
    return pc.and_(pc.is_valid(column), pc.invert(known))


def _uint_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    limit = _UINT_MAX[name]
    target = REQUESTS_SCHEMA.field(name).type
    type_ = column.type
    if pa.types.is_null(type_):
        values = pa.nulls(n, target)
        return (pc.fill_null(values, 0) if name == "http_status" else values), []
    if type_ == pa.uint64():
        bad = pc.greater(column, pa.scalar(limit, pa.uint64()))
        wide = pc.cast(pc.if_else(bad, pa.scalar(None, pa.uint64()), column), pa.int64())
    elif pa.types.is_integer(type_):
        wide = pc.cast(column, pa.int64())
        bad = pc.or_(pc.less(wide, 0), pc.greater(wide, limit))
    elif pa.types.is_floating(type_):
        wide = pc.cast(column, pa.float64())
        ok = pc.and_(pc.is_finite(wide), pc.equal(pc.floor(wide), wide))
        bad = pc.invert(pc.and_(ok, pc.and_(pc.greater_equal(wide, 0), pc.less_equal(wide, limit))))
    else:
        raise _ColumnTypeError(f"{type_} cannot be read as an integer")
    bad = pc.fill_null(bad, False)
    clean = pc.if_else(bad, pa.scalar(None, wide.type), wide)
    values = pc.cast(clean, target, safe=False)
    if name == "http_status":
        values = pc.fill_null(values, 0)
    return values, [_Check(name, bad, _problem(name), column)]


def _float_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        return pa.nulls(n, pa.float32()), []
    if not (_is_numeric(column.type) or pa.types.is_decimal(column.type)):
        raise _ColumnTypeError(f"{column.type} cannot be read as a number")
    wide = pc.cast(column, pa.float64())
    narrow = pc.cast(wide, pa.float32(), safe=False)
    ok = pc.is_finite(narrow)  # false for NaN, infinities and Float32 overflow alike
    if _KINDS[name] == "latency":
        ok = pc.and_(ok, pc.greater_equal(wide, 0))
    bad = pc.fill_null(pc.invert(ok), False)
    values = pc.if_else(bad, pa.scalar(None, pa.float32()), narrow)
    return values, [_Check(name, bad, _problem(name), column)]


def _bool_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    if pa.types.is_null(column.type):
        column = pa.nulls(n, pa.bool_())
    elif not pa.types.is_boolean(column.type):
        raise _ColumnTypeError(f"{column.type} cannot be read as true or false")
    return pc.fill_null(column, False), []


def _ts_column(name: str, column: Any, n: int, text: Any = None) -> tuple[Any, list[_Check]]:
    """Epoch ms (integers), RFC 3339 text or zoned timestamps -> timestamp[ms, UTC].

    ``text``, when given, holds the records whose ``ts`` is text while ``column`` holds
    the integer ones (NDJSON bodies that mix the two).
    """
    type_ = column.type
    if pa.types.is_null(type_):
        ms, bad = pa.nulls(n, pa.int64()), pa.nulls(n, pa.bool_())
    elif pa.types.is_integer(type_) and type_ != pa.uint64():
        ms, bad = pc.cast(column, pa.int64()), None
    elif type_ == pa.uint64():
        big = pc.greater(column, pa.scalar(TS_MAX_MS, pa.uint64()))
        ms, bad = pc.cast(pc.if_else(big, pa.scalar(None, type_), column), pa.int64()), big
    elif _is_text(type_):
        ms, bad = _parse_rfc3339(pc.cast(column, pa.string()))
    elif pa.types.is_timestamp(type_):
        if type_.tz is None:
            raise _ColumnTypeError(
                f"{type_} has no time zone; give the column one (for instance UTC)"
            )
        raw = pc.cast(pc.cast(column, pa.timestamp(type_.unit)), pa.int64())
        bad = pc.or_(pc.less(raw, 0), pc.greater(raw, TS_MAX_MS // 1000))
        if type_.unit == "s":  # out of range before multiplying, which could wrap
            ms = pc.multiply(pc.if_else(bad, pa.scalar(None, pa.int64()), raw), 1000)
        else:  # truncates toward zero: before 1970 is refused anyway
            ms = pc.divide(raw, {"ms": 1, "us": 1000, "ns": 1_000_000}[type_.unit])
            bad = pc.less(raw, 0)
    else:
        raise _ColumnTypeError(f"{type_} cannot be read as a timestamp")
    shown = column
    if text is not None:
        text_ms, text_bad = _parse_rfc3339(text)
        ms = pc.coalesce(ms, text_ms)
        bad = text_bad if bad is None else _either(bad, text_bad)
        shown = pc.coalesce(pc.cast(column, pa.string()), text)
    out_of_range = pc.or_(pc.less(ms, 0), pc.greater(ms, TS_MAX_MS))
    bad = _either(out_of_range, out_of_range if bad is None else bad)
    ms = pc.if_else(bad, pa.scalar(None, pa.int64()), ms)
    checks = [
        _Check(name, pc.is_null(shown), "is required", None),
        _Check(name, bad, _TS_PROBLEM, shown),
    ]
    return pc.cast(ms, _UTC_MS), checks


def _either(a: Any, b: Any) -> Any:
    """``a or b`` row by row, null counting as false."""
    return pc.or_(pc.fill_null(a, False), pc.fill_null(b, False))


_RFC3339 = (
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?"
    r"(?P<offset>[Zz]|[+-](?:[01]\d|2[0-3]):?[0-5]\d)$"
)


def _parse_rfc3339(text: Any) -> tuple[Any, Any]:
    """RFC 3339 text -> (epoch ms, bad): vectorized; bad is null where text is null."""
    parts = pc.extract_regex(text, _RFC3339)
    matched = pc.is_valid(parts)
    wall = pc.binary_join_element_wise(
        pc.struct_field(parts, "date"), pc.struct_field(parts, "time"), "T"
    )
    seconds, real = _wall_seconds(pc.if_else(matched, wall, "1970-01-01T00:00:00"))
    frac = pc.utf8_slice_codeunits(
        pc.binary_join_element_wise(pc.struct_field(parts, "frac"), "000", ""), 0, 3
    )
    offset = pc.struct_field(parts, "offset")
    zulu = pc.is_in(offset, value_set=pa.array(["Z", "z"]))
    digits = pc.replace_substring(pc.utf8_slice_codeunits(offset, 1, 6), ":", "")
    hours = pc.cast(pc.if_else(zulu, "0", pc.utf8_slice_codeunits(digits, 0, 2)), pa.int64())
    minutes = pc.cast(pc.if_else(zulu, "0", pc.utf8_slice_codeunits(digits, 2, 4)), pa.int64())
    sign = pc.if_else(pc.starts_with(offset, "-"), -1, 1)
    offset_ms = pc.multiply(
        sign, pc.add(pc.multiply(hours, 3_600_000), pc.multiply(minutes, 60_000))
    )
    ms = pc.add(pc.multiply(pc.cast(seconds, pa.int64()), 1000), pc.cast(frac, pa.int64()))
    ok = pc.and_(matched, real)
    ms = pc.if_else(ok, pc.subtract(ms, offset_ms), pa.scalar(None, pa.int64()))
    bad = pc.if_else(pc.is_null(text), pa.scalar(None, pa.bool_()), pc.invert(ok))
    return ms, bad


def _wall_seconds(wall: Any) -> tuple[Any, Any]:
    """``YYYY-MM-DDThh:mm:ss`` -> (seconds since 1970, whether it is a real date and time)."""
    try:  # the strict parser: all real, the common case
        seconds = pc.cast(wall, pa.timestamp("s"))
        return seconds, pc.is_valid(wall)
    except pa.ArrowInvalid:  # which ones are not?
        pass
    seconds = pc.strptime(wall, format="%Y-%m-%dT%H:%M:%S", unit="s", error_is_null=True)
    # strptime rolls 2024-02-30 over into March: a date is real if it prints back the same.
    real = pc.fill_null(pc.equal(pc.strftime(seconds, format="%Y-%m-%dT%H:%M:%S"), wall), False)
    return seconds, real


def _attrs_column(name: str, column: Any, n: int) -> tuple[Any, list[_Check]]:
    """A map (Arrow) or a struct (NDJSON objects) of strings -> map<string, string>.

    Null values are dropped (no label), keys are sorted within each row; a key twice in
    one row is refused.
    """
    type_ = column.type
    if pa.types.is_null(type_):
        return _empty_maps(n), []
    if pa.types.is_struct(type_):
        if not all(_is_text(f.type) or pa.types.is_null(f.type) for f in type_):
            raise _ColumnTypeError(f"{type_} is not a map of strings")
        return _struct_to_map(_combined(column)), []
    if not (pa.types.is_map(type_) and _is_text(type_.key_type) and _is_text(type_.item_type)):
        raise _ColumnTypeError(f"{type_} is not a map of strings")
    entries = pc.cast(column, _ENTRIES_TYPE)
    flat = pc.list_flatten(entries)
    rows = pc.list_parent_indices(entries)
    if isinstance(flat, pa.ChunkedArray):
        flat, rows = flat.combine_chunks(), rows.combine_chunks()
    entries = pa.table({"row": rows, "key": flat.field("key"), "value": flat.field("value")})
    entries = entries.sort_by([("row", "ascending"), ("key", "ascending")])
    rows, keys = entries.column("row").combine_chunks(), entries.column("key").combine_chunks()
    duplicate = np.zeros(n, dtype=bool)
    if len(rows) > 1:
        same = pc.and_(
            pc.equal(rows.slice(1), rows.slice(0, len(rows) - 1)),
            pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1)),
        )
        duplicate[rows.slice(1).filter(same).to_numpy()] = True
    entries = entries.filter(pc.is_valid(entries.column("value")))
    maps = _maps(
        n,
        entries.column("row").to_numpy(),
        entries.column("key").combine_chunks(),
        entries.column("value").combine_chunks(),
    )
    check = _Check(name, pa.array(duplicate), "must not hold a key twice", maps)
    return maps, [check]


def _combined(column: Any) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _empty_maps(n: int) -> pa.Array:
    return _maps(n, np.zeros(0, np.int64), pa.array([], pa.string()), pa.array([], pa.string()))


def _maps(n: int, rows: np.ndarray, keys: pa.Array, values: pa.Array) -> pa.Array:
    """Maps from entries already ordered by row; ``rows`` gives each entry's row."""
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values, type=_MAP_TYPE)


def _struct_to_map(struct: pa.StructArray) -> pa.Array:
    """Objects parsed as a struct (one child per key seen) -> maps with sorted keys."""
    n = len(struct)
    names = [field.name for field in struct.type]
    children = struct.flatten()  # each child with the parent's nulls applied
    by_name = sorted(range(len(names)), key=names.__getitem__)
    rows, ranks, values = [], [], []
    for rank, index in enumerate(by_name):
        child = children[index]
        if pa.types.is_null(child.type) or child.null_count == n:
            continue
        valid = pc.is_valid(child)
        at = pc.indices_nonzero(valid).to_numpy()
        rows.append(at)
        ranks.append(np.full(len(at), rank, dtype=np.int32))
        values.append(pc.cast(child.filter(valid), pa.string()))
    if not rows:
        return _empty_maps(n)
    row, rank = np.concatenate(rows), np.concatenate(ranks)
    order = np.lexsort((rank, row))
    keys = pa.array([names[i] for i in by_name], pa.string()).take(pa.array(rank[order]))
    items = pa.concat_arrays(values).take(pa.array(order))
    return _maps(n, row[order], keys, items)


_COLUMN_RULES: dict[str, Callable[..., tuple[Any, list[_Check]]]] = {
    "string": _string_column,
    "uint": _uint_column,
    "latency": _float_column,
    "number": _float_column,
    "bool": _bool_column,
    "ts": _ts_column,
    "attrs": _attrs_column,
}


# --- one pipeline for every format -------------------------------------------------------


def _finish(
    table: pa.Table,
    where: Callable[[int], str],
    *,
    ts_text: Any = None,
    extra: _Violation | None = None,
) -> pa.Table:
    """Columns of any accepted types -> a checked REQUESTS_SCHEMA table, or IngestError.

    Absent columns are taken as null in every record. Column-level type errors are raised
    as they are found; row-level ones are gathered and the first (by row, then by field
    order) is raised, so the message names the first bad record.
    """
    n = table.num_rows
    columns: dict[str, Any] = {}
    checks: list[_Check] = []
    for field in REQUESTS_SCHEMA:
        name = field.name
        column = table.column(name) if name in table.column_names else pa.nulls(n)
        try:
            if name == "ts":
                values, found = _ts_column(name, column, n, ts_text)
            else:
                values, found = _COLUMN_RULES[_KINDS[name]](name, column, n)
        except _ColumnTypeError as exc:
            raise IngestError(f"column {name}: {exc}") from None
        columns[name] = values
        checks.extend(found)

    given = columns["tpot_ms"]
    derived = derive_tpot_ms(columns["e2e_ms"], columns["ttft_ms"], columns["output_tokens"])
    negative = pc.fill_null(pc.and_(pc.is_null(given), pc.less(derived, 0)), False)
    checks.append(
        _Check(
            "e2e_ms",
            negative,
            "must be >= ttft_ms, or tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1) "
            "would be negative",
            columns["e2e_ms"],
        )
    )
    columns["tpot_ms"] = pc.coalesce(given, derived)
    prompt, cached = columns["prompt_tokens"], columns["cached_prompt_tokens"]
    checks.append(
        _Check(
            "cached_prompt_tokens",
            pc.fill_null(pc.greater(cached, prompt), False),
            "must be <= prompt_tokens",
            cached,
        )
    )

    violation = _first_violation(checks, extra)
    if violation is not None:
        raise IngestError(violation.message(where(violation.row)))
    return pa.Table.from_arrays(
        [columns[field.name] for field in REQUESTS_SCHEMA], schema=REQUESTS_SCHEMA
    )


# --- NDJSON ---------------------------------------------------------------------------------


def decode_ndjson(data: bytes) -> pa.Table:
    """Newline-delimited JSON records -> a checked REQUESTS_SCHEMA table.

    One JSON object per line; blank lines are ignored. Errors name the line (1-based)
    and the field: ``line 3, field ttft_ms: must be a finite number >= 0, got -4``.
    """
    data = bytes(data)
    lines = _record_lines(data)
    if lines is not None and len(lines) == 0:
        raise IngestError("empty body: no records")
    table = None if lines is None else _read_json(data, len(lines))
    if table is None:
        return _decode_lines(data)
    return _finish(table, lambda row: f"line {lines[row]}")


def _record_lines(data: bytes) -> np.ndarray | None:
    """1-based numbers of the lines that hold a record, or None if one holds a non-object.

    Vectorized over the bytes; only lines that do not begin with ``{`` (blank or
    indented ones) are looked at one by one. pyarrow's JSON reader must not see a line
    that is not an object: a top-level ``null`` crashes it (pyarrow 26).
    """
    buffer = np.frombuffer(data, dtype=np.uint8)
    step = 1 << 22  # in slices that stay in cache, rather than one body-sized mask
    newlines = [
        np.flatnonzero(buffer[at : at + step] == 0x0A) + (at + 1)
        for at in range(0, len(buffer), step)
    ]
    starts = np.concatenate([np.zeros(1, dtype=np.int64), *newlines])
    numbers = np.arange(1, len(starts) + 1)
    ends = np.append(starts[1:] - 1, len(buffer))
    keep = np.zeros(len(starts), dtype=bool)
    inside = starts < len(buffer)
    keep[inside] = buffer[starts[inside]] == ord("{")
    for index in np.flatnonzero(~keep):
        text = data[starts[index] : ends[index]].strip(b" \t\r")
        if text[:1] == b"{":
            keep[index] = True
        elif text:
            return None
    return numbers[keep]


def _json_schema(ts_type: pa.DataType) -> pa.Schema:
    """What pyarrow's reader parses each field as (``attrs`` is inferred: any keys)."""
    wide = {"string": pa.string(), "uint": pa.int64(), "bool": pa.bool_()}
    fields = []
    for field in REQUESTS_SCHEMA:
        kind = _KINDS[field.name]
        if kind == "ts":
            fields.append(pa.field(field.name, ts_type))
        elif kind in ("latency", "number"):
            fields.append(pa.field(field.name, pa.float64()))
        elif kind != "attrs":
            fields.append(pa.field(field.name, wide[kind]))
    return pa.schema(fields)


def _read_json(data: bytes, records: int) -> pa.Table | None:
    """The fast path: pyarrow's reader, or None when it cannot take this body.

    The body is cut at line ends into pieces of about :data:`_PIECE_BYTES`, each read
    by pyarrow as one block, in parallel. Never several blocks in one read: pyarrow's
    reader crashes the process when a field's type differs between blocks in some ways
    (a sender could bring the receiver down); within one block it reports an error.
    """
    start = data.index(b"{")  # a record line begins with it, after blank lines if any
    end = data.find(b"\n", start)
    try:
        ts = json.loads(data[start : end if end >= 0 else len(data)]).get("ts")
    except (ValueError, AttributeError, RecursionError):
        return None
    schema = _json_schema(pa.string() if isinstance(ts, str) else pa.int64())
    buffer = pa.py_buffer(data)
    pieces = [buffer[begin:end] for begin, end in _pieces(data)]
    if len(pieces) == 1:
        tables = [_read_piece(pieces[0], schema)]
    else:
        tables = list(_pool().map(lambda piece: _read_piece(piece, schema), pieces))
    if any(table is None for table in tables) or sum(t.num_rows for t in tables) != records:
        return None  # a type error, an unknown field, two records on a line: find the line
    # Pieces saw different attrs keys: their structs merge by key name.
    return pa.concat_tables(tables, promote_options="permissive")


_PIECE_BYTES = 1 << 20
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="llmwh-ndjson")
    return _POOL


def _pieces(data: bytes) -> list[tuple[int, int]]:
    """(begin, end) of consecutive pieces of ``data`` that end at line ends."""
    spans, begin = [], 0
    while begin < len(data):
        cut = data.find(b"\n", min(begin + _PIECE_BYTES, len(data)) - 1)
        end = len(data) if cut < 0 else cut + 1
        spans.append((begin, end))
        begin = end
    return spans


def _read_piece(piece: pa.Buffer, schema: pa.Schema) -> pa.Table | None:
    """One piece as one block: the explicit fields, and ``attrs`` as a struct of strings."""
    try:
        table = _pyarrow_json(piece, schema)
        if not set(table.column_names) <= set(_FIELDS):
            return None  # an unknown field
        table.validate(full=True)  # the reader lets invalid UTF-8 through
        attrs = table.schema.field("attrs").type if "attrs" in table.column_names else None
        if attrs is None or pa.types.is_null(attrs):
            return table
        if not pa.types.is_struct(attrs):
            return None
        if not all(pa.types.is_string(f.type) or pa.types.is_null(f.type) for f in attrs):
            # The reader infers timestamps from date-like text and numbers from numbers:
            # read again with every key seen as a string.
            keys = pa.struct([pa.field(f.name, pa.string()) for f in attrs])
            table = _pyarrow_json(piece, schema.append(pa.field("attrs", keys)))
    except pa.ArrowException:
        return None
    return table


def _pyarrow_json(piece: pa.Buffer, schema: pa.Schema) -> pa.Table:
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
    read = pa_json.ReadOptions(block_size=piece.size + 1, use_threads=False)
    return pa_json.read_json(pa.BufferReader(piece), read_options=read, parse_options=options)


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


def _decode_lines(data: bytes) -> pa.Table:
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
    result = _finish(table, lambda row: f"line {line_numbers[row]}", ts_text=text, extra=wrong_type)
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


def _is_unicode(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape such as "\ud800"
        return False
    return True


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


# --- Arrow IPC and Parquet ---------------------------------------------------------------


def decode_arrow_stream(data: bytes) -> pa.Table:
    """An Arrow IPC stream of records -> a checked REQUESTS_SCHEMA table.

    Columns are named as the fields; any subset, any castable type (integers or floats
    for numbers, strings or dictionary-encoded strings, ``ts`` as integers, RFC 3339 text
    or a zoned timestamp, ``attrs`` as a map of strings). Errors name the row (0-based)
    and the field, or the column when its type cannot be read.
    """
    if not data:
        raise IngestError("empty body: no records")
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise IngestError(f"not an Arrow IPC stream: {exc}") from None
    return decode_arrow_table(table)


def decode_arrow_table(table: pa.Table) -> pa.Table:
    """An Arrow table of records (as :func:`decode_arrow_stream` takes) -> checked table."""
    names = table.column_names
    for name in names:
        if name not in _FIELDS:
            raise IngestError(f"column {name}: {_unknown_field(name)}")
        if names.count(name) > 1:
            raise IngestError(f"column {name}: appears twice")
    for name in REQUIRED:
        if name not in names:
            raise IngestError(f"column {name}: is required, missing")
    if table.num_rows == 0:
        raise IngestError("empty body: no records")
    return _finish(table, lambda row: f"row {row} (0-based)")


def read_file(path: str | PathLike[str]) -> pa.Table:
    """A file of records -> a checked REQUESTS_SCHEMA table, by its name's ending.

    ``.ndjson``/``.jsonl`` (NDJSON), ``.parquet``, ``.arrow``/``.feather`` (Arrow IPC
    file, or stream), ``.arrows`` (Arrow IPC stream). Errors begin with the path.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise IngestError(f"{path}: unknown file type; use one of {', '.join(FILE_SUFFIXES)}")
    try:
        if suffix in (".ndjson", ".jsonl"):
            return decode_ndjson(path.read_bytes())
        if suffix == ".arrows":
            return decode_arrow_stream(path.read_bytes())
        return decode_arrow_table(_read_table(path, suffix))
    except IngestError as exc:
        raise IngestError(f"{path}: {exc}") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_table(path: Path, suffix: str) -> pa.Table:
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix == ".feather":
            return feather.read_table(path)
        try:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_stream(source).read_all()
    except pa.ArrowException as exc:
        raise IngestError(f"not a valid {suffix} file: {exc}") from None


# --- the other way round ------------------------------------------------------------------


def encode_ndjson(table: pa.Table) -> bytes:
    """REQUESTS_SCHEMA rows -> NDJSON that :func:`decode_ndjson` reads back identically.

    ``ts`` as epoch milliseconds; NULL measures are left out. Not a hot path (Python
    objects per row): for tests, samples and ``generate --out``.
    """
    columns = {}
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(pc.cast(column, _UTC_MS), pa.int64())
        columns[name] = column.to_pylist()
    lines = []
    for row in range(table.num_rows):
        record = {}
        for name, column in columns.items():
            value = column[row]
            if value is None:
                continue
            record[name] = dict(value) if name == "attrs" else value
        lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False))
    return ("\n".join(lines) + "\n").encode()
