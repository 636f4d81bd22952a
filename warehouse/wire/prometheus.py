"""Remote-write and remote-read protobuf messages, built at import time from descriptors.

No ``protoc`` and no generated ``_pb2`` modules: each ``.proto`` file of the
specifications is written below as a :class:`~google.protobuf.descriptor_pb2.FileDescriptorProto`
and turned into message classes by the installed runtime (upb). Field numbers,
types and enum values are those of

* Remote-Write 1.0: ``prometheus.WriteRequest`` (``prompb/remote.proto`` and
  ``prompb/types.proto``: ``TimeSeries``, ``Label``, ``Sample``, ``Exemplar``,
  ``Histogram``, ``BucketSpan``, ``MetricMetadata``);
* Remote-Read: ``prometheus.ReadRequest`` and ``prometheus.ReadResponse``
  (``prompb/remote.proto``; ``LabelMatcher`` and ``ReadHints`` of ``prompb/types.proto``);
* Remote-Write 2.0-rc.4: ``io.prometheus.write.v2.Request``
  (``prompb/io/prometheus/write/v2/types.proto``), where ``start_timestamp`` lives
  on each ``Sample`` (field 3) and ``Histogram`` (field 17) and ``TimeSeries`` field 6
  (rc.3's ``created_timestamp``) is reserved.

Views
-----
Decoding millions of samples through one Python object per sample is what makes a
Python receiver slow. The *views* below describe the very same bytes with other
shapes. In the COLUMNS views a field that the specification declares
``repeated Sample`` is a *singular* message whose fields are *repeated*: protobuf
parsers merge every occurrence of a singular message field into one message, and
merging concatenates repeated fields, so a series' samples come out as one
``repeated double value`` and one ``repeated int64 timestamp``, which the runtime
re-encodes packed for numpy to read (:func:`scan`, :func:`packed_doubles`,
:func:`packed_varints`).

Proto3 encoders leave out zero values (a sample of value ``0.0`` has no field 1 on
the wire), so columns can come out shorter than the number of samples; the COUNTS
views (every element an empty message, re-encoded as two bytes) give the true
counts, and the RAW views each sample's own bytes for :func:`read_samples`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from warehouse.errors import WireError

__all__ = [
    "READ",
    "V1",
    "V1_COLUMNS",
    "V1_COUNTS",
    "V1_RAW",
    "V1_SPLIT",
    "V1_TOTALS",
    "V2",
    "V2_COLUMNS",
    "V2_COUNTS",
    "V2_RAW",
    "V2_SPLIT",
    "V2_TOTALS",
    "Fields",
    "Records",
    "delimited",
    "element_counts",
    "encode_samples",
    "gather",
    "packed_doubles",
    "packed_varints",
    "read_samples",
    "scan",
    "split_records",
    "varint",
]

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_TYPES = {
    "bool": _F.TYPE_BOOL,
    "double": _F.TYPE_DOUBLE,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "uint32": _F.TYPE_UINT32,
    "sint32": _F.TYPE_SINT32,
    "sint64": _F.TYPE_SINT64,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

# One private pool: message names here never clash with another copy of the
# Prometheus protos that some other library may have put in the default pool.
_POOL = descriptor_pool.DescriptorPool()


class _Namespace:
    """The message classes of one file, as attributes (``V1.TimeSeries``)."""

    def __init__(self, package: str, classes: dict[str, Any]):
        self.package = package
        self.__dict__.update(classes)

    def __repr__(self) -> str:
        return f"<messages of {self.package}>"


def _field(
    name: str,
    number: int,
    kind: str,
    *,
    repeated: bool = False,
    oneof: int | None = None,
) -> descriptor_pb2.FieldDescriptorProto:
    """A field; ``kind`` is a scalar type name, ``.Message`` or ``enum:.Enum``."""
    field = _F(name=name, number=number, label=_REPEATED if repeated else _OPTIONAL)
    if kind in _TYPES:
        field.type = _TYPES[kind]
    elif kind.startswith("enum:"):
        field.type = _F.TYPE_ENUM
        field.type_name = kind[5:]
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = kind
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _message(
    name: str,
    fields: Iterable[descriptor_pb2.FieldDescriptorProto],
    *,
    oneofs: Iterable[str] = (),
    enums: Iterable[tuple[str, list[tuple[str, int]]]] = (),
    reserved: Iterable[tuple[int, int]] = (),
) -> descriptor_pb2.DescriptorProto:
    message = descriptor_pb2.DescriptorProto(name=name)
    message.field.extend(fields)
    for oneof in oneofs:
        message.oneof_decl.add(name=oneof)
    for enum_name, values in enums:
        enum = message.enum_type.add(name=enum_name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    for start, end in reserved:  # end inclusive, as in .proto files
        message.reserved_range.add(start=start, end=end + 1)
    return message


def _build(
    file_name: str,
    package: str,
    messages: list[descriptor_pb2.DescriptorProto],
    dependencies: Iterable[str] = (),
) -> Any:
    """The messages of one file: a :class:`_Namespace`, typed ``Any`` because its
    classes are built at run time (no stubs) and read as its attributes."""
    proto = descriptor_pb2.FileDescriptorProto(name=file_name, package=package, syntax="proto3")
    proto.dependency.extend(dependencies)
    proto.message_type.extend(messages)
    _POOL.Add(proto)
    classes = {
        m.name: message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{package}.{m.name}"))
        for m in messages
    }
    return _Namespace(package, classes)


def _histogram(
    package: str, *, reset_hint_values: list[tuple[str, int]], v2: bool
) -> descriptor_pb2.DescriptorProto:
    """The native histogram message: identical wire layout in 1.0 and 2.0."""
    span = f".{package}.BucketSpan"
    fields = [
        _field("count_int", 1, "uint64", oneof=0),
        _field("count_float", 2, "double", oneof=0),
        _field("sum", 3, "double"),
        _field("schema", 4, "sint32"),
        _field("zero_threshold", 5, "double"),
        _field("zero_count_int", 6, "uint64", oneof=1),
        _field("zero_count_float", 7, "double", oneof=1),
        _field("negative_spans", 8, span, repeated=True),
        _field("negative_deltas", 9, "sint64", repeated=True),
        _field("negative_counts", 10, "double", repeated=True),
        _field("positive_spans", 11, span, repeated=True),
        _field("positive_deltas", 12, "sint64", repeated=True),
        _field("positive_counts", 13, "double", repeated=True),
        _field("reset_hint", 14, f"enum:.{package}.Histogram.ResetHint"),
        _field("timestamp", 15, "int64"),
        _field("custom_values", 16, "double", repeated=True),
    ]
    if v2:
        fields.append(_field("start_timestamp", 17, "int64"))
    return _message(
        "Histogram",
        fields,
        oneofs=("count", "zero_count"),
        enums=[("ResetHint", reset_hint_values)],
    )


def _bucket_span() -> descriptor_pb2.DescriptorProto:
    return _message("BucketSpan", [_field("offset", 1, "sint32"), _field("length", 2, "uint32")])


# --- Remote-Write 1.0: prometheus.WriteRequest ------------------------------------------

_P1 = "prometheus"
V1 = _build(
    "llmwh/prometheus/remote.proto",
    _P1,
    [
        _message(
            "WriteRequest",
            [
                _field("timeseries", 1, f".{_P1}.TimeSeries", repeated=True),
                _field("metadata", 3, f".{_P1}.MetricMetadata", repeated=True),
            ],
            reserved=[(2, 2)],
        ),
        _message(
            "TimeSeries",
            [
                _field("labels", 1, f".{_P1}.Label", repeated=True),
                _field("samples", 2, f".{_P1}.Sample", repeated=True),
                _field("exemplars", 3, f".{_P1}.Exemplar", repeated=True),
                _field("histograms", 4, f".{_P1}.Histogram", repeated=True),
            ],
        ),
        _message("Label", [_field("name", 1, "string"), _field("value", 2, "string")]),
        _message("Sample", [_field("value", 1, "double"), _field("timestamp", 2, "int64")]),
        _message(
            "Exemplar",
            [
                _field("labels", 1, f".{_P1}.Label", repeated=True),
                _field("value", 2, "double"),
                _field("timestamp", 3, "int64"),
            ],
        ),
        _histogram(
            _P1, reset_hint_values=[("UNKNOWN", 0), ("YES", 1), ("NO", 2), ("GAUGE", 3)], v2=False
        ),
        _bucket_span(),
        _message(
            "MetricMetadata",
            [
                _field("type", 1, f"enum:.{_P1}.MetricMetadata.MetricType"),
                _field("metric_family_name", 2, "string"),
                _field("help", 4, "string"),
                _field("unit", 5, "string"),
            ],
            enums=[
                (
                    "MetricType",
                    [
                        ("UNKNOWN", 0),
                        ("COUNTER", 1),
                        ("GAUGE", 2),
                        ("HISTOGRAM", 3),
                        ("GAUGEHISTOGRAM", 4),
                        ("SUMMARY", 5),
                        ("INFO", 6),
                        ("STATESET", 7),
                    ],
                )
            ],
        ),
    ],
)

# --- Remote-Read: prometheus.ReadRequest and ReadResponse -------------------------------
# prompb/remote.proto and the LabelMatcher and ReadHints of prompb/types.proto; the
# series of a response are 1.0's TimeSeries.

READ = _build(
    "llmwh/prometheus/read.proto",
    _P1,
    [
        _message(
            "ReadRequest",
            [
                _field("queries", 1, f".{_P1}.Query", repeated=True),
                _field(
                    "accepted_response_types",
                    2,
                    f"enum:.{_P1}.ReadRequest.ResponseType",
                    repeated=True,
                ),
            ],
            enums=[("ResponseType", [("SAMPLES", 0), ("STREAMED_XOR_CHUNKS", 1)])],
        ),
        _message("ReadResponse", [_field("results", 1, f".{_P1}.QueryResult", repeated=True)]),
        _message(
            "Query",
            [
                _field("start_timestamp_ms", 1, "int64"),
                _field("end_timestamp_ms", 2, "int64"),
                _field("matchers", 3, f".{_P1}.LabelMatcher", repeated=True),
                _field("hints", 4, f".{_P1}.ReadHints"),
            ],
        ),
        _message("QueryResult", [_field("timeseries", 1, f".{_P1}.TimeSeries", repeated=True)]),
        _message(
            "LabelMatcher",
            [
                _field("type", 1, f"enum:.{_P1}.LabelMatcher.Type"),
                _field("name", 2, "string"),
                _field("value", 3, "string"),
            ],
            enums=[("Type", [("EQ", 0), ("NEQ", 1), ("RE", 2), ("NRE", 3)])],
        ),
        _message(
            "ReadHints",
            [
                _field("step_ms", 1, "int64"),
                _field("func", 2, "string"),
                _field("start_ms", 3, "int64"),
                _field("end_ms", 4, "int64"),
                _field("grouping", 5, "string", repeated=True),
                _field("by", 6, "bool"),
                _field("range_ms", 7, "int64"),
            ],
        ),
    ],
    dependencies=["llmwh/prometheus/remote.proto"],
)

# --- Remote-Write 2.0-rc.4: io.prometheus.write.v2.Request ------------------------------

_P2 = "io.prometheus.write.v2"
V2 = _build(
    "llmwh/io/prometheus/write/v2/types.proto",
    _P2,
    [
        _message(
            "Request",
            [
                _field("symbols", 4, "string", repeated=True),
                _field("timeseries", 5, f".{_P2}.TimeSeries", repeated=True),
            ],
            reserved=[(1, 3)],
        ),
        _message(
            "TimeSeries",
            [
                _field("labels_refs", 1, "uint32", repeated=True),
                _field("samples", 2, f".{_P2}.Sample", repeated=True),
                _field("histograms", 3, f".{_P2}.Histogram", repeated=True),
                _field("exemplars", 4, f".{_P2}.Exemplar", repeated=True),
                _field("metadata", 5, f".{_P2}.Metadata"),
            ],
            reserved=[(6, 6)],
        ),
        _message(
            "Exemplar",
            [
                _field("labels_refs", 1, "uint32", repeated=True),
                _field("value", 2, "double"),
                _field("timestamp", 3, "int64"),
            ],
        ),
        _message(
            "Sample",
            [
                _field("value", 1, "double"),
                _field("timestamp", 2, "int64"),
                _field("start_timestamp", 3, "int64"),
            ],
        ),
        _message(
            "Metadata",
            [
                _field("type", 1, f"enum:.{_P2}.Metadata.MetricType"),
                _field("help_ref", 3, "uint32"),
                _field("unit_ref", 4, "uint32"),
            ],
            enums=[
                (
                    "MetricType",
                    [
                        ("METRIC_TYPE_UNSPECIFIED", 0),
                        ("METRIC_TYPE_COUNTER", 1),
                        ("METRIC_TYPE_GAUGE", 2),
                        ("METRIC_TYPE_HISTOGRAM", 3),
                        ("METRIC_TYPE_GAUGEHISTOGRAM", 4),
                        ("METRIC_TYPE_SUMMARY", 5),
                        ("METRIC_TYPE_INFO", 6),
                        ("METRIC_TYPE_STATESET", 7),
                    ],
                )
            ],
        ),
        _histogram(
            _P2,
            reset_hint_values=[
                ("RESET_HINT_UNSPECIFIED", 0),
                ("RESET_HINT_YES", 1),
                ("RESET_HINT_NO", 2),
                ("RESET_HINT_GAUGE", 3),
            ],
            v2=True,
        ),
        _bucket_span(),
    ],
)

# --- Views: the same wire bytes, shaped for columnar decoding ---------------------------
#
# Field numbers and wire types are those of the messages above; only the shape
# differs. Fields a view leaves out are unknown fields, dropped before re-encoding.
#
# * COLUMNS: per series, every Label merges into one message of two repeated strings
#   and every Sample into one message of repeated numbers, which re-encode packed.
# * COUNTS: every element becomes an empty message, so a series re-encodes as one
#   two-byte record (tag, length 0) per label, sample, histogram or exemplar.
# * SPLIT: each series as raw bytes, which tells where each series starts and ends
#   in a re-encoded request.


def _empty() -> descriptor_pb2.DescriptorProto:
    return _message("Empty", [])


_C1 = "llmwh.view.v1.columns"
V1_COLUMNS = _build(
    "llmwh/view/v1/columns.proto",
    _C1,
    [
        _message("WriteRequest", [_field("timeseries", 1, f".{_C1}.TimeSeries", repeated=True)]),
        _message(
            "TimeSeries",
            [_field("labels", 1, f".{_C1}.Labels"), _field("samples", 2, f".{_C1}.Samples")],
        ),
        _message(
            "Labels",
            [
                _field("name", 1, "string", repeated=True),
                _field("value", 2, "string", repeated=True),
            ],
        ),
        _message(
            "Samples",
            [
                _field("value", 1, "double", repeated=True),
                _field("timestamp", 2, "int64", repeated=True),
            ],
        ),
    ],
)

_K1 = "llmwh.view.v1.counts"
V1_COUNTS = _build(
    "llmwh/view/v1/counts.proto",
    _K1,
    [
        _message(
            "WriteRequest",
            [
                _field("timeseries", 1, f".{_K1}.TimeSeries", repeated=True),
                _field("metadata", 3, f".{_K1}.Empty", repeated=True),
            ],
        ),
        _message(
            "TimeSeries",
            [
                _field("labels", 1, f".{_K1}.Empty", repeated=True),
                _field("samples", 2, f".{_K1}.Empty", repeated=True),
                _field("exemplars", 3, f".{_K1}.Empty", repeated=True),
                _field("histograms", 4, f".{_K1}.Empty", repeated=True),
            ],
        ),
        _empty(),
    ],
)

V1_SPLIT = _build(
    "llmwh/view/v1/split.proto",
    "llmwh.view.v1.split",
    [_message("WriteRequest", [_field("timeseries", 1, "bytes", repeated=True)])],
)

_C2 = "llmwh.view.v2.columns"
V2_COLUMNS = _build(
    "llmwh/view/v2/columns.proto",
    _C2,
    [
        _message(
            "Request",
            [
                _field("symbols", 4, "string", repeated=True),
                _field("timeseries", 5, f".{_C2}.TimeSeries", repeated=True),
            ],
        ),
        _message(
            "TimeSeries",
            [
                _field("labels_refs", 1, "uint32", repeated=True),
                _field("samples", 2, f".{_C2}.Samples"),
                _field("metadata", 5, f".{_C2}.Metadata"),
            ],
        ),
        _message(
            "Samples",
            [
                _field("value", 1, "double", repeated=True),
                _field("timestamp", 2, "int64", repeated=True),
                _field("start_timestamp", 3, "int64", repeated=True),
            ],
        ),
        _message(
            "Metadata",
            [
                _field("type", 1, "uint32"),
                _field("help_ref", 3, "uint32"),
                _field("unit_ref", 4, "uint32"),
            ],
        ),
    ],
)

_K2 = "llmwh.view.v2.counts"
V2_COUNTS = _build(
    "llmwh/view/v2/counts.proto",
    _K2,
    [
        _message("Request", [_field("timeseries", 5, f".{_K2}.TimeSeries", repeated=True)]),
        _message(
            "TimeSeries",
            [
                _field("samples", 2, f".{_K2}.Empty", repeated=True),
                _field("histograms", 3, f".{_K2}.Empty", repeated=True),
                _field("exemplars", 4, f".{_K2}.Empty", repeated=True),
            ],
        ),
        _empty(),
    ],
)

V2_SPLIT = _build(
    "llmwh/view/v2/split.proto",
    "llmwh.view.v2.split",
    [_message("Request", [_field("timeseries", 5, "bytes", repeated=True)])],
)


# --- Reading re-encoded views with numpy -------------------------------------------------
#
# The bytes read here are the runtime's own re-encoding of a view it has already
# parsed (and so validated): canonical, in field-number order, one-byte tags. These
# readers work on every element of a request at once; the Python loops below run
# once per field *position* (label k of every series together), never per element.

_PAD = 16  # zero bytes after the data, so varint reads never index past the end


@dataclass(frozen=True)
class Records:
    """Byte ranges ``[start, start + length)`` of ``buf``, each owned by some index."""

    buf: np.ndarray
    start: np.ndarray
    length: np.ndarray

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length


@dataclass(frozen=True)
class Fields:
    """The fields found in a set of records, in wire order within each record."""

    owner: np.ndarray
    """Index of the record each field belongs to."""
    number: np.ndarray
    wire: np.ndarray
    value: np.ndarray
    """Varint fields: the value (uint64)."""
    start: np.ndarray
    """Length-delimited and fixed fields: where the payload starts."""
    length: np.ndarray

    def only(self, number: int) -> Fields:
        keep = np.flatnonzero(self.number == number)
        return Fields(*(getattr(self, f).take(keep) for f in _FIELD_COLUMNS))


_FIELD_COLUMNS = ("owner", "number", "wire", "value", "start", "length")


def padded(data: bytes) -> np.ndarray:
    buf = np.zeros(len(data) + _PAD, np.uint8)
    buf[: len(data)] = np.frombuffer(data, np.uint8)
    return buf


def varint_size(values: np.ndarray) -> np.ndarray:
    """Bytes each value takes as a varint."""
    values = np.asarray(values, np.uint64)
    size = np.ones(values.shape, np.int64)
    for bits in range(7, 64, 7):
        size += values >= np.uint64(1 << bits)
    return size


def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint starting at each position: (values as uint64, sizes in bytes)."""
    byte = buf[pos]
    value = (byte & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), np.int64)
    active = np.flatnonzero(byte >= 0x80)  # most tags and lengths take one byte
    for k in range(1, 10):
        if not active.size:
            break
        byte = buf[pos[active] + k].astype(np.uint64)
        value[active] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        size[active] = k + 1
        active = active[byte >= 0x80]
    if active.size:
        raise WireError("varint longer than 10 bytes")
    return value, size


