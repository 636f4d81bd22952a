"""The ``ts`` column: epoch milliseconds, RFC 3339 text or zoned timestamps -> UTC ms.

RFC 3339 text is parsed over whole columns: a regular expression, then Arrow's strict
timestamp cast, or ``strptime`` and a round-trip check when some date is not real.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events.columns import _ColumnTypeError, _is_text
from warehouse.ingest.events.fields import _TS_PROBLEM, _UTC_MS, TS_MAX_MS
from warehouse.ingest.events.violations import _Check


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
