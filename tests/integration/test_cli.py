"""`llmwh clickhouse ...` and `llmwh migrate ...` as a user runs them: real processes."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
from polling import poll_until

from warehouse.store import open_store
from warehouse.store.embedded import server_status, stop_server


def clean_environment(**extra: str) -> dict[str, str]:
    """The test's environment without a developer's LLMWH_* settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")} | extra


# An empty working directory: a developer's ./llmwh.toml must not steer the tests.
WORKDIR = tempfile.mkdtemp(prefix="llmwh-cli-")


def llmwh(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "warehouse", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=WORKDIR,
        env=clean_environment(**(env or {})),
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
    result = llmwh("migrate", "status", "--data", data_dir)
    assert result.returncode == 1
    assert "llmwh clickhouse start" in result.stderr and result.stderr.count("\n") == 1


def test_a_bad_store_url_is_one_line(data_dir):
    result = llmwh("migrate", "status", "--store", "postgres://x/y")
    assert result.returncode == 1
    assert result.stderr.startswith("llmwh: error: unsupported store URL scheme 'postgres'")


def start_serve(data_dir: str, cwd) -> subprocess.Popen:
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warehouse",
            "serve",
            "--data",
            data_dir,
            "--http-port",
            "0",
            "--tcp-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=clean_environment(),
    )
    lines = []
    for line in serve.stdout:
        lines.append(line)
        if line.startswith("  acknowledged:"):  # the banner's line after "warehouse ready"
            serve.acknowledged = line.strip()  # type: ignore[attr-defined]
            return serve
    serve.kill()
    raise AssertionError(f"serve never got ready: {lines} {serve.stderr.read()}")


def test_serve_starts_migrates_and_stops_its_server_on_ctrl_c(data_dir, tmp_path):
    serve = start_serve(data_dir, tmp_path)
    info = server_status(data_dir)
    assert info is not None
    assert "applied" in llmwh("migrate", "status", "--data", data_dir).stdout
    serve.send_signal(signal.SIGINT)
    assert serve.wait(timeout=60) == 0
    assert server_status(data_dir) is None


def test_serve_keeps_its_log_in_the_data_directory_and_a_second_serve_there_is_refused(
    data_dir, tmp_path
):
    serve = start_serve(data_dir, tmp_path)
    try:
        wal = os.path.join(data_dir, "wal")
        assert serve.acknowledged == (
            f"acknowledged:  once synced to the write-ahead log in {wal} "
            "(--no-wal: once in the store)"
        )
        checkpoint = os.path.join(wal, "checkpoint.json")
        poll_until(lambda: os.path.exists(checkpoint), "the receiver to open its log")
        # A second `llmwh serve` on the same directory would find the same ClickHouse
        # running, but the log is the first one's: refused before it starts anything.
        second = llmwh("serve", "--data", data_dir, "--listen", "127.0.0.1:1")
        assert second.returncode == 1
        assert f"process {serve.pid} keeps its write-ahead log in {wal}" in second.stderr
        assert "--no-wal" in second.stderr
    finally:
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=60) == 0


def test_serve_fails_loudly_when_its_server_is_stopped_under_it(data_dir, tmp_path):
    serve = start_serve(data_dir, tmp_path)
    started = time.monotonic()
    stopped = llmwh("clickhouse", "stop", "--data", data_dir)
    assert stopped.returncode == 0
    assert time.monotonic() - started < 15  # no waiting out the grace period on a zombie
    assert serve.wait(timeout=30) == 1
    assert "the embedded ClickHouse stopped" in serve.stderr.read()


def test_migrating_a_cluster_needs_its_shards_in_the_store_url(embedded_server):
    result = llmwh("migrate", "up", "--cluster", "c2", "--store", embedded_server.store_url())
    assert result.returncode == 1
    assert "?cluster=NAME&shards=HOST1:PORT1,HOST2:PORT2" in result.stderr
    assert "llmwh migrate plan --cluster c2" in result.stderr


def test_ingest_loads_files_and_refuses_a_bad_one_whole(tmp_path):
    from warehouse.ingest.events import encode_ndjson
    from warehouse.synthetic import synthetic_requests

    good = tmp_path / "good.ndjson"
    good.write_bytes(encode_ndjson(synthetic_requests(300, seed=1)))
    parquet = tmp_path / "more.parquet"
    import pyarrow.parquet as pq

    pq.write_table(synthetic_requests(200, seed=2), parquet)
    store = f"duckdb://{tmp_path / 'w.duckdb'}"
    assert llmwh("migrate", "up", "--store", store).returncode == 0

    loaded = llmwh("ingest", str(good), str(parquet), "--store", store)
    assert loaded.returncode == 0, loaded.stderr
    assert "ingested 500 requests from 2 file(s)" in loaded.stdout

    bad = tmp_path / "bad.ndjson"
    bad.write_bytes(good.read_bytes().replace(b'"status": "ok"', b'"status": "fine"', 1))
    refused = llmwh("ingest", str(good), str(bad), "--store", store)
    assert refused.returncode == 1
    assert str(bad) in refused.stderr and "status" in refused.stderr

    opened = open_store(store)
    try:
        total = opened.query_arrow("SELECT count(*) AS n FROM requests").column("n")[0].as_py()
    finally:
        opened.close()
    assert total == 500  # the refused run wrote nothing, not even the good file
