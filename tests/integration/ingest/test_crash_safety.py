"""kill -9 under load: whatever got a 2xx survives, exactly once, and retries fill the rest.

A real Prometheus scrapes itself every second and remote-writes to a real `llmwh serve`
as shipped (its write-ahead log on, under the data directory) and the embedded
ClickHouse it runs; once more with `--no-wal`, where a 2xx waits for the commit in
ClickHouse; and once with `wal_sync = false`, where a 2xx means written to the log file,
not synced (a kill of a process keeps it; a crash of the machine, not tested, may not).
Ten times, at random moments, one of the two is killed with SIGKILL and `llmwh serve`
is started again (finding its ClickHouse still running, or starting it again).
Afterwards the warehouse must hold exactly the samples Prometheus's own TSDB holds for
the run (its HTTP API is the reference): nothing an acknowledged write carried is lost,
Prometheus's retries fill in what was not acknowledged, and no sample is there twice.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from polling import poll_until
from senders import (
    free_port,
    get_json,
    sent_up_to,
    settle,
    start_prometheus,
    wait_for,
    warehouse_samples,
)
from test_prometheus_sender import prometheus_samples

from warehouse.store.embedded import server_status, stop_server

KILLS = 10


def counter(base: str, name: str) -> float:
    """A Prometheus counter's value, as Prometheus reports its own metrics."""
    result = get_json(f"{base}/api/v1/query?query=sum({name})")["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


class Warehouse:
    """`llmwh serve --data DIR` as deployed: the receiver and the embedded ClickHouse it
    starts (or finds running) on fixed ports, each killable; ``wal=False`` adds
    `--no-wal`, ``sync=False`` sets `wal_sync = false`."""

    def __init__(self, root: Path, wal: bool = True, sync: bool = True):
        self.root = root
        self.data = root / "data"
        self.wal = [] if wal else ["--no-wal"]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
        if not sync:
            self.env["LLMWH_WAL_SYNC"] = "false"
        self.ports = [free_port() for _ in range(3)]  # receiver, ClickHouse HTTP and TCP
        self.receiver: subprocess.Popen | None = None
        self.start()

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}/api/v1/write"

    def start(self) -> None:
        log = open(self.root / "serve.log", "a")  # noqa: SIM115 - the child writes it
        self.receiver = subprocess.Popen(
            [sys.executable, "-m", "warehouse", "serve", "--data", str(self.data),
             "--listen", f"127.0.0.1:{self.ports[0]}",
             "--http-port", str(self.ports[1]), "--tcp-port", str(self.ports[2]), *self.wal],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
            env=self.env,
        )  # fmt: skip
        wait_for(f"http://127.0.0.1:{self.ports[0]}/healthz", timeout=90)

    def kill_receiver(self) -> None:
        """SIGKILL `llmwh serve`; its ClickHouse lives on, and the next serve finds it."""
        self.receiver.kill()
        self.receiver.wait()

    def kill_clickhouse(self) -> None:
        """SIGKILL the embedded ClickHouse; serve sees it go and exits, failing its writes."""
        os.kill(server_status(self.data).pid, signal.SIGKILL)
        self.receiver.wait(timeout=60)

    def store_url(self) -> str:
        return server_status(self.data).store_url()

    def diagnosis(self) -> str:
        """Whether the receiver still runs, and the end of its log: for a failure."""
        code = self.receiver.poll() if self.receiver is not None else None
        state = "running" if code is None else f"exited with {code}"
        log = (self.root / "serve.log").read_text(errors="replace")[-3000:]
        return f"llmwh serve: {state}; ClickHouse: {server_status(self.data)}\n{log}"

    def close(self) -> None:
        if self.receiver is not None and self.receiver.poll() is None:
            self.receiver.terminate()
            self.receiver.wait(timeout=60)
        stop_server(self.data)

    def base(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "victim, wal, sync",
    [
        ("receiver", True, True),
        ("clickhouse", True, True),
        ("receiver", False, True),
        ("clickhouse", False, True),
        ("receiver", True, False),
    ],
    ids=["receiver", "clickhouse", "receiver-no-wal", "clickhouse-no-wal", "receiver-no-sync"],
)
def test_kill_9_loses_no_acknowledged_sample_and_duplicates_none(tmp_path, victim, wal, sync):
    """As shipped, acknowledged means synced to the write-ahead log in the data directory:
    what a killed receiver held there, or what a killed ClickHouse never took, is
    inserted by the next `llmwh serve` before it listens. With `--no-wal`, acknowledged
    means committed in ClickHouse; with `wal_sync = false`, written to the log file,
    which the kernel keeps when the process dies."""
    warehouse = Warehouse(tmp_path, wal=wal, sync=sync)
    try:
        expected, retried, dropped, got = _kill_repeatedly(warehouse, tmp_path, victim)
    finally:
        warehouse.close()  # a failed run must not leave its ClickHouse running
    kind = victim if wal and sync else f"{victim}, {'--no-wal' if not wal else 'wal_sync = false'}"
    print(f"{kind}: {KILLS} kills, {len(expected):,} samples, {retried:,.0f} retried by Prometheus")
    # The defaults keep the log under the data directory; --no-wal keeps none.
    assert (warehouse.data / "wal" / "checkpoint.json").exists() == wal
    assert len(expected) > 5_000  # the run really produced data
    assert retried > 0, "no write was interrupted: the kills proved nothing"
    assert dropped == 0, f"Prometheus gave up on {dropped} samples"
    assert expected - got == set(), f"{len(expected - got)} samples missing"
    assert got - expected == set(), f"{len(got - expected)} samples Prometheus does not hold"


def _kill_repeatedly(
    warehouse: Warehouse, tmp_path: Path, victim: str
) -> tuple[set, float, float, set]:
    """Kill ``victim`` KILLS times under Prometheus's writes; what Prometheus holds for
    the run, its retried and failed counts, and what the warehouse holds."""
    prometheus, base = start_prometheus(tmp_path, remote_write=warehouse.write_url)
    rng = random.Random(f"kill-{victim}")
    try:
        start = time.time()
        # The sleeps below shape the load, they wait for nothing: writes run for a
        # while, each kill comes at a random moment of them and leaves the warehouse
        # down for a random while, and writes run on after the last restart.
        time.sleep(2)
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.5, 3.0))  # a random moment of a run of writes
            if victim == "receiver":
                warehouse.kill_receiver()
            else:
                warehouse.kill_clickhouse()
            time.sleep(rng.uniform(0.0, 1.0))  # down for a random while
            warehouse.start()
        time.sleep(3)  # writes through the last restarted receiver
        end = time.time() - 2
        try:
            poll_until(
                lambda: sent_up_to(base, end),
                "Prometheus to have every sample of the run acknowledged after the kills",
                timeout=120,
                every=0.5,
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{warehouse.diagnosis()}") from None
        settle(warehouse.base())  # with the log, its last writes reach the store
        expected = prometheus_samples(base, start, end)
        retried = counter(base, "prometheus_remote_storage_samples_retried_total")
        dropped = counter(base, "prometheus_remote_storage_samples_failed_total")
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
    return expected, retried, dropped, warehouse_samples(warehouse.store_url(), start, end)
