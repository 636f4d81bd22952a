"""The files of the top-level ``exporters/``: what the warehouse hands to other systems.

Grafana's dashboards and provisioning files and Prometheus's alerting rules, each
rendered from the code. ``llmwh exporters write`` writes them; with ``--check`` it
compares a folder to them instead, as a test does for the repository's ``exporters/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from warehouse.exporters import grafana_dashboards, grafana_provisioning
from warehouse.exporters.alerts import render_rules

__all__ = ["differences", "shipped_files", "write_files"]


def shipped_files() -> dict[str, str]:
    """Relative path (``/``-separated) -> text of every shipped file."""
    files = {
        f"grafana/dashboards/{name}": text for name, text in grafana_dashboards.render().items()
    }
    files |= {
        f"grafana/provisioning/{name}": text for name, text in grafana_provisioning.render().items()
    }
    files["prometheus/alerts.yml"] = render_rules()
    return files


def differences(folder: Path, files: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each relative path where ``folder`` is not what the code builds -> why: the file
    ``differs``, is ``missing``, or is ``not built`` (the code writes no such file)."""
    files = shipped_files() if files is None else files
    found = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    wrong = {path: "not built" for path in found - files.keys()}
    for path, text in files.items():
        if path not in found:
            wrong[path] = "missing"
        elif (folder / path).read_bytes() != text.encode():
            wrong[path] = "differs"
    return dict(sorted(wrong.items()))


def write_files(folder: Path) -> list[str]:
    """Write every shipped file under ``folder`` (made as needed) and return the relative
    paths whose text changed. Files the code does not build are left alone."""
    files = shipped_files()
    changed = [p for p, why in differences(folder, files).items() if why != "not built"]
    for path in changed:
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(files[path].encode())
    return changed
