"""The one parser of the CLI's repeated KEY=VALUE options, and the options built on it."""

import pytest

from warehouse.cli.options import filters, key_values, nonempty, thresholds
from warehouse.errors import ConfigError


def test_keys_are_stripped_and_values_converted():
    assert key_values([" a =1", "b=2.5"], "--x", "K=V", value=float) == [("a", 1.0), ("b", 2.5)]
    assert key_values(["name= raw "], "--param", "NAME=VALUE", value=str) == [("name", " raw ")]
    assert key_values(
        ["X-Scope-OrgID: a:b"], "--header", "NAME: VALUE", value=nonempty, sep=":"
    ) == [("X-Scope-OrgID", "a:b")]
    assert key_values(None, "--x", "K=V", value=str) == []


@pytest.mark.parametrize("item", ["novalue", "=1", " =1", "a=", "a= ", "a=x"])
def test_a_bad_item_is_one_error_naming_the_option_and_the_form(item):
    convert = float if item == "a=x" else nonempty
    with pytest.raises(ConfigError) as raised:
        key_values(["ok=1", item], "--opt", "KEY=NUMBER", value=convert)
    assert str(raised.value) == f"bad --opt {item!r}: expected KEY=NUMBER"


def test_where_and_threshold():
    assert filters(["model=a, b", "model=c", "zone=z"]) == {"model": ["a", "b", "c"], "zone": ["z"]}
    assert thresholds(["ttft_ms=200", "e2e_ms=1e3"]) == {"ttft_ms": 200.0, "e2e_ms": 1000.0}
    with pytest.raises(ConfigError, match="bad --where 'tenant': expected DIMENSION=VALUE"):
        filters(["tenant"])
    with pytest.raises(ConfigError, match="expected LATENCY=MILLISECONDS"):
        thresholds(["ttft_ms=abc"])
