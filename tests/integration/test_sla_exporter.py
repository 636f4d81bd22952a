"""The SLA exporter: figures computed on an interval, bounded labels, failures shown."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from days import at
from polling import poll_until
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from stores import fresh_store, server_database

from warehouse import Warehouse
from warehouse.exporters.alerts import render_rules
from warehouse.exporters.sla import DEFAULT_WINDOWS, SLAExporter
from warehouse.query.slo import load_slo, shipped_slos
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests

ROOT = Path(__file__).resolve().parents[2]
NOW = at(12, 0, 30)  # figures are as of 12:00
# The shipped chat SLO, for every service of the synthetic traffic.
SLO = replace(load_slo("chat-assistant"), scope={})


@pytest.fixture
def wh(migrated):
    start = NOW.replace(second=0) - timedelta(hours=2)
    migrated.insert_arrow(
        "requests", synthetic_requests(20_000, seed=4, start=start, span=timedelta(hours=2))
    )
    return Warehouse(migrated)


def scrape(exporter: SLAExporter) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(exporter)
    text = generate_latest(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def samples(families, name, **labels):
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in families.get(name, [])
        if all(s.labels.get(k) == v for k, v in labels.items())
    }


def exporter_for(wh, **kw) -> SLAExporter:
    defaults = {"by": ["model"], "windows": ["5m", "1h"], "top": 10}
    return SLAExporter(wh, [SLO], **{**defaults, **kw}, clock=NOW.timestamp)


def test_figures_are_the_query_layers_over_each_window(wh):
    exporter = exporter_for(wh)
    exporter.refresh()
    families = scrape(exporter)
    slo = SLO
    until = NOW.replace(second=0)
    expected = wh.drill(
        ["model"],
        ["count", "attainment"],
        slo.filters(),
        until - timedelta(hours=1),
        until,
        thresholds=slo.thresholds,
    )
    got = samples(families, "llmwh_slo_attainment", window="1h")
    assert len(got) == expected.height > 0
    for row in expected.iter_rows(named=True):
        key = (("model", row["model"]), ("slo", "chat-assistant"), ("window", "1h"))
        assert got[key] == pytest.approx(row["attainment"])
        burn = samples(families, "llmwh_slo_burn_rate", window="1h")[key]
        assert burn == pytest.approx((1 - row["attainment"]) / (1 - slo.target))
    # Every objective of the SLO has a value and a verdict per window and group.
    objectives = samples(families, "llmwh_slo_objective_met", window="5m")
    assert {dict(k)["objective"] for k in objectives} == {o.text for o in slo.objectives}
    assert samples(families, "llmwh_slo_target") == {(("slo", "chat-assistant"),): 0.99}
    assert samples(families, "llmwh_slo_error_budget_remaining")
    assert samples(families, "llmwh_exporter_up") == {(("slo", "chat-assistant"),): 1.0}


def test_label_values_beyond_the_top_n_become_other(wh):
    exporter = exporter_for(wh, top=1)
    exporter.refresh()
    requests = samples(scrape(exporter), "llmwh_slo_requests", window="1h")
    models = {dict(k)["model"] for k in requests}
    assert len(models) == 2 and "other" in models
    everything = wh.drill(
        [],
        ["count"],
        {},
        NOW.replace(second=0) - timedelta(hours=1),
        NOW.replace(second=0),
    )
    assert sum(requests.values()) == everything["count"].item()


def test_a_scrape_never_queries_the_store(wh, monkeypatch):
    exporter = exporter_for(wh)
    exporter.refresh()
    before = scrape(exporter)

    def unreachable(*args, **kwargs):
        raise AssertionError("a scrape queried the store")

    monkeypatch.setattr(wh.store, "query_arrow", unreachable)
    assert scrape(exporter) == before


def test_a_failed_computation_drops_the_figures_and_says_so(wh, caplog):
    exporter = exporter_for(wh)
    exporter.refresh()
    assert samples(scrape(exporter), "llmwh_slo_attainment")
    wh.store.command(f"ALTER TABLE {wh.store.database}.requests RENAME COLUMN ttft_ms TO gone")
    try:
        exporter.refresh()
        families = scrape(exporter)
        assert not samples(families, "llmwh_slo_attainment")  # stale, not repeated
        assert samples(families, "llmwh_exporter_up") == {(("slo", "chat-assistant"),): 0.0}
        assert samples(families, "llmwh_exporter_failures") == {(("slo", "chat-assistant"),): 1.0}
        assert samples(families, "llmwh_exporter_last_success_timestamp_seconds")
        assert any("chat-assistant failed" in r.getMessage() for r in caplog.records)
    finally:
        wh.store.command(f"ALTER TABLE {wh.store.database}.requests RENAME COLUMN gone TO ttft_ms")
    exporter.refresh()
    assert samples(scrape(exporter), "llmwh_slo_attainment")


def test_the_shipped_alerting_rules_pass_promtool():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("LLMWH_REQUIRE_SYSTEM_DEPS"):
            pytest.fail("promtool is required here (CI) but not installed")
        pytest.skip("promtool is not installed: `make system-deps` (root) installs prometheus")
    rules = ROOT / "exporters" / "prometheus" / "alerts.yml"
    result = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout + result.stderr


def test_the_shipped_alerting_rules_are_generated_and_read_what_the_exporter_serves(wh):
    """exporters/prometheus/alerts.yml is `llmwh alert-rules`' output: every metric
    name and window in it comes from the code the exporter runs, none typed by hand."""
    rules = (ROOT / "exporters" / "prometheus" / "alerts.yml").read_text()
    assert rules == render_rules(), "regenerate it: llmwh exporters write"
    exporter = exporter_for(wh, windows=DEFAULT_WINDOWS)
    exporter.refresh()
    families = scrape(exporter)
    read = set(re.findall(r"\b(llmwh_\w+)\{?", rules))
    assert read and read <= set(families), read - set(families)
    windows = set(re.findall(r'window="(\w+)"', rules))
    served = {s.labels["window"] for s in families["llmwh_slo_burn_rate"]}
    assert windows == set(DEFAULT_WINDOWS) <= served


@pytest.fixture
def served(embedded_server):
    """(store URL, a free port): an hour of requests in a database of its own."""
    url = embedded_server.store_url(server_database())
    with fresh_store(url) as store:
        Migrator(store).up()
        now = datetime.now(UTC)
        store.insert_arrow(
            "requests", synthetic_requests(5_000, seed=9, start=now - timedelta(hours=1))
        )
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        yield url, port


def served_metrics(process: subprocess.Popen, url: str, headers: dict | None = None) -> str:
    """The exporter's page once it holds its first figures (``llmwh_exporter_up``)."""

    def page() -> str:
        assert process.poll() is None, process.stderr.read().decode()
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.read().decode()

    return poll_until(
        page,
        f"{url} to serve llmwh_exporter_up",
        until=lambda text: "llmwh_exporter_up" in text,
        timeout=60,
        every=0.5,
        ignoring=(OSError,),
    )


