"""Bad input never ends in a traceback: the CLI says one ``llmwh: error:`` line and exits
non-zero, and the Python API raises an error from ``warehouse.errors``."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import typer.main

from warehouse import connect
from warehouse.cli import app, run
from warehouse.errors import WarehouseError

UNREACHABLE = "http://127.0.0.1:1/llmwh"  # nothing listens on port 1


@pytest.fixture(autouse=True)
def clean_cwd(tmp_path, monkeypatch):
    """No developer's llmwh.toml or LLMWH_* settings steer these runs."""
    monkeypatch.chdir(tmp_path)
    for name in [n for n in __import__("os").environ if n.startswith("LLMWH_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def duckdb_store(tmp_path_factory) -> str:
    """A migrated DuckDB warehouse: commands get past the store to the bad argument."""
    url = f"duckdb:///{tmp_path_factory.mktemp('bad-input') / 'w.duckdb'}"
    with connect(url) as warehouse:
        warehouse.migrate()
    return url


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("files")
    not_utf8 = root / "latin1.ndjson"
    not_utf8.write_bytes(b'{"model": "caf\xe9"}\n')
    empty = root / "empty.ndjson"
    empty.write_bytes(b"")
    slo = root / "latin1.toml"
    slo.write_bytes(b'name = "caf\xe9"\n')
    return {"not_utf8": not_utf8, "empty": empty, "slo_not_utf8": slo}


def assert_one_error_line(argv: list[str], capsys) -> str:
    code = run(argv)
    out, err = capsys.readouterr()
    assert code != 0, f"{argv} exited 0"
    assert "Traceback" not in out + err, f"{argv} printed a traceback:\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmwh: error: "), (
        f"{argv} did not end in one error line:\n{err}"
    )
    return lines[0]


# -- every typed option of every command ---------------------------------------------


def leaf_commands():
    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, command

    yield from walk(typer.main.get_command(app), [])


def typed_options() -> Iterator[tuple[list[str], str, set[type]]]:
    """(command path, option, the types it takes) for every ``--option`` of every command;
    ``int | None`` and ``list[str] | None`` take {int} and {str}."""
    for path, command in leaf_commands():
        hints = typing.get_type_hints(command.callback)
        for param in command.params:
            if not getattr(param, "opts", None) or not param.opts[0].startswith("--"):
                continue
            base = hints[param.name]
            args = [a for a in typing.get_args(base) if a is not type(None)]
            kinds = {base, *args, *(typing.get_args(a)[0] for a in args if typing.get_args(a))}
            yield path, param.opts[0], kinds


def numeric_options() -> list[tuple[list[str], str]]:
    """(command path, option) for every option that takes a number."""
    return [(path, option) for path, option, kinds in typed_options() if kinds & {int, float}]


def test_the_walk_finds_the_numeric_options():
    options = numeric_options()
    assert (["generate"], "--diurnal") in options
    assert (["drill"], "--limit") in options
    assert len(options) >= 15


@pytest.mark.parametrize(
    ("path", "option"), numeric_options(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_a_word_where_a_number_goes_is_one_error_line(path, option, capsys):
    line = assert_one_error_line([*path, option, "twelve"], capsys)
    assert option in line


def test_an_unknown_command_or_option_is_one_error_line(capsys):
    assert "nope" in assert_one_error_line(["nope"], capsys)
    assert "--nope" in assert_one_error_line(["drill", "--nope"], capsys)


# -- values out of their domain ------------------------------------------------------


CLI_CASES = {
    "diurnal above 1": (
        ["generate", "-n", "10", "--diurnal", "1.5", "--out", "x.ndjson"],
        "diurnal",
    ),
    "negative request count": (["generate", "-n", "-1", "--out", "x.ndjson"], "requests"),
    "zero send rate": (["generate", "-n", "5", "--send", UNREACHABLE, "--rate", "0"], "rate"),
    "unreachable store": (["drill", "--store", UNREACHABLE, "--by", "model"], "unreachable"),
    "unknown store scheme": (["drill", "--store", "mysql://x/y"], "mysql"),
    "unreachable store, sql": (["sql", "--store", UNREACHABLE, "SELECT 1"], "unreachable"),
    "unreachable store, migrate": (["migrate", "up", "--store", UNREACHABLE], "unreachable"),
    "missing config file": (["drill", "--config", "no-such.toml"], "no-such.toml"),
    "compare: no rows": (["compare", "--rows", "0"], "positive"),
    "compare: unknown backend": (["compare", "--backends", "oracle"], "oracle"),
    "compare: bad fault": (["compare", "--fault", "nonsense"], "nonsense"),
    "export: bad listen address": (["export", "--slo", "chat", "--listen", "here"], "here"),
    "export: zero interval": (["export", "--interval", "0"], "--interval"),
    "export: negative interval": (["export", "--interval", "-1"], "--interval"),
    "export: interval nan": (["export", "--interval", "nan"], "--interval"),
    "serve: demo rate nan": (["serve", "--demo-rate", "nan"], "--demo-rate"),
    "serve: a file as the WAL": (["serve", "--wal", "/etc/passwd"], "/etc/passwd"),
    "serve: a WAL and none": (["serve", "--wal", "w", "--no-wal"], "pick one"),
    "incident: negative severity": (
        ["generate", "-n", "10", "-i", "zone-ttft:severity=-3", "--out", "x.ndjson"],
        "severity",
    ),
    "incident: share above 1": (
        ["generate", "-n", "10", "-i", "tenant-errors:severity=3", "--out", "x.ndjson"],
        "share",
    ),
    "store: timeout not a number": (
        ["sql", "SELECT 1", "--store", "http://127.0.0.1:1/llmwh?connect_timeout=abc"],
        "connect_timeout",
    ),
    "store: timeout nan": (
        ["sql", "SELECT 1", "--store", "http://127.0.0.1:1/llmwh?connect_timeout=nan"],
        "connect_timeout",
    ),
    "store: zero timeout": (
        ["sql", "SELECT 1", "--store", "http://127.0.0.1:1/llmwh?connect_timeout=0"],
        "connect_timeout",
    ),
    "store: negative timeout": (
        ["sql", "SELECT 1", "--store", "http://127.0.0.1:1/llmwh?send_receive_timeout=-1"],
        "send_receive_timeout",
    ),
    "store: broken IPv6 host": (["sql", "SELECT 1", "--store", "http://[::1"], "IPv6"),
}


@pytest.mark.parametrize(("argv", "names"), CLI_CASES.values(), ids=CLI_CASES.keys())
def test_a_value_out_of_its_domain_is_one_error_line(argv, names, capsys):
    assert names in assert_one_error_line(argv, capsys)


STORE_CASES = {
    "unknown dimension": (["drill", "--by", "colour"], "colour"),
    "unknown measure": (["drill", "-m", "p101_ttft_ms"], "p101_ttft_ms"),
    "negative limit": (["drill", "--by", "model", "--limit", "-5"], "limit"),
    "huge limit": (["drill", "--by", "model", "--limit", "9" * 30], "limit"),
    "unreadable time": (["drill", "--since", "yesterday-ish"], "yesterday-ish"),
    "filter without a value": (["drill", "--where", "model"], "model"),
    "threshold not a number": (["drill", "-m", "attainment", "-t", "ttft_ms=fast"], "fast"),
    "empty interval": (["timeseries", "--interval", ""], "duration"),
    "zero interval": (["timeseries", "--interval", "0m"], "0m"),
    "unknown format": (["drill", "--format", "xlsx"], "xlsx"),
    "unknown SLO": (["sla", "--slo", "no-such-slo"], "no-such-slo"),
    "a write through sql": (["sql", "DROP TABLE requests"], "read-only"),
    "empty sql": (["sql", ""], "SQL"),
    "drift: baseline of one": (["drift", "--baseline", "1"], "baseline"),
    "drift: baseline past the range": (["drift", "--baseline", "99999999"], "baseline"),
    "drift: unknown direction": (["drift", "--direction", "sideways"], "sideways"),
    "ab: confidence above 1": (["ab", "--level", "1.5"], "level"),
    "root cause: negative limit": (["root-cause", "--limit", "-1"], "limit"),
}


@pytest.mark.parametrize(("argv", "names"), STORE_CASES.values(), ids=STORE_CASES.keys())
def test_a_bad_question_is_one_error_line(argv, names, duckdb_store, capsys):
    line = assert_one_error_line([*argv, "--store", duckdb_store], capsys)
    assert names in line


def test_files_that_cannot_be_read_are_one_error_line(duckdb_store, files, capsys):
    store = ["--store", duckdb_store]
    assert "missing.ndjson" in assert_one_error_line(["ingest", "missing.ndjson", *store], capsys)
    assert_one_error_line(["ingest", str(files["not_utf8"]), *store], capsys)
    assert_one_error_line(["sla", "--slo", str(files["slo_not_utf8"]), *store], capsys)
    assert_one_error_line(["drill", "--config", str(files["slo_not_utf8"]), *store], capsys)


# -- the Python API ------------------------------------------------------------------


API_CASES = {
    "unknown dimension": lambda w: w.drill(by=["colour"]),
    "unknown measure": lambda w: w.drill(measures=["p101_ttft_ms"]),
    "unreadable time": lambda w: w.drill(since="yesterday-ish"),
    "until before since": lambda w: w.drill(since="1h", until="2h"),
    "negative limit": lambda w: w.drill(by=["model"], limit=-1),
    "zero interval": lambda w: w.timeseries(interval="0m"),
    "unknown SLO": lambda w: w.sla("no-such-slo"),
    "confidence above 1": lambda w: w.compare_groups(level=1.5),
    "baseline of one": lambda w: w.drift(baseline=1),
    "unknown direction": lambda w: w.drift(direction="sideways"),
    "negative share": lambda w: w.root_cause(thresholds={"ttft_ms": 200}, min_share=-1),
    "a write through sql": lambda w: w.sql("DROP TABLE requests"),
    "rows of another shape": lambda w: w.insert_requests(pa.table({"colour": ["red"]})),
}


@pytest.mark.parametrize("call", API_CASES.values(), ids=API_CASES.keys())
def test_the_api_raises_from_the_error_tree(call, duckdb_store):
    with connect(duckdb_store) as warehouse, pytest.raises(WarehouseError):
        call(warehouse)


def test_connect_to_an_unknown_scheme_raises_from_the_error_tree():
    with pytest.raises(WarehouseError, match="mysql"):
        connect("mysql://x/y")


# Commands that start servers or long runs; their text options get curated cases above.
LONG_RUNNING = {("serve",), ("export",), ("compare",), ("generate",), ("clickhouse", "start")}


def text_options() -> list[tuple[list[str], str]]:
    """(command path, option) for every option of a quick command that takes text."""
    return [
        (path, option)
        for path, option, kinds in typed_options()
        if tuple(path) not in LONG_RUNNING
        and kinds & {str, Path}
        and option not in ("--store", "--data", "--output")
    ]


def test_the_walk_finds_the_text_options():
    options = text_options()
    assert (["drill"], "--by") in options and (["sla"], "--slo") in options
    assert len(options) >= 30


@pytest.mark.parametrize("value", ["", "x" * 100_000], ids=["empty", "huge"])
@pytest.mark.parametrize(
    ("path", "option"), text_options(), ids=lambda v: " ".join(v) if isinstance(v, list) else v
)
def test_an_empty_or_huge_text_is_taken_or_one_error_line(
    path, option, value, duckdb_store, capsys
):
    argv = [*path, option, value, "--store", duckdb_store]
    if path == ["sql"]:
        argv.append("SELECT 1")
    if path == ["sla"] and option != "--slo":
        argv += ["--slo", "chat-assistant"]
    if path == ["ingest"]:
        argv.append("missing.ndjson")
    code = run(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, f"{argv[:3]} printed a traceback:\n{err[-2000:]}"
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("llmwh: error: "), err[-2000:]
