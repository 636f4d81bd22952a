"""Credentials: a bearer token or basic auth, either when both are configured."""

from __future__ import annotations

import base64

import pytest

from warehouse.auth import authorized, challenge, credentials

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
