"""Credentials: a bearer token or basic auth, either when both are configured; and the
credentials file, whose tokens each hold tenants and rights."""

from __future__ import annotations

import base64

import pytest

from warehouse.auth import (
    EVERYTHING,
    authorized,
    challenge,
    credentials,
    hash_token,
    load_access,
    new_credential,
)
from warehouse.config import Config
from warehouse.errors import ConfigError

BASIC = "Basic " + base64.b64encode(b"prom:pw").decode()


@pytest.mark.parametrize(
    ("header", "token", "basic", "ok"),
    [
        (None, None, None, True),  # nothing configured: open
        (None, "s3cret", None, False),
        ("", "s3cret", None, False),
        ("Bearer s3cret", "s3cret", None, True),
        ("bearer s3cret", "s3cret", None, True),  # the scheme is case-insensitive
        ("Bearer s3cre", "s3cret", None, False),
        ("Bearer s3cret ", "s3cret", None, False),
        ("Bearer s3cret", None, "prom:pw", False),
        (BASIC, None, "prom:pw", True),
        (BASIC, "s3cret", "prom:pw", True),  # either credential, when both are set
        ("Bearer s3cret", "s3cret", "prom:pw", True),
        ("Basic " + base64.b64encode(b"prom:px").decode(), None, "prom:pw", False),
    ],
)
def test_credentials(header, token, basic, ok):
    assert authorized(header, token, basic) is ok


def test_the_challenge_names_the_scheme_to_use():
    assert challenge("s3cret") == 'Bearer realm="llmwh"'
    assert challenge(None) == 'Basic realm="llmwh"'


@pytest.mark.parametrize(
    ("token", "basic"), [("s3cret", None), (None, "prom:pw"), ("s3cret", "prom:pw")]
)
def test_our_own_credentials_are_taken(token, basic):
    (header,) = credentials(token, basic).values()
    assert authorized(header, token, basic)
    assert credentials(None, None) == {}


# -- credentials that bind tenants ----------------------------------------------------


def settings(credentials: str | None, multi_tenant: bool, **more) -> Config:
    header = "X-Scope-OrgID" if multi_tenant else None
    return Config(credentials_file=credentials, tenant_header=header, **more)


def credentials_file(tmp_path, text: str) -> str:
    path = tmp_path / "credentials.toml"
    path.write_text(text)
    return str(path)


def test_a_new_credential_grants_its_token_what_it_names(tmp_path):
    token, entry = new_credential("acme-agent", ["acme", "acme-staging"], ["write"])
    assert token not in entry and hash_token(token) in entry
    access = load_access(settings(credentials_file(tmp_path, entry), multi_tenant=True))
    grant = access.grant(f"Bearer {token}")
    assert grant.name == "acme-agent" and grant.allows("write") and not grant.allows("read")
    assert grant.covers("acme-staging") and not grant.covers("bravo")
    # Basic auth carries the token as its password.
    basic = "Basic " + base64.b64encode(f"vmagent:{token}".encode()).decode()
    assert access.grant(basic) == grant
    assert access.grant(f"Bearer {token}x") is None
    assert access.grant(None) is None


def test_every_tenant_and_the_shared_token_grant_everything(tmp_path):
    token, entry = new_credential("ops", ["*"], ["read", "admin"])
    access = load_access(
        settings(credentials_file(tmp_path, entry), multi_tenant=False, auth_token="legacy")
    )
    assert access.grant(f"Bearer {token}").covers("anyone")
    assert access.grant("Bearer legacy") == EVERYTHING
    assert load_access(settings(None, multi_tenant=True)).grant(None) == EVERYTHING


@pytest.mark.parametrize(
    ("text", "multi_tenant", "reason"),
    [
        ("[[credential]]\ntoken_sha256 = 'abc'\ntenants = ['a']\nrights = ['write']",
         True, "64 hex digits"),
        (f"[[credential]]\ntoken_sha256 = '{'a' * 64}'\ntenants = ['a']\nrights = ['own']",
         True, "rights must be a list of write, read, admin"),
        (f"[[credential]]\ntoken_sha256 = '{'a' * 64}'\ntenants = []\nrights = ['read']",
         True, "tenants must be a list"),
        (f"[[credential]]\ntoken_sha256 = '{'a' * 64}'\ntenants = ['a b']\nrights = ['read']",
         True, "not a tenant name"),
        (f"[[credential]]\ntoken_sha256 = '{'a' * 64}'\ntenants = ['a']\nrights = ['read']",
         False, "set tenant_header"),
        (f"[[credential]]\ntoken_sha256 = '{'a' * 64}'\ntenants = ['*']\nrights = ['read']\n"
         f"[[credential]]\ntoken_sha256 = '{'A' * 64}'\ntenants = ['*']\nrights = ['read']",
         True, "granted twice"),
        ("[[credential]]\ntoken = 'plain'\ntenants = ['*']\nrights = ['read']",
         True, "64 hex digits"),
        ("token = 'x'", True, "unknown key"),
        ("[[credential", True, "invalid TOML"),
    ],
)  # fmt: skip
def test_a_bad_credentials_file_is_refused_naming_the_problem(tmp_path, text, multi_tenant, reason):
    with pytest.raises(ConfigError, match=reason):
        load_access(settings(credentials_file(tmp_path, text), multi_tenant))


def test_a_missing_credentials_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        load_access(settings(str(tmp_path / "nope.toml"), multi_tenant=True))
