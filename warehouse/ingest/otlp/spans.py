"""OTLP spans in, `requests` rows out: each span that is an LLM request becomes one row.

:func:`spans_to_requests` reads an ``ExportTraceServiceRequest`` through a
:class:`~warehouse.ingest.otlp.span_mapping.SpanMapping` and returns the rows, checked
as per-request events are (:func:`warehouse.ingest.events.decode_arrow_table`), and
what it left out: spans that are not LLM requests (skipped), and spans it could not
take (rejected, with the first reason), which OTLP reports as a partial success.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from warehouse.errors import IngestError
from warehouse.ingest.events import decode_arrow_table
from warehouse.ingest.metric_mapping import REJECTION_CLASSES
from warehouse.ingest.otlp.span_mapping import Source, SpanMapping
from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA

__all__ = ["SpanRequests", "spans_to_requests"]

_ATTRS = REQUESTS_SCHEMA.field("attrs").type
_KINDS = {
    f.name: "uint"
    if pa.types.is_unsigned_integer(f.type)
    else "float"
    if pa.types.is_floating(f.type)
    else "string"
    for f in REQUESTS_SCHEMA
}
_UINT_MAX = {
    f.name: 2**f.type.bit_width - 1 for f in REQUESTS_SCHEMA if pa.types.is_unsigned_integer(f.type)
}
_ARROW = {"uint": pa.int64(), "float": pa.float64(), "string": pa.string()}
_HTTP_CLASSES = {429: "rate_limited", 503: "overloaded", 408: "timeout", 504: "timeout"}


@dataclass
class SpanRequests:
    """The requests rows of an export, and the spans left out of them."""

    table: pa.Table | None
    """Checked ``REQUESTS_SCHEMA`` rows; None when no span was an LLM request."""
    skipped: int = 0
    """Spans that are not LLM requests (no attribute with the mapping's prefix)."""
    rejected: int = 0
    """LLM-request spans that could not be taken (see ``reasons``)."""
    reasons: list[str] = field(default_factory=list)

    def note(self, reason: str) -> None:
        self.rejected += 1
        if len(self.reasons) < 3:
            self.reasons.append(reason)


class _Rejected(Exception):
    """One span cannot become a row (the message says why)."""


def spans_to_requests(
    request: ExportTraceServiceRequest,
    mapping: SpanMapping,
    check: Callable[[pa.Table], None] | None = None,
    *,
    strict: bool = False,
) -> SpanRequests:
    """The LLM-request spans of ``request`` as checked ``requests`` rows.

    ``check`` (the receiver's limits) raises :class:`IngestError` for rows it refuses;
    the spans of those rows are rejected, the others kept. ``strict``: spans that are
    not LLM requests are rejected (reported to the sender) instead of skipped.
    """
    result = SpanRequests(None)
    # request_id and e2e_ms have defaults (span id, duration) even where the mapping
    # names no attribute for them.
    names = ("ts", "request_id", "e2e_ms", "status", "error_class", *mapping.columns)
    columns: dict[str, list[object]] = {name: [] for name in names}
    attrs: list[list[tuple[str, str]]] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                own = _attributes(span.attributes)
                if not any(key.startswith(mapping.request_prefix) for key in own):
                    if strict:
                        result.note(
                            f"span {span.span_id.hex() or '(no id)'}: not an LLM request "
                            f"(no {mapping.request_prefix}* attribute)"
                        )
                    else:
                        result.skipped += 1
                    continue
                try:
                    row, kept = _row(span, own, resource, mapping)
                except _Rejected as exc:
                    result.note(f"span {span.span_id.hex() or '(no id)'}: {exc}")
                    continue
                for name, values in columns.items():
                    values.append(row.get(name))
                attrs.append(kept)
    if not attrs:
        return result
    table = pa.table(
        {
            **{name: pa.array(values, _arrow_type(name)) for name, values in columns.items()},
            "attrs": pa.array(attrs, _ATTRS),
        }
    )
    result.table = _checked(table, result, check or (lambda rows: None))
    return result


def _row(
    span: Span, own: dict[str, AnyValue], resource: dict[str, AnyValue], mapping: SpanMapping
) -> tuple[dict[str, object], list[tuple[str, str]]]:
    """One span's column values, and its ``attrs`` pairs."""
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if not start:
        raise _Rejected("no start time")
    row: dict[str, object] = {"ts": start // 1_000_000}
    for column, sources in mapping.columns.items():
        found = _first(sources, own, resource)
        if found is not None:
            row[column] = _column_value(column, *found)
    if row.get("request_id") in (None, ""):
        if not span.span_id:
            raise _Rejected("no request id attribute and no span id")
        row["request_id"] = span.span_id.hex()
    if row.get("e2e_ms") is None and end > start:  # a span of no duration measured none
        row["e2e_ms"] = (end - start) / 1e6
    row["status"], row["error_class"] = _outcome(span, own, row, mapping)
    kept = {"trace_id": span.trace_id.hex(), "span_id": span.span_id.hex()}
    for key, sources in mapping.attrs.items():
        found = _first(sources, own, resource)
        if found is not None:
            kept[key] = _text(*found)
    return row, sorted(kept.items())


def _outcome(
    span: Span, own: dict[str, AnyValue], row: dict[str, object], mapping: SpanMapping
) -> tuple[str, str]:
    """(status, error_class): a span failed when its status is ERROR or it names an
    ``error.type``; the type (or an HTTP status code) names the class."""
    error_type = own.get("error.type")
    if span.status.code != Status.STATUS_CODE_ERROR and error_type is None:
        return "ok", ""
    name = _text(error_type, 1.0) if error_type is not None else ""
    if name in mapping.error_types:
        error_class = mapping.error_types[name]
    elif name in ERROR_CLASSES:  # already one of the taxonomy's names
        error_class = name
    else:
        # isascii: str.isdigit() is true of "²", which int() refuses.
        numeric = name.isascii() and name.isdigit() and len(name) <= 3
        # http_status is a uint column: _column_value made it an int.
        code = int(name) if numeric else cast(int, row.get("http_status") or 0)
        if code in _HTTP_CLASSES:
            error_class = _HTTP_CLASSES[code]
        elif 400 <= code < 500:
            error_class = "client_error"
        else:
            error_class = "server_error"
    return ("rejected" if error_class in REJECTION_CLASSES else "error"), error_class


def _attributes(pairs: list[KeyValue]) -> dict[str, AnyValue]:
    return {pair.key: pair.value for pair in pairs}


def _first(
    sources: tuple[Source, ...], own: dict[str, AnyValue], resource: dict[str, AnyValue]
) -> tuple[AnyValue, float] | None:
    """The first source the span (else its resource) carries, with its scale."""
    for source in sources:
        value = own.get(source.attribute)
        if value is None:
            value = resource.get(source.attribute)
        if value is not None and value.WhichOneof("value") is not None:
            return value, source.scale
    return None


def _plain(value: AnyValue) -> str | bool | int | float | None:
    """An attribute's value as Python: the first item of an array (``finish_reasons``)."""
    kind = value.WhichOneof("value")
    if kind is None:  # an empty AnyValue
        return None
    if kind == "array_value":
        items = value.array_value.values
        return _plain(items[0]) if items else None
    if kind in ("kvlist_value", "bytes_value"):
        raise _Rejected(f"a {kind.removesuffix('_value')} value where a scalar was expected")
    return getattr(value, kind)


def _column_value(column: str, value: AnyValue, scale: float) -> object:
    plain = _plain(value)
    if plain is None:
        return None
    kind = _KINDS[column]
    if kind == "string":
        if isinstance(plain, float):
            raise _Rejected(f"field {column}: must be a string, got {plain!r}")
        return str(plain).lower() if isinstance(plain, bool) else str(plain)
    if isinstance(plain, str):  # numbers as text: OTLP JSON senders sometimes do this
        try:
            plain = float(plain)
        except ValueError:
            raise _Rejected(f"field {column}: must be a number, got {plain!r}") from None
    if isinstance(plain, bool):
        raise _Rejected(f"field {column}: must be a number, got {plain!r}")
    number = plain * scale
    if kind == "uint":
        top = _UINT_MAX[column]
        if not (math.isfinite(number) and number == int(number) and 0 <= number <= top):
            raise _Rejected(f"field {column}: must be an integer from 0 to {top}, got {plain!r}")
        return int(number)
    return float(number)


def _text(value: AnyValue, scale: float) -> str:
    """An attribute's value as ``attrs`` text; numbers scaled."""
    plain = _plain(value)
    if isinstance(plain, bool):
        return str(plain).lower()
    if isinstance(plain, int | float) and scale != 1.0:
        return repr(float(plain * scale))
    return "" if plain is None else str(plain)


def _arrow_type(name: str) -> pa.DataType:
    if name == "ts":
        return pa.int64()
    return _ARROW[_KINDS[name]]


def _checked(
    table: pa.Table, result: SpanRequests, check: Callable[[pa.Table], None]
) -> pa.Table | None:
    """The rows that pass the events' checks and ``check``; each that does not is
    rejected by its span's id."""

    def checked(rows: pa.Table) -> pa.Table:
        rows = decode_arrow_table(rows)
        check(rows)
        return rows

    try:
        return checked(table)
    except IngestError:
        pass
    keep = []
    for row in range(table.num_rows):
        try:
            checked(table.slice(row, 1))
            keep.append(row)
        except IngestError as exc:
            span_id = dict(table.column("attrs")[row].as_py()).get("span_id", "?")
            reason = re.sub(r"^(row 0 \(0-based\)|row 1)[,:] ", "", str(exc))
            result.note(f"span {span_id}: {reason}")
    return checked(table.take(keep)) if keep else None
