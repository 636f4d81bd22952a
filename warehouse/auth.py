"""HTTP credentials, shared by the receiver and the exporter: a bearer token or basic
auth, and the credentials file whose tokens each hold tenants and rights.

Secrets are compared in constant time (or looked up by their hash), and every configured
check runs whatever the request carries, so the time of an answer says nothing about how
close a guess was. See docs/security.md.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.config import Config
from warehouse.errors import ConfigError
from warehouse.model import check_tenant

__all__ = [
    "EVERYTHING",
    "RIGHTS",
    "Access",
    "Grant",
    "authorized",
    "challenge",
    "credentials",
    "hash_token",
    "load_access",
    "new_credential",
]


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


# -- credentials that bind tenants ------------------------------------------------------

RIGHTS = ("write", "read", "admin")
"""``write``: remote write, events, OTLP; ``read``: remote read, the overview and report
pages; ``admin``: the receiver's own ``/metrics`` (every tenant's figures)."""
ALL_TENANTS = "*"


@dataclass(frozen=True)
class Grant:
    """What one credential may do: its rights, on its tenants (None: every tenant)."""

    name: str
    tenants: frozenset[str] | None
    rights: frozenset[str]

    def allows(self, right: str) -> bool:
        return right in self.rights

    def covers(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants


EVERYTHING = Grant("open", None, frozenset(RIGHTS))
"""The grant of a receiver without credentials, and of ``auth_token``/``basic_auth``."""


class Access:
    """Who may do what: the credentials file's tokens, and the single shared
    ``auth_token``/``basic_auth`` (every right on every tenant)."""

    def __init__(
        self,
        token: str | None = None,
        basic: str | None = None,
        grants: dict[str, Grant] | None = None,
    ):
        self._token, self._basic = token, basic
        self._grants = dict(grants or {})

    @property
    def open(self) -> bool:
        """No credential is asked for."""
        return self._token is None and self._basic is None and not self._grants

    def grant(self, authorization: str | None) -> Grant | None:
        """The grant the ``Authorization`` header value carries, or None (a 401)."""
        if self.open:
            return EVERYTHING
        if (self._token is not None or self._basic is not None) and authorized(
            authorization, self._token, self._basic
        ):
            return EVERYTHING
        secret = _presented_secret(authorization)
        if secret is None:
            return None
        # A dictionary keyed by the secret's hash: its timing tells nothing of the secret.
        return self._grants.get(hash_token(secret))


def hash_token(token: str) -> str:
    """How the credentials file stores a token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_credential(name: str, tenants: list[str], rights: list[str]) -> tuple[str, str]:
    """A fresh random token, and the credentials-file entry that grants it."""
    grant = _grant(name, {"tenants": tenants, "rights": rights}, f"credential {name!r}")
    token = secrets.token_urlsafe(32)
    listed = ", ".join(json.dumps(t) for t in sorted(grant.tenants or {ALL_TENANTS}))
    entry = (
        "[[credential]]\n"
        f"name = {json.dumps(name)}\n"
        f'token_sha256 = "{hash_token(token)}"\n'
        f"tenants = [{listed}]\n"
        f"rights = [{', '.join(json.dumps(r) for r in sorted(grant.rights))}]\n"
    )
    return token, entry


def load_access(config: Config) -> Access:
    """The receiver's :class:`Access` from its settings (``auth_token``, ``basic_auth``,
    ``credentials_file``); a clear error for a bad file."""
    credentials_file = config.credentials_file
    multi_tenant = config.tenant_header is not None
    grants: dict[str, Grant] = {}
    if credentials_file is not None:
        path = Path(credentials_file)
        try:
            document = tomllib.loads(path.read_text())
        except OSError as exc:
            raise ConfigError(f"credentials file {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"credentials file {path}: invalid TOML: {exc}") from None
        unknown = sorted(set(document) - {"credential"})
        if unknown:
            raise ConfigError(f"credentials file {path}: unknown key(s) {', '.join(unknown)}")
        entries = document.get("credential", [])
        if not isinstance(entries, list):
            raise ConfigError(f"credentials file {path}: write each as [[credential]]")
        for index, entry in enumerate(entries, 1):
            where = f"credentials file {path}, credential {index}"
            if not isinstance(entry, dict):
                raise ConfigError(f"{where}: not a table")
            digest = entry.get("token_sha256")
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise ConfigError(f"{where}: token_sha256 must be 64 hex digits")
            if digest.lower() in grants:
                raise ConfigError(f"{where}: the same token is granted twice")
            name = entry.get("name", f"credential {index}")
            grant = _grant(str(name), entry, where)
            if grant.tenants is not None and not multi_tenant:
                raise ConfigError(
                    f"{where} names tenants, which needs multi-tenant mode: set tenant_header"
                )
            grants[digest.lower()] = grant
    return Access(config.auth_token, config.basic_auth, grants)


def _grant(name: str, entry: dict[str, Any], where: str) -> Grant:
    unknown = sorted(set(entry) - {"name", "token_sha256", "tenants", "rights"})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    tenants, rights = entry.get("tenants"), entry.get("rights")
    if not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) for t in tenants):
        raise ConfigError(f'{where}: tenants must be a list of tenants, or ["{ALL_TENANTS}"]')
    if not isinstance(rights, list) or not rights or not set(rights) <= set(RIGHTS):
        raise ConfigError(f"{where}: rights must be a list of {', '.join(RIGHTS)}")
    if ALL_TENANTS in tenants:
        return Grant(name, None, frozenset(rights))
    for tenant in tenants:
        check_tenant(tenant)
    return Grant(name, frozenset(tenants), frozenset(rights))


def _presented_secret(authorization: str | None) -> str | None:
    """The secret of ``Bearer TOKEN``, or the password of basic auth."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return value
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
