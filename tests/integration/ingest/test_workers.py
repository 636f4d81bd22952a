"""`llmwh serve --workers N`: receiver processes sharing one port, each with its own log.

Real `llmwh serve` processes on the embedded ClickHouse, written to over fresh
connections (so the kernel spreads them over the workers): every acknowledged sample is
stored exactly once when writes go to both workers, when a worker is killed with
SIGKILL mid-load (its parent starts it again, and it replays its log), when the parent
is killed (its workers die with it; the next serve replays their logs), and when a
later serve runs fewer workers (the logs of the others are replayed, then removed).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import cramjam
import pytest
from polling import poll_until
from senders import free_port, settle, wait_for, warehouse_samples

from warehouse.store import open_store
from warehouse.store.embedded import server_status, stop_server
from warehouse.wire.prometheus import V1

SAMPLES = 10
"""Samples in each body, of a series of its own."""

pytestmark = pytest.mark.slow


class Serve:
    """`llmwh serve --data DIR --workers N` on fixed ports; ``env`` adds settings."""

    def __init__(self, root: Path, workers: int, env: dict[str, str] | None = None):
        self.root = root
        self.data = root / "data"
        self.ports = [free_port() for _ in range(3)]  # receiver, ClickHouse HTTP and TCP
        self.env = env or {}
        self.process: subprocess.Popen | None = None
        self.start(workers)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    def start(self, workers: int) -> None:
        log = open(self.root / "serve.log", "a")  # noqa: SIM115 - the child writes it
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "warehouse", "serve", "--data", str(self.data),
             "--listen", f"127.0.0.1:{self.ports[0]}", "--workers", str(workers),
             "--http-port", str(self.ports[1]), "--tcp-port", str(self.ports[2])],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env={**env, **self.env},
        )  # fmt: skip
        wait_for(f"{self.base}/healthz", timeout=90)

    def worker_pid(self, index: int) -> int | None:
        """The pid holding worker ``index``'s log now (its lock file names it)."""
        lock = self.data / "wal" / ("lock" if index == 0 else f"{index}/lock")
        try:
            pid = int(lock.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def requests_by_worker(self) -> dict[str, float]:
        """Acknowledged remote writes per worker, from whichever worker answers /metrics."""
        with urllib.request.urlopen(f"{self.base}/metrics", timeout=10) as response:
            text = response.read().decode()
        found: dict[str, float] = {}
        pattern = r"^llmwh_receiver_http_requests_total\{(.*)\} (\S+)$"
        for labels, value in re.findall(pattern, text, re.MULTILINE):
            if 'endpoint="/api/v1/write"' in labels and 'code="204"' in labels:
                worker = re.search(r'worker="(\d+)"', labels)
                found[worker.group(1) if worker else "0"] = float(value)
        return found

    def log(self) -> str:
        return (self.root / "serve.log").read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=90)
        stop_server(self.data)


