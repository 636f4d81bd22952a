"""Regenerate docs/overview.png, the README's picture of the overview page, from the demo.

    python benchmarks/overview_png.py [--out docs/overview.png] [--width 1366] [--height 900]

(or ``make overview-png``). It runs ``llmwh serve --demo`` on an embedded ClickHouse in a
scratch directory, waits until the demo has backfilled its hours of traffic, takes a
screenshot of ``GET /`` with Debian's headless Chromium at the given window size (the
top of the page, as a person opening it sees it first), and stops the server. Whatever
the demo's incident is, the picture shows it: the page sorts the SLOs by trouble.

Not a benchmark: it lives here with the other scripts that run the warehouse as a user
would, apart from the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BACKFILLED = "demo: backfilled"
"""What the demo prints once its history is in (warehouse/demo.py)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "overview.png")
    parser.add_argument("--width", type=int, default=1366)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the demo")
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("chromium is not installed: `make system-deps` (as root) installs it")
        return 1
    with tempfile.TemporaryDirectory(prefix="llmwh-overview-") as scratch:
        port = _free_port()
        url = f"http://127.0.0.1:{port}/"
        llmwh = Path(sys.executable).with_name("llmwh")
        server = subprocess.Popen(
            [str(llmwh), "serve", "--demo", "--data", scratch, "--listen", f"127.0.0.1:{port}"],
            cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        said: list[str] = []
        threading.Thread(target=_keep, args=(server, said), daemon=True).start()
        try:
            _wait(lambda: any(BACKFILLED in line for line in said), args.timeout, said)
            _wait(lambda: _answers(url), 60, said)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shot = Path(scratch) / "overview.png"
            subprocess.run(
                [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                 "--hide-scrollbars", f"--window-size={args.width},{args.height}",
                 f"--user-data-dir={Path(scratch) / 'chromium'}", f"--screenshot={shot}", url],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            shutil.copyfile(shot, args.out)
        finally:
            server.send_signal(signal.SIGINT)  # drains, then stops its ClickHouse
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()
    print(f"wrote {args.out} ({args.width}x{args.height}) from {url}")
    return 0


def _keep(server: subprocess.Popen[str], said: list[str]) -> None:
    """Keep what the server prints (the demo's progress among it)."""
    assert server.stdout is not None
    for line in server.stdout:
        said.append(line.rstrip())


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _wait(ready: Callable[[], bool], timeout: float, said: list[str]) -> None:
    """Poll ``ready()`` until it holds; fail with what the server printed."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            sys.exit("gave up waiting; the server said:\n" + "\n".join(said[-20:]))
        time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
