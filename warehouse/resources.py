"""Folders shipped with the package (``migrations/``, ``sql/``): inside the wheel under
``warehouse/_data/`` (pyproject.toml's force-include), or beside the package in the
source tree."""

from __future__ import annotations

from pathlib import Path

__all__ = ["shipped_dir"]


def shipped_dir(name: str) -> Path | None:
    """The shipped folder ``name``, or None when this installation lacks it."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "_data" / name, package.parent / name):
        if candidate.is_dir():
            return candidate
    return None
