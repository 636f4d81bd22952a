"""The embedded ClickHouse server's child process.

Run as ``python -m warehouse.store._embedded_child DIR``.

It holds ``DIR/server.lock`` for its whole life (so a crashed server leaves no false
"running" state behind), then hands the thread to ClickHouse: ``_chdb.query`` opens the
HTTP and TCP listeners named in ``DIR/config.xml`` and a never-ending statement keeps
it serving. Whatever ClickHouse prints about a failure goes to ``DIR/server.log``,
where the parent reads it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

LOCKED_EXIT = 3
FAILED_EXIT = 4

SERVE_SQL = (
    "SYSTEM START LISTEN HTTP; SYSTEM START LISTEN TCP; "
    "SELECT sleepEachRow(3) FROM numbers(1000000000) "
    "SETTINGS max_block_size = 1, max_execution_time = 0 FORMAT Null"
)


def main(data_dir: Path) -> int:
    lock = open(data_dir / "server.lock", "a")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"llmwh: {data_dir} is locked by another embedded server", file=sys.stderr)
        return LOCKED_EXIT
    lock.truncate(0)
    lock.write(str(os.getpid()))
    lock.flush()
    os.chdir(data_dir)  # ClickHouse reads config.xml from its working directory
    from chdb import _chdb

    # "TabSeparated" becomes the HTTP default format; CSV would break clients' version query.
    _chdb.query(SERVE_SQL, "TabSeparated", path=str(data_dir / "clickhouse"))
    print("llmwh: the embedded ClickHouse stopped serving", file=sys.stderr)
    return FAILED_EXIT


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
