"""Remote write 1.0 decoded by ClickHouse: the receiver's fast path.

Python decodes a few hundred thousand samples a second at best; ClickHouse parses
protobuf in C++ several times faster, and a flush becomes one statement. The group
committer joins the decompressed bodies of a flush byte for byte (repeated fields
concatenate, so they form one valid ``WriteRequest``) and sends them as the body of
:func:`insert_sql`, which yields one row per float sample into the Null table
``remote_write_v1``; its views fill ``samples``, ``series`` and ``request_parts``
(``migrations/clickhouse/0008_remote_write_staging.sql``).

The statement computes what :mod:`warehouse.ingest.remote_write` computes (labels
with empty values dropped, the metric name, the other labels sorted by name, the
series id) and what :func:`warehouse.ingest.llm_metrics.request_parts` maps, and it
refuses the whole flush, before writing anything, when any series is one the Python
decoder would refuse (no metric name, an empty or duplicate label name, invalid
UTF-8) or when a sample is older than the retention. The committer then decodes each
body of that flush on its own in Python, which names the problem or keeps what can
be kept; a bad body never costs the others their write.

Only bodies of float samples take this path: :func:`plan` sends writes with
histograms, exemplars or metadata (and every 2.0 write) to the Python decoder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from warehouse.errors import IngestError
from warehouse.ingest import proto
from warehouse.ingest.llm_metrics import DIMENSIONS, RESERVED_LABELS, MetricMapping

__all__ = ["PROTO_SCHEMA", "NativeWrite", "insert_parameters", "insert_sql", "plan"]

PROTO_SCHEMA = """syntax = "proto3";
message WriteRequest { repeated TimeSeries timeseries = 1; }
message TimeSeries { repeated Label labels = 1; repeated Sample samples = 2; }
message Label { string name = 1; string value = 2; }
message Sample { double value = 1; int64 timestamp = 2; }
"""
"""The part of ``prometheus.WriteRequest`` this path reads; other fields are skipped."""

SETTINGS = {
    "format_schema_source": "string",
    "format_schema": PROTO_SCHEMA,
    "format_schema_message_name": "WriteRequest",
    # Merging rows of the same key inside each inserted block (the default) costs more
    # than the insert itself when every sample is a new series; merges do it later.
    "optimize_on_insert": 0,
    # The three views are filled side by side rather than one after the other.
    "parallel_view_processing": 1,
}

_INPUT = (
    "timeseries Array(Tuple(labels Array(Tuple(name String, value String)), "
    "samples Array(Tuple(value Float64, timestamp Int64))))"
)

# Over every series of the whole flush (one input row): would the Python decoder
# refuse one (no metric name, an empty or duplicate label name; upb has checked the
# structure and UTF-8 already), or does one hold a sample the retention would drop?
_REFUSED = """arrayExists(names ->
        NOT has(names, '__name__') OR has(names, '')
        OR length(arrayDistinct(names)) != length(names),
        arrayMap(t -> arrayFilter((n, v) -> v != '', t.labels.name, t.labels.value), timeseries))
    OR arrayExists(t -> arrayExists(ms -> ms < {cutoff_ms:Int64}, t.samples.timestamp),
        timeseries)"""

REFUSED_MESSAGE = "llmwh: a series of this flush needs the Python decoder"


def insert_sql(database: str) -> str:
    """The statement a flush of joined bodies is sent with (its parameters:
    :func:`insert_parameters`)."""
    return f"""INSERT INTO {database}.remote_write_v1
WITH
    arrayFilter(l -> l.value != '', s.labels) AS kept,
    arrayFirst(l -> l.name = '__name__', kept).value AS metric,
    arraySort(l -> l.name, arrayFilter(l -> l.name != '__name__', kept)) AS others,
    mapFromArrays(arrayMap(l -> l.name, others), arrayMap(l -> l.value, others)) AS label_map,
    transform(metric, {{mapped:Array(String)}}, {{columns:Array(String)}}, '') AS target,
    if(target != '', label_map[{{request_id_label:String}}], '') AS part_request_id
SELECT
    reinterpretAsUUID(MD5(concat(toString(length(metric)), ':', metric, arrayStringConcat(
        arrayMap(l -> concat(toString(length(l.name)), ':', l.name,
                             toString(length(l.value)), ':', l.value), others))))) AS id,
    metric AS metric_name,
    label_map AS labels,
    fromUnixTimestamp64Milli(x.timestamp, 'UTC') AS timestamp,
    x.value AS value,
    if({{tenant:String}} != '', {{tenant:String}}, label_map['tenant']) AS tenant,
    part_request_id AS request_id,
    if(part_request_id != '', target, '') AS part_column,
    x.value * transform(metric, {{mapped:Array(String)}}, {{scales:Array(Float64)}}, 1.)
        AS part_value,
    if(part_request_id != '',
       mapFilter((k, v) -> NOT has({{not_attrs:Array(String)}}, k), label_map),
       map()) AS part_attrs
FROM
(
    SELECT timeseries FROM input('{_INPUT}')
    WHERE throwIf({_REFUSED}, '{REFUSED_MESSAGE}') = 0
)
ARRAY JOIN timeseries AS s
ARRAY JOIN s.samples AS x
FORMAT ProtobufSingle"""


def insert_parameters(mapping: MetricMapping, tenant: str | None, cutoff_ms: int) -> dict[str, Any]:
    """Bound values of :func:`insert_sql`: the mapping, the tenant, the retention cutoff."""
    names = list(mapping.metrics)
    return {
        "mapped": names,
        "columns": [mapping.metrics[n][0] for n in names],
        "scales": [float(mapping.metrics[n][1]) for n in names],
        "request_id_label": mapping.request_id_label,
        "not_attrs": sorted({mapping.request_id_label, *DIMENSIONS, *RESERVED_LABELS}),
        "tenant": tenant or "",
        "cutoff_ms": cutoff_ms,
    }


@dataclass(frozen=True)
class NativeWrite:
    """A body ClickHouse can decode: its bytes, and the samples it holds."""

    body: bytes
    samples: int
    series: int


def plan(body: bytes) -> NativeWrite | None:
    """The body as a :class:`NativeWrite` when it holds float samples only, else None.

    Parses the whole message (the runtime checks structure and UTF-8 at C speed) so a
    corrupt body is refused here, on its own, with a 400 naming the problem.
    """
    try:
        full = proto.V1.WriteRequest.FromString(body)
        totals = proto.V1_TOTALS.WriteRequest.FromString(body)
    except DecodeError as exc:
        raise IngestError(
            f"the body is not a valid prometheus.WriteRequest protobuf message: {exc}"
        ) from exc
    ts = totals.timeseries
    if len(totals.metadata) or len(ts.exemplars) or len(ts.histograms):
        return None
    return NativeWrite(body, len(ts.samples), len(full.timeseries))
