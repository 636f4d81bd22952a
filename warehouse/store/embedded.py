"""The embedded ClickHouse server: chdb-core's bundled ClickHouse as a child process.

It serves HTTP and native TCP on 127.0.0.1 only (it has no passwords), keeps its
data under ``DIR/clickhouse`` and announces itself in ``DIR/server.json`` (pid, ports),
which is how the CLI, the receiver and tests find it. :func:`start_server`,
:func:`stop_server` and :func:`server_status` are the whole interface.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from warehouse.errors import (
    ChdbMissing,
    DataDirLocked,
    EmbeddedServerError,
    PortInUse,
    ServerAlreadyRunning,
)
from warehouse.store._embedded_child import HOST, LOCKED_EXIT
from warehouse.store.tenancy import RollupTables, readable_rollups, users_config_xml
from warehouse.store.url import DEFAULT_DATABASE

__all__ = [
    "DEFAULT_HTTP_PORT",
    "DEFAULT_TCP_PORT",
    "ServerInfo",
    "server_status",
    "start_server",
    "stop_server",
]

DEFAULT_HTTP_PORT = 8123
DEFAULT_TCP_PORT = 9000
CHDB_REQUIREMENT = "chdb-core==26.9.0"

_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ServerInfo:
    """A running embedded server, as recorded in ``server.json``."""

    pid: int
    http_port: int
    tcp_port: int
    data_dir: str
    started_at: float

    def store_url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"http://{HOST}:{self.http_port}/{database}"


def start_server(
    data_dir: str | Path,
    http_port: int = DEFAULT_HTTP_PORT,
    tcp_port: int = DEFAULT_TCP_PORT,
    *,
    timeout: float = 60.0,
    extra_config: str = "",
    tenant_databases: tuple[str, ...] = (DEFAULT_DATABASE,),
) -> ServerInfo:
    """Start a server on ``data_dir`` and return once it answers ``/ping``.

    A port of 0 picks a free one. ``extra_config`` is XML placed inside
    ``<clickhouse>`` (for instance a ``<remote_servers>`` section). The tables of
    ``tenant_databases``, and the SLO rollups built in them so far, carry the row
    policies tenants read under (:mod:`warehouse.store.tenancy`): the server serves users
    from its configuration only, so these are fixed while it runs.
    """
    if not _chdb_installed():
        raise ChdbMissing(
            f"chdb-core is not installed, and it carries the embedded ClickHouse: "
            f"pip install '{CHDB_REQUIREMENT}'"
        )
    root = Path(data_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    running = server_status(root)
    if running is not None:
        raise ServerAlreadyRunning(
            f"an embedded ClickHouse already serves {root} (pid {running.pid}, "
            f"http port {running.http_port}); stop it with `llmwh clickhouse stop --data {root}`"
        )
    http_port, tcp_port = claim_ports((http_port, "--http-port"), (tcp_port, "--tcp-port"))
    _server_json(root).unlink(missing_ok=True)
    config = users_config_xml(_tenant_tables(root, tenant_databases)) + extra_config
    log_path = root / "server.log"
    with open(log_path, "ab") as log:
        log.write(f"--- llmwh starting ClickHouse at {time.ctime()}\n".encode())
        log.flush()
        offset = log.tell()
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "warehouse.store._embedded_child",
                str(root),
                str(http_port),
                str(tcp_port),
            ],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            cwd=root,
            start_new_session=True,  # outlives the terminal and the command that started it
        )
    # Its stdin: exited already, it broke the pipe, and _wait_until_serving says why.
    assert child.stdin is not None  # stdin=PIPE
    with contextlib.suppress(BrokenPipeError), child.stdin:
        child.stdin.write(config.encode())
    _children[child.pid] = child
    info = ServerInfo(child.pid, http_port, tcp_port, str(root), time.time())
    try:
        _wait_until_serving(child, info, timeout)
    except BaseException as exc:
        # Ctrl-C included: a server nobody recorded would be left running for good.
        _terminate(child.pid, grace=5.0, released=lambda: not _lock_is_held(root))
        if isinstance(exc, EmbeddedServerError | TimeoutError):
            code = None if isinstance(exc, TimeoutError) else child.returncode
            raise _startup_error(root, log_path, offset, info, code) from None
        raise
    _write_json_atomically(_server_json(root), asdict(info))
    return info


def _tenant_tables(root: Path, databases: tuple[str, ...]) -> dict[str, RollupTables]:
    """Each database with the SLO rollups a tenant may read in it, from the table
    definitions ClickHouse keeps on disk (``metadata/<database>/<table>.sql``)."""
    found = {}
    for database in databases:
        folder = root / "clickhouse" / "metadata" / database
        definitions = (
            {path.stem: path.read_text(errors="replace") for path in folder.glob("slo_*.sql")}
            if folder.is_dir()
            else {}
        )
        found[database] = readable_rollups(definitions)
    return found


def _wait_until_serving(child: subprocess.Popen[bytes], info: ServerInfo, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise EmbeddedServerError("exited")
        if _ping(info.http_port):
            return
        time.sleep(0.1)
    raise TimeoutError


def _chdb_installed() -> bool:
    try:
        return importlib.util.find_spec("chdb") is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False


def server_status(data_dir: str | Path) -> ServerInfo | None:
    """The server serving ``data_dir``, or None when none is."""
    root = Path(data_dir).resolve()
    path = _server_json(root)
    if not path.exists() or not _lock_is_held(root):
        return None
    try:
        return ServerInfo(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None


def stop_server(data_dir: str | Path, *, timeout: float = 30.0) -> ServerInfo | None:
    """Stop the server on ``data_dir`` with SIGTERM (SIGKILL after ``timeout``).

    Returns what was stopped, or None when nothing was running. A server that holds
    the directory without having announced itself (its start was interrupted) is
    stopped too, found by the pid in its lock file.
    """
    root = Path(data_dir).resolve()
    info = server_status(root)
    pid = info.pid if info else _locked_by(root)
    if pid is not None:
        _terminate(pid, grace=timeout, released=lambda: not _lock_is_held(root))
    _server_json(root).unlink(missing_ok=True)
    if info is None and pid is not None:
        info = ServerInfo(pid, 0, 0, str(root), 0.0)
    return info


def _terminate(pid: int, grace: float, released: Callable[[], bool]) -> None:
    """SIGTERM, wait until ``released()`` (the lock is free once the process is gone,
    even while it is an unreaped zombie), then SIGKILL."""
    child = _children.pop(pid, None)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if child is not None:
                child.poll()  # reap our own child
            if released():
                return
            time.sleep(0.05)


def _server_json(root: Path) -> Path:
    return root / "server.json"


def _lock_is_held(root: Path) -> bool:
    path = root / "server.lock"
    if not path.exists():
        return False
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def _locked_by(root: Path) -> int | None:
    """The pid a held lock file names, or None when the lock is free."""
    if not _lock_is_held(root):
        return None
    try:
        return int((root / "server.lock").read_text().strip())
    except ValueError:
        return None


def claim_ports(*requested: tuple[int, str]) -> list[int]:
    """Check the ports, each ``(port, flag naming it)``, are free on the loopback
    address; 0 picks a free one.

    Every probe socket stays open until all ports are chosen, so zeros never resolve
    to the same port twice.
    """
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        flags: dict[int, str] = {}
        for port, flag in requested:
            if not 0 <= port <= 65535:
                raise PortInUse(f"{flag} {port} is not a TCP port (0-65535)")
            if port and port in flags:
                raise PortInUse(f"{flags[port]} and {flag} are both {port}; give two ports")
            probe = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((HOST, port))
            except OSError:
                raise PortInUse(
                    f"port {port} on {HOST} is already in use; choose another with {flag} N"
                ) from None
            chosen.append(probe.getsockname()[1])
            flags[port] = flag
        return chosen


def _ping(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}/ping", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _startup_error(
    root: Path, log_path: Path, offset: int, info: ServerInfo, exit_code: int | None
) -> Exception:
    with open(log_path, "rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    if exit_code == LOCKED_EXIT:
        return DataDirLocked(f"{root} is locked by another embedded server that is starting")
    if "Cannot lock file" in text:
        return DataDirLocked(
            f"{root} is locked by another ClickHouse process (an embedded server or an "
            "in-process chdb using the same directory)"
        )
    if "Address already in use" in text:
        return PortInUse(
            f"port {info.http_port} or {info.tcp_port} on {HOST} is already in use; "
            "choose others with --http-port N --tcp-port N"
        )
    if exit_code is None:
        return EmbeddedServerError(
            f"the embedded ClickHouse did not answer /ping on port {info.http_port} in time, "
            f"or its start was interrupted; see {log_path}"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    detail = lines[-1] if lines else "no output"
    return EmbeddedServerError(f"the embedded ClickHouse exited during start-up: {detail}")


def _write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)
