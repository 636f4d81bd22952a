"""The receiver: a plain ASGI app, the write endpoints and the checks every request takes.

==========================  =====================================================
``POST /api/v1/write``      Prometheus remote write 1.0 and 2.0 (by Content-Type)
``POST /api/v1/requests``   per-request events: NDJSON or an Arrow IPC stream
``POST /v1/traces``         OTLP/HTTP spans; those of LLM requests become requests
``POST /v1/metrics``        OTLP/HTTP metric points, as Prometheus series
``GET /metrics``            the receiver's own metrics
``GET /healthz``            the process is up
``GET /readyz``             the store answers
==========================  =====================================================

Reads (remote read, the overview and report pages) and the OTLP/gRPC server are
mounted by ``llmwh serve``'s composition root (:mod:`warehouse.serve.app`), through
:meth:`Receiver.mount` and the start and stop hooks: ingest imports no reader.

Decoding is done by pure functions (``remote_write``, ``events``); this module maps
HTTP to them and their errors to status codes, and hands rows to the group
committer. A 2xx is sent only once the rows are committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial

import numpy as np
import pyarrow as pa
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from warehouse.auth import EVERYTHING, challenge, load_access
from warehouse.config import Config
from warehouse.errors import (
    BufferFull,
    ConfigError,
    Forbidden,
    IngestError,
    InvalidArgument,
    QueryError,
    SealingBehind,
    StoreError,
    StoreUnavailable,
    TooManyNewSeries,
    UnsupportedMediaType,
)
from warehouse.ingest import events, remote_write
from warehouse.ingest.batcher import Body, GroupCommitter
from warehouse.ingest.http import (
    Receive,
    Scope,
    Send,
    header,
    header_values,
    media_type,
    read_body,
    require_snappy,
    respond,
)
from warehouse.ingest.limits import WriteLimits
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.otlp import wire as otlp_wire
from warehouse.ingest.otlp.delta import DeltaBatch, DeltaStreams
from warehouse.ingest.otlp.metrics import MetricsWrite, metrics_to_write
from warehouse.ingest.otlp.span_mapping import load_span_mapping
from warehouse.ingest.otlp.spans import SpanRequests, spans_to_requests
from warehouse.ingest.receiver_metrics import ReceiverMetrics
from warehouse.ingest.remote_write_tables import series_times_of_kept, with_tenant
from warehouse.ingest.request_pivot import (
    Pivot,
    c_spec,
    parts_table,
    pivot_rows,
    request_times,
    split_requests,
)
from warehouse.ingest.sealing import POLL_SECONDS as SEALING_POLL_SECONDS
from warehouse.ingest.sealing import SealingLag, lag_limit, refresh_limit
from warehouse.ingest.tenant import named_tenant, require_tenant
from warehouse.ingest.time_window import TimeWindow, keep_within, window_for
from warehouse.ingest.wal import Entry, WriteAheadLog
from warehouse.ingest.wal_inserter import WalInserter
from warehouse.store.base import Store
from warehouse.wire.compression import DECOMPRESSORS, gunzip, unsnappy

try:  # C, like the decoder it serves (see hatch_build.py)
    from warehouse.ingest.cardinality import NewSeriesBudget
    from warehouse.ingest.series_cache import WrittenSeries
except ImportError:  # pragma: no cover - built without a C compiler
    WrittenSeries = NewSeriesBudget = None

__all__ = ["Endpoint", "Receiver", "Route"]

log = logging.getLogger("llmwh.receiver")

OTLP_TRACES_PATH = "/v1/traces"
OTLP_METRICS_PATH = "/v1/metrics"
OTLP_PATHS = (OTLP_TRACES_PATH, OTLP_METRICS_PATH)
V1_PROTO = "prometheus.WriteRequest"
V2_PROTO = "io.prometheus.write.v2.Request"
NDJSON_TYPES = {
    "application/x-ndjson",
    "application/jsonl",
    "application/json-seq",
    "application/ndjson",
}
ARROW_STREAM_TYPES = {"application/vnd.apache.arrow.stream"}
RETRY_AFTER_SECONDS = 1

Endpoint = Callable[[Scope, Receive, Send], Awaitable[int]]
"""An endpoint answers a request and returns the status it sent."""
Hook = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Route:
    """An endpoint at ``method path``, open to credentials with ``right`` (``write``,
    ``read`` or ``admin``; None: open to anyone, as health checks are)."""

    method: str
    path: str
    endpoint: Endpoint
    right: str | None


class Receiver:
    """The ASGI app. Its lifespan starts and drains the group committer."""

    def __init__(self, store: Store, config: Config | None = None):
        self.store = store
        self.started = time.monotonic()
        self.config = config or Config()
        self.access = load_access(self.config)
        self.metrics = ReceiverMetrics()
        self.metrics.buffer_limit_bytes.set(self.config.buffer_bytes)
        self.mapping = load_mapping(self.config.metric_mapping)
        self.span_mapping = load_span_mapping(self.config.span_mapping)
        self._delta_streams = DeltaStreams()  # OTLP delta points made cumulative
        self.limits = WriteLimits.from_config(self.config)
        self.new_series = None
        if self.config.max_new_series_per_minute:
            if WrittenSeries is None:
                raise ConfigError("max_new_series_per_minute needs the C extensions (not built)")
            self.new_series = NewSeriesBudget(
                self.config.max_new_series_per_minute, self.config.series_cache_size
            )
        self._sealer: asyncio.Task | None = None
        self._stopping = asyncio.Event()
        self._sealing = SealingLag(
            lag_limit(self.config.seal_after_seconds, self.config.seal_every_seconds),
            refresh_limit=refresh_limit(self.config.seal_every_seconds),
        )
        self.metrics.sealing_lag_seconds.set_function(self._sealing.seconds)
        self._sealing_watch: asyncio.Task | None = None
        self._request_label = self.mapping.request_id_label.encode()
        self.wal: WalInserter | None = None
        if self.config.wal_dir:
            self.wal = WalInserter(
                store,
                WriteAheadLog(self.config.wal_dir),
                interval=self.config.wal_flush_ms / 1000,
                max_pending_bytes=self.config.wal_max_bytes,
                on_insert=self._logged_writes_inserted,
            )
            self.metrics.wal_pending_bytes.set_function(lambda: self.wal.pending_bytes)
        self.committer = GroupCommitter(
            store,
            max_buffer_bytes=self.config.buffer_bytes,
            max_tenant_bytes=self.config.tenant_buffer_bytes if self.config.tenant_header else 0,
            linger=self.config.flush_linger_ms / 1000,
            on_flush=self.metrics.observe_flush,
            insert_bodies=self._insert_v1_batch if self._batched_v1 else None,
            # With the log a flush only decodes and appends, on the CPU under the GIL:
            # one at a time makes each larger (measured: 1.5x the writes with 4 senders).
            concurrency=1 if self.wal is not None else self.config.flush_concurrency,
            write_ahead=self.wal.write if self.wal is not None else None,
            # In multi-tenant mode no tenant's backlog may fill the log for the others.
            backlog=self.wal.tenant_backlog if self.wal is not None else None,
            max_tenant_backlog=(
                self.config.wal_max_bytes // 4 if self.wal and self.config.tenant_header else 0
            ),
        )
        # Inserts of one flush's tables run side by side (ClickHouse takes each on a core).
        self._inserts = ThreadPoolExecutor(max_workers=4, thread_name_prefix="llmwh-insert")
        if self._batched_v1:
            self._written_series = WrittenSeries(
                self.config.series_cache_size, self.config.series_refresh_seconds
            )
        self._on_start: list[Hook] = []
        self._on_stop: list[Hook] = []
        self._routes: dict[tuple[str, str], Route] = {}
        for route in (
            Route("POST", "/api/v1/write", self._remote_write, "write"),
            Route("POST", "/api/v1/requests", self._events, "write"),
            Route("POST", OTLP_TRACES_PATH, self._otlp_traces, "write"),
            Route("POST", OTLP_METRICS_PATH, self._otlp_metrics, "write"),
            Route("GET", "/metrics", self._metrics, "admin"),
            # Health and readiness stay open for load balancers: they tell nothing else.
            Route("GET", "/healthz", self._healthz, None),
            Route("GET", "/readyz", self._readyz, None),
        ):
            self.mount(route)

    def mount(self, route: Route) -> None:
        """Serve ``route`` behind the receiver's checks (credential and its rights, the
        tenant's share of the buffer, errors as status codes)."""
        self._routes[route.method, route.path] = route

    def on_start(self, hook: Hook) -> None:
        """Run ``hook`` once the committer has started (a start hook that raises stops
        the receiver again)."""
        self._on_start.append(hook)

    def on_stop(self, hook: Hook) -> None:
        """Run ``hook`` first when stopping, while the committer still takes writes."""
        self._on_stop.append(hook)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        """Start the group committer (and the write-ahead log's inserts, after inserting
        what it held from before), and the sealer where the store has no scheduled views."""
        if self.wal is not None:
            await asyncio.to_thread(self.wal.start)
        await self.committer.start()
        if self.store.capabilities.scheduled_views:
            self._sealing_watch = asyncio.create_task(
                self._watch_sealing(), name="llmwh-sealing-watch"
            )
        else:
            self._sealer = asyncio.create_task(self._seal_forever(), name="llmwh-sealer")
        for hook in self._on_start:
            try:
                await hook()
            except BaseException:  # undo what started
                await self.stop()
                raise

    async def stop(self) -> None:
        """Flush every acknowledged write, then stop."""
        for hook in self._on_stop:  # e.g. gRPC exports in flight: they need the committer
            await hook()
        await self.committer.close()
        if self.wal is not None:  # what the store cannot take now stays in the log
            await asyncio.to_thread(self.wal.close)
        self._inserts.shutdown()
        if self._sealing_watch is not None:
            self._sealing_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sealing_watch
        if self._sealer is not None:
            # Not cancelled: a seal running in its thread would go on using the store
            # after stop() returned (and the store was closed). It ends at its next turn.
            self._stopping.set()
            await self._sealer

    async def seal(self) -> None:
        """Move requests whose parts are complete into `requests` (idempotent)."""
        db = self.store.database
        started = time.time()
        await asyncio.to_thread(
            self.store.command,
            f"INSERT INTO {db}.requests BY NAME SELECT * FROM {db}.request_parts_sealable",
        )
        self._sealing.sealed(started - self.config.seal_after_seconds)

    async def _watch_sealing(self) -> None:
        """Follow how far the store's sealing view got, and how long its refresh has been
        running, while parts wait to be sealed."""
        db = self.store.database
        through = f"(SELECT max(last_received) FROM {db}.sealed_keys) AS t"
        # last_refresh_time (whole seconds) names the running refresh; how long it has
        # run is counted from when a poll first saw it, so never more than it ran.
        running = (
            "(SELECT max(if(status = 'Running', toUnixTimestamp(last_refresh_time), NULL)) "
            f"FROM system.view_refreshes WHERE database = '{db}' "
            "AND view = 'request_parts_seal') AS running"
        )
        query = f"SELECT {through}, {running}"
        while True:
            await asyncio.sleep(SEALING_POLL_SECONDS)
            if not self._sealing.waiting:
                continue
            try:
                row = (await asyncio.to_thread(self.store.query_arrow, query)).to_pylist()[0]
            except Exception as exc:  # the next poll retries; meanwhile the lag grows
                if "view_refreshes" in query and "view_refreshes" in str(exc):
                    log.warning(
                        "cannot read system.view_refreshes (%s): sealing's pace is "
                        "judged by its lag alone",
                        exc,
                    )
                    query = f"SELECT {through}, NULL AS running"
                else:
                    log.warning("could not read how far sealing got: %s", exc)
                self._sealing.refreshing(None)  # not known: the lag limit alone decides
                continue
            at = row["t"]
            if at is not None:
                self._sealing.sealed(at.replace(tzinfo=at.tzinfo or UTC).timestamp())
            self._sealing.refreshing(row["running"])

    def _refuse_while_sealing_behind(self, raw: bytes, tenant: str | None) -> None:
        """429 for a body that may carry per-request metrics while sealing lags.

        A body without the request-id label's name anywhere in it carries none."""
        if self._sealing.behind(tenant or "") and self._request_label in raw:
            raise SealingBehind(
                f"{self._sealing.reason(tenant or '')}: retry later",
                retry_after=RETRY_AFTER_SECONDS,
            )

    async def _seal_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.seal_every_seconds)
            if self._stopping.is_set():
                return
            try:
                await self.seal()
            except Exception:  # the next round retries; sealing is idempotent
                log.exception("sealing request parts failed")

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        route = self._routes.get((method, path))
        if route is None:
            allowed = sorted(m for (m, p) in self._routes if p == path)
            if allowed:
                await respond(
                    send, 405, f"{method} not allowed on {path}\n", [("allow", ", ".join(allowed))]
                )
            else:
                await respond(send, 404, f"no such endpoint: {path}\n")
            return
        endpoint = path
        status = 500
        writes = route.right == "write"
        try:
            guarded = route.right is not None
            grant = self.access.grant(header(scope, "authorization")) if guarded else EVERYTHING
            if grant is None:
                status = 401
                await self._refuse(
                    scope,
                    send,
                    401,
                    "missing or wrong credentials",
                    [("www-authenticate", challenge(self.config.auth_token))],
                )
                return
            if guarded and not grant.allows(route.right):
                raise Forbidden(f"credential {grant.name!r} may not {route.right} here")
            scope["llmwh.grant"] = grant
            # Bytes are held as they arrive, for the tenant the header names (checked by
            # the handler): an idle sender holds what it sent, not what it declared.
            with self.committer.hold(0, self._tenant_key(scope), write=writes) as held:
                scope["llmwh.held"] = held
                status = await route.endpoint(scope, receive, send)
        except BufferFull as exc:
            status = exc.http_status
            await self._refuse(
                scope, send, status, str(exc), [("retry-after", str(exc.retry_after))]
            )
        except (IngestError, QueryError, InvalidArgument) as exc:
            status = exc.http_status
            await self._refuse(scope, send, status, str(exc))
        except StoreUnavailable as exc:
            status = 503
            log.warning("store unavailable: %s", exc)
            await self._refuse(
                scope, send, status, str(exc), [("retry-after", str(RETRY_AFTER_SECONDS))]
            )
        except StoreError as exc:
            what = "commit the write" if writes else "answer"
            log.error("the store could not %s on %s: %s", what, path, exc)
            status, retry = 500, None
            if path in OTLP_PATHS:  # OTLP senders retry 503, never 500
                status, retry = 503, [("retry-after", str(RETRY_AFTER_SECONDS))]
            # A read's error may quote the SQL the warehouse built: that stays in the log.
            shown = f": {exc}" if writes else " (see the receiver's log)"
            await self._refuse(scope, send, status, f"the store could not {what}{shown}", retry)
        finally:
            self.metrics.labelled(self.metrics.http_requests, endpoint, str(status)).inc()

    async def _refuse(
        self, scope: Scope, send: Send, status: int, message: str, headers: list | None = None
    ) -> None:
        """An error answer: plain text, or on OTLP paths the ``google.rpc.Status`` the
        OTLP specification asks for, in the request's encoding (protobuf when unknown)."""
        if scope["path"] not in OTLP_PATHS:
            await respond(send, status, f"{message}\n", headers or ())
            return
        kind, _ = media_type(header(scope, "content-type"))
        kind = kind if kind == otlp_wire.JSON else otlp_wire.PROTOBUF
        body = otlp_wire.status(message, kind, status)
        await respond(send, status, body, headers or (), content_type=kind)

    def _tenant_key(self, scope: Scope) -> str:
        """Whose share of the buffer a request's bytes count against: the tenant header's
        first value in multi-tenant mode, else everyone's."""
        name = self.config.tenant_header
        return (header(scope, name.lower()) or "") if name else ""

    async def body_of(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body, held against the buffer as it arrives, under a timeout."""
        held = scope.get("llmwh.held")
        return await read_body(
            scope,
            receive,
            self.config.max_body_bytes,
            charge=None if held is None else held.grow,
            timeout=self.config.body_timeout_seconds,
        )

    # -- endpoints ----------------------------------------------------------------------

    async def _remote_write(self, scope: Scope, receive: Receive, send: Send) -> int:
        kind, params = media_type(header(scope, "content-type"))
        proto = params.get("proto", V1_PROTO)
        if kind not in ("", "application/x-protobuf") or proto not in (V1_PROTO, V2_PROTO):
            raise UnsupportedMediaType(
                f"unsupported Content-Type {header(scope, 'content-type')!r}: remote write takes "
                f"application/x-protobuf with proto={V1_PROTO} or proto={V2_PROTO}"
            )
        require_snappy(scope, "remote write")
        tenant = self.tenant_of(scope)  # before the body: a refusal reads none
        body = await self.body_of(scope, receive)
        self.metrics.labelled(self.metrics.bytes_received, "/api/v1/write").inc(len(body))
        started = time.perf_counter()
        if proto == V1_PROTO and self._batched_v1:
            # Decoded in C with the other bodies of its flush. CPU work on a large body
            # runs off the event loop.
            if len(body) <= _INLINE_DECOMPRESS_BYTES:
                raw = unsnappy(body, self.config.max_body_bytes)
            else:
                raw = await asyncio.to_thread(unsnappy, body, self.config.max_body_bytes)
            self.metrics.labelled(self.metrics.decode_seconds, "/api/v1/write").observe(
                time.perf_counter() - started
            )
            self._refuse_while_sealing_behind(raw, tenant)
            written_at = time.time()
            outcome = await self.committer.submit_body(
                Body(raw, tenant or "", partial(self._decode, raw, remote_write.decode_v1, tenant))
            )
            if outcome is None:  # written with its flush
                await respond(send, 204)
                return 204
            decoded, refused, pivot = outcome
        else:
            decode = remote_write.decode_v2 if proto == V2_PROTO else remote_write.decode_v1
            written_at = time.time()
            tables, (decoded, refused, pivot) = await asyncio.to_thread(
                lambda: self._decode(unsnappy(body, self.config.max_body_bytes), decode, tenant)
            )
            self.metrics.labelled(self.metrics.decode_seconds, "/api/v1/write").observe(
                time.perf_counter() - started
            )
            # Where the tables do not collapse repeated rows (DuckDB), the body's hash
            # makes a retried write a no-op instead; ClickHouse's writes stay merged.
            token = None
            if not self.store.capabilities.collapsing_engines:
                token = _body_token(tenant, body)
            await self.committer.submit(tables, dedup_token=token)
        self._count_written(decoded)
        self._count_parts(pivot, written_at, tenant)
        headers = []
        if proto == V2_PROTO:
            headers = [
                ("x-prometheus-remote-write-samples-written", str(decoded.samples_written)),
                ("x-prometheus-remote-write-histograms-written", str(decoded.histograms_written)),
                ("x-prometheus-remote-write-exemplars-written", str(decoded.exemplars_written)),
            ]
        if refused[0]:
            # A partial write: the rest is committed; 400 tells the sender not to retry
            # what can never be stored (as Prometheus does for out-of-bounds samples).
            await respond(
                send,
                400,
                f"{refused[0]} samples, histograms, exemplars or per-request metrics were "
                f"not written ({refused[1]}); the rest was\n",
                headers,
            )
            return 400
        await respond(send, 204, headers=headers)
        return 204

    def _decode(
        self, raw: bytes, decode: Callable, tenant: str | None
    ) -> tuple[dict[str, pa.Table], tuple[remote_write.DecodedWrite, int, Pivot]]:
        """Decode a decompressed remote-write body in Python.

        Returns the store tables (per-request samples pivoted into request parts), and
        the write less what the store would not keep (:mod:`.time_window`), how much that
        was and why, and the pivot.
        """
        self._refuse_while_sealing_behind(raw, tenant)
        decoded = decode(raw)
        self.limits.check_series(decoded.series)
        decoded, pivot = split_requests(
            decoded, self.mapping, tenant, self.config.request_samples_as_series
        )
        decoded = self._tenants_series(decoded, tenant)
        if self.new_series is not None:  # per-request samples are no series
            self.new_series.charge(tenant or "", decoded.series)
        decoded, (samples_refused, why) = self._samples_within_window(decoded)
        pivot, (parts_refused, why_parts) = self._parts_within_window(pivot)
        refused = (samples_refused + parts_refused, why or why_parts)
        tables = {**_store_tables(decoded), "request_parts": parts_table(pivot)}
        return tables, (decoded, refused, pivot)

    def _tenants_series(
        self, decoded: remote_write.DecodedWrite, tenant: str | None
    ) -> remote_write.DecodedWrite:
        """In multi-tenant mode, the write's series are its tenant's (``__tenant__``)."""
        if self.config.tenant_header is None or not tenant:
            return decoded
        return with_tenant(decoded, tenant)

    @property
    def _batched_v1(self) -> bool:
        """1.0 writes are decoded a flush at a time in C (where retries collapse in the store)."""
        return (
            remote_write.FAST_V1
            and WrittenSeries is not None
            and self.store.capabilities.collapsing_engines
        )

    def _insert_v1_batch(self, groups: Mapping[str, list[bytes]]) -> dict[str, list[int]]:
        """One flush of 1.0 bodies, by tenant, decoded in C and written as one insert per
        table whatever the tenants; returns each tenant's bodies left out."""
        written_at = time.time()
        # A body with any time outside the narrower window of the two is left to the
        # Python decoder, which keeps what it can and says why it refused the rest.
        windows = (self.window("samples"), self.window("requests"))
        earliest = max(w.earliest_ms for w in windows)
        latest = min(w.latest_ms for w in windows)
        left: dict[str, list[int]] = {}
        writes = []
        for tenant, bodies in groups.items():
            spec = c_spec(self.mapping, tenant or None, self.config.request_samples_as_series)
            # In multi-tenant mode the series are the tenant's (`__tenant__`, in C).
            series_tenant = tenant if self.config.tenant_header else None
            decoded, pivot, left[tenant] = remote_write.decode_v1_batch(
                bodies, earliest, self.limits.as_tuple(), spec, latest, series_tenant
            )
            if self.new_series is not None:
                try:
                    self.new_series.charge(tenant, decoded.series)
                except TooManyNewSeries:
                    left[tenant] = list(range(len(bodies)))  # each alone: those within pass
                    continue
            writes.append((tenant, decoded, pivot, parts_table(pivot)))
        if not writes:
            return left
        series, samples, parts = (
            pa.concat_tables(tables)
            for tables in zip(
                *((d.series, d.samples, parts) for _, d, _, parts in writes), strict=True
            )
        )
        # Series first: no sample lands before its series.
        series = self._written_series.to_write(series)
        if self.wal is not None:
            self.wal.write(
                [Entry("series", series), Entry("samples", samples), Entry("request_parts", parts)],
                {t: d.series.nbytes + d.samples.nbytes + p.nbytes for t, d, _, p in writes},
            )
            self._written_series.remember(series)
        else:
            if series.num_rows:
                self.store.insert_arrow("series", series)
                self._written_series.remember(series)
            self._insert_together({"samples": samples, "request_parts": parts})
        for tenant, decoded, pivot, _ in writes:
            self._count_written(decoded)
            self._count_parts(pivot, written_at, tenant)
        return left

    def _insert_together(self, tables: dict[str, pa.Table]) -> None:
        """Insert tables side by side; raises the first error once every insert has ended."""
        running = [
            self._inserts.submit(self.store.insert_arrow, name, table)
            for name, table in tables.items()
            if table.num_rows
        ]
        wait(running)
        for future in running:
            future.result()

    def window(self, table: str) -> TimeWindow:
        """The times a write into ``table`` (``requests`` or ``samples``) may carry now."""
        return window_for(table, self.config, self.store.capabilities)

    def _samples_within_window(
        self, decoded: remote_write.DecodedWrite
    ) -> tuple[remote_write.DecodedWrite, tuple[int, str]]:
        """The write less the samples, histograms and exemplars the store would not keep
        (older than its retention, too far ahead, past what it holds), how many those
        were and why. Acknowledging them would be a lie: ClickHouse's TTL drops the old
        at once, and a time past 2106 wraps in it."""
        window = self.window("samples")
        kept, gone, reasons = {}, {}, []
        for name in ("samples", "histograms", "exemplars"):
            table = getattr(decoded, name)
            kept[name], gone[name], reason = keep_within(table, "timestamp", window)
            if reason:
                reasons.append(reason)
        dropped = sum(gone.values())
        if not dropped:
            return decoded, (0, "")
        decoded = replace(
            decoded,
            **kept,
            samples_written=decoded.samples_written - gone["samples"],
            histograms_written=decoded.histograms_written - gone["histograms"],
            exemplars_written=decoded.exemplars_written - gone["exemplars"],
        )
        return series_times_of_kept(decoded), (dropped, f"a sample's {reasons[0]}")

    def _parts_within_window(self, pivot: Pivot) -> tuple[Pivot, tuple[int, str]]:
        """The pivot less the requests whose per-request metrics carry a time their
        ``requests`` row could not keep; how many samples those were and why."""
        if not len(pivot.rank):
            return pivot, (0, "")
        window = self.window("requests")
        outside = np.zeros(len(pivot.rank), dtype=bool)
        reason = ""
        for times in request_times(pivot):
            mask, why = window.outside(pa.array(times, pa.int64()))
            outside |= mask.to_numpy(zero_copy_only=False)
            reason = reason or why
        if not reason:
            return pivot, (0, "")
        refused = int(outside.sum())
        return pivot_rows(pivot, ~outside), (refused, f"a per-request metric's time {reason}")

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> int:
        kind, _ = media_type(header(scope, "content-type"))
        if kind in NDJSON_TYPES:
            decode = events.decode_ndjson
        elif kind in ARROW_STREAM_TYPES:
            decode = events.decode_arrow_stream
        else:
            raise UnsupportedMediaType(
                f"unsupported Content-Type {kind or '(none)'!r}: per-request events are "
                "application/x-ndjson or application/vnd.apache.arrow.stream"
            )
        encoding = (header(scope, "content-encoding") or "identity").strip().lower()
        if encoding not in DECOMPRESSORS:
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {encoding!r}: use identity, gzip or zstd"
            )
        tenant = self.tenant_of(scope)  # before the body: a refusal reads none
        body = await self.body_of(scope, receive)
        self.metrics.labelled(self.metrics.bytes_received, "/api/v1/requests").inc(len(body))
        started = time.perf_counter()
        window = self.window("requests")
        table = await asyncio.to_thread(
            _decode_events,
            body,
            encoding,
            partial(decode, window=window),
            self.config.max_body_bytes,
        )
        self.limits.check_requests(table)
        table = self._tenant_rows(tenant, table)
        self.metrics.labelled(self.metrics.decode_seconds, "/api/v1/requests").observe(
            time.perf_counter() - started
        )
        # The same body retried (after a 5xx or a lost response) carries the same token,
        # and the store drops it: a retry changes no figure.
        token = _body_token(tenant, body)
        await self.committer.submit({"requests": table}, dedup_token=token)
        self.metrics.labelled(self.metrics.written, "requests").inc(table.num_rows)
        await respond(
            send, 200, f'{{"accepted": {table.num_rows}}}\n', content_type="application/json"
        )
        return 200

    async def _otlp_traces(self, scope: Scope, receive: Receive, send: Send) -> int:
        """OTLP/HTTP spans (docs/otlp.md): each LLM-request span becomes a request."""
        kind, raw = await self._otlp_body(scope, receive, OTLP_TRACES_PATH)
        answer = await self.export_traces(raw, kind, self.tenant_of(scope))
        await respond(send, 200, otlp_wire.encode(answer, kind), content_type=kind)
        return 200

    async def _otlp_metrics(self, scope: Scope, receive: Receive, send: Send) -> int:
        """OTLP/HTTP metric points (docs/otlp.md): series as Prometheus would name them."""
        kind, raw = await self._otlp_body(scope, receive, OTLP_METRICS_PATH)
        answer = await self.export_metrics(raw, kind, self.tenant_of(scope))
        await respond(send, 200, otlp_wire.encode(answer, kind), content_type=kind)
        return 200

    async def _otlp_body(self, scope: Scope, receive: Receive, path: str) -> tuple[str, bytes]:
        """An OTLP/HTTP request's media type and its body, inflated."""
        kind, _ = media_type(header(scope, "content-type"))
        if kind not in (otlp_wire.PROTOBUF, otlp_wire.JSON):
            raise UnsupportedMediaType(
                f"unsupported Content-Type {kind or '(none)'!r}: OTLP/HTTP takes "
                f"{otlp_wire.PROTOBUF} or {otlp_wire.JSON}"
            )
        encoding = (header(scope, "content-encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip"):
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {encoding!r}: OTLP/HTTP takes gzip or none"
            )
        body = await self.body_of(scope, receive)
        self.metrics.labelled(self.metrics.bytes_received, path).inc(len(body))
        if encoding == "identity":
            return kind, body
        return kind, await asyncio.to_thread(gunzip, body, self.config.max_body_bytes)

    async def export_traces(
        self, raw: bytes, kind: str, tenant: str | None
    ) -> ExportTraceServiceResponse:
        """One OTLP trace export (``raw``: the uncompressed body in media type ``kind``):
        its LLM-request spans are committed as requests before this returns.

        ``tenant``: in multi-tenant mode the tenant the export belongs to (required there).
        Raises what a write raises (:class:`IngestError`, :class:`BufferFull`, store
        errors); every transport maps those onto its own status codes.
        """
        started = time.perf_counter()
        found = await asyncio.to_thread(self._spans_of, raw, kind)
        self.metrics.labelled(self.metrics.decode_seconds, OTLP_TRACES_PATH).observe(
            time.perf_counter() - started
        )
        if found.table is not None:
            # Spans the store would not keep are rejected, never acknowledged.
            kept, outside, reason = keep_within(found.table, "ts", self.window("requests"))
            if outside:
                found.rejected += outside
                found.reasons.append(f"{outside} spans: {reason}")
            found = replace(found, table=kept if kept.num_rows else None)
        if found.table is not None:
            table = self._tenant_rows(tenant, found.table)
            # A retried export is the same body: its token makes the store drop it.
            token = _body_token(tenant, raw)
            await self.committer.submit({"requests": table}, dedup_token=token)
            self.metrics.labelled(self.metrics.written, "requests").inc(table.num_rows)
        self.metrics.labelled(self.metrics.spans_left_out, "skipped").inc(found.skipped)
        self.metrics.labelled(self.metrics.spans_left_out, "rejected").inc(found.rejected)
        answer = ExportTraceServiceResponse()
        if found.rejected:
            answer.partial_success.rejected_spans = found.rejected
            answer.partial_success.error_message = "; ".join(found.reasons)
        return answer

    async def export_metrics(
        self, raw: bytes, kind: str, tenant: str | None
    ) -> ExportMetricsServiceResponse:
        """One OTLP metrics export, as :meth:`export_traces` takes spans: its points are
        written as the Remote-Write 2.0 request a Prometheus sender would have sent for
        them, down the same path, and committed before this returns."""
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
                self._decode, points.body, remote_write.decode_v2, tenant
            )
            self.metrics.labelled(self.metrics.decode_seconds, OTLP_METRICS_PATH).observe(
                time.perf_counter() - started
            )
            token = None  # ClickHouse's tables collapse a retry's rows, as for remote write
            if not self.store.capabilities.collapsing_engines:
                token = _body_token(tenant, raw)
            await self.committer.submit(tables, dedup_token=token)
            self._count_written(decoded)
            self._count_parts(pivot, written_at, tenant)
            if refused[0]:  # what the store would not keep (too old were refused before)
                points.note(refused[0], f"{refused[0]} points or exemplars: {refused[1]}")
        # Committed: the delta streams take the export's points (a refused or failed
        # export moved none, so its retry is summed afresh).
        self._delta_streams.commit(deltas)
        self.metrics.otlp_points_rejected.inc(points.rejected)
        if points.rejected:
            answer.partial_success.rejected_data_points = points.rejected
            answer.partial_success.error_message = "; ".join(points.reasons)
        return answer

    def _points_of(
        self, raw: bytes, kind: str, tenant: str | None, deltas: DeltaBatch
    ) -> MetricsWrite:
        request = otlp_wire.decode(raw, kind, ExportMetricsServiceRequest)
        not_before = self.window("samples").earliest_ms * 1_000_000
        return metrics_to_write(request, deltas, tenant, not_before)

    def _spans_of(self, raw: bytes, kind: str) -> SpanRequests:
        request = otlp_wire.decode(raw, kind, ExportTraceServiceRequest)
        return spans_to_requests(
            request,
            self.span_mapping,
            self.limits.check_requests,
            strict=self.config.otlp_strict_spans,
        )

    async def _metrics(self, scope: Scope, receive: Receive, send: Send) -> int:
        self.metrics.buffer_bytes.set(self.committer.buffered_bytes)
        await respond(
            send, 200, generate_latest(self.metrics.registry), content_type=CONTENT_TYPE_LATEST
        )
        return 200

    async def _healthz(self, scope: Scope, receive: Receive, send: Send) -> int:
        await respond(send, 200, "ok\n")
        return 200

    async def _readyz(self, scope: Scope, receive: Receive, send: Send) -> int:
        try:
            await asyncio.wait_for(asyncio.to_thread(self.store.query_arrow, "SELECT 1 AS ok"), 5)
        except (StoreError, TimeoutError) as exc:
            await respond(send, 503, f"store not ready: {exc}\n")
            return 503
        await respond(send, 200, "ready\n")
        return 200

    # -- helpers ------------------------------------------------------------------------

    def tenant_of(self, scope: Scope) -> str | None:
        """In multi-tenant mode, the one tenant the header names, which every request
        must name (:func:`named_tenant`); None otherwise (the `tenant` setting then
        scopes reads, when set)."""
        name = self.config.tenant_header
        if name is None:
            return None
        tenant = named_tenant(header_values(scope, name.lower()), name)
        require_tenant(scope.get("llmwh.grant", EVERYTHING), tenant)
        return tenant

    @staticmethod
    def _tenant_rows(tenant: str | None, table: pa.Table) -> pa.Table:
        """``table`` with every row's ``tenant`` set to ``tenant``; as it is when None."""
        if tenant is None:
            return table
        column = pa.repeat(pa.scalar(tenant, pa.string()), table.num_rows)
        index = table.schema.get_field_index("tenant")
        return table.set_column(index, table.schema.field("tenant"), column)

    def _count_written(self, decoded: remote_write.DecodedWrite) -> None:
        self.metrics.labelled(self.metrics.written, "samples").inc(decoded.samples_written)
        self.metrics.labelled(self.metrics.written, "histograms").inc(decoded.histograms_written)
        self.metrics.labelled(self.metrics.written, "exemplars").inc(decoded.exemplars_written)
        self.metrics.labelled(self.metrics.written, "series").inc(decoded.series.num_rows)

    def _count_parts(self, pivot: Pivot, written_at: float, tenant: str | None) -> None:
        """Count a committed pivot; ``written_at`` is no later than its ``received``
        (with the write-ahead log, parts count as received when it inserts them)."""
        if len(pivot.rank) and self.wal is None:
            self._sealing.wrote(written_at, tenant or "")
        self.metrics.labelled(self.metrics.written, "request_samples").inc(pivot.taken)
        self.metrics.labelled(self.metrics.written, "request_parts").inc(len(pivot.rank))
        self.metrics.request_samples_dropped.inc(pivot.dropped)

    def _logged_writes_inserted(
        self, rows: Mapping[str, int], received: datetime, seconds: float, tenants: frozenset
    ) -> None:
        """The write-ahead log inserted a batch; its request parts wait to be sealed, each
        tenant's counted against that tenant (in multi-tenant mode)."""
        if rows.get("request_parts"):
            for tenant in tenants if self.config.tenant_header else ("",):
                self._sealing.wrote(received.timestamp(), tenant)
        self.metrics.observe_wal_insert(sum(rows.values()), seconds)


def _body_token(tenant: str | None, body: bytes) -> str:
    """The deduplication token of a write: the same body from the same tenant, the same token."""
    return hashlib.sha256(f"{tenant or ''}\0".encode() + body).hexdigest()


def _store_tables(decoded: remote_write.DecodedWrite) -> dict[str, pa.Table]:
    return {
        "series": decoded.series,
        "metric_metadata": decoded.metadata,
        "samples": decoded.samples,
        "histogram_samples": decoded.histograms,
        "exemplars": decoded.exemplars,
        "sample_starts": decoded.starts,
    }


_INLINE_DECOMPRESS_BYTES = 256 << 10
"""Bodies up to this size are decompressed on the event loop (well under a millisecond)."""


def _decode_events(
    body: bytes, encoding: str, decode: Callable[[bytes], pa.Table], limit: int
) -> pa.Table:
    try:
        raw = DECOMPRESSORS[encoding](body, limit)
    except IngestError:  # the decompressor's own, a 413 among them
        raise
    except Exception as exc:
        raise IngestError(f"body is not valid {encoding}: {exc}") from None
    return decode(raw)
