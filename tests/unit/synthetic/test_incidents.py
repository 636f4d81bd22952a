"""Incidents: parsed from the command line, hitting only their target and window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pytest

from warehouse.errors import ConfigError
from warehouse.synthetic import INCIDENT_KINDS, Incident, parse_incident, synthetic_requests

START = datetime(2026, 11, 2, tzinfo=UTC)
SPAN = timedelta(hours=4)
ROWS = 40_000


def generate(*incidents: Incident) -> pl.DataFrame:
    return pl.from_arrow(
        synthetic_requests(ROWS, seed=2, start=START, span=SPAN, incidents=incidents)
    )


@pytest.fixture(scope="module")
def baseline() -> pl.DataFrame:
    return generate()


class TestParsing:
    def test_a_kind_alone_takes_the_defaults(self):
        incident = parse_incident("zone-ttft")
        assert (incident.dimension, incident.target) == ("zone", "sh-b")
        assert incident.window(0, 1000) == (600, 850)

    def test_settings_name_the_target_window_and_severity(self):
        incident = parse_incident("tenant-errors:tenant=acme, at=1h, for=25%, severity=0.5")
        assert (incident.target, incident.severity) == ("acme", 0.5)
        assert incident.window(0, 4 * 3_600_000) == (3_600_000, 7_200_000)

    @pytest.mark.parametrize(
        ("spec", "complaint"),
        [
            ("zone-slow", "unknown incident 'zone-slow'"),
            ("zone-ttft:model=x", "unknown incident setting 'model'"),
            ("zone-ttft:at", "expected KEY=VALUE"),
            ("zone-ttft:at=150%", "bad share '150%'"),
            ("zone-ttft:for=soon", "bad time 'soon'"),
            ("zone-ttft:severity=high", "bad severity 'high'"),
        ],
    )
    def test_bad_specs_are_refused_naming_the_problem(self, spec, complaint):
        with pytest.raises(ConfigError, match=complaint):
            parse_incident(spec)


@pytest.mark.parametrize("kind", list(INCIDENT_KINDS))
def test_an_incident_changes_only_the_requests_it_hits(baseline, kind):
    incident = Incident(kind)
    hit_rows = generate(incident)
    first, end = incident.window(int(START.timestamp() * 1000), int(SPAN.total_seconds() * 1000))
    ts = baseline["ts"].dt.epoch("ms")
    hit = (
        (ts >= first)
        & (ts < end)
        & (baseline[incident.dimension] == incident.target)
        & ~baseline["is_probe"]
    )
    assert hit.sum() > 500
    untouched = baseline.filter(~hit)
    assert hit_rows.filter(~hit).equals(untouched)
    assert not hit_rows.filter(hit).equals(baseline.filter(hit))


def test_zone_ttft_multiplies_the_zones_ttft(baseline):
    during = generate(Incident("zone-ttft", at=0.0, length=1.0, severity=4))
    zone = pl.col("zone") == "sh-b"
    before = baseline.filter(zone)["ttft_ms"].median()
    after = during.filter(zone & ~pl.col("is_probe"))["ttft_ms"].median()
    assert after == pytest.approx(4 * before, rel=0.15)


def test_kv_collapse_empties_the_models_cache_and_slows_its_first_token(baseline):
    model = baseline["model"].mode()[0]
    during = generate(Incident("kv-collapse", value=model, at=0.0, length=1.0))
    mine = pl.col("model") == model
    ratio = pl.col("cached_prompt_tokens").sum() / pl.col("prompt_tokens").sum()
    assert baseline.filter(mine).select(ratio).item() > 0.2
    assert during.filter(mine & ~pl.col("is_probe")).select(ratio).item() < 0.01
    assert during.filter(mine)["ttft_ms"].mean() > 1.5 * baseline.filter(mine)["ttft_ms"].mean()


def test_tenant_errors_fail_about_the_severity_share(baseline):
    during = generate(Incident("tenant-errors", at=0.0, length=1.0, severity=0.35))
    tenant = during.filter((pl.col("tenant") == "globex") & ~pl.col("is_probe"))
    assert (tenant["status"] == "error").mean() == pytest.approx(0.35, abs=0.03)
    assert set(tenant.filter(pl.col("status") == "error")["http_status"]) <= {500, 503, 504} | set(
        baseline.filter(pl.col("status") == "error")["http_status"]
    )


def test_a_bad_arm_is_slower_and_fails_more_than_control(baseline):
    during = generate(Incident("bad-arm", at=0.0, length=1.0))
    arms = (
        during.filter(~pl.col("is_probe"))
        .group_by("ab_group")
        .agg(pl.col("ttft_ms").median(), (pl.col("status") == "error").mean().alias("errors"))
    )
    by_arm = {row["ab_group"]: row for row in arms.to_dicts()}
    assert by_arm["treatment"]["ttft_ms"] > 1.4 * by_arm["control"]["ttft_ms"]
    assert by_arm["treatment"]["errors"] > by_arm["control"]["errors"] + 0.03
    assert np.isfinite(by_arm["treatment"]["ttft_ms"])
