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

from typing import Any

import cramjam
from google.protobuf.message import DecodeError

from warehouse.errors import QueryError
from warehouse.query.series_read import Matcher, Selection, SeriesRead, read_series
from warehouse.store.base import Store
from warehouse.store.tenancy import SERIES_TENANT_LABEL as TENANT_LABEL
from warehouse.store.tenancy import reader_for
from warehouse.wire.compression import unsnappy
from warehouse.wire.prometheus import READ, V1, delimited, encode_samples, varint

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


MAX_REQUEST_BYTES = 16 << 20
"""Most bytes a read request may inflate to (its matchers and hints; a bomb is a 413)."""


def answer(
    store: Store, body: bytes, max_samples: int, max_series: int, tenant: str | None = None
) -> bytes:
    """The snappy-compressed ``ReadResponse`` to a snappy-compressed ``ReadRequest``;
    with ``tenant``, of that tenant's series only (their ``__tenant__`` label, which the
    answer leaves out), read under its row policies where the store has them."""
    request = _decode(body)
    accepted = list(request.accepted_response_types) or [_SAMPLES]
    if _SAMPLES not in accepted:
        raise QueryError(
            "this endpoint answers with the SAMPLES response type only; "
            "add SAMPLES to accepted_response_types"
        )
    results = []
    reader = reader_for(store, tenant)
    for index, query in enumerate(request.queries):
        try:
            found = read_series(reader, _selection(query, tenant), max_samples, max_series)
        except QueryError as exc:
            raise QueryError(f"query {index}: {exc}") from None
        results.append(delimited(1, _query_result(found, hidden=TENANT_LABEL if tenant else "")))
    return bytes(cramjam.snappy.compress_raw(b"".join(results)))


def _decode(body: bytes) -> READ.ReadRequest:
    raw = unsnappy(body, MAX_REQUEST_BYTES)
    try:
        return READ.ReadRequest.FromString(raw)
    except DecodeError as exc:
        raise QueryError(f"the body is not a valid {READ_PROTO} protobuf message: {exc}") from None


def _selection(query: READ.Query, tenant: str | None) -> Selection:
    matchers = []
    for m in query.matchers:
        if m.type not in _OPERATORS:
            raise QueryError(f"unknown label matcher type {m.type} for {m.name!r}")
        if tenant and m.name == TENANT_LABEL:
            raise QueryError(f"{TENANT_LABEL} is set by the tenant header, not by a matcher")
        matchers.append(Matcher(m.name, _OPERATORS[m.type], m.value))
    if tenant:
        matchers.append(Matcher(TENANT_LABEL, "=", tenant))
    return Selection(matchers, query.start_timestamp_ms, query.end_timestamp_ms)


def _query_result(found: SeriesRead, hidden: str = "") -> bytes:
    """A ``QueryResult``: each series' labels and histograms from the protobuf runtime,
    its float samples written at once by :func:`encode_samples`."""
    encoded, starts = encode_samples(found.values, found.timestamps)
    samples = memoryview(encoded)
    offsets = found.offsets
    pieces: list[bytes | memoryview] = []
    for i, pairs in enumerate(found.labels):
        head = V1.TimeSeries(
            labels=[V1.Label(name=n, value=v) for n, v in pairs if n != hidden],
            histograms=[_histogram(h) for h in found.histograms[i]],
        ).SerializeToString()
        # Field order on the wire is free: the samples (field 2) may follow histograms.
        own = samples[starts[offsets[i]] : starts[offsets[i + 1]]]
        pieces += [_SERIES_TAG, varint(len(head) + len(own)), head, own]
    return b"".join(pieces)  # one copy of the samples' bytes


_SERIES_TAG = b"\x0a"  # QueryResult.timeseries: field 1, length-delimited


_RESET_HINTS = {"unknown": 0, "yes": 1, "no": 2, "gauge": 3}


def _histogram(sample: dict[str, Any]) -> V1.Histogram:
    """A stored native histogram sample as 1.0's ``Histogram``: the integer form (bucket
    deltas) when every count is a whole number, as Prometheus's own histograms are; the
    float form otherwise. 1.0 has no start timestamp: it is not sent."""
    histogram = V1.Histogram(
        sum=sample["sum"],
        schema=sample["schema"],
        zero_threshold=sample["zero_threshold"],
        timestamp=sample["timestamp"],
        reset_hint=_RESET_HINTS.get(sample["reset_hint"], 0),
        positive_spans=_spans(sample, "positive"),
        negative_spans=_spans(sample, "negative"),
        custom_values=sample["custom_values"],
    )
    positive, negative = sample["positive_counts"], sample["negative_counts"]
    counts = [sample["count"], sample["zero_count"], *positive, *negative]
    # A zero count is left unset, as a sender's encoder leaves it: the same on the wire.
    if all(_whole(c) for c in counts):
        if sample["count"]:
            histogram.count_int = int(sample["count"])
        if sample["zero_count"]:
            histogram.zero_count_int = int(sample["zero_count"])
        histogram.positive_deltas.extend(_deltas(positive))
        histogram.negative_deltas.extend(_deltas(negative))
    else:
        if sample["count"]:
            histogram.count_float = sample["count"]
        if sample["zero_count"]:
            histogram.zero_count_float = sample["zero_count"]
        histogram.positive_counts.extend(positive)
        histogram.negative_counts.extend(negative)
    return histogram


def _spans(sample: dict[str, Any], side: str) -> list[V1.BucketSpan]:
    offsets, lengths = sample[f"{side}_span_offsets"], sample[f"{side}_span_lengths"]
    return [V1.BucketSpan(offset=o, length=n) for o, n in zip(offsets, lengths, strict=True)]


def _whole(count: float) -> bool:
    return count.is_integer() and 0 <= count < 2**63


def _deltas(counts: list[float]) -> list[int]:
    """Bucket counts as an integer histogram carries them: each relative to the one
    before, across spans."""
    whole = [int(c) for c in counts]
    return [b - a for a, b in zip([0, *whole], whole, strict=False)]
