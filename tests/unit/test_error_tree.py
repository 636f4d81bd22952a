"""One error tree: what the package raises on purpose is a ``WarehouseError`` from
``warehouse/errors.py``, so a caller (the receiver, the CLI's ``main``, a user of the
Python API) catches one base class and reads an HTTP status from it."""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

import warehouse
from warehouse import errors

PACKAGE = Path(warehouse.__file__).parent
BUILTIN_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}
INVARIANTS = {"AssertionError"}
"""Raised only where the code cannot go (marked ``pragma: no cover``): a broken
invariant is a bug to report, not an error for a caller to handle."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _raised_name(node: ast.Raise) -> str | None:
    target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return target.id if isinstance(target, ast.Name) else None


def _public_raises(tree: ast.AST, private: bool = False):
    """The ``raise`` statements of ``tree`` outside private helpers: a ``_function``
    may signal its caller in the same module with a builtin (a timeout, an interrupt
    from a signal handler), which that caller turns into an error of the tree."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _public_raises(child, child.name.startswith("_"))
        elif isinstance(child, ast.Raise) and not private:
            yield child
        else:
            yield from _public_raises(child, private)


def test_no_builtin_exception_is_raised():
    found = [
        f"{path}:{node.lineno} raises {name}"
        for path, tree in _modules()
        for node in _public_raises(tree)
        if (name := _raised_name(node)) in BUILTIN_EXCEPTIONS and name not in INVARIANTS
    ]
    assert not found, "raise an error of warehouse/errors.py instead:\n" + "\n".join(found)


def test_public_exceptions_are_defined_in_errors():
    known = {name for name, _ in inspect.getmembers(errors, inspect.isclass)}
    bases = BUILTIN_EXCEPTIONS | known | {"Exception"}
    found = [
        f"{path}:{node.lineno} class {node.name}"
        for path, tree in _modules()
        if path != "warehouse/errors.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and any(isinstance(b, ast.Name) and b.id in bases for b in node.bases)
    ]
    assert not found, "define public exceptions in warehouse/errors.py:\n" + "\n".join(found)


def test_every_error_is_a_warehouse_error_with_a_status():
    for name in errors.__all__:
        error = getattr(errors, name)
        assert issubclass(error, errors.WarehouseError), name
        assert 400 <= error.http_status < 600, name
        assert error.__doc__, f"{name} says nothing of when it is raised"


def test_the_checks_find_what_they_look_for():
    source = ast.parse(
        "def f():\n    raise ValueError('x')\n"
        "def _g():\n    raise TimeoutError\n"
        "def h():\n    raise errors.QueryError('x')\n"
    )
    assert [_raised_name(node) for node in _public_raises(source)] == ["ValueError", None]
