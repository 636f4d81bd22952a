"""A real OTLP sender: the OpenTelemetry Python SDK exports spans to `llmwh serve`, on
each of the three stores (the embedded ClickHouse server, ClickHouse in-process and DuckDB).

The spans are shaped as vLLM's ``llm_request`` span and as a GenAI client span; each
becomes one request with the columns the span mapping names. A few hundred more
``llm_request`` spans carry latencies and tokens drawn from a seeded RNG, and `llmwh sla`
over the requests they became equals the numpy reference computed from the same draws
(docs/querying.md: percentiles interpolate linearly between order statistics, numpy's
default ``np.percentile``; exact from raw rows, within a 2%-wide bucket from a rollup).

`llmwh serve` runs once per store for the module, in a subprocess that owns the store
while it runs (ClickHouse in-process and DuckDB take one process at a time): every
export is acknowledged after commit, then the receiver is stopped and the data read back
as a user would, by `llmwh sql` and `llmwh sla` in subprocesses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.trace import Status, StatusCode
from polling import poll_until
from senders import (
    clean_environment,
    drop_store,
    emit_shaped_spans,
    llmwh_command,
    running_serve,
    store_url_for,
)

BACKENDS = ("clickhouse", "chdb", "duckdb")
COMPRESSIONS = (Compression.NoCompression, Compression.Gzip)
SHAPED = 42  # spans per compression: 40 vLLM, one GenAI client span, one health check
SHAPED_REQUESTS = 41  # the health check is not a request

START = (datetime.now(UTC) - timedelta(days=2)).replace(hour=9, minute=0, second=0, microsecond=0)
"""09:00 UTC two days back: absolute, hour-aligned (so are the SLO's 5-minute windows)."""
SPAN = timedelta(hours=2)
RANGE = ("--since", f"{START:%Y-%m-%dT%H:%M:%SZ}", "--until", f"{START + SPAN:%Y-%m-%dT%H:%M:%SZ}")
CHAT, BATCH = 360, 40  # spans in the SLO's scope (service chat), and outside it

TARGET = 0.9
THRESHOLDS = {"ttft_ms": 250.0, "tpot_ms": 40.0, "e2e_ms": 15000.0}
WINDOW_MS = 300_000
BURN_MS = 30 * 60_000
# (measure, latency column, percentile, limit, weight); error_rate has no column.
OBJECTIVES = [
    ("p95_ttft_ms", "ttft_ms", 95, 400.0, 3),
    ("p99_e2e_ms", "e2e_ms", 99, 15000.0, 1),
    ("p90_tpot_ms", "tpot_ms", 90, 50.0, 2),
    ("error_rate", None, None, 0.08, 2),
]
SLO_TEXT = f"""
name = "otlp-chat"
target = {TARGET}
window = "5m"
period = "2h"
burn_windows = ["30m"]

[scope]
service = "chat"

[thresholds]
{chr(10).join(f"{column} = {limit}" for column, limit in THRESHOLDS.items())}
""" + "".join(
    f'\n[[objectives]]\nobjective = "{f"p{q}({column})" if column else name} <= {limit}"\n'
    f"weight = {weight}\n"
    for name, column, q, limit, weight in OBJECTIVES
)


# -- the senders --------------------------------------------------------------------------


class RecordingExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter, keeping each export's size and result."""

    def __init__(self, **options):
        super().__init__(**options)
        self.results: list[tuple[int, SpanExportResult]] = []

    def export(self, spans: Sequence) -> SpanExportResult:
        result = super().export(spans)
        self.results.append((len(spans), result))
        return result


def provider_for(base: str, resource: dict, compression=Compression.NoCompression):
    exporter = RecordingExporter(endpoint=f"{base}/v1/traces", compression=compression)
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider, exporter


def flushed(provider: TracerProvider, exporter: RecordingExporter, spans: int) -> None:
    """Every span exported and acknowledged (a 200 comes only after the commit)."""
    assert provider.force_flush(timeout_millis=30_000)
    provider.shutdown()
    assert {result for _, result in exporter.results} == {SpanExportResult.SUCCESS}
    assert sum(size for size, _ in exporter.results) == spans


def send_shaped(base: str, compression: Compression) -> None:
    """vLLM's ``llm_request`` spans, a failed GenAI client span and a health check, from a
    provider whose resource names the compression (``deployment.environment``)."""
    provider, exporter = provider_for(
        base,
        {
            "service.name": "vllm",
            "cloud.region": "us-east-1",
            "deployment.environment": compression.name,
        },
        compression,
    )
    emit_shaped_spans(provider.get_tracer("test"), f"{compression.name}-")
    flushed(provider, exporter, SHAPED)


@dataclass
class Drawn:
    """The SLO test's requests as drawn, and as the store must hold them."""

    request_id: np.ndarray
    service: np.ndarray
    model: np.ndarray
    tenant: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    status: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    ttft_s: np.ndarray  # NaN: the span carries no TTFT (a rejected request)
    e2e_s: np.ndarray

    @property
    def ts_ms(self) -> np.ndarray:
        return self.start_ns // 1_000_000

    @property
    def ttft_ms(self) -> np.ndarray:
        """As stored: seconds x 1000 (the mapping's scale, in float64), in a Float32."""
        return (self.ttft_s * 1000).astype(np.float32).astype(np.float64)

    @property
    def e2e_ms(self) -> np.ndarray:
        """As stored: the span's ``gen_ai.latency.e2e``, else its duration."""
        e2e = np.where(np.isnan(self.e2e_s), self.duration_ns / 1e6, self.e2e_s * 1000)
        return e2e.astype(np.float32).astype(np.float64)

    @property
    def tpot_ms(self) -> np.ndarray:
        """Derived as docs/querying.md says: (e2e - ttft) / (output_tokens - 1) from the
        stored latencies, NaN (NULL) for one output token or fewer."""
        decoded = self.output > 1
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = (self.e2e_ms - self.ttft_ms) / (self.output - 1.0)
        return np.where(decoded & ~np.isnan(self.ttft_ms), tpot, np.nan).astype(np.float32)


def drawn_requests(seed: int = 11) -> Drawn:
    """CHAT requests in the SLO's scope and BATCH outside it, over [START, START + SPAN):
    two models, two tenants, log-normal TTFT, per-token decode times, about 4% errors
    (timeouts) and 2% rejections (rate limited: no latencies, the span's duration is E2E),
    and some one-token answers (no TPOT)."""
    rng = np.random.default_rng(seed)
    n = CHAT + BATCH
    start_ns = int(START.timestamp()) * 1_000_000_000 + np.sort(
        rng.integers(0, int(SPAN.total_seconds() * 1e9), n)
    )
    service = np.where(rng.permutation(n) < CHAT, "chat", "batch")
    model = rng.choice(["llama-3-8b", "qwen-2-7b"], n, p=[0.6, 0.4])
    tenant = rng.choice(["acme", "globex"], n, p=[0.55, 0.45])
    ttft_s = rng.lognormal(np.where(model == "llama-3-8b", np.log(0.12), np.log(0.18)), 0.6)
    output = rng.geometric(1 / 120, n)
    output[rng.random(n) < 0.08] = 1
    per_token_s = rng.gamma(5.0, 0.006, n)
    e2e_s = ttft_s + (output - 1) * per_token_s
    status = rng.choice(["ok", "error", "rejected"], n, p=[0.94, 0.04, 0.02])
    rejected = status == "rejected"
    ttft_s[rejected] = np.nan
    e2e_s[rejected] = np.nan
    output[rejected] = 0
    duration_ns = np.where(rejected, rng.integers(1_000_000, 9_000_000, n), 0)
    duration_ns = np.where(rejected, duration_ns, np.nan_to_num(e2e_s) * 1e9).astype(np.int64)
    return Drawn(
        request_id=np.array([f"cmpl-sla-{i:04d}" for i in range(n)]),
        service=service,
        model=model,
        tenant=tenant,
        start_ns=start_ns,
        duration_ns=duration_ns,
        status=status,
        prompt=rng.integers(20, 4000, n),
        output=output,
        ttft_s=ttft_s,
        e2e_s=e2e_s,
    )


def send_drawn(base: str, drawn: Drawn) -> None:
    """Each drawn request as vLLM's ``llm_request`` span, from the provider of its
    service, with the tenant in ``tenant.id``; failures carry vLLM's error type."""
    providers = {
        service: provider_for(base, {"service.name": service, "cloud.region": "eu-west-1"})
        for service in ("chat", "batch")
    }
    for i in range(drawn.request_id.size):
        tracer = providers[str(drawn.service[i])][0].get_tracer("vllm")
        start = int(drawn.start_ns[i])
        span = tracer.start_span("llm_request", start_time=start)
        attributes = {
            "gen_ai.request.id": str(drawn.request_id[i]),
            "gen_ai.response.model": str(drawn.model[i]),
            "tenant.id": str(drawn.tenant[i]),
            "gen_ai.usage.prompt_tokens": int(drawn.prompt[i]),
            "gen_ai.usage.completion_tokens": int(drawn.output[i]),
        }
        if not np.isnan(drawn.ttft_s[i]):
            attributes["gen_ai.latency.time_to_first_token"] = float(drawn.ttft_s[i])
            attributes["gen_ai.latency.e2e"] = float(drawn.e2e_s[i])
        if drawn.status[i] == "error":
            attributes["error.type"] = "TimeoutError"
        elif drawn.status[i] == "rejected":
            attributes["error.type"] = "RateLimitError"
        span.set_attributes(attributes)
        if drawn.status[i] != "ok":
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=start + int(drawn.duration_ns[i]))
    for service, (provider, exporter) in providers.items():
        flushed(provider, exporter, int((drawn.service == service).sum()))


