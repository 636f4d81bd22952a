"""Prometheus remote read: a snappy ``prometheus.ReadRequest`` in, a ``ReadResponse`` out.

The warehouse as Prometheus's long-term store (docs/remote-read.md): each query of the
request is one read of the store (:mod:`warehouse.query.series_read`), and the answer is
the ``SAMPLES`` response type. ``STREAMED_XOR_CHUNKS`` would need Prometheus's XOR chunk
encoding, which no maintained Python library writes; a client that accepts both (as
Prometheus does from 2.13 on, listing the streamed type first) gets ``SAMPLES``, and one
that accepts only the streamed type gets a 400 saying so, as the protocol asks.
Read hints (step, range, function) are not used: they may narrow a read, and reading
everything the matchers select is always the right answer.
"""

from __future__ import annotations

import re

import cramjam
from google.protobuf.message import DecodeError

from warehouse.errors import IngestError, QueryError
from warehouse.ingest.proto import READ, V1, delimited, encode_samples
from warehouse.query.series_read import Matcher, Selection, read_series
from warehouse.store.base import Store

__all__ = ["CONTENT_TYPE", "READ_PROTO", "answer"]

CONTENT_TYPE = "application/x-protobuf"
READ_PROTO = "prometheus.ReadRequest"
_SAMPLES = READ.ReadRequest.SAMPLES
_OPERATORS = {
    READ.LabelMatcher.EQ: "=",
    READ.LabelMatcher.NEQ: "!=",
    READ.LabelMatcher.RE: "=~",
    READ.LabelMatcher.NRE: "!~",
}
# What Python's `re` takes and RE2 (Go's regexp, so Prometheus) refuses.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?>|\\[1-9]")


def answer(store: Store, body: bytes, max_samples: int, max_series: int) -> bytes:
    """The snappy-compressed ``ReadResponse`` to a snappy-compressed ``ReadRequest``."""
    request = _decode(body)
    accepted = list(request.accepted_response_types) or [_SAMPLES]
    if _SAMPLES not in accepted:
        raise IngestError(
            "this endpoint answers with the SAMPLES response type only; "
            "add SAMPLES to accepted_response_types"
        )
    results = []
    for index, query in enumerate(request.queries):
        try:
            selection = _selection(query)
            labels, values, stamps, offsets = read_series(store, selection, max_samples, max_series)
        except QueryError as exc:
            raise IngestError(f"query {index}: {exc}") from None
        results.append(delimited(1, _query_result(labels, values, stamps, offsets)))
    return bytes(cramjam.snappy.compress_raw(b"".join(results)))


def _decode(body: bytes) -> READ.ReadRequest:
    try:
        raw = bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam raises its own error types
        raise IngestError(f"the body is not snappy-compressed (block format): {exc}") from None
    try:
        return READ.ReadRequest.FromString(raw)
    except DecodeError as exc:
        raise IngestError(f"the body is not a valid {READ_PROTO} protobuf message: {exc}") from None


def _selection(query: READ.Query) -> Selection:
    matchers = []
    for m in query.matchers:
        if m.type not in _OPERATORS:
            raise QueryError(f"unknown label matcher type {m.type} for {m.name!r}")
        op = _OPERATORS[m.type]
        if op in ("=~", "!~") and _NOT_RE2.search(m.value):
            raise QueryError(
                f"bad regular expression {m.value!r} for {m.name}: lookarounds, atomic "
                "groups and backreferences are not RE2 syntax"
            )
        matchers.append(Matcher(m.name, op, m.value))
    return Selection(matchers, query.start_timestamp_ms, query.end_timestamp_ms)


def _query_result(labels, values, stamps, offsets) -> bytes:
    """A ``QueryResult``: each series' labels from the protobuf runtime, then its samples
    written at once by :func:`encode_samples`."""
    samples, starts = encode_samples(values, stamps)
    series = []
    for i, pairs in enumerate(labels):
        head = V1.TimeSeries(labels=[V1.Label(name=n, value=v) for n, v in pairs])
        body = head.SerializeToString() + samples[starts[offsets[i]] : starts[offsets[i + 1]]]
        series.append(delimited(1, body))
    return b"".join(series)
