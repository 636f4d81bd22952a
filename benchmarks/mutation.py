"""Mutation pass over the SLA maths and the remote-write decoders: would the tests notice?

    .venv/bin/python benchmarks/mutation.py [--module NAME ...] [--jobs 1] [--json FILE]
    .venv/bin/python benchmarks/mutation.py --list [--module NAME ...]
    .venv/bin/python benchmarks/mutation.py --module NAME --only N [--only M] [--show]

A report, not a test (``pytest`` never collects it). For each module in ``MODULES``
every mutation point is changed on its own: an arithmetic, comparison or boolean
operator (``+`` to ``-``, ``<`` to ``<=``, ``and`` to ``or``, ...), a ``not`` or a
unary minus dropped, a number moved by one (``True`` and ``False`` swapped), ``min``
and ``max`` or ``floor`` and ``ceil`` swapped. Error messages (f-strings and what
``raise`` builds) and annotations are left alone. Then the module's fast unit tests
run against the mutant, stopping at the first failure: the mutant is *killed* when a
test fails (or the mutated module cannot even be imported, or the tests hang past
three times their usual time), and *survives* when every test passes. The score is
killed / total; each survivor is printed with its line, for a reader to judge: a
gap in the tests, or a change that alters nothing (an equivalent mutant). ``--list``
numbers the mutants; ``--only N --show`` runs one and prints its tests' output.

``warehouse.query.sla`` (budget, burn rates, window compliance) has no unit tests:
its tests are the SLA integration tests and those of SLO rollups, run here on DuckDB
alone (in process); its ClickHouse-only paths (the rollups' tables, the percentile
checks) are tested on ClickHouse and count as survivors here.

Mutants are made in memory, never on disk (others may be running the tests on the
same files): the module's source is parsed, one node changed, the module executed
again in a forked child, and each function's code swapped in place, so every
reference to it, the tests' included, runs the mutant. A changed module-level
constant is rebound in every module that imported it by name. Hypothesis runs
derandomized and without its example database, so a score can be compared from run
to run, and no health check fails a test for being slow. Any failing test kills a
mutant, whatever made it fail: run the pass on a tree nobody is changing (a file
renamed under it fails every mutant tested after the rename).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import math
import os
import select
import shutil
import sys
import tempfile
import time
import types
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODULES: dict[str, list[str]] = {
    # module: the unit tests that cover it, the quickest to fail first
    "warehouse.query.stats": ["tests/unit/query/test_stats.py"],
    "warehouse.model": [
        "tests/unit/test_histograms.py",
        "tests/unit/ingest/test_events.py",
        "tests/unit/synthetic/test_traffic.py",
        "tests/unit/test_config.py",
    ],
    "warehouse.query.slo": ["tests/unit/query/test_slo.py"],
    "warehouse.query.registry": [
        "tests/unit/query/test_registry.py",
        "tests/unit/query/test_builder.py",
    ],
    "warehouse.query.sla": [
        "tests/integration/query/test_sla.py",
        "tests/integration/query/test_slo_rollups.py",
        "-k",
        "duckdb",
    ],
    "warehouse.ingest.remote_write": [
        "tests/unit/ingest/test_remote_write.py",
        "tests/unit/ingest/test_v1_fast.py",
        "tests/unit/ingest/test_metric_mapping.py",
        "tests/unit/ingest/test_request_pivot.py",
        "tests/unit/ingest/test_limits.py",
        "tests/unit/ingest/test_cardinality.py",
        "tests/unit/synthetic/test_samples.py",
    ],
    "warehouse.ingest.request_pivot": [
        "tests/unit/ingest/test_request_pivot.py",
        "tests/unit/ingest/test_metric_mapping.py",
        "tests/unit/synthetic/test_samples.py",
    ],
}

FRESH = {"warehouse.query.sla"}
"""Modules whose tests start servers (the session's ClickHouse, even for DuckDB's
tests): each mutant runs in a new interpreter, since a forked one hangs there."""

_BINARY = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_COMPARE = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BOOLEAN = {ast.And: ast.Or, ast.Or: ast.And}
_FUNCTIONS = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "floor": "ceil",
    "ceil": "floor",
}
_SYMBOL = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
    ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
    ast.LShift: "<<", ast.RShift: ">>", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
    ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not",
    ast.In: "in", ast.NotIn: "not in", ast.And: "and", ast.Or: "or",
    ast.Not: "not ", ast.USub: "-", ast.Invert: "~",
}  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One mutation: where, and what it changes."""

    index: int
    line: int
    change: str