# -- `llmwh serve` on each store, once for the module --------------------------------------


def written_requests(base: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(r'^llmwh_receiver_written_total\{kind="requests"\} (\S+)$', text, re.M)
    return float(found[1]) if found else 0.0


@dataclass
class Landed:
    backend: str
    url: str
    folder: Path
    drawn: Drawn


@pytest.fixture(scope="module")
def slo_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("slo") / "otlp-chat.toml"
    path.write_text(SLO_TEXT)
    return path


@pytest.fixture(scope="module", params=BACKENDS)
def landed(request, embedded_server, tmp_path_factory, slo_file) -> Iterator[Landed]:
    """The module's spans sent to `llmwh serve` on one store, which is then stopped.

    The receiver runs with the SLO in its ``slos`` setting, so it builds the SLO's
    rollup before it takes a span, and the span-made requests fill it as they land.
    """
    backend = request.param
    folder = tmp_path_factory.mktemp(f"otel-{backend}")
    url = store_url_for(backend, embedded_server, folder, "otel")
    drawn = drawn_requests()
    with running_serve(url, folder, {"LLMWH_SLOS": str(slo_file)}) as base:
        for compression in COMPRESSIONS:
            send_shaped(base, compression)
        send_drawn(base, drawn)
        expected = len(COMPRESSIONS) * SHAPED_REQUESTS + drawn.request_id.size
        poll_until(
            lambda: written_requests(base),
            f"{expected} requests acknowledged",
            until=lambda written: written == expected,
            timeout=10,
        )
    yield Landed(backend, url, folder, drawn)
    drop_store(url)


def llmwh(landed: Landed, *args: str) -> str:
    """`llmwh ARGS --store URL` as a user runs it; its stdout."""
    return llmwh_command(landed.url, landed.folder, *args)


def query(landed: Landed, sql: str) -> list[dict]:
    return json.loads(llmwh(landed, "sql", sql, "--format", "json"))


# -- the spans land as requests --------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name)
def test_the_sdks_spans_land_as_requests(landed, compression):
    rows = query(
        landed,
        "SELECT request_id, service, region, model, request_type, prompt_tokens, "
        "output_tokens, ttft_ms, e2e_ms, tpot_ms, status, error_class, "
        "attrs['trace_id'] AS trace_id, attrs['span_id'] AS span_id FROM requests "
        f"WHERE attrs['deployment.environment'] = '{compression.name}' ORDER BY request_id",
    )
    assert len(rows) == SHAPED_REQUESTS  # the health check span is not a request
    by_id = {row["request_id"]: row for row in rows}
    assert len(by_id) == SHAPED_REQUESTS
    seventh = by_id[f"{compression.name}-cmpl-7"]
    assert (seventh["service"], seventh["region"], seventh["model"]) == (
        "vllm",
        "us-east-1",
        "llama-3-8b",
    )
    assert (seventh["prompt_tokens"], seventh["output_tokens"]) == (107, 10)
    assert seventh["ttft_ms"] == pytest.approx(70, rel=1e-6)
    assert seventh["e2e_ms"] == pytest.approx(1070, rel=1e-6)
    assert seventh["tpot_ms"] == pytest.approx(1000 / 9, rel=1e-6)
    assert seventh["status"] == "ok" and seventh["error_class"] == ""
    assert re.fullmatch(r"[0-9a-f]{32}", seventh["trace_id"])
    assert re.fullmatch(r"[0-9a-f]{16}", seventh["span_id"])
    assert len({row["span_id"] for row in rows}) == SHAPED_REQUESTS
    failed = by_id[f"{compression.name}-chatcmpl-x"]
    assert (failed["model"], failed["request_type"], failed["status"], failed["error_class"]) == (
        "gpt-4o",
        "chat",
        "rejected",
        "rate_limited",
    )


def test_every_drawn_span_is_one_request_with_its_values(landed):
    drawn = landed.drawn
    rows = query(
        landed,
        "SELECT request_id, toUnixTimestamp64Milli(ts) AS ts_ms, service, region, tenant, "
        "model, status, error_class, prompt_tokens, output_tokens, ttft_ms, e2e_ms, tpot_ms "
        "FROM requests WHERE request_id LIKE 'cmpl-sla-%' ORDER BY request_id",
    )
    assert [row["request_id"] for row in rows] == drawn.request_id.tolist()
    error_class = {"ok": "", "error": "timeout", "rejected": "rate_limited"}
    expected = [
        {
            "request_id": drawn.request_id[i],
            "ts_ms": int(drawn.ts_ms[i]),
            "service": drawn.service[i],
            "region": "eu-west-1",
            "tenant": drawn.tenant[i],
            "model": drawn.model[i],
            "status": drawn.status[i],
            "error_class": error_class[drawn.status[i]],
            "prompt_tokens": int(drawn.prompt[i]),
            "output_tokens": int(drawn.output[i]),
            "ttft_ms": nullable(drawn.ttft_ms[i]),
            "e2e_ms": nullable(drawn.e2e_ms[i]),
            "tpot_ms": nullable(drawn.tpot_ms[i]),
        }
        for i in range(drawn.request_id.size)
    ]
    # Float32 values, exactly as the mapping scales and the store keeps them.
    assert rows == expected


def nullable(value) -> float | None:
    return None if np.isnan(value) else float(value)


# -- `llmwh sla` over the span-made requests equals numpy -------------------------------------


def reference(drawn: Drawn, *, model: str | None = None, tenant: str | None = None) -> dict:
    """The SLO's figures for one group, from the drawn values with numpy, as
    warehouse/query/sla.py's docstring and docs/querying.md define them.

    Beside them, under ``floor``, each percentile's order statistic at the rank's floor
    (``q (n - 1)`` rounded down): a percentile read from a rollup's 2%-wide histogram
    lies in its bucket (docs/querying.md).
    """
    keep = drawn.service == "chat"
    if model is not None:
        keep &= drawn.model == model
    if tenant is not None:
        keep &= drawn.tenant == tenant
    ts = drawn.ts_ms[keep]
    status = drawn.status[keep]
    values = {
        "ttft_ms": drawn.ttft_ms[keep],
        "e2e_ms": drawn.e2e_ms[keep],
        "tpot_ms": drawn.tpot_ms[keep].astype(np.float64),
    }

    def good(rows: np.ndarray) -> np.ndarray:
        ok = status[rows] == "ok"
        for column, limit in THRESHOLDS.items():
            v = values[column][rows]
            with np.errstate(invalid="ignore"):
                meets = v <= limit
            if column == "tpot_ms":  # as in vLLM: no TPOT meets a TPOT threshold
                meets |= np.isnan(v)
            ok &= meets  # any other missing latency fails its threshold
        return ok

    def measured(rows: np.ndarray) -> dict[str, float | None]:
        found: dict[str, float | None] = {}
        for name, column, q, _, _ in OBJECTIVES:
            if column is None:
                found[name] = float((status[rows] == "error").mean())
                continue
            v = values[column][rows]
            v = v[~np.isnan(v)]
            found[name] = float(np.percentile(v, q)) if v.size else None
        return found

    everything = np.ones(ts.size, bool)
    whole = measured(everything)
    floor = {}
    for name, column, q, _, _ in OBJECTIVES:
        if column is not None:
            v = np.sort(values[column][~np.isnan(values[column])])
            floor[name] = float(v[int(np.floor(q / 100 * (v.size - 1)))])
    attainment = float(good(everything).mean())
    until_ms = int((START + SPAN).timestamp() * 1000)
    recent = ts >= until_ms - BURN_MS
    # Windows with traffic; in each, an objective without a value holds.
    held = []
    for window in np.unique(ts // WINDOW_MS):
        in_window = measured(ts // WINDOW_MS == window)
        held.append([in_window[n] is None or in_window[n] <= lim for n, _, _, lim, _ in OBJECTIVES])
    held_in = np.array(held)
    weights = np.array([weight for *_, weight in OBJECTIVES], float)
    return {
        "count": int(ts.size),
        **whole,
        **{f"{n}_ok": whole[n] <= lim for n, _, _, lim, _ in OBJECTIVES},
        "attainment": attainment,
        "goodput_rps": float(good(everything).sum() / SPAN.total_seconds()),
        "windows": len(held),
        "compliance": float(held_in.all(axis=1).mean()),
        "score": float((held_in.mean(axis=0) * weights).sum() / weights.sum()),
        "budget_remaining": 1 - (1 - attainment) / (1 - TARGET),
        "burn_rate_30m": float((1 - good(recent).mean()) / (1 - TARGET)),
        "floor": floor,
    }


def expected_rows(drawn: Drawn, by: tuple[str, ...]) -> list[dict]:
    """The reference of each group of ``by`` that has requests in the SLO's scope."""
    chat = drawn.service == "chat"
    pairs = zip(drawn.model[chat], drawn.tenant[chat], strict=True)
    groups = sorted(set(pairs)) if by else [()]
    assert len(groups) == (4 if by else 1)
    return [
        {
            **dict(zip(by, group, strict=True)),
            **reference(drawn, **dict(zip(by, group, strict=True))),
        }
        for group in groups
    ]


_answers: dict[tuple, tuple[list, str]] = {}


def sla(landed: Landed, slo_file: Path, by: tuple[str, ...], *args: str) -> tuple[list, str]:
    """`llmwh sla` over the range: its JSON rows sorted by group, and its stderr. Run once
    per store and arguments (two tests read each answer)."""
    key = (landed.url, by, args)
    if key not in _answers:
        result = subprocess.run(
            [sys.executable, "-m", "warehouse", "sla", "--slo", str(slo_file), *RANGE,
             *(("--by", ",".join(by)) if by else ()), *args, "--format", "json",
             "--store", landed.url],
            capture_output=True, text=True, timeout=120, cwd=landed.folder,
            env=clean_environment(),
        )  # fmt: skip
        assert result.returncode == 0, (result.stdout, result.stderr)
        rows = sorted(json.loads(result.stdout), key=lambda row: tuple(row[k] for k in by))
        _answers[key] = rows, result.stderr
    return _answers[key]


BY = pytest.mark.parametrize("by", [(), ("model", "tenant")], ids=["all", "by-model-tenant"])
PERCENTILES = [name for name, column, *_ in OBJECTIVES if column is not None]


def test_the_reference_is_not_trivial():
    """The draws make every figure informative: neither all nor none good or held."""
    whole = reference(drawn_requests())
    assert whole["count"] == CHAT
    assert 0.5 < whole["attainment"] < 0.95
    assert 0 < whole["compliance"] < 1 and whole["windows"] == SPAN // timedelta(minutes=5)
    assert 0 < whole["score"] < 1 and whole["compliance"] < whole["score"]
    assert whole["burn_rate_30m"] > 0
    assert {whole[f"{name}_ok"] for name, *_ in OBJECTIVES} == {True, False}
    groups = expected_rows(drawn_requests(), ("model", "tenant"))
    assert len({group["compliance"] for group in groups}) == len(groups)


@BY
def test_llmwh_sla_exact_over_span_made_requests_equals_numpy(landed, slo_file, by):
    """`--exact` (raw rows): every figure is numpy's, to float rounding."""
    rows, stderr = sla(landed, slo_file, by, "--exact")
    expected = expected_rows(landed.drawn, by)
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        want = {k: v for k, v in want.items() if k != "floor"}
        assert {k: row[k] for k in want} == pytest.approx(want, rel=1e-9, abs=1e-12), row
    assert "source: raw requests (exact percentiles asked)" in stderr


@BY
def test_llmwh_sla_from_the_slos_rollup_equals_numpy(landed, slo_file, by):
    """The fastest source: the SLO's rollup, which the span-made requests filled as they
    landed (on DuckDB a view). Counts, attainment, verdicts, compliance, score, budget
    and burn rates are exact (docs/slo-rollups.md); a percentile value read from a
    rollup's histogram lies in the 2%-wide bucket of the order statistic at the rank's
    floor (docs/querying.md), and DuckDB reads percentile values from raw rows."""
    rows, stderr = sla(landed, slo_file, by)
    footer = " ".join(stderr.split())  # wrapped at 100 columns
    assert "the rollup of SLO otlp-chat" in footer
    histogram = landed.backend != "duckdb"
    assert ("percentiles from 2%-wide latency buckets" in footer) is histogram
    expected = expected_rows(landed.drawn, by)
    assert len(rows) == len(expected)
    for row, want in zip(rows, expected, strict=True):
        floor = want.pop("floor")
        if histogram:
            for name in PERCENTILES:
                assert row[name] == pytest.approx(floor[name], rel=0.02), (name, row)
                want[name] = row[name]
        assert {k: row[k] for k in want} == pytest.approx(want, rel=1e-9, abs=1e-12), row


@BY
@pytest.mark.parametrize("exact", [False, True], ids=["rollup", "exact"])
def test_llmwh_sla_writes_only_its_footer_to_stderr(landed, slo_file, by, exact):
    """Nothing but the footer on stderr (the SLO's target, then the sources, wrapped at
    100 columns): a stray warning there is a defect of the command (as test_cli_query
    says of every command). On DuckDB a window of a group with no value of a
    percentile's column once put numpy's cast warning there."""
    _, stderr = sla(landed, slo_file, by, *(["--exact"] if exact else []))
    target, sources = stderr.split("\n", 1)
    assert target.startswith("SLO otlp-chat: target 0.9, ") and "source: " in sources
    assert all(len(line) <= 100 for line in stderr.splitlines()), stderr
    assert "warn" not in stderr.lower() and "Traceback" not in stderr, stderr
