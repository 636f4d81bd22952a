"""The package's imports follow the layer table of docs/architecture.md, without a loop.

Every ``import`` in ``warehouse/`` counts, also those inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency. ``from package import module``
is an import of that module. Run this file (``python tests/unit/test_layers.py``) to
print the loops and the imports the table does not allow.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "warehouse"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

Graph = Mapping[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package, and the modules of the package it imports."""
    paths = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                    for alias in node.names
                ]
            else:
                continue
            found |= {t for t in targets if t in paths and t != name}
        graph[name] = found
    return graph


def loops(graph: Graph) -> list[list[str]]:
    """The import loops: each set of modules that import one another, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's strongly connected components, iterative
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, rest = work[-1]
            for nxt in rest:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer_table(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """The table under "### Layer rules": each layer's folders and modules (their names
    under ``warehouse/``), and the layers it may import."""
    section = text.split("### Layer rules", 1)[1].split("\n#", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("layer", "") or set(cells[0]) <= {"-"}:
            continue
        members = {m.rstrip("/").removesuffix(".py") for m in re.findall(r"`([^`]+)`", cells[1])}
        may = set(re.findall(r"[a-z_]+", cells[2])) - {"nothing"}
        table[cells[0]] = (members, may)
    return table


def top_level(module: str) -> str:
    """The folder or module of ``warehouse/`` a module is in (``__init__`` for the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward(graph: Graph, table: Mapping[str, tuple[set[str], set[str]]]) -> list[str]:
    """Every import from one layer into a layer it may not import."""
    layer_of = {member: layer for layer, (members, _) in table.items() for member in members}
    wrong = []
    for source, targets in sorted(graph.items()):
        mine = layer_of[top_level(source)]
        for target in sorted(targets):
            theirs = layer_of[top_level(target)]
            if theirs != mine and theirs not in table[mine][1]:
                wrong.append(f"{source} ({mine}) imports {target} ({theirs})")
    return wrong


def package_entries(package: Path = PACKAGE) -> set[str]:
    """The folders and modules at the top of the package."""
    return {
        p.stem if p.is_file() else p.name
        for p in package.iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    }


def table() -> dict[str, tuple[set[str], set[str]]]:
    return layer_table(ARCHITECTURE.read_text())


# -- the package ---------------------------------------------------------------------------


def test_no_module_imports_itself_through_others():
    assert loops(import_graph()) == []


def test_every_import_goes_down_the_layer_table():
    assert upward(import_graph(), table()) == []


def test_the_layer_table_names_every_folder_and_module_once():
    named = [m for members, _ in table().values() for m in members]
    assert len(named) == len(set(named)), "a folder or module is in two layers"
    assert set(named) == package_entries()


def test_a_layer_imports_only_layers_the_table_knows():
    rules = table()
    for layer, (_, may) in rules.items():
        assert may <= rules.keys(), f"{layer} may import an unknown layer"


# -- the checks themselves ----------------------------------------------------------------


def test_a_loop_through_three_modules_is_found_once():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert loops(graph) == [["a", "b", "c"]]


def test_an_import_the_table_does_not_allow_is_named():
    rules = {"store": ({"store"}, set()), "query": ({"query"}, {"store"})}
    graph = {
        "warehouse.query.builder": {"warehouse.store.base"},
        "warehouse.store.base": {"warehouse.query.builder"},
    }
    assert upward(graph, rules) == [
        "warehouse.store.base (store) imports warehouse.query.builder (query)"
    ]


def test_a_lazy_import_and_a_package_import_of_a_module_both_count(tmp_path: Path):
    package = tmp_path / "warehouse"
    (package / "ingest").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ingest" / "__init__.py").write_text("from warehouse.ingest.app import run\n")
    (package / "ingest" / "app.py").write_text("def run():\n    from warehouse import api\n")
    (package / "api.py").write_text("from warehouse.ingest import app\n")
    graph = import_graph(package)
    assert graph["warehouse.ingest.app"] == {"warehouse.api"}
    assert graph["warehouse.api"] == {"warehouse.ingest.app"}
    assert loops(graph) == [["warehouse.api", "warehouse.ingest.app"]]


def _report(found_loops: Iterable[list[str]], wrong: list[str]) -> str:
    found_loops = list(found_loops)
    lines = [f"import loops: {len(found_loops)}"]
    lines += [f"  {' <-> '.join(loop)}" for loop in found_loops]
    lines.append(f"imports against the layer table: {len(wrong)}")
    lines += [f"  {line}" for line in wrong]
    return "\n".join(lines)


if __name__ == "__main__":
    graph = import_graph()
    print(_report(loops(graph), upward(graph, table())))
    sys.exit(0)