class Senders:
    """Threads sending bodies of series of their own, each over a new connection;
    remembers which bodies were acknowledged and which were sent at all."""

    def __init__(self, base: str, threads: int = 6):
        self.url = f"{base}/api/v1/write"
        self.start_ms = int(time.time() * 1000) - 60_000
        self.acknowledged: set[int] = set()
        self.sent: set[int] = set()
        self._next = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Senders:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def wait_acknowledged(self, count: int, timeout: float = 60) -> None:
        poll_until(lambda: len(self.acknowledged) >= count, f"{count} acknowledged bodies",
                   timeout=timeout, every=0.05)  # fmt: skip

    def send_one(self) -> None:
        with self._lock:
            index, self._next = self._next, self._next + 1
            self.sent.add(index)
        request = urllib.request.Request(
            self.url, data=body(index, self.start_ms), method="POST",
            headers={"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                     "X-Prometheus-Remote-Write-Version": "0.1.0"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                if response.status < 300:
                    with self._lock:
                        self.acknowledged.add(index)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            self._stop.wait(0.05)  # down (a kill): not acknowledged; the next body tries again

    def expected(self, bodies: set[int]) -> set[tuple]:
        return {sample for index in bodies for sample in samples_of(index, self.start_ms)}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.send_one()


def body(index: int, start_ms: int) -> bytes:
    request = V1.WriteRequest()
    series = request.timeseries.add()
    series.labels.add(name="__name__", value="workers_test")
    series.labels.add(name="body", value=str(index))
    for k in range(SAMPLES):
        series.samples.add(value=float(index * SAMPLES + k), timestamp=start_ms + k)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def samples_of(index: int, start_ms: int) -> list[tuple]:
    labels = (("__name__", "workers_test"), ("body", str(index)))
    return [(labels, start_ms + k, float(index * SAMPLES + k)) for k in range(SAMPLES)]


def stored(serve: Serve, senders: Senders) -> tuple[set[tuple], int]:
    """The samples the store holds for the run, and how many rows hold them (a sample
    stored twice is two rows until a merge)."""
    url = server_status(serve.data).store_url()
    start, end = senders.start_ms / 1000 - 1, senders.start_ms / 1000 + 1
    found = warehouse_samples(url, start, end)
    store = open_store(url)
    try:
        rows = store.query_arrow(f"SELECT count() AS n FROM {store.database}.samples")
    finally:
        store.close()
    return found, rows.column("n")[0].as_py()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped) is no receiver.
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def check_exactly_once(serve: Serve, senders: Senders) -> None:
    found, rows = stored(serve, senders)
    acknowledged, sent = senders.expected(senders.acknowledged), senders.expected(senders.sent)
    assert acknowledged - found == set(), f"{len(acknowledged - found)} acknowledged missing"
    assert found - sent == set(), "samples no one sent"
    assert rows == len(found), f"{rows - len(found)} rows stored twice"


def test_writes_spread_over_two_workers_are_stored_once(tmp_path):
    serve = Serve(tmp_path, workers=2)
    try:
        with Senders(serve.base) as senders:
            senders.wait_acknowledged(300)
        settle(serve.base)
        by_worker = serve.requests_by_worker()
        assert set(by_worker) == {"0", "1"} and all(by_worker.values()), by_worker
        assert sum(by_worker.values()) == len(senders.acknowledged)
        assert senders.acknowledged == senders.sent
        check_exactly_once(serve, senders)
    finally:
        serve.close()


def test_kill_9_of_a_worker_then_of_serve_loses_nothing_acknowledged(tmp_path):
    """Inserted every 3 s, so each kill finds acknowledged writes only in the log."""
    serve = Serve(tmp_path, workers=2, env={"LLMWH_WAL_FLUSH_MS": "3000"})
    try:
        with Senders(serve.base) as senders:
            senders.wait_acknowledged(100)
            # Under load a worker may still be opening its log after another answered.
            victim = poll_until(lambda: serve.worker_pid(1), "worker 1 to hold its log",
                                timeout=60)  # fmt: skip
            os.kill(victim, signal.SIGKILL)
            poll_until(lambda: serve.worker_pid(1) not in (None, victim),
                       "the parent to start worker 1 again", timeout=60)  # fmt: skip
            senders.wait_acknowledged(len(senders.acknowledged) + 100)
            assert serve.process is not None
            workers = [serve.worker_pid(0), serve.worker_pid(1)]
            serve.process.kill()  # the workers die with it
            serve.process.wait()
            poll_until(lambda: not any(p and _alive(p) for p in workers),
                       "the workers to die with their parent", timeout=30)  # fmt: skip
            serve.start(2)
            senders.wait_acknowledged(len(senders.acknowledged) + 100)
        settle(serve.base)
        assert "starting it again" in serve.log()
        check_exactly_once(serve, senders)
    finally:
        serve.close()


def test_logs_of_workers_no_longer_run_are_replayed_then_removed(tmp_path):
    """Three workers that never insert (a flush period of 10 minutes) are killed with
    their parent; a serve of one worker inserts all three logs."""
    serve = Serve(tmp_path, workers=3, env={"LLMWH_WAL_FLUSH_MS": "600000"})
    try:
        with Senders(serve.base) as senders:
            poll_until(lambda: len(serve.requests_by_worker()) == 3 and
                       all(serve.requests_by_worker().values()),
                       "every worker to have taken writes", timeout=60)  # fmt: skip
        assert serve.process is not None
        serve.process.kill()
        serve.process.wait()
        for index in (1, 2):
            poll_until(lambda i=index: serve.worker_pid(i) is None, f"worker {index} to die")
            log = serve.data / "wal" / str(index)
            assert sum(p.stat().st_size for p in log.glob("*.wal")) > 0
        serve.env = {}
        serve.start(1)
        settle(serve.base)
        assert not (serve.data / "wal" / "1").exists()
        assert not (serve.data / "wal" / "2").exists()
        check_exactly_once(serve, senders)
        assert "a worker no longer run" in serve.log()
    finally:
        serve.close()
