"""Settings: flags beat LLMWH_* variables, which beat llmwh.toml, which beats defaults."""

from dataclasses import fields
from pathlib import Path

import pytest

from warehouse.config import Config, load_config
from warehouse.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGURATION = DOCS / "configuration.md"
EVENTS = DOCS / "remote-write.md"  # its "Per-request events" section


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for field in fields(Config):
        monkeypatch.delenv(f"LLMWH_{field.name.upper()}", raising=False)
    monkeypatch.delenv("LLMWH_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)


def test_defaults_without_any_source():
    config = load_config()
    assert config.store is None
    assert config.requests_ttl_days == 90


def test_precedence_flag_then_environment_then_file(tmp_path, monkeypatch):
    (tmp_path / "llmwh.toml").write_text('requests_ttl_days = 10\nstore = "duckdb:///f"\n')
    assert load_config().requests_ttl_days == 10
    monkeypatch.setenv("LLMWH_REQUESTS_TTL_DAYS", "20")
    assert load_config().requests_ttl_days == 20
    assert load_config(requests_ttl_days=30).requests_ttl_days == 30
    assert load_config().store == "duckdb:///f"


@pytest.mark.parametrize(
    ("toml", "complaint"),
    [
        ("requests_ttl_days = 'soon'", "must be a whole number"),
        ("requests_ttl_days = 0", "must be positive"),
        ("retention = 3", "unknown setting"),
        ("requests_ttl_days = ", "invalid TOML"),
        ("requests_ttl_days = true", "must be a whole number"),
        ("requests_ttl_days = 7.9", "must be a whole number"),
        ("store = 5", "must be a string"),
    ],
)
def test_bad_settings_name_the_setting(tmp_path, toml, complaint):
    (tmp_path / "llmwh.toml").write_text(toml)
    with pytest.raises(ConfigError, match=complaint):
        load_config()


def test_the_write_ahead_log_is_on_by_default_under_the_data_directory(monkeypatch):
    assert load_config().wal_directory() == Path("llmwh-data/wal")
    assert load_config(data_dir="/srv/llmwh").wal_directory() == Path("/srv/llmwh/wal")
    assert load_config(wal_dir="/fast/wal").wal_directory() == Path("/fast/wal")
    monkeypatch.setenv("LLMWH_WAL_DIR", "/fast/wal")
    monkeypatch.setenv("LLMWH_WAL", "false")  # off: no log, wherever it would be
    assert load_config().wal_directory() is None
    assert load_config(wal=True).wal_directory() == Path("/fast/wal")  # serve --wal DIR


def test_the_write_ahead_log_is_turned_off_in_the_file_as_anywhere(tmp_path):
    (tmp_path / "llmwh.toml").write_text("wal = false\n")
    assert load_config().wal_directory() is None
    (tmp_path / "llmwh.toml").write_text("wal = 'sometimes'\n")
    with pytest.raises(ConfigError, match="setting wal must be true or false"):
        load_config()


def test_a_named_config_file_must_exist(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    monkeypatch.setenv("LLMWH_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml does not exist"):
        load_config()


def test_an_empty_variable_means_the_default(monkeypatch):
    monkeypatch.setenv("LLMWH_DATA_DIR", "")
    monkeypatch.setenv("LLMWH_STORE", "")
    config = load_config()
    assert (config.data_dir, config.store) == ("./llmwh-data", None)


def test_every_setting_is_documented_in_the_configuration_page():
    text = CONFIGURATION.read_text()
    for field in fields(Config):
        assert f"`{field.name}`" in text, field.name


def test_every_request_field_is_documented_with_the_events_endpoint():
    from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA

    text = EVENTS.read_text()
    for name in [*REQUESTS_SCHEMA.names, *ERROR_CLASSES]:
        assert f"`{name}`" in text, name


def test_every_setting_has_a_help_text_with_its_default():
    """--help texts come from the settings' docstrings, with the code's default."""
    from dataclasses import fields

    from warehouse.config import setting_help

    for field in fields(Config):
        text = setting_help(field.name)
        default = "unset" if field.default is None else field.default
        assert text.endswith(f"[default: {default}]"), text
        assert len(text) > len(f" [default: {default}]") + 10, f"{field.name} has no help"
        assert "\n" not in text
    assert setting_help("listen").startswith("Address the receiver listens on (HOST:PORT).")
