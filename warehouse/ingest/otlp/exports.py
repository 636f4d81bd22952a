"""OTLP exports through the write service, whatever carried them (HTTP or gRPC).

A trace export's LLM-request spans become requests (docs/otlp.md); a metrics export's
points are written as the Remote-Write 2.0 request a Prometheus sender would have sent
for them, down the same stages. What is not kept is counted in ``partial_success``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from warehouse.ingest import remote_write
from warehouse.ingest.otlp import wire as otlp_wire
from warehouse.ingest.otlp.delta import DeltaBatch, DeltaStreams
from warehouse.ingest.otlp.metrics import MetricsWrite, metrics_to_write
from warehouse.ingest.otlp.span_mapping import load_span_mapping
from warehouse.ingest.otlp.spans import SpanRequests, spans_to_requests
from warehouse.ingest.service import WriteService
from warehouse.ingest.time_window import keep_within

__all__ = ["OTLP_METRICS_PATH", "OTLP_TRACES_PATH", "OtlpExports"]

OTLP_TRACES_PATH = "/v1/traces"
OTLP_METRICS_PATH = "/v1/metrics"


class OtlpExports:
    """The two OTLP exports on ``writes``. Each takes the raw body (uncompressed) in
    media type ``kind`` and the tenant, and raises what a write raises
    (:class:`~warehouse.errors.IngestError`, ``BufferFull``, store errors); every
    transport maps those onto its own status codes."""

    def __init__(self, writes: WriteService):
        self.writes = writes
        self.span_mapping = load_span_mapping(writes.config.span_mapping)
        self._delta_streams = DeltaStreams()  # delta points made cumulative

    async def traces(self, raw: bytes, kind: str, tenant: str | None) -> ExportTraceServiceResponse:
        """A trace export: its LLM-request spans committed as requests."""
        writes, metrics = self.writes, self.writes.metrics
        started = time.perf_counter()
        found = await asyncio.to_thread(self._spans_of, raw, kind)
        writes.observe_decode(OTLP_TRACES_PATH, started)
        if found.table is not None:
            # Spans the store would not keep are rejected, never acknowledged.
            kept, outside, reason = keep_within(found.table, "ts", writes.window("requests"))
            if outside:
                found.rejected += outside
                found.reasons.append(f"{outside} spans: {reason}")
            found = replace(found, table=kept if kept.num_rows else None)
        if found.table is not None:
            await writes.commit_requests(found.table, tenant, raw)
        metrics.labelled(metrics.spans_left_out, "skipped").inc(found.skipped)
        metrics.labelled(metrics.spans_left_out, "rejected").inc(found.rejected)
        answer = ExportTraceServiceResponse()
        if found.rejected:
            answer.partial_success.rejected_spans = found.rejected
            answer.partial_success.error_message = "; ".join(found.reasons)
        return answer

    async def metrics(
        self, raw: bytes, kind: str, tenant: str | None
    ) -> ExportMetricsServiceResponse:
        """A metrics export: its points committed as a 2.0 remote write would be."""
        writes = self.writes
        started = time.perf_counter()
        deltas = self._delta_streams.batch()
        points = await asyncio.to_thread(self._points_of, raw, kind, tenant, deltas)
        answer = ExportMetricsServiceResponse()
        if points.body:
            # Before the decode gives the parts their `received`: sealing is followed by
            # it, and a write time after it would wait for a sealing that never comes
            # (every sender's per-request metrics were then refused until a restart).
            written_at = time.time()
            tables, (decoded, refused, pivot) = await asyncio.to_thread(
                writes.decode_remote_write, points.body, remote_write.decode_v2, tenant
            )
            writes.observe_decode(OTLP_METRICS_PATH, started)
            await writes.commit(tables, tenant, raw)
            writes.count_written(tenant or "", decoded, pivot, written_at)
            if refused[0]:  # what the store would not keep (too old were refused before)
                points.note(refused[0], f"{refused[0]} points or exemplars: {refused[1]}")
        # Committed: the delta streams take the export's points (a refused or failed
        # export moved none, so its retry is summed afresh).
        self._delta_streams.commit(deltas)
        writes.metrics.otlp_points_rejected.inc(points.rejected)
        if points.rejected:
            answer.partial_success.rejected_data_points = points.rejected
            answer.partial_success.error_message = "; ".join(points.reasons)
        return answer

    def _points_of(
        self, raw: bytes, kind: str, tenant: str | None, deltas: DeltaBatch
    ) -> MetricsWrite:
        request = otlp_wire.decode(raw, kind, ExportMetricsServiceRequest)
        not_before = self.writes.window("samples").earliest_ms * 1_000_000
        return metrics_to_write(request, deltas, tenant, not_before)

    def _spans_of(self, raw: bytes, kind: str) -> SpanRequests:
        request = otlp_wire.decode(raw, kind, ExportTraceServiceRequest)
        return spans_to_requests(
            request,
            self.span_mapping,
            self.writes.limits.check_requests,
            strict=self.writes.config.otlp_strict_spans,
        )
