"""The embedded ClickHouse server's child process.

Run as ``python -m warehouse.store._embedded_child DIR HTTP_PORT TCP_PORT``, with any
extra ``config.xml`` content on its standard input (the users and row policies of many
databases outgrow an environment variable).

It takes ``DIR/server.lock`` first and holds it for its whole life (so a crashed
server leaves no false "running" state behind, and two starts cannot both write
``config.xml``), writes ``config.xml``, then hands the thread to ClickHouse:
``_chdb.query`` opens the HTTP and TCP listeners and a never-ending statement keeps
it serving. What ClickHouse prints about a failure goes to ``DIR/server.log``, where
the parent reads it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

LOCKED_EXIT = 3
FAILED_EXIT = 4
HOST = "127.0.0.1"

SERVE_SQL = (
    "SYSTEM START LISTEN HTTP; SYSTEM START LISTEN TCP; "
    "SELECT sleepEachRow(3) FROM numbers(1000000000) "
    "SETTINGS max_block_size = 1, max_execution_time = 0 FORMAT Null"
)


def config_xml(http_port: int, tcp_port: int, extra: str = "") -> str:
    """The ``config.xml`` ClickHouse reads from its working directory."""
    return (
        "<clickhouse>\n"
        "  <!-- written by llmwh; the embedded server has no passwords,\n"
        "       so it listens on loopback only -->\n"
        f"  <listen_host>{HOST}</listen_host>\n"
        f"  <http_port>{http_port}</http_port>\n"
        f"  <tcp_port>{tcp_port}</tcp_port>\n"
        f"{extra}"
        "</clickhouse>\n"
    )


def main(data_dir: Path, http_port: int, tcp_port: int) -> int:
    lock = open(data_dir / "server.lock", "a+")  # noqa: SIM115 - held until the process ends
    deadline = time.monotonic() + 2.0  # `status` probes the lock for an instant; outwait it
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                print(f"llmwh: {data_dir} is locked by another embedded server", file=sys.stderr)
                return LOCKED_EXIT
            time.sleep(0.05)
    lock.truncate(0)
    lock.write(str(os.getpid()))
    lock.flush()
    extra = sys.stdin.read()
    (data_dir / "config.xml").write_text(config_xml(http_port, tcp_port, extra))
    from chdb import _chdb

    # The working directory is data_dir (config.xml); "TabSeparated" becomes the HTTP
    # default format, where CSV would break clients' version query.
    # chdb's _chdb stub declares only its UDF functions; query is in the extension.
    _chdb.query(SERVE_SQL, "TabSeparated", path=str(data_dir / "clickhouse"))  # type: ignore[attr-defined]
    print("llmwh: the embedded ClickHouse stopped serving", file=sys.stderr)
    return FAILED_EXIT


if __name__ == "__main__":
    directory = Path(sys.argv[1]).resolve()
    os.chdir(directory)
    sys.exit(main(directory, int(sys.argv[2]), int(sys.argv[3])))
