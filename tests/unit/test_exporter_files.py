"""The top-level exporters/ is what the code builds, and `llmwh exporters write` keeps it so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from warehouse.cli import app
from warehouse.exporters import grafana_dashboards
from warehouse.exporters.shipped import differences, shipped_files
from warehouse.query.sla import WORKBOOK_ALERTS

ROOT = Path(__file__).resolve().parents[2]
FILES = shipped_files()
DASHBOARD = "grafana/dashboards/latency.json"


def llmwh(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_repository_exporters_folder_is_what_the_code_builds():
    assert differences(ROOT / "exporters") == {}, "run: llmwh exporters write"


def test_the_files_are_the_dashboards_their_provisioning_and_the_alerting_rules():
    assert set(FILES) == {
        *(f"grafana/dashboards/{name}" for name in grafana_dashboards.DASHBOARDS),
        "grafana/provisioning/datasources/llmwh-clickhouse.yaml",
        "grafana/provisioning/dashboards/llmwh.yaml",
        "prometheus/alerts.yml",
    }
    datasource = FILES["grafana/provisioning/datasources/llmwh-clickhouse.yaml"]
    assert f"uid: {grafana_dashboards.DATASOURCE['uid']}\n" in datasource


def test_write_puts_every_file_in_place_and_rewrites_only_what_changed(tmp_path: Path):
    code, out, _ = llmwh("exporters", "write", str(tmp_path))
    assert code == 0
    assert out.splitlines() == [f"wrote {tmp_path / path}" for path in sorted(FILES)]
    assert {p: (tmp_path / p).read_text() for p in FILES} == FILES
    (tmp_path / DASHBOARD).write_text("{}\n")
    assert llmwh("exporters", "write", str(tmp_path))[:2] == (0, f"wrote {tmp_path / DASHBOARD}\n")
    assert (tmp_path / DASHBOARD).read_text() == FILES[DASHBOARD]


def test_write_defaults_to_the_exporters_folder_here(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert llmwh("exporters", "write")[0] == 0
    assert differences(tmp_path / "exporters") == {}


def test_check_passes_on_what_write_wrote(tmp_path: Path):
    llmwh("exporters", "write", str(tmp_path))
    code, out, err = llmwh("exporters", "write", "--check", str(tmp_path))
    assert (code, err) == (0, "")
    assert "every file is as the code builds it" in out


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param(lambda d: (d / DASHBOARD).write_text("{}\n"), "differs", id="changed"),
        pytest.param(lambda d: (d / DASHBOARD).write_bytes(b""), "differs", id="emptied"),
        pytest.param(lambda d: (d / DASHBOARD).unlink(), "missing", id="deleted"),
    ],
)
def test_check_fails_naming_the_file_and_writes_nothing(tmp_path: Path, change, why):
    llmwh("exporters", "write", str(tmp_path))
    change(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, out, err = llmwh("exporters", "write", "--check", str(tmp_path))
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == f"{tmp_path / DASHBOARD}: {why}"
    assert len(err.splitlines()) == 2 and "llmwh exporters write" in err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_check_names_a_file_the_code_does_not_build_and_write_leaves_it(tmp_path: Path):
    llmwh("exporters", "write", str(tmp_path))
    stale = tmp_path / "grafana" / "dashboards" / "old.json"
    stale.write_text("{}\n")
    assert differences(tmp_path) == {"grafana/dashboards/old.json": "not built"}
    assert llmwh("exporters", "write", str(tmp_path))[:2] == (0, "")
    assert stale.exists()
    code, _, err = llmwh("exporters", "write", "--check", str(tmp_path))
    assert code == 1 and f"{stale}: not built" in err


def test_check_of_a_missing_folder_names_every_file(tmp_path: Path):
    assert differences(tmp_path / "nowhere") == dict.fromkeys(sorted(FILES), "missing")


def test_the_prometheus_rules_page_and_ticket_on_the_pairs_the_overview_shows():
    """One list of burn-rate alerts: the rules file fires on the same window pairs, rates
    and severities as the overview's and the report's alert column."""
    rules = yaml.safe_load(FILES["prometheus/alerts.yml"])["groups"][0]["rules"]
    burns = [rule for rule in rules if rule["alert"].startswith("SLOErrorBudgetBurn")]
    found = []
    for rule in burns:
        [(long, rate)] = re.findall(r'window="(\w+)"\} > ([\d.]+)\n\s*and', rule["expr"])
        [short] = re.findall(r'and ignoring\(window\) \w+\{window="(\w+)"\}', rule["expr"])
        found.append((rule["labels"]["severity"], float(rate), long, short))

    assert found == [(a.severity, a.rate, a.long, a.short) for a in WORKBOOK_ALERTS]
