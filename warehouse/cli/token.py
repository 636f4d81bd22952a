"""``llmwh token new``: a credential bound to tenants and rights (see docs/security.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from warehouse.auth import new_credential

__all__ = ["app"]

app = typer.Typer(
    help="Credentials that bind tenants (see docs/security.md).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)


@app.command("new")
def token_new(
    name: Annotated[str, typer.Option("--name", help="What the credential is for (logs, 403s)")],
    tenants: Annotated[
        list[str], typer.Option("--tenant", help="A tenant it may use (repeat; '*': every one)")
    ],
    rights: Annotated[
        list[str], typer.Option("--right", help="write, read or admin (repeat for several)")
    ],
) -> None:
    """Make a random token: the token goes to stderr, once, and the entry to append to the
    `credentials_file` (which keeps only the token's SHA-256) to stdout."""
    token, entry = new_credential(name, tenants, rights)
    typer.echo(f"token (shown once): {token}", err=True)
    typer.echo(entry, nl=False)
