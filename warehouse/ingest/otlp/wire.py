"""OTLP/HTTP bodies: protobuf or JSON in, the export response or a ``google.rpc.Status`` out.

The messages are the ``opentelemetry-proto`` package's classes. OTLP's JSON is
protobuf's JSON mapping with two differences this module bridges: trace and span ids
are hex, not base64, and unknown fields must be ignored.
"""

from __future__ import annotations

import base64
import json
import re
from typing import TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc.status_pb2 import Status

from warehouse.errors import IngestError

__all__ = ["JSON", "PROTOBUF", "decode", "encode", "status"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
_INVALID_ARGUMENT, _INTERNAL = 3, 13
_GRPC_CODES = {401: 16, 403: 7, 429: 8, 503: 14}
"""HTTP status -> ``google.rpc.Code``: UNAUTHENTICATED, PERMISSION_DENIED,
RESOURCE_EXHAUSTED, UNAVAILABLE; other 4xx are INVALID_ARGUMENT, other 5xx INTERNAL."""

M = TypeVar("M", bound=Message)


def decode(body: bytes, media_type: str, message: type[M]) -> M:
    """Parse an export request; :class:`IngestError` (400) naming what is wrong."""
    parsed = message()
    if media_type == PROTOBUF:
        try:
            parsed.ParseFromString(body)
        except (DecodeError, ValueError) as exc:
            raise IngestError(f"not a {message.DESCRIPTOR.full_name}: {exc}") from None
        return parsed
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise IngestError(f"not JSON: {exc}") from None
    except RecursionError:
        raise IngestError("not JSON that can be read: nested too deeply") from None
    if not isinstance(document, dict):
        raise IngestError(f"not a {message.DESCRIPTOR.full_name} in OTLP JSON: not an object")
    try:
        json_format.ParseDict(_base64_ids(document), parsed, ignore_unknown_fields=True)
    except RecursionError:
        raise IngestError("OTLP JSON nested too deeply") from None
    except (json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        raise IngestError(f"not a {message.DESCRIPTOR.full_name} in OTLP JSON: {exc}") from None
    return parsed


def encode(message: Message, media_type: str) -> bytes:
    """A response message in the request's encoding."""
    if media_type == PROTOBUF:
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


def status(message: str, media_type: str, http_status: int = 400) -> bytes:
    """The body of an error answer: a ``google.rpc.Status`` with ``message`` and the
    gRPC code the OTLP specification pairs with ``http_status``."""
    code = _GRPC_CODES.get(http_status, _INVALID_ARGUMENT if http_status < 500 else _INTERNAL)
    return encode(Status(code=code, message=message), media_type)


def _base64_ids(node: object) -> object:
    """The document with its hex trace and span ids turned into protobuf JSON's base64."""
    if isinstance(node, list):
        return [_base64_ids(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {}
    for key, value in node.items():
        if key in _ID_KEYS and isinstance(value, str):
            if not _HEX.fullmatch(value):
                raise IngestError(f"{key} {value!r} is not hex")
            value = base64.b64encode(bytes.fromhex(value)).decode()
        converted[key] = _base64_ids(value)
    return converted