def split_records(blob: bytes, split_view: Any, *, first: bool) -> Records:
    """Where each series of a re-encoded request lies in ``blob``.

    Fields are written in number order, so the series (each a tag byte, a varint
    length and the payload) come ``first`` when theirs is the lowest field number
    written, and last otherwise.
    """
    lengths = np.fromiter(map(len, split_view.FromString(blob).timeseries), np.int64)
    framed = 1 + varint_size(lengths) + lengths
    base = 0 if first else len(blob) - int(framed.sum())
    ends = base + np.cumsum(framed)
    return Records(padded(blob), ends - lengths, lengths)


def scan(records: Records) -> Fields:
    """Every field of every record, decoded one field position at a time."""
    buf = records.buf
    owner = np.arange(len(records.start))
    cur = records.start.astype(np.int64)
    end = records.end.astype(np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    while True:
        live = cur < end
        owner, cur, end = owner[live], cur[live], end[live]
        if not owner.size:
            break
        tag = buf[cur]
        if (tag < 0x80).all():  # field numbers below 16: what every view here writes
            cur = cur + 1
            tag = tag.astype(np.uint64)
        else:
            tag, size = read_varints(buf, cur)
            cur = cur + size
        wire = (tag & np.uint64(7)).astype(np.int64)
        number = (tag >> np.uint64(3)).astype(np.int64)
        if (wire == 2).all():  # only length-delimited fields here: the common case
            value, size = read_varints(buf, cur)
            start = cur + size
            length = value.astype(np.int64)
            cur = start + length
        else:
            value, start, length, cur = _mixed_fields(buf, wire, cur)
        if (cur > end).any():
            raise WireError("field runs past the end of its message")
        parts.append((owner, number, wire, value, start, length))
    if not parts:
        empty = np.zeros(0, np.int64)
        return Fields(empty, empty, empty, np.zeros(0, np.uint64), empty, empty)
    # Field k of record r goes to first[r] + k: by record, in wire order within it.
    per_record = np.zeros(len(records.start), np.int64)
    for part in parts:
        per_record[part[0]] += 1
    first = np.cumsum(per_record) - per_record
    total = int(per_record.sum())
    columns = [np.empty(total, c.dtype) for c in parts[0]]
    for k, part in enumerate(parts):
        where = first[part[0]] + k
        for column, values in zip(columns, part, strict=True):
            column[where] = values
    return Fields(*columns)


def _mixed_fields(
    buf: np.ndarray, wire: np.ndarray, cur: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Values, payload starts and lengths of fields of any wire type; the next positions."""
    value = np.zeros(len(cur), np.uint64)
    length = np.zeros(len(cur), np.int64)
    start = cur.copy()
    if (m := wire == 0).any():
        value[m], size = read_varints(buf, cur[m])
        cur = cur.copy()
        cur[m] += size
    length[wire == 1] = 8
    length[wire == 5] = 4
    if (m := wire == 2).any():
        value[m], size = read_varints(buf, cur[m])
        start[m] = cur[m] + size
        length[m] = value[m].astype(np.int64)
    if not np.isin(wire, (0, 1, 2, 5)).all():
        raise WireError("unexpected wire type")
    return value, start, length, np.where(wire == 0, cur, start + length)


def gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges laid end to end: (bytes, offsets with a leading 0).

    Ranges come in buffer order and do not overlap (fields of records in order).
    A few bytes are picked by index; many by one mask over the whole buffer, which
    costs a pass over the buffer but eight times less memory traffic per byte.
    """
    offsets = np.zeros(len(length) + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets
    if total * 8 < len(buf):
        index = np.repeat(start - offsets[:-1], length) + np.arange(total)
        return buf[index], offsets
    filled = length > 0
    begin, end = start[filled], start[filled] + length[filled]
    edges = np.zeros(len(buf) + 1, np.int8)
    edges[begin] += 1  # non-empty ranges that do not overlap: every begin (and end) differs
    edges[end] -= 1
    return buf[np.cumsum(edges[:-1], dtype=np.int8).view(bool)], offsets


def packed_doubles(fields: Fields, buf: np.ndarray) -> np.ndarray:
    data, _ = gather(buf, fields.start, fields.length)
    return data.view("<f8")


def packed_varints(fields: Fields, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every varint of packed fields: (values as uint64, how many each field holds)."""
    data, offsets = gather(buf, fields.start, fields.length)
    last = np.flatnonzero(data < 0x80)
    counts = np.diff(np.searchsorted(last, offsets))
    size = int(last[0]) + 1 if len(last) else 0
    if (
        len(last)
        and len(data) == size * len(last)
        and size <= 10
        and (data[size - 1 :: size] < 0x80).all()
    ):
        # Every varint has the same size (timestamps of one era): read them as rows.
        rows = data.reshape(-1, size).astype(np.uint64)
        values = rows[:, 0] & np.uint64(0x7F)
        for k in range(1, size):
            values |= (rows[:, k] & np.uint64(0x7F)) << np.uint64(7 * k)
        return values, counts
    first = np.concatenate(([0], last[:-1] + 1)).astype(np.int64)[: len(last)]
    values, _ = read_varints(np.concatenate((data, np.zeros(_PAD, np.uint8))), first)
    return values, counts


def element_counts(blob: bytes, split_view: Any, numbers: int, *, first: bool) -> np.ndarray:
    """Per series of a COUNTS view's re-encoding: how many of each field it has.

    Returns an array of shape ``(series, numbers + 1)``, indexed by field number.
    """
    records = split_records(blob, split_view, first=first)
    data, _ = gather(records.buf, records.start, records.length)
    tags = data[0::2].astype(np.int64)
    owner = np.repeat(np.arange(len(records.start)), records.length // 2)
    counts = np.zeros((len(records.start), numbers + 1), np.int64)
    np.add.at(counts, (owner, tags >> 3), 1)
    return counts


# Each sample as its raw bytes: for the few series whose columns came out short.
V1_RAW = _build(
    "llmwh/view/v1/raw.proto",
    "llmwh.view.v1.raw",
    [
        _message(
            "WriteRequest",
            [_field("timeseries", 1, ".llmwh.view.v1.raw.TimeSeries", repeated=True)],
        ),
        _message("TimeSeries", [_field("samples", 2, "bytes", repeated=True)]),
    ],
)
V2_RAW = _build(
    "llmwh/view/v2/raw.proto",
    "llmwh.view.v2.raw",
    [
        _message(
            "Request", [_field("timeseries", 5, ".llmwh.view.v2.raw.TimeSeries", repeated=True)]
        ),
        _message("TimeSeries", [_field("samples", 2, "bytes", repeated=True)]),
    ],
)


def read_samples(raws: list[bytes], sample_class: Any) -> tuple[np.ndarray, np.ndarray]:
    """Values and timestamps of encoded ``Sample`` messages (1.0 or 2.0).

    Samples as encoders write them (value, timestamp, then 2.0's start timestamp,
    each left out when zero) are read all at once; any other encoding is parsed
    by ``sample_class`` one sample at a time.
    """
    lengths = np.fromiter(map(len, raws), np.int64, len(raws))
    buf = padded(b"".join(raws))
    end = np.cumsum(lengths)
    cur = end - lengths
    values = np.zeros(len(raws), np.float64)
    stamps = np.zeros(len(raws), np.uint64)
    at = np.flatnonzero((cur < end) & (buf[cur] == 0x09))  # field 1, 64-bit
    values[at] = buf[cur[at, None] + np.arange(1, 9)].copy().view("<f8").ravel()
    cur[at] += 9
    for tag, out in ((0x10, stamps), (0x18, None)):  # field 2; field 3 (2.0 only)
        at = np.flatnonzero((cur < end) & (buf[cur] == tag))
        value, size = read_varints(buf, cur[at] + 1)
        if out is not None:
            out[at] = value
        cur[at] += 1 + size
    stamps = stamps.view(np.int64)
    for k in np.flatnonzero(cur != end).tolist():
        sample = sample_class.FromString(raws[k])
        values[k], stamps[k] = sample.value, sample.timestamp
    return values, stamps


# Every series merged into one: how many labels, samples, ... the whole request holds.
V1_TOTALS = _build(
    "llmwh/view/v1/totals.proto",
    "llmwh.view.v1.totals",
    [
        _message(
            "WriteRequest",
            [
                _field("timeseries", 1, ".llmwh.view.v1.totals.TimeSeries"),
                _field("metadata", 3, "bytes", repeated=True),
            ],
        ),
        _message(
            "TimeSeries",
            [
                _field("labels", 1, "bytes", repeated=True),
                _field("samples", 2, "bytes", repeated=True),
                _field("exemplars", 3, "bytes", repeated=True),
                _field("histograms", 4, "bytes", repeated=True),
            ],
        ),
    ],
)
V2_TOTALS = _build(
    "llmwh/view/v2/totals.proto",
    "llmwh.view.v2.totals",
    [
        _message("Request", [_field("timeseries", 5, ".llmwh.view.v2.totals.TimeSeries")]),
        _message(
            "TimeSeries",
            [
                _field("samples", 2, "bytes", repeated=True),
                _field("histograms", 3, "bytes", repeated=True),
                _field("exemplars", 4, "bytes", repeated=True),
            ],
        ),
    ],
)


# --- Writing samples with numpy -----------------------------------------------------------


def encode_samples(values: np.ndarray, timestamps: np.ndarray) -> tuple[bytes, np.ndarray]:
    """1.0 ``TimeSeries.samples`` entries (field 2) for every sample at once, and where
    each sample's bytes start (``len(values) + 1`` offsets).

    A series' slice of these bytes, after its labels, is its ``TimeSeries``: a Python
    object per sample would cost more than reading the samples did. Every field is
    written, zeros too (an explicit default is valid protobuf), and a value keeps its
    bits (NaN payloads such as the staleness marker, infinities).
    """
    values = np.ascontiguousarray(values, np.float64)
    stamps = np.asarray(timestamps, np.int64).view(np.uint64)  # negative: ten bytes
    size = varint_size(stamps)
    if len(size) and size.min() == size.max():
        return _same_size_samples(values, stamps, int(size[0]))
    body = 9 + 1 + size  # Sample: tag + double, tag + varint; at most 20 bytes
    starts = np.zeros(len(values) + 1, np.int64)
    np.cumsum(body + 2, out=starts[1:])  # + the entry's tag and one-byte length
    buf = np.zeros(int(starts[-1]), np.uint8)
    at = starts[:-1]
    buf[at] = 0x12  # field 2, length-delimited
    buf[at + 1] = body
    buf[at + 2] = 0x09  # field 1, 64-bit
    doubles = values.view(np.uint8).reshape(-1, 8)
    for k in range(8):
        buf[at + 3 + k] = doubles[:, k]
    buf[at + 11] = 0x10  # field 2, varint
    rest = stamps.copy()
    for k in range(int(size.max(initial=0))):
        more = size > k + 1
        writing = size > k
        byte = (rest & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        buf[(at + 12 + k)[writing]] = byte[writing]
        rest >>= np.uint64(7)
    return buf.tobytes(), starts


def varint(n: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def delimited(number: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length as a varint, the payload."""
    return bytes([number << 3 | 2]) + varint(len(payload)) + payload


def _same_size_samples(
    values: np.ndarray, stamps: np.ndarray, size: int
) -> tuple[bytes, np.ndarray]:
    """:func:`encode_samples` when every timestamp's varint has ``size`` bytes (the
    usual case: times of one range in ms since 1970 take six): fixed-size records, each
    field written for all samples at once."""
    record = np.dtype(
        [
            ("tag", "u1"),
            ("length", "u1"),
            ("value_tag", "u1"),
            ("value", "<f8"),
            ("time_tag", "u1"),
            ("time", "u1", (size,)),
        ]
    )
    out = np.empty(len(values), record)
    out["tag"] = 0x12
    out["length"] = 10 + size
    out["value_tag"] = 0x09
    out["value"] = values
    out["time_tag"] = 0x10
    rest = stamps.copy()
    for k in range(size):
        more = np.uint8(0x80 if k < size - 1 else 0)
        out["time"][:, k] = (rest & np.uint64(0x7F)).astype(np.uint8) | more
        rest >>= np.uint64(7)
    return out.tobytes(), np.arange(len(values) + 1, dtype=np.int64) * record.itemsize
