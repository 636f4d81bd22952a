"""Copying sqlglot trees."""

from __future__ import annotations

from typing import Any, TypeVar

from sqlglot import exp

__all__ = ["copy"]

E = TypeVar("E", bound=exp.Expr)


def copy(tree: E) -> E:
    """A copy of ``tree``: every node new, every value shared (strings, numbers, bools).

    sqlglot's ``copy()`` is a ``deepcopy`` that builds each node through its
    constructor and deep-copies its comments and metadata: a third of a first
    question's compile time. A tree's node holds its ``args`` and the links and caches
    named in :data:`_NODE_FIELDS`; tests/unit/test_tree_copy.py fails if sqlglot's
    nodes come to hold more.
    """
    return _copied(tree, 0)


def _copied(tree: E, depth: int) -> E:
    if depth > _DEEPEST:
        # sqlglot's copy is not recursive: a tenant's chain of a thousand ORs parses
        # that deep, past Python's recursion limit.
        return tree.copy()
    new = _new(tree.__class__)
    args: dict[str, Any] = {}
    for key, value in tree.args.items():
        if isinstance(value, _Expr):
            value = _copied(value, depth + 1)
            value.parent, value.arg_key, value.index = new, key, None
        elif type(value) is list:
            listed = []
            for i, item in enumerate(value):
                if isinstance(item, _Expr):
                    item = _copied(item, depth + 1)
                    item.parent, item.arg_key, item.index = new, key, i
                listed.append(item)
            value = listed
        args[key] = value
    new.args = args
    new.parent = new.arg_key = new.index = None
    new.comments = list(tree.comments) if tree.comments is not None else None
    new._type = copy(tree._type) if tree._type is not None else None
    new._meta = dict(tree._meta) if tree._meta is not None else None
    new._hash = tree._hash
    return new


_DEEPEST = 200
_Expr = exp.Expr
_new = object.__new__
_NODE_FIELDS = frozenset(
    ("args", "parent", "arg_key", "index", "comments", "_type", "_meta", "_hash")
)
"""What a sqlglot node holds, which :func:`copy` copies."""
