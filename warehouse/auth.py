"""HTTP credentials, shared by the receiver and the exporter: a bearer token or basic auth.

Secrets are compared in constant time, and every configured check runs whatever the
request carries, so the time of an answer says nothing about how close a guess was.
"""

from __future__ import annotations

import base64
import hmac

__all__ = ["authorized", "challenge", "credentials"]


def authorized(authorization: str | None, token: str | None, basic: str | None) -> bool:
    """Whether an ``Authorization`` header value carries the configured credentials.

    With neither ``token`` nor ``basic`` (``USER:PASSWORD``) configured, every request is.
    """
    if token is None and basic is None:
        return True
    scheme, _, credentials = (authorization or "").partition(" ")
    given = f"{scheme.lower()} {credentials}".encode()
    ok = False
    if token is not None:
        ok |= hmac.compare_digest(given, f"bearer {token}".encode())
    if basic is not None:
        ok |= hmac.compare_digest(given, f"basic {_basic(basic)}".encode())
    return ok


def credentials(token: str | None, basic: str | None) -> dict[str, str]:
    """The ``Authorization`` header that :func:`authorized` takes, for our own writes."""
    if token is not None:
        return {"Authorization": f"Bearer {token}"}
    if basic is not None:
        return {"Authorization": f"Basic {_basic(basic)}"}
    return {}


def _basic(user_password: str) -> str:
    return base64.b64encode(user_password.encode()).decode()


def challenge(token: str | None) -> str:
    """The ``WWW-Authenticate`` value of a 401."""
    return 'Bearer realm="llmwh"' if token else 'Basic realm="llmwh"'