def test_llmwh_export_serves_the_figures_over_http(served, tmp_path):
    url, port = served
    command = [
        sys.executable,
        "-m",
        "warehouse",
        "export",
        "--store",
        url,
        "--slo",
        "chat-assistant",
        "--by",
        "model",
        "--listen",
        f"127.0.0.1:{port}",
        "--interval",
        "2",
    ]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        text = served_metrics(process, f"http://127.0.0.1:{port}/metrics")
        assert 'llmwh_exporter_up{slo="chat-assistant"} 1.0' in text
        assert 'llmwh_slo_target{slo="chat-assistant"} 0.99' in text
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_llmwh_export_with_credentials_and_a_tenant_serves_that_tenant_only(served, tmp_path):
    url, port = served
    command = [sys.executable, "-m", "warehouse", "export", "--store", url, "--slo",
               "chat-assistant", "--by", "tenant", "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    env |= {"LLMWH_AUTH_TOKEN": "s3cret", "LLMWH_TENANT": "acme"}
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    metrics = f"http://127.0.0.1:{port}/metrics"
    try:
        text = served_metrics(process, metrics, {"Authorization": "Bearer s3cret"})
        tenants = set(re.findall(r'tenant="([^"]+)"', text))
        assert tenants == {"acme"}, tenants
        for credentials in (None, "Bearer wrong", "Basic czNjcmV0"):
            headers = {"Authorization": credentials} if credentials else {}
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(metrics, headers=headers))
            assert refused.value.code == 401
            assert refused.value.headers["WWW-Authenticate"] == 'Bearer realm="llmwh"'
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_llmwh_export_refuses_a_bad_listen_address(tmp_path):
    command = [
        sys.executable,
        "-m",
        "warehouse",
        "export",
        "--store",
        f"duckdb://{tmp_path}/x.duckdb",
        "--slo",
        "chat-assistant",
        "--listen",
        "nowhere",
    ]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "llmwh: error: --listen must be HOST:PORT with a port from 1 to 65535, got 'nowhere'"
    ]


@pytest.mark.parametrize(
    ("slos_setting", "expected"),
    [(None, set(shipped_slos())), ("code-completion", {"code-completion"})],
    ids=["every shipped SLO", "the slos setting"],
)
def test_llmwh_export_without_slo_serves_the_configured_slos(
    served, tmp_path, slos_setting, expected
):
    url, port = served
    command = [sys.executable, "-m", "warehouse", "export", "--store", url,
               "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    if slos_setting:
        env["LLMWH_SLOS"] = slos_setting
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        text = served_metrics(process, f"http://127.0.0.1:{port}/metrics")
        assert set(re.findall(r'llmwh_exporter_up\{slo="([^"]+)"\} 1.0', text)) == expected
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("store", ["clickhouse", "chdb"], indirect=True)  # DuckDB keeps none
def test_with_the_slos_rollup_every_figure_stays_the_same(wh):
    before = scrape_refreshed(exporter_for(wh, top=2))
    [applied] = wh.slo_apply([SLO])
    assert applied.action == "built"
    after = scrape_refreshed(exporter_for(wh, top=2))
    for name in ("llmwh_slo_requests", "llmwh_slo_attainment", "llmwh_slo_burn_rate"):
        assert samples(after, name) == samples(before, name), name
    for name in ("llmwh_slo_objective_met", "llmwh_slo_error_budget_remaining"):
        assert samples(after, name) == samples(before, name), name
    assert any(labels for labels in samples(after, "llmwh_slo_objective_met"))


def scrape_refreshed(exporter: SLAExporter) -> dict[str, list]:
    exporter.refresh()
    return scrape(exporter)
