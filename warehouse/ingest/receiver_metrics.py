"""The receiver's own metrics, on a registry of its own, served at ``GET /metrics``."""

from __future__ import annotations

from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from warehouse.ingest.batcher import FlushStats

__all__ = ["ReceiverMetrics"]

M = TypeVar("M", bound=MetricWrapperBase)

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ReceiverMetrics:
    """Counters and histograms of what the receiver took in and wrote."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._children: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}
        self.http_requests = Counter(
            "llmwh_receiver_http_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "code"],
            registry=r,
        )
        self.grpc_requests = Counter(
            "llmwh_receiver_grpc_requests",
            "OTLP/gRPC calls by method and status code (calls grpc itself refused, a "
            "message over max_body_bytes, are not counted)",
            ["method", "code"],
            registry=r,
        )
        self.bytes_received = Counter(
            "llmwh_receiver_received_bytes",
            "Request body bytes received (compressed)",
            ["endpoint"],
            registry=r,
        )
        self.written = Counter(
            "llmwh_receiver_written",
            "Elements acknowledged after commit, by kind (series: the series of each "
            "write, counted once per write)",
            ["kind"],
            registry=r,
        )
        self.request_samples_dropped = Counter(
            "llmwh_receiver_request_samples_dropped",
            "Samples of per-request metrics that measured nothing (NaN, as staleness "
            "markers are; infinite; negative; too large for their column): not stored",
            registry=r,
        )
        self.spans_left_out = Counter(
            "llmwh_receiver_otlp_spans_left_out",
            "OTLP spans not written as requests, by reason (skipped: not an LLM request; "
            "rejected: an LLM request that could not be taken, reported to the sender)",
            ["reason"],
            registry=r,
        )
        self.otlp_points_rejected = Counter(
            "llmwh_receiver_otlp_points_rejected",
            "OTLP metric data points that could not be taken (reported to the sender as a "
            "partial success)",
            registry=r,
        )
        self.decode_seconds = Histogram(
            "llmwh_receiver_decode_seconds",
            "Time to decompress, decode, validate and map a body",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flush_seconds = Histogram(
            "llmwh_receiver_flush_seconds",
            "Time of one group-commit flush into the store",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.flushes = Counter(
            "llmwh_receiver_flushes", "Group-commit flushes by outcome", ["outcome"], registry=r
        )
        self.flush_writes = Histogram(
            "llmwh_receiver_flush_writes",
            "HTTP writes sharing one flush",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.buffer_bytes = Gauge(
            "llmwh_receiver_buffer_bytes", "Bytes waiting for or in a flush", registry=r
        )
        self.sealing_lag_seconds = Gauge(
            "llmwh_receiver_sealing_lag_seconds",
            "How long the oldest request part this receiver wrote has waited to be sealed; "
            "past seal_after_seconds + 1.2 x seal_every_seconds, writes of per-request "
            "metrics are refused with 429",
            registry=r,
        )
        self.wal_pending_bytes = Gauge(
            "llmwh_receiver_wal_pending_bytes",
            "Bytes of acknowledged writes in the write-ahead log not yet in the store",
            registry=r,
        )
        self.wal_insert_seconds = Histogram(
            "llmwh_receiver_wal_insert_seconds",
            "Time of one insert of write-ahead log frames into the store",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.wal_inserted_rows = Counter(
            "llmwh_receiver_wal_inserted_rows",
            "Rows inserted from the write-ahead log into the store",
            registry=r,
        )
        self.buffer_limit_bytes = Gauge(
            "llmwh_receiver_buffer_limit_bytes", "Byte bound of the ingest buffer", registry=r
        )

    def labelled(self, metric: M, *values: str) -> M:
        """``metric.labels(*values)``, looked up once: ``labels()`` validates its
        arguments and takes a lock on every call, a cost every write paid several times."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child  # type: ignore[return-value]  # a child of a metric has its type

    def observe_flush(self, stats: FlushStats) -> None:
        self.flush_seconds.observe(stats.seconds)
        self.flush_writes.observe(stats.writes)
        self.labelled(self.flushes, "error" if stats.failed else "ok").inc()

    def observe_wal_insert(self, rows: int, seconds: float) -> None:
        self.wal_insert_seconds.observe(seconds)
        self.wal_inserted_rows.inc(rows)
