"""The CLI's commands as the tests that go through every one of them list them."""

from __future__ import annotations

from collections.abc import Iterator

import typer

from warehouse.cli import app


def registered_commands() -> set[str]:
    """Every command of the typer app, subcommands as ``group command``."""

    def walk(command: object, path: tuple[str, ...]) -> Iterator[str]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            yield " ".join(path)
            return
        for name, sub in subcommands.items():
            if not sub.hidden:
                yield from walk(sub, (*path, name))

    return set(walk(typer.main.get_command(app), ()))
