"""The one parser of the CLI's repeated KEY=VALUE options, and the options built on it."""

import polars as pl
import pytest

from warehouse.cli.options import columns, filters, key_values, nonempty, thresholds
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


def test_columns_a_table_shows_its_defaults_machines_every_column_and_asked_ones_in_order():
    frame = pl.DataFrame(
        {n: [1] for n in ("zone", "count", "score", "burn_rate_5m", "burn_rate_1h")}
    )
    default = columns(None, False, ["zone", "count", "burn_rate_*"])
    assert default.pick(frame, "table") == ["zone", "count", "burn_rate_5m", "burn_rate_1h"]
    assert default.pick(frame, "json") == frame.columns
    assert columns(None, True, ["zone"]).pick(frame, "table") == frame.columns
    asked = columns(["score,zone", "count"], True, ["zone"])
    assert asked.pick(frame, "table") == asked.pick(frame, "csv") == ["score", "zone", "count"]
    with pytest.raises(
        ConfigError, match="unknown column 'p' in --columns; this answer has zone, "
    ):
        columns(["p"], False, None).pick(frame, "table")


def test_columns_with_no_default_fit_from_the_left():
    frame = pl.DataFrame({f"column_{k}": ["x" * 20] for k in range(9)})
    assert columns(None, False, None).pick(frame, "table") == frame.columns[:4]
    assert columns(None, False, []).pick(frame, "table") == frame.columns
