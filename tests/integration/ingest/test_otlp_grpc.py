"""OTLP/gRPC: the OpenTelemetry SDK's gRPC exporter, raw grpc calls and `llmwh generate
--via otlp-grpc` against the receiver's gRPC server (`--otlp-grpc-listen`), with the
status codes the OTLP specification names."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import grpc
import pyarrow.compute as pc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from polling import poll_until
from prometheus_client import generate_latest
from senders import emit_shaped_spans, free_port, wait_for
from test_otlp_traces import FailingInserts, export, vllm_span

from warehouse.auth import new_credential
from warehouse.cli import run as llmwh
from warehouse.config import Config
from warehouse.ingest.otlp.grpc_server import TRACES_METHOD
from warehouse.serve import build_app
from warehouse.store import open_store
from warehouse.synthetic import synthetic_requests

START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def served(embedded_server, tmp_path, **settings) -> Iterator[tuple[str, str, str]]:
    """`llmwh serve --otlp-grpc-listen` with ``settings`` (as LLMWH_* variables): yields
    its HTTP base URL, its gRPC HOST:PORT and its store URL.

    Without a write-ahead log unless ``settings`` ask for one: the tests read what an
    export stored (or that a refused one stored nothing) as soon as it is answered."""
    url = embedded_server.store_url(f"grpc_{uuid.uuid4().hex[:10]}")
    port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    settings = {"wal": "false", **settings}
    env |= {f"LLMWH_{name.upper()}": str(value) for name, value in settings.items()}
    process = subprocess.Popen(
        [sys.executable, "-m", "warehouse", "serve", "--store", url,
         "--listen", f"127.0.0.1:{port}", "--otlp-grpc-listen", f"127.0.0.1:{grpc_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}", f"127.0.0.1:{grpc_port}", url
    finally:
        process.terminate()
        process.wait(timeout=60)
        store = open_store(url)
        store.command(f"DROP DATABASE IF EXISTS {store.database}")
        store.close()


@pytest.fixture
def serve(embedded_server, tmp_path) -> Iterator:
    """``serve(**settings)``: a `llmwh serve` with its gRPC server, stopped after the test."""
    running = []

    def start(**settings) -> tuple[str, str, str]:
        running.append(served(embedded_server, tmp_path, **settings))
        return next(running[-1])

    yield start
    for generator in running:
        generator.close()


def rows(store_url: str, sql: str) -> list[dict]:
    store = open_store(store_url)
    try:
        return store.query_arrow(sql.format(db=store.database)).to_pylist()
    finally:
        store.close()


def request_ids(store_url: str) -> list[str]:
    return [r["request_id"] for r in rows(store_url, "SELECT request_id FROM {db}.requests")]


def exporter(target: str):
    """A raw unary call of the trace service: bytes in, the parsed response out."""
    channel = grpc.insecure_channel(target)
    return channel, channel.unary_unary(
        TRACES_METHOD, response_deserializer=ExportTraceServiceResponse.FromString
    )


def retry_delay(error: grpc.RpcError) -> float | None:
    details = dict(error.trailing_metadata())["grpc-status-details-bin"]
    status = RpcStatus.FromString(details)
    assert status.code == error.code().value[0]
    for detail in status.details:
        info = RetryInfo()
        if detail.Unpack(info):
            return info.retry_delay.seconds
    return None


# -- the OpenTelemetry SDK ---------------------------------------------------------------


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_the_sdks_grpc_exports_land_as_requests(serve, compression):
    base, target, store_url = serve()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "vllm", "cloud.region": "us-east-1"})
    )
    sdk = OTLPSpanExporter(endpoint=target, insecure=True, compression=compression)
    provider.add_span_processor(BatchSpanProcessor(sdk))
    emit_shaped_spans(provider.get_tracer("test"))
    assert provider.force_flush(timeout_millis=30_000)
    provider.shutdown()

    # force_flush returned after the receiver acknowledged, so after the commit.
    landed = rows(
        store_url,
        "SELECT request_id, service, region, model, prompt_tokens, ttft_ms, e2e_ms, status, "
        "error_class, attrs['trace_id'] AS trace_id FROM {db}.requests",
    )
    assert len(landed) == 41  # the health check span is not a request
    by_id = {row["request_id"]: row for row in landed}
    seventh = by_id["cmpl-7"]
    assert (seventh["service"], seventh["region"], seventh["model"]) == (
        "vllm",
        "us-east-1",
        "llama-3-8b",
    )
    assert seventh["prompt_tokens"] == 107
    assert seventh["ttft_ms"] == pytest.approx(70, rel=1e-6)
    assert seventh["e2e_ms"] == pytest.approx(1070, rel=1e-6)
    assert len(seventh["trace_id"]) == 32
    failed = by_id["chatcmpl-x"]
    assert (failed["status"], failed["error_class"]) == ("rejected", "rate_limited")
    metrics = poll_until(
        lambda: _text(f"{base}/metrics"), "the gRPC call counted", until=lambda t: "OK" in t
    )
    assert f'llmwh_receiver_grpc_requests_total{{code="OK",method="{TRACES_METHOD}"}}' in metrics


def test_the_sdks_grpc_metrics_land_as_series(serve):
    _, target, store_url = serve()
    sdk = OTLPMetricExporter(endpoint=target, insecure=True, compression=grpc.Compression.Gzip)
    reader = PeriodicExportingMetricReader(sdk, export_interval_millis=3_600_000)
    provider = MeterProvider(
        metric_readers=[reader],
        resource=Resource.create({"service.name": "gateway", "service.instance.id": "gw-1"}),
    )
    usage = provider.get_meter("llm.gateway").create_counter("gen_ai.client.token.usage")
    for _ in range(30):
        usage.add(10, {"gen_ai.token.type": "input"})
    assert reader.force_flush(timeout_millis=30_000)
    provider.shutdown()
    landed = rows(
        store_url,
        "SELECT argMax(sa.value, sa.timestamp) AS value FROM {db}.samples AS sa FINAL "
        "JOIN (SELECT DISTINCT id, metric_name, labels FROM {db}.series) AS s ON sa.id = s.id "
        "WHERE s.metric_name = 'gen_ai_client_token_usage_total' "
        "AND s.labels['gen_ai_token_type'] = 'input' AND s.labels['job'] = 'gateway'",
    )
    assert landed == [{"value": 300.0}]


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


# -- raw calls against `llmwh serve` -----------------------------------------------------


def test_bad_bytes_are_invalid_argument_and_a_retried_export_counts_once(serve):
    _, target, store_url = serve(max_label_value_bytes=64)
    channel, call = exporter(target)
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            call(b"\x0a\xff\xff\xff\x0f", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a opentelemetry.proto.collector.trace" in refused.value.details()
        assert retry_delay(refused.value) is None  # not to be retried
        assert request_ids(store_url) == []

        body = export(*(vllm_span(n) for n in range(1, 4)))
        for _ in range(2):  # the same export retried (its answer lost, say)
            answer = call(body, timeout=10)
            assert not answer.HasField("partial_success")
        assert sorted(request_ids(store_url)) == ["req-1", "req-2", "req-3"]

        long_model = vllm_span(5, **{"gen_ai.response.model": "m" * 100})
        answer = call(export(vllm_span(4), long_model), timeout=10)
        assert answer.partial_success.rejected_spans == 1
        assert "span 0000000000000005: field model" in answer.partial_success.error_message
        assert sorted(request_ids(store_url)) == ["req-1", "req-2", "req-3", "req-4"]


def test_credentials_are_the_http_ones_in_metadata(serve):
    _, target, store_url = serve(auth_token="s3cret")
    channel, call = exporter(target)
    body = export(vllm_span(1))
    with channel:
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as refused:
                call(body, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert request_ids(store_url) == []
        call(body, metadata=(("authorization", "Bearer s3cret"),), timeout=10)
    assert request_ids(store_url) == ["req-1"]


def test_multi_tenant_exports_must_name_their_tenant(serve):
    _, target, store_url = serve(tenant_header="X-Scope-OrgID")
    channel, call = exporter(target)
    body = export(vllm_span(1))
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            call(body, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "X-Scope-OrgID" in refused.value.details()
        # Refused as the HTTP doors refuse them: a repeated or an empty tenant.
        for metadata, reason in (
            ((("x-scope-orgid", "acme"), ("x-scope-orgid", "bravo")), "given 2 times"),
            ((("x-scope-orgid", ""),), "not a tenant name"),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call(body, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert reason in refused.value.details()
        assert request_ids(store_url) == []
        call(body, metadata=(("x-scope-orgid", "acme"),), timeout=10)
    landed = rows(store_url, "SELECT request_id, tenant FROM {db}.requests")
    assert landed == [{"request_id": "req-1", "tenant": "acme"}]


def test_a_credential_exports_to_its_own_tenants_only(serve, tmp_path):
    token, entry = new_credential("acme-collector", ["acme"], ["write"])
    reader, reader_entry = new_credential("dashboards", ["*"], ["read"])
    (tmp_path / "credentials.toml").write_text(entry + reader_entry)
    _, target, store_url = serve(
        tenant_header="X-Scope-OrgID", credentials_file=tmp_path / "credentials.toml"
    )
    channel, call = exporter(target)
    body = export(vllm_span(1))
    with channel:
        for secret, tenant, reason in (
            (token, "bravo", "may not use tenant 'bravo'"),
            (reader, "acme", "may not write"),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                metadata = (("authorization", f"Bearer {secret}"), ("x-scope-orgid", tenant))
                call(body, metadata=metadata, timeout=10)
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert reason in refused.value.details()
        assert request_ids(store_url) == []
        call(body, metadata=(("authorization", f"Bearer {token}"), ("x-scope-orgid", "acme")),
             timeout=10)  # fmt: skip
    assert request_ids(store_url) == ["req-1"]


def test_a_message_over_max_body_bytes_is_resource_exhausted(serve):
    _, target, store_url = serve(max_body_bytes=20_000)
    channel, call = exporter(target)
    padded = vllm_span(1, **{"gen_ai.prompt": "x" * 30_000})
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            call(export(padded), timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as refused:  # the limit is on the inflated size
            call(export(padded), timeout=10, compression=grpc.Compression.Gzip)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        call(export(vllm_span(2)), timeout=10)  # one under the limit is taken
    assert request_ids(store_url) == ["req-2"]


def test_a_port_in_use_is_a_clear_error(embedded_server, tmp_path):
    url = embedded_server.store_url(f"grpc_{uuid.uuid4().hex[:10]}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "warehouse", "serve", "--store", url,
             "--listen", f"127.0.0.1:{free_port()}", "--otlp-grpc-listen", busy],
            capture_output=True, text=True, cwd=tmp_path, timeout=60,
        )  # fmt: skip
    assert done.returncode == 1
    assert f"--otlp-grpc-listen {busy}: cannot listen there" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


# -- `llmwh generate --via otlp-grpc` -----------------------------------------------------


@pytest.mark.parametrize("how", ["--via", "grpc://"])
def test_generate_sends_every_user_request_over_grpc(serve, how):
    _, target, store_url = serve()
    args = (
        ["--send", target, "--via", "otlp-grpc"]
        if how == "--via"
        else ["--send", f"grpc://{target}"]
    )
    start = START.isoformat()
    assert (
        llmwh(["generate", "-n", "1500", "--seed", "4", "--span", "1h", "--start", start, *args])
        == 0
    )
    mapped = [
        "request_id", "tenant", "service", "model", "region", "zone", "node",
        "request_type", "status", "error_class", "http_status", "finish_reason",
        "prompt_tokens", "output_tokens", "cached_prompt_tokens", "ttft_ms", "e2e_ms",
        "queue_ms",
    ]  # fmt: skip
    landed = rows(store_url, f"SELECT {', '.join(mapped)} FROM {{db}}.requests ORDER BY request_id")
    table = synthetic_requests(1500, seed=4, start=START)
    users = table.filter(pc.invert(table.column("is_probe")))
    assert users.num_rows > 1024  # more than two exports of 512
    assert landed == users.select(mapped).sort_by("request_id").to_pylist()


# -- in process: refusals that may be retried, and a graceful stop ------------------------


class InProcess:
    """A :class:`Receiver` with its gRPC server, on an event loop in a thread of its own."""

    def __init__(self, store, **options):
        self.target = f"127.0.0.1:{free_port()}"
        # No write-ahead log: the tests read what an export stored once it is answered.
        self.app = build_app(store, Config(otlp_grpc_listen=self.target, wal=False, **options))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.run(self.app.start())

    def run(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.run(self.app.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def in_process(migrated) -> Iterator:
    started = []

    def make(store=None, **options) -> InProcess:
        started.append(InProcess(store or migrated, **options))
        return started[-1]

    yield make
    for receiver in started:
        if not receiver.loop.is_closed():
            receiver.close()


def test_a_failed_commit_is_unavailable_with_retry_info(in_process, migrated):
    receiver = in_process(FailingInserts(migrated))
    channel, call = exporter(receiver.target)
    with channel, pytest.raises(grpc.RpcError) as refused:
        call(export(vllm_span(1)), timeout=30)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "TOO_MANY_PARTS" in refused.value.details()
    assert retry_delay(refused.value) == 1
    metrics = generate_latest(receiver.app.metrics.registry).decode()
    assert (
        f'llmwh_receiver_grpc_requests_total{{code="UNAVAILABLE",method="{TRACES_METHOD}"}} 1.0'
        in metrics
    )


def test_a_full_buffer_is_unavailable_with_retry_info(in_process):
    receiver = in_process()
    committer = receiver.app.writes.committer
    committer.buffer.buffered_bytes = committer.buffer.max_buffer_bytes  # saturated
    channel, call = exporter(receiver.target)
    try:
        with channel, pytest.raises(grpc.RpcError) as refused:
            call(export(vllm_span(1)), timeout=30)
    finally:
        committer.buffer.buffered_bytes = 0
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert retry_delay(refused.value) == 1
    # The Python SDK's exporter reads the delay from this key instead.
    assert "google.rpc.retryinfo-bin" in dict(refused.value.trailing_metadata())


class SlowInserts:
    """A real store whose inserts wait until the test lets them go."""

    def __init__(self, store):
        self.store = store
        self.entered = threading.Event()
        self.go = threading.Event()

    def __getattr__(self, name):
        return getattr(self.store, name)

    def insert_arrow(self, *args, **kwargs):
        self.entered.set()
        assert self.go.wait(60)
        return self.store.insert_arrow(*args, **kwargs)


def test_stop_lets_an_export_in_flight_finish_and_commit(in_process, migrated):
    store = SlowInserts(migrated)
    receiver = in_process(store)
    channel, call = exporter(receiver.target)
    with channel:
        answer = call.future(export(vllm_span(1)), timeout=60)
        assert store.entered.wait(30)  # the export is being committed
        # Stopped mid-commit: grpc takes no new call, but this one must finish (were it
        # cancelled, the call would fail) and its rows be committed before stop returns.
        stopping = asyncio.run_coroutine_threadsafe(receiver.app.stop(), receiver.loop)
        store.go.set()
        assert not answer.result(timeout=60).HasField("partial_success")  # acknowledged
        stopping.result(timeout=60)
    count = migrated.query_arrow(f"SELECT count() AS n FROM {migrated.database}.requests")
    assert count.column(0).to_pylist() == [1]
    receiver.loop.call_soon_threadsafe(receiver.loop.stop)
    receiver.thread.join(timeout=10)
    receiver.loop.close()
