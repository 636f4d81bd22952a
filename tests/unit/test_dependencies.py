"""Every package ``warehouse/`` imports is declared in pyproject.toml, so that
``pip install`` on a fresh machine gives a working ``llmwh``."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    """The dependencies, and those of the optional extras a user may ask for (`pdf`):
    a module of an extra is imported only where the extra's feature is used."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [deps for name, deps in project["optional-dependencies"].items() if name != "dev"]
    every = [*project["dependencies"], *(dep for deps in extras for dep in deps)]
    return {_normalized(re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0]) for dep in every}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level modules imported by the package (not the standard library), and where."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "warehouse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "warehouse" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_a_declared_dependency():
    distributions = packages_distributions()
    deps = declared()
    undeclared = {
        module: sorted(where)
        for module, where in third_party_imports().items()
        if not {_normalized(d) for d in distributions.get(module, [module])} & deps
    }
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_check_sees_imports_that_need_a_declaration():
    imports = third_party_imports()
    assert {"pyarrow", "typer", "clickhouse_connect", "google"} <= imports.keys()
    assert "json" not in imports and "warehouse" not in imports