class Mutator(ast.NodeTransformer):
    """Walks a module's tree counting mutation points; changes the one numbered ``target``
    (none with -1) and records every point met in ``points``."""

    def __init__(self, target: int = -1):
        self.target = target
        self.points: list[Point] = []

    def _point(self, node: ast.AST, change: str) -> bool:
        """Record a mutation point; whether it is the one to change."""
        index = len(self.points)
        self.points.append(Point(index, node.lineno, change))
        return index == self.target

    # -- what is left alone ------------------------------------------------------------

    def visit_JoinedStr(self, node):  # an f-string: a message, not a computation
        return node

    def visit_Raise(self, node):
        return node

    def visit_FunctionDef(self, node):  # its annotations are strings, never run
        returns, node.returns = node.returns, None
        self.generic_visit(node)
        node.returns = returns
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node):
        return node

    def visit_AnnAssign(self, node):
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_Expr(self, node):  # a docstring
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node
        return self.generic_visit(node)

    # -- mutation points ---------------------------------------------------------------

    def visit_BinOp(self, node):
        self.generic_visit(node)
        swap = _BINARY.get(type(node.op))
        if swap and self._point(node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[swap]}"):
            node.op = swap()
        return node

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        swap = _BINARY.get(type(node.op))
        if swap and self._point(node, f"{_SYMBOL[type(node.op)]}= -> {_SYMBOL[swap]}="):
            node.op = swap()
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        for k, op in enumerate(node.ops):
            swap = _COMPARE[type(op)]
            if self._point(node, f"{_SYMBOL[type(op)]} -> {_SYMBOL[swap]}"):
                node.ops[k] = swap()
        return node

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        swap = _BOOLEAN[type(node.op)]
        if self._point(node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[swap]}"):
            node.op = swap()
        return node

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if type(node.op) in (ast.Not, ast.USub, ast.Invert) and self._point(
            node, f"{_SYMBOL[type(node.op)]}x -> x"
        ):
            return node.operand
        return node

    def visit_Constant(self, node):
        value = node.value
        if isinstance(value, bool):
            if self._point(node, f"{value} -> {not value}"):
                return ast.copy_location(ast.Constant(not value), node)
        elif (
            isinstance(value, int | float)
            and math.isfinite(value)
            and self._point(node, f"{value!r} -> {value + 1!r}")
        ):
            return ast.copy_location(ast.Constant(value + 1), node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in _FUNCTIONS and self._point(node, f"{name}() -> {_FUNCTIONS[name]}()"):
            if isinstance(func, ast.Name):
                node.func = ast.copy_location(ast.Name(_FUNCTIONS[name], ast.Load()), func)
            else:
                node.func = ast.copy_location(
                    ast.Attribute(func.value, _FUNCTIONS[name], ast.Load()), func
                )
        return node


def mutation_points(source: str) -> list[Point]:
    mutator = Mutator()
    mutator.visit(ast.parse(source))
    return mutator.points


def mutant_code(source: str, filename: str, index: int) -> types.CodeType:
    tree = Mutator(index).visit(ast.parse(source))
    return compile(ast.fix_missing_locations(tree), filename, "exec")


# -- putting a mutant in place (in the child) ---------------------------------------------


def _differs(old: object, new: object) -> bool:
    try:
        return not bool(old == new)
    except Exception:  # numpy arrays and the like: compare what they print
        return repr(old) != repr(new)


def _swap_code(old: object, new: object) -> None:
    """Make function ``old`` run ``new``'s code (and defaults), through decorators."""
    while hasattr(old, "__wrapped__") and hasattr(new, "__wrapped__"):
        old, new = old.__wrapped__, new.__wrapped__
    for attr in ("__func__", "fget"):  # classmethod, staticmethod, property
        if hasattr(old, attr) and hasattr(new, attr):
            old, new = getattr(old, attr), getattr(new, attr)
    if not isinstance(old, types.FunctionType) or not isinstance(new, types.FunctionType):
        return
    if old.__code__ != new.__code__:
        old.__code__ = new.__code__
    if _differs(old.__defaults__, new.__defaults__):
        old.__defaults__ = new.__defaults__
    if _differs(old.__kwdefaults__, new.__kwdefaults__):
        old.__kwdefaults__ = new.__kwdefaults__


def install(module: types.ModuleType, code: types.CodeType, source: str) -> None:
    """Run the mutated module ``code`` and put what changed into the live ``module``."""
    fresh = {
        "__name__": module.__name__,
        "__file__": module.__file__,
        "__package__": module.__package__,
        "__builtins__": __builtins__,
    }
    exec(code, fresh)
    assigned = set()
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            assigned |= {target.id for target in targets if isinstance(target, ast.Name)}
    live = vars(module)

    def rebind(name: str, old: object, new: object) -> None:
        """``name`` is ``new`` wherever it was ``old`` (imported by name)."""
        for other in list(sys.modules.values()):
            try:
                if getattr(other, name, None) is old:
                    setattr(other, name, new)
            except Exception:  # a module that will not say
                continue
        live[name] = new

    for name, new in fresh.items():
        old = live.get(name)
        own = getattr(new, "__module__", None) == module.__name__
        if isinstance(new, types.FunctionType) and own:
            _swap_code(old, new)
        elif isinstance(new, type) and own and isinstance(old, type):
            try:
                for attr, value in vars(new).items():
                    if attr in vars(old):
                        _swap_code(vars(old)[attr], value)
            except ValueError:  # methods made by a decorator that changed: a new class
                rebind(name, old, new)
        elif name in assigned and _differs(old, new):
            rebind(name, old, new)


# -- running -----------------------------------------------------------------------------


def run_tests(
    tests: list[str], quiet: bool = True, basetemp: Path | None = None, collect: bool = False
) -> int:
    import pytest

    args = [*tests, "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--no-header"]
    if collect:
        args.append("--collect-only")
    if basetemp is not None:
        args.append(f"--basetemp={basetemp}")
    if quiet:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    return int(pytest.main(args))


def clean(basetemp: Path) -> None:
    """Stop any embedded ClickHouse a child left running under ``basetemp``; remove it."""
    from warehouse.store.embedded import stop_server

    for announced in basetemp.rglob("server.json"):
        stop_server(announced.parent, timeout=5)
    shutil.rmtree(basetemp, ignore_errors=True)


def fork(job, argv: list[str] | None = None) -> tuple[int, int]:
    """Run ``job()`` in a child, or with ``argv`` this script in a fresh interpreter;
    (pid, read end of a pipe that gets the child's exit code)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        if argv is not None:  # the new interpreter writes its exit code itself
            os.set_inheritable(write, True)
            os.execv(sys.executable, [sys.executable, __file__, *argv, f"--result-fd={write}"])
        try:
            code = job()
        except BaseException:  # the mutant cannot even be imported: killed
            code = 99
        os.write(write, bytes([min(code, 255)]))
        os._exit(0)
    os.close(write)
    return pid, read


@dataclass
class Outcome:
    module: str
    index: int
    line: int
    change: str
    source: str
    result: str  # "killed", "survived", "timeout", "error" (the mutant cannot be imported)


def mutate_module(
    name: str, tests: list[str], jobs: int, only: set[int] | None, show: bool = False
) -> list[Outcome]:
    module = importlib.import_module(name)
    path = Path(module.__file__)
    source = path.read_text()
    lines = source.splitlines()
    points = [p for p in mutation_points(source) if only is None or p.index in only]

    scratch = Path(tempfile.mkdtemp(prefix="llmwh-mutation-"))

    def child(index: int) -> list[str] | None:
        """How a fresh interpreter runs mutant ``index`` (-1: none), for FRESH modules."""
        if name not in FRESH:
            return None
        argv = [f"--module={name}", f"--child={index}", f"--basetemp={scratch / str(index)}"]
        return [*argv, "--show"] if show else argv

    began = time.monotonic()
    pid, pipe = fork(lambda: run_tests(tests, basetemp=scratch / "-1"), child(-1))  # unmutated
    ready, _, _ = select.select([pipe], [], [], 600)
    baseline = os.read(pipe, 1) if ready else b"hung"
    if not ready:
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    os.close(pipe)
    clean(scratch / "-1")
    if baseline != b"\0":
        raise SystemExit(f"{name}: the tests fail (or hang) without any mutation ({tests})")
    limit = 3 * (time.monotonic() - began) + 10
    print(f"{name}: {len(points)} mutants, tests take {time.monotonic() - began:.1f} s", flush=True)

    def job(point: Point):
        def run() -> int:
            try:
                install(module, mutant_code(source, str(path), point.index), source)
            except Exception:
                return 98
            return run_tests(tests, quiet=not show, basetemp=scratch / str(point.index))

        return run

    outcomes: list[Outcome] = []
    waiting = list(points)
    running: dict[int, tuple[Point, int, float]] = {}
    while waiting or running:
        while waiting and len(running) < jobs:
            point = waiting.pop(0)
            pid, pipe = fork(job(point), child(point.index))
            running[pipe] = (point, pid, time.monotonic())
        ready, _, _ = select.select(list(running), [], [], 0.5)
        now = time.monotonic()
        for pipe in list(running):
            point, pid, started = running[pipe]
            if pipe in ready:
                code = os.read(pipe, 1)
                os.waitpid(pid, 0)
                exit_code = code[0] if code else 99
                result = {0: "survived", 98: "error"}.get(exit_code, "killed")
            elif now - started > limit:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                result = "timeout"
            else:
                continue
            os.close(pipe)
            del running[pipe]
            clean(scratch / str(point.index))
            text = lines[point.line - 1].strip()
            outcomes.append(Outcome(name, point.index, point.line, point.change, text, result))
            if result == "survived":
                print(f"  survived: {path.name}:{point.line}  {point.change}  | {text}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return sorted(outcomes, key=lambda o: o.index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", choices=list(MODULES))
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once")
    parser.add_argument("--only", type=int, action="append", help="mutant numbers (with --list)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--show", action="store_true", help="print the tests' output")
    parser.add_argument("--json", type=Path, help="write every outcome to this file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--basetemp", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result-fd", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    os.chdir(ROOT)
    sys.path[:0] = [str(ROOT)]

    from hypothesis import HealthCheck, settings

    settings.register_profile(  # the same examples every run, none failing for time alone
        "mutation",
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    settings.load_profile("mutation")

    if options.child is not None:  # a fresh interpreter running one mutant (see fork)
        [name] = options.module
        code = 99
        try:
            if options.child >= 0:
                module = importlib.import_module(name)
                source = Path(module.__file__).read_text()
                try:
                    install(module, mutant_code(source, module.__file__, options.child), source)
                except Exception:
                    code = 98
                    return
            code = run_tests(MODULES[name], quiet=not options.show, basetemp=options.basetemp)
        finally:
            os.write(options.result_fd, bytes([min(code, 255)]))
        return

    names = options.module or list(MODULES)
    if options.list:
        for name in names:
            path = Path(importlib.import_module(name).__file__)
            for point in mutation_points(path.read_text()):
                print(f"{name} #{point.index} {path.name}:{point.line} {point.change}")
        return

    # Import the tests (and everything they import) once, so that each child only runs
    # them; without running them, which would start thread pools (polars') that a
    # forked child could never use.
    for name in names:
        if name not in FRESH and run_tests(MODULES[name], quiet=False, collect=True) != 0:
            raise SystemExit(f"the tests of {name} cannot be collected")
    outcomes: list[Outcome] = []
    only = set(options.only) if options.only else None
    for name in names:
        outcomes += mutate_module(name, MODULES[name], options.jobs, only, options.show)

    print("\nmodule                            killed / total   (timeouts, errors)  survived")
    for name in names:
        mine = [o for o in outcomes if o.module == name]
        killed = [o for o in mine if o.result != "survived"]
        timeouts = sum(o.result == "timeout" for o in mine)
        errors = sum(o.result == "error" for o in mine)
        score = len(killed) / len(mine) if mine else math.nan
        print(
            f"{name:32}  {len(killed):4} / {len(mine):<4} {score:6.1%}  ({timeouts}, {errors})"
            f"  {len(mine) - len(killed)}"
        )
    if options.json:
        options.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1) + "\n")


if __name__ == "__main__":
    main()
