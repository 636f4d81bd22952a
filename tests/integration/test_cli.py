"""`llmwh clickhouse ...` and `llmwh migrate ...` as a user runs them: real processes."""

import os
import socket
import subprocess
import sys

import pytest

from warehouse.store.embedded import stop_server


def llmwh(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "warehouse", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def data_dir(tmp_path):
    yield str(tmp_path / "data")
    stop_server(tmp_path / "data")


def test_start_status_migrate_stop(data_dir):
    started = llmwh(
        "clickhouse", "start", "--data", data_dir, "--http-port", "0", "--tcp-port", "0"
    )
    assert started.returncode == 0, started.stderr
    assert "ClickHouse 26." in started.stdout and "store URL: http://127.0.0.1:" in started.stdout

    status = llmwh("clickhouse", "status", "--data", data_dir)
    assert status.returncode == 0 and status.stdout.startswith("running: pid ")

    plan = llmwh("migrate", "plan", "--data", data_dir)
    assert plan.returncode == 0
    assert (
        "-- 0001_core.sql" in plan.stdout
        and "CREATE TABLE IF NOT EXISTS llmwh.requests" in plan.stdout
    )
    assert "pending" in llmwh("migrate", "status", "--data", data_dir).stdout  # plan ran nothing

    up = llmwh("migrate", "up", "--data", data_dir)
    assert up.returncode == 0 and "applied 0001_core" in up.stdout
    assert "up to date" in llmwh("migrate", "up", "--data", data_dir).stdout
    assert llmwh("migrate", "plan", "--data", data_dir).stdout == ""

    stopped = llmwh("clickhouse", "stop", "--data", data_dir)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    after = llmwh("clickhouse", "status", "--data", data_dir)
    assert after.returncode == 1 and after.stdout.startswith("not running")


def test_cluster_plan_prints_distributed_ddl(embedded_server):
    plan = llmwh(
        "migrate", "plan", "--all", "--cluster", "c2", "--store", embedded_server.store_url()
    )
    assert plan.returncode == 0, plan.stderr
    assert "ENGINE = Distributed(c2, llmwh, requests_local, cityHash64(request_id))" in plan.stdout
    assert "CREATE DATABASE IF NOT EXISTS llmwh ON CLUSTER c2;" in plan.stdout


def test_cluster_rendering_is_refused_for_duckdb(tmp_path):
    store = f"duckdb://{tmp_path}/x.duckdb"
    plan = llmwh("migrate", "plan", "--all", "--cluster", "c2", "--store", store)
    assert plan.returncode == 1
    assert plan.stderr == "llmwh: error: --cluster applies to ClickHouse stores only\n"


def test_a_taken_port_is_one_line_and_a_failing_exit_code(data_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = llmwh("clickhouse", "start", "--data", data_dir, "--http-port", port)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"llmwh: error: port {port} on 127.0.0.1 is already in use")


def test_missing_chdb_is_one_line_and_a_failing_exit_code(data_dir):
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['chdb'] = None; sys.argv = ['llmwh', *sys.argv[1:]]; "
            "from warehouse.cli import main; main()",
            "clickhouse",
            "start",
            "--data",
            data_dir,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("llmwh: error: chdb-core is not installed")
    assert result.stderr.count("\n") == 1


def test_no_store_and_no_server_says_what_to_do(data_dir):
    result = llmwh("migrate", "status", "--data", data_dir, env={"LLMWH_STORE": ""})
    assert result.returncode == 1
    assert "llmwh clickhouse start" in result.stderr and result.stderr.count("\n") == 1


def test_a_bad_store_url_is_one_line(data_dir):
    result = llmwh("migrate", "status", "--store", "postgres://x/y")
    assert result.returncode == 1
    assert result.stderr.startswith("llmwh: error: unsupported store URL scheme 'postgres'")
