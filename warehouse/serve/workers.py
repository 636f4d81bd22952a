"""``llmwh serve --workers N``: N receiver processes on one port, writing to one store.

One Python process spends its one interpreter lock on the request cycle, the decode
and the log's frames, and stops at about one core (docs/benchmarks.md). Here the parent
(which started or found the store and migrated it) runs N receiver processes; each
listens on the same address with ``SO_REUSEPORT`` (the kernel shares connections out
among them), keeps a write-ahead log of its own and inserts it into the store itself:
worker 0 in ``wal_dir`` (the log of a single receiver), worker *i* in ``wal_dir/i``.

- Logs of workers no longer started (``wal_dir/i`` with *i* >= N) are inserted by the
  parent before any worker starts, then removed: nothing acknowledged stays behind.
- A worker that exits is started again on its own log (which it replays first); one
  that cannot stay up (exits within :data:`QUICK_EXIT_SECONDS` of its start
  :data:`QUICK_EXITS` times in a row) stops the serve, as a single receiver that
  cannot start does.
- A worker dies with its parent (``PR_SET_PDEATHSIG``): a ``kill -9`` of ``llmwh
  serve`` leaves no receiver holding the port or a log, and loses nothing acknowledged
  (each 2xx was synced to a log first).
- OTLP/gRPC is served by worker 0 alone; sealing is the store's (ClickHouse refreshes
  its view), each worker only follows it for its own writes.
- ``/metrics`` of any worker answers for all of them (:mod:`.worker_metrics`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.config import Config
from warehouse.errors import ConfigError, EmbeddedServerError
from warehouse.ingest.wal import WriteAheadLog, check_unlocked, usable_directory
from warehouse.ingest.wal_inserter import WalInserter
from warehouse.serve.worker_metrics import WorkerMetrics
from warehouse.store import embedded
from warehouse.store.base import Store
from warehouse.store.url import parse_store_url

if TYPE_CHECKING:
    from warehouse.ingest.app import Receiver

__all__ = [
    "check_workers",
    "orphan_logs",
    "replay_orphan_logs",
    "run_workers",
    "worker_config",
    "worker_log",
]

log = logging.getLogger("llmwh")

QUICK_EXIT_SECONDS = 10.0
QUICK_EXITS = 3
_STOP_SECONDS = 60.0
_PR_SET_PDEATHSIG = 1


def worker_log(wal_directory: Path, index: int) -> Path:
    """Where worker ``index`` keeps its write-ahead log."""
    return wal_directory if index == 0 else wal_directory / str(index)


def orphan_logs(wal_directory: Path, workers: int) -> list[Path]:
    """The logs under ``wal_directory`` of worker indexes ``workers`` and up, in order."""
    if not wal_directory.is_dir():
        return []
    found = [
        (int(p.name), p)
        for p in wal_directory.iterdir()
        if p.is_dir() and p.name.isdigit() and int(p.name) >= max(workers, 1)
    ]
    return [p for _, p in sorted(found)]


def check_workers(config: Config, store: Store | None = None) -> None:
    """:class:`ConfigError` for what N workers cannot do: share a store living inside
    one process (DuckDB, chdb), or logs another process holds now."""
    workers = config.receiver_processes()
    if workers == 1:
        return
    backend = parse_store_url(store.url).backend if store is not None else None
    if backend is not None and backend != "clickhouse":
        raise ConfigError(
            f"workers = {workers} needs a ClickHouse server (the embedded one, or --store "
            f"http://...); a {backend} store lives inside one process: set workers = 1"
        )
    wal_directory = config.wal_directory()
    if wal_directory is not None:
        for index in range(1, workers):
            path = worker_log(wal_directory, index)
            if path.exists():
                check_unlocked(path)


def replay_orphan_logs(store: Store, config: Config, say: Callable[[str], None]) -> None:
    """Insert what the logs of workers no longer started hold, then remove each log the
    store has all of (one the store cannot take now stays, for the next start)."""
    wal_directory = config.wal_directory()
    if wal_directory is None:
        return
    for path in orphan_logs(wal_directory, config.receiver_processes()):
        inserter = WalInserter(store, WriteAheadLog(path), max_pending_bytes=config.wal_max_bytes)
        replayed = inserter.start()
        complete = inserter.wait_inserted(timeout=30)
        inserter.close()
        if complete:
            shutil.rmtree(path)
            say(f"inserted {replayed} writes from the log of a worker no longer run ({path})")
        else:
            why = inserter.last_error
            say(f"the log {path} of a worker no longer run waits for the store: {why}")


def worker_config(config: Config, index: int) -> Config:
    """Worker ``index``'s settings: its own log, its share of the byte bounds, and OTLP/gRPC
    for worker 0 alone."""
    workers = config.receiver_processes()
    wal_directory = config.wal_directory()
    return replace(
        config,
        workers=1,
        wal_dir=None if wal_directory is None else str(worker_log(wal_directory, index)),
        buffer_bytes=max(config.buffer_bytes // workers, config.max_body_bytes),
        tenant_buffer_bytes=config.tenant_buffer_bytes // workers,
        wal_max_bytes=config.wal_max_bytes // workers,
        otlp_grpc_listen=config.otlp_grpc_listen if index == 0 else None,
    )


def run_workers(
    config: Config, host: str, port: int, watch: str | Path | None, say: Callable[[str], None]
) -> None:
    """Run ``config.workers`` receiver processes on ``host:port`` until SIGINT or SIGTERM,
    then stop them (each drains as a single receiver does). Raises
    :class:`EmbeddedServerError` when the watched embedded server went away, and
    :class:`ConfigError` when a worker cannot stay up."""
    workers = config.receiver_processes()
    context = multiprocessing.get_context("spawn")
    stopping: list[int] = []

    def stop(signum: int, frame: object) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    running: dict[int, BaseProcess] = {}
    started_at: dict[int, float] = {}
    quick: dict[int, int] = dict.fromkeys(range(workers), 0)

    def start(index: int) -> None:
        process = context.Process(
            target=_worker,
            args=(worker_config(config, index), index, workers, host, port, os.getpid(), shared),
            name=f"llmwh-worker-{index}",
        )
        process.start()
        running[index], started_at[index] = process, time.monotonic()

    failure: Exception | None = None
    shared = Path(tempfile.mkdtemp(prefix="llmwh-metrics-"))
    try:
        for index in range(workers):
            start(index)
        say(f"{workers} receiver processes on {host}:{port} (pids {_pids(running)})")
        while not stopping and failure is None:
            wait([p.sentinel for p in running.values()], timeout=0.5)
            if watch is not None and embedded.server_status(watch) is None:
                failure = EmbeddedServerError(
                    f"the embedded ClickHouse stopped; see {watch}/server.log"
                )
                break
            for index, process in list(running.items()):
                if process.exitcode is None or stopping:
                    continue
                lived = time.monotonic() - started_at[index]
                quick[index] = quick[index] + 1 if lived < QUICK_EXIT_SECONDS else 0
                if quick[index] >= QUICK_EXITS:
                    failure = ConfigError(
                        f"receiver worker {index} exited {QUICK_EXITS} times within "
                        f"{QUICK_EXIT_SECONDS:.0f} s of its start (exit code "
                        f"{process.exitcode}); see its messages above"
                    )
                    break
                say(f"receiver worker {index} exited (code {process.exitcode}); starting it again")
                start(index)
    finally:
        _stop_all(running)
        shutil.rmtree(shared, ignore_errors=True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if failure is not None:
        raise failure


def _pids(running: dict[int, BaseProcess]) -> str:
    return ", ".join(str(p.pid) for _, p in sorted(running.items()))


def _stop_all(running: dict[int, BaseProcess]) -> None:
    """SIGTERM to every worker, then wait for each to drain (SIGKILL past the wait: what
    it acknowledged is in its log either way)."""
    for process in running.values():
        if process.exitcode is None and process.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_SECONDS
    for process in running.values():
        process.join(max(deadline - time.monotonic(), 0.1))
        if process.exitcode is None:
            process.kill()
            process.join()


def _worker(
    config: Config, index: int, workers: int, host: str, port: int, parent: int, shared: Path
) -> None:
    """A worker process: the receiver on its own ``SO_REUSEPORT`` socket, its ``/metrics``
    answering for every worker (published in ``shared``)."""
    # Its own process group: Ctrl-C reaches the parent alone, which stops the workers
    # once (a second signal would make uvicorn skip draining).
    os.setpgid(0, 0)
    _die_with(parent)
    notices = logging.getLogger("llmwh")
    if not notices.handlers:
        notices.addHandler(logging.StreamHandler())
        notices.setLevel(logging.INFO)
    from warehouse.serve.run import run_receiver
    from warehouse.store import discovery

    def attach(receiver: Receiver) -> None:
        metrics = WorkerMetrics(shared, index, workers, receiver.metrics.registry)
        buffered = receiver.writes.committer.buffer
        receiver.metrics.buffer_bytes.set_function(lambda: buffered.buffered_bytes)
        receiver.exposition = metrics.exposition

        async def start() -> None:
            metrics.start()

        async def stop() -> None:
            metrics.stop()

        receiver.on_start(start)
        receiver.on_stop(stop)

    store = discovery.find_store(config)
    try:
        sockets = [reuseport_socket(host, port)]
        run_receiver(store, config, host, port, sockets=sockets, on_app=attach)
    finally:
        store.close()


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other processes may listen on too."""
    family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"the receiver could not listen on {host}:{port} ({exc})") from None
    sock.listen(2048)
    sock.set_inheritable(False)
    return sock


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def usable_worker_logs(config: Config) -> None:
    """Make each worker's log directory now, so that a bad ``wal_dir`` fails before any
    worker starts."""
    wal_directory = config.wal_directory()
    if wal_directory is None:
        return
    for index in range(config.receiver_processes()):
        usable_directory(worker_log(wal_directory, index))
