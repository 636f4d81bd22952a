"""The embedded ClickHouse server: chdb-core's bundled ClickHouse as a child process.

It serves HTTP and native TCP on 127.0.0.1 only (it has no authentication), keeps its
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
from dataclasses import asdict, dataclass
from pathlib import Path

from warehouse.errors import (
    ChdbMissing,
    DataDirLocked,
    EmbeddedServerError,
    PortInUse,
    ServerAlreadyRunning,
)
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
HOST = "127.0.0.1"
CHDB_REQUIREMENT = "chdb-core==26.9.0"

_children: dict[int, subprocess.Popen] = {}


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
) -> ServerInfo:
    """Start a server on ``data_dir`` and return once it answers ``/ping``.

    A port of 0 picks a free one. ``extra_config`` is XML placed inside
    ``<clickhouse>`` (for instance a ``<remote_servers>`` section).
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
    if _lock_is_held(root):
        raise DataDirLocked(f"{root} is locked by another embedded server that is still starting")
    http_port = _claim_port(http_port, "--http-port")
    tcp_port = _claim_port(tcp_port, "--tcp-port")
    if http_port == tcp_port:
        raise PortInUse(f"--http-port and --tcp-port are both {http_port}; give two ports")
    (root / "config.xml").write_text(_config_xml(http_port, tcp_port, extra_config))
    _server_json(root).unlink(missing_ok=True)
    log_path = root / "server.log"
    with open(log_path, "ab") as log:
        log.write(f"--- llmwh starting ClickHouse at {time.ctime()}\n".encode())
        log.flush()
        offset = log.tell()
        child = subprocess.Popen(
            [sys.executable, "-m", "warehouse.store._embedded_child", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=root,
            start_new_session=True,  # outlives the terminal and the command that started it
        )
    _children[child.pid] = child
    info = ServerInfo(child.pid, http_port, tcp_port, str(root), time.time())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            _children.pop(child.pid, None)
            raise _startup_error(root, log_path, offset, info)
        if _ping(http_port):
            _write_json_atomically(_server_json(root), asdict(info))
            return info
        time.sleep(0.1)
    _terminate(child.pid, grace=5.0)
    raise EmbeddedServerError(
        f"the embedded ClickHouse did not answer /ping on port {http_port} within "
        f"{timeout:.0f}s; see {log_path}"
    )


def _chdb_installed() -> bool:
    try:
        return importlib.util.find_spec("chdb") is not None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        return False


def server_status(data_dir: str | Path) -> ServerInfo | None:
    """The server running on ``data_dir``, or None when none is."""
    root = Path(data_dir).resolve()
    path = _server_json(root)
    if not path.exists() or not _lock_is_held(root):
        return None
    try:
        info = ServerInfo(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None
    return info if _pid_alive(info.pid) else None


def stop_server(data_dir: str | Path, *, timeout: float = 30.0) -> ServerInfo | None:
    """Stop the server on ``data_dir`` with SIGTERM (SIGKILL after ``timeout``).

    Returns what was stopped, or None when nothing was running.
    """
    root = Path(data_dir).resolve()
    info = server_status(root)
    if info is None:
        _server_json(root).unlink(missing_ok=True)
        return None
    _terminate(info.pid, grace=timeout)
    deadline = time.monotonic() + timeout
    while _lock_is_held(root) and time.monotonic() < deadline:
        time.sleep(0.05)
    _server_json(root).unlink(missing_ok=True)
    return info


def _terminate(pid: int, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    child = _children.pop(pid, None)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None and child.poll() is not None:
            return
        if child is None and not _pid_alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if child is not None:
        child.wait()


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _claim_port(port: int, flag: str) -> int:
    """Check that ``port`` is free on the loopback address (0: pick a free one)."""
    if not 0 <= port <= 65535:
        raise PortInUse(f"{flag} {port} is not a TCP port (0-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            raise PortInUse(
                f"port {port} on {HOST} is already in use; choose another with {flag} N"
            ) from None
        return probe.getsockname()[1]


def _ping(http_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{http_port}/ping", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _startup_error(root: Path, log_path: Path, offset: int, info: ServerInfo) -> Exception:
    with open(log_path, "rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    if "Cannot lock file" in text or "is locked by another" in text:
        return DataDirLocked(
            f"{root} is locked by another ClickHouse process (an embedded server or an "
            "in-process chdb using the same directory)"
        )
    if "Address already in use" in text:
        return PortInUse(
            f"port {info.http_port} or {info.tcp_port} on {HOST} is already in use; "
            "choose others with --http-port N --tcp-port N"
        )
    lines = [line for line in text.splitlines() if line.strip()]
    detail = lines[-1] if lines else "no output"
    return EmbeddedServerError(f"the embedded ClickHouse exited during start-up: {detail}")


def _config_xml(http_port: int, tcp_port: int, extra: str) -> str:
    return (
        "<clickhouse>\n"
        f"  <!-- written by llmwh; the embedded server has no authentication,\n"
        f"       so it listens on loopback only -->\n"
        f"  <listen_host>{HOST}</listen_host>\n"
        f"  <http_port>{http_port}</http_port>\n"
        f"  <tcp_port>{tcp_port}</tcp_port>\n"
        f"{extra}"
        "</clickhouse>\n"
    )


def _write_json_atomically(path: Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)
