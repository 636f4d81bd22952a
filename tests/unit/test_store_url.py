"""Store URLs pick the backend and carry the database; bad URLs say what is wrong."""

import pytest

from warehouse.errors import ConfigError
from warehouse.store import parse_store_url


def test_http_url_names_host_port_and_database():
    url = parse_store_url("http://127.0.0.1:8123/metrics")
    assert (url.backend, url.host, url.port, url.database, url.secure) == (
        "clickhouse",
        "127.0.0.1",
        8123,
        "metrics",
        False,
    )


def test_database_defaults_to_llmwh_and_ports_to_the_clickhouse_defaults():
    assert parse_store_url("http://ch.internal").database == "llmwh"
    assert parse_store_url("http://ch.internal").port == 8123
    assert parse_store_url("https://ch.internal").port == 8443


def test_clickhouse_scheme_carries_credentials_which_are_never_printed():
    url = parse_store_url("clickhouse://writer:s%40cret@ch:8123/llmwh")
    assert (url.username, url.password) == ("writer", "s@cret")
    assert "s@cret" not in url.redacted()
    assert url.redacted() == "http://writer@ch:8123/llmwh"


def test_chdb_and_duckdb_urls_name_a_path():
    assert parse_store_url("chdb:///var/lib/llmwh").path == "/var/lib/llmwh"
    duck = parse_store_url("duckdb:///tmp/w.duckdb?database=lab")
    assert (duck.backend, duck.path, duck.database) == ("duckdb", "/tmp/w.duckdb", "lab")
    assert parse_store_url("duckdb://").path == ""


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("", "invalid store URL"),
        ("localhost:8123", "invalid store URL"),
        ("postgres://db/x", "unsupported store URL scheme 'postgres'"),
        ("http:///llmwh", "no host"),
        ("http://ch:99999/x", "invalid store URL"),
        ("http://ch:8123/bad-name", "invalid database name 'bad-name'"),
        ("duckdb:///x.duckdb?database=x;drop", "invalid database name"),
        ("chdb:///x?databse=lab", "unknown store URL option"),
    ],
)
def test_bad_urls_are_config_errors_naming_the_problem(url, complaint):
    with pytest.raises(ConfigError, match=complaint):
        parse_store_url(url)


def test_a_printed_url_opens_the_same_store_again():
    for text in (
        "duckdb:///tmp/w.duckdb?database=lab",
        "chdb:///var/lib/llmwh",
        "https://writer@ch:8443/llmwh?connect_timeout=5",
    ):
        url = parse_store_url(text)
        assert parse_store_url(url.redacted()) == url
