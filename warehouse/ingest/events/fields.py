"""The record's fields, as data: which are required, each field's kind and what it must be.

Each field's kind (``ts``, ``string``, ``uint``, ``latency``, ``number``, ``bool``,
``attrs``) comes from its type in :data:`warehouse.model.REQUESTS_SCHEMA`; the rules
elsewhere in the package are keyed by it.
"""

from __future__ import annotations

import difflib

import pyarrow as pa

from warehouse.model import LATENCY_COLUMNS, REQUESTS_SCHEMA

REQUIRED = ("ts", "request_id", "status")
TS_MAX_MS = (2**32) * 1000 - 1
"""2106-02-07T06:28:15.999Z, the end of ClickHouse's DateTime (TTL and partition keys)."""

_FIELDS = {field.name: index for index, field in enumerate(REQUESTS_SCHEMA)}
_MAP_TYPE = REQUESTS_SCHEMA.field("attrs").type
_UTC_MS = pa.timestamp("ms", tz="UTC")


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
