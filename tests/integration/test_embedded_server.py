"""The embedded ClickHouse server: lifecycle, durability and its clear errors."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
from polling import poll_until

from warehouse.errors import ChdbMissing, DataDirLocked, PortInUse, ServerAlreadyRunning
from warehouse.store import open_store
from warehouse.store.embedded import server_status, start_server, stop_server
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests


@pytest.fixture
def data_dir(tmp_path):
    yield tmp_path / "data"
    stop_server(tmp_path / "data")


def count_requests(info) -> int:
    store = open_store(info.store_url())
    try:
        return store.query_arrow("SELECT count() AS n FROM llmwh.requests").column("n")[0].as_py()
    finally:
        store.close()


def test_start_announces_itself_and_stop_keeps_the_data(data_dir):
    info = start_server(data_dir, http_port=0, tcp_port=0)
    recorded = json.loads((data_dir / "server.json").read_text())
    assert (recorded["pid"], recorded["http_port"], recorded["tcp_port"]) == (
        info.pid,
        info.http_port,
        info.tcp_port,
    )
    assert server_status(data_dir) == info
    with socket.create_connection(("127.0.0.1", info.tcp_port), timeout=2):
        pass  # the native protocol port listens too

    store = open_store(info.store_url())
    Migrator(store).up()
    store.insert_arrow("requests", synthetic_requests(5_000, seed=3))
    store.close()

    assert stop_server(data_dir) == info
    assert server_status(data_dir) is None
    assert not (data_dir / "server.json").exists()

    again = start_server(data_dir, http_port=0, tcp_port=0)
    assert again.pid != info.pid
    assert count_requests(again) == 5_000


def test_a_second_server_on_the_same_directory_is_refused(data_dir):
    info = start_server(data_dir, http_port=0, tcp_port=0)
    with pytest.raises(ServerAlreadyRunning, match=f"pid {info.pid}"):
        start_server(data_dir, http_port=0, tcp_port=0)


def test_a_taken_port_is_named(data_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=f"port {port} .* --http-port"):
            start_server(data_dir, http_port=port, tcp_port=0)
        with pytest.raises(PortInUse, match="--tcp-port"):
            start_server(data_dir, http_port=0, tcp_port=port)
    assert server_status(data_dir) is None


def test_a_directory_held_by_another_clickhouse_is_reported_locked(data_dir):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time, chdb.session
                session = chdb.session.Session({str(data_dir / "clickhouse")!r})
                print("holding", flush=True)
                time.sleep(120)  # holds the directory until the test kills it
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(DataDirLocked, match="locked by another ClickHouse process"):
            start_server(data_dir, http_port=0, tcp_port=0)
    finally:
        holder.kill()
        holder.wait()


def test_missing_chdb_is_one_clear_error(data_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "chdb", None)
    with pytest.raises(ChdbMissing, match="pip install 'chdb-core=="):
        start_server(data_dir)


def test_a_killed_server_leaves_no_false_running_state(data_dir):
    info = start_server(data_dir, http_port=0, tcp_port=0)
    os.kill(info.pid, signal.SIGKILL)
    poll_until(
        lambda: server_status(data_dir),
        "the killed server to be reported not running",
        until=lambda status: status is None,
        timeout=10,
        every=0.05,
    )
    assert start_server(data_dir, http_port=0, tcp_port=0).pid != info.pid


def test_stop_without_a_server_is_harmless(data_dir):
    assert stop_server(data_dir) is None


def test_stop_finds_a_server_that_never_announced_itself(data_dir):
    info = start_server(data_dir, http_port=0, tcp_port=0)
    (data_dir / "server.json").unlink()  # as if its start had been interrupted
    assert server_status(data_dir) is None
    stopped = stop_server(data_dir)
    assert stopped is not None and stopped.pid == info.pid
    assert start_server(data_dir, http_port=0, tcp_port=0).pid != info.pid


def test_two_free_ports_are_two_different_ports(data_dir):
    info = start_server(data_dir, http_port=0, tcp_port=0)
    assert info.http_port != info.tcp_port
