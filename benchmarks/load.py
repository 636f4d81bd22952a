"""Several senders at full speed for minutes against one `llmwh serve`: memory, backpressure,
and that every acknowledged sample is stored.

    python benchmarks/load.py [--seconds 180] [--senders 4] [--connections 8]
        [--buffer-mib 32] [--max-samples 3000000] [--json]

Each sender is a process with ``--connections`` keep-alive connections (threads),
replaying pre-built remote-write 1.0 bodies of 500 samples in a loop (half the
connections scrape-like long-lived series, half per-request LLM metrics that are a
new series each; see ``remote_write.py``). A 429 is obeyed as Prometheus does: wait
``Retry-After`` and send the same body again; a 5xx or a lost connection is retried
after half a second. The receiver runs with ``buffer_bytes`` set to ``--buffer-mib``.

Every half second the script reads the receiver process's resident memory (the
embedded ClickHouse is another process, reported apart) and its buffered bytes. At
the end it checks that ClickHouse holds exactly the samples of the bodies that got a
2xx: a body sent again after its 2xx adds nothing, as it holds the same samples.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from remote_write import HEADERS, SAMPLES_PER_BODY, Receiver, _build_lanes, wait_wal_inserted

from warehouse.compare.worker import status_bytes
from warehouse.store import open_store
from warehouse.store.embedded import server_status


def main() -> None:
    args = _parse_args()
    per_kind = args.senders * args.connections // 2 or 1
    bodies_per_lane = max(1, args.max_samples // SAMPLES_PER_BODY // (2 * per_kind))
    lanes = _build_lanes("low", per_kind, bodies_per_lane)
    lanes += _build_lanes("high", per_kind, bodies_per_lane)
    lanes = [[(f"{k}:{i}", body) for i, body in enumerate(lane)] for k, lane in enumerate(lanes)]

    os.environ["LLMWH_BUFFER_BYTES"] = str(args.buffer_mib << 20)
    root = Path(tempfile.mkdtemp(prefix="llmwh-load-"))
    receiver = Receiver("llmwh", root)
    receiver.start()
    try:
        result = _run(receiver, lanes, args)
    finally:
        receiver.stop()
    result["buffer_bytes_setting"] = args.buffer_mib << 20
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    if result["stored_samples"] != result["acknowledged_samples"]:
        sys.exit("stored samples differ from acknowledged ones")


def _run(receiver: Receiver, lanes: list, args: argparse.Namespace) -> dict:
    server = server_status(receiver.root / "data")
    idle_rss = _rss(receiver.process.pid)
    queue: multiprocessing.Queue = multiprocessing.Queue()
    groups = [lanes[i :: args.senders] for i in range(args.senders)]
    deadline = time.time() + args.seconds
    senders = [
        multiprocessing.Process(target=_sender, args=(receiver.port, group, deadline, queue))
        for group in groups
    ]
    for sender in senders:
        sender.start()
    peak_rss = peak_server_rss = peak_buffer = 0
    while any(s.is_alive() for s in senders):
        peak_rss = max(peak_rss, _rss(receiver.process.pid))
        peak_server_rss = max(peak_server_rss, _rss(server.pid))
        peak_buffer = max(peak_buffer, _buffered(receiver.port))
        time.sleep(0.5)
    reports = [queue.get() for _ in senders]
    acked = set().union(*(r["acked"] for r in reports))
    statuses: dict[str, int] = {}
    for report in reports:
        for status, n in report["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    wait_wal_inserted(receiver.port)  # acknowledged once in its log: stored within 500 ms
    store = open_store(server.store_url())
    stored = store.query_arrow("SELECT count() FROM llmwh.samples FINAL").column(0)[0].as_py()
    store.close()
    seconds = max(r["seconds"] for r in reports)
    return {
        "seconds": round(seconds, 1),
        "senders": args.senders,
        "connections": args.senders * args.connections,
        "writes_acknowledged": statuses.get("2xx", 0),
        "distinct_bodies_acknowledged": len(acked),
        "acknowledged_samples": len(acked) * SAMPLES_PER_BODY,
        "stored_samples": stored,
        "samples_per_second": round(statuses.get("2xx", 0) * SAMPLES_PER_BODY / seconds),
        "statuses": statuses,
        "retry_after_waits": sum(r["retry_after_waits"] for r in reports),
        "receiver_rss_idle_mib": round(idle_rss / 2**20, 1),
        "receiver_rss_peak_mib": round(peak_rss / 2**20, 1),
        "clickhouse_rss_peak_mib": round(peak_server_rss / 2**20, 1),
        "buffered_bytes_peak": peak_buffer,
    }


def _sender(port: int, lanes: list, deadline: float, queue: multiprocessing.Queue) -> None:
    """One sender process: a thread per lane, each looping over its bodies."""
    acked: set[str] = set()
    statuses: dict[str, int] = {}
    waits = [0]
    lock = threading.Lock()

    def lane_loop(lane: list) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        k = 0
        while time.time() < deadline:
            key, body = lane[k % len(lane)]
            try:
                connection.request("POST", "/api/v1/write", body, HEADERS)
                response = connection.getresponse()
                response.read()
                status, retry_after = response.status, response.getheader("Retry-After")
            except (OSError, http.client.HTTPException):
                connection.close()
                status, retry_after = 0, None
            kind = f"{status // 100}xx" if status else "no answer"
            with lock:
                statuses[kind] = statuses.get(kind, 0) + 1
                if 200 <= status < 300:
                    acked.add(key)
            if 200 <= status < 300:
                k += 1
            elif status == 429:
                with lock:
                    waits[0] += 1
                time.sleep(float(retry_after or 1))  # as a sender must: wait, then resend
            elif status >= 500 or not status:
                time.sleep(0.5)
            else:
                raise RuntimeError(f"refused: {status}")
        connection.close()

    started = time.time()
    threads = [threading.Thread(target=lane_loop, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    queue.put(
        {
            "acked": acked,
            "statuses": statuses,
            "retry_after_waits": waits[0],
            "seconds": time.time() - started,
        }
    )


def _rss(pid: int) -> int:
    return status_bytes(str(pid), "VmRSS")


def _buffered(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            for line in response.read().decode().splitlines():
                if line.startswith("llmwh_receiver_buffer_bytes "):
                    return int(float(line.split()[1]))
    except OSError:
        pass
    return 0


def _print(result: dict) -> None:
    width = max(len(k) for k in result)
    for key, value in result.items():
        shown = f"{value:,}" if isinstance(value, int) else value
        print(f"{key:<{width}}  {shown}")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--senders", type=int, default=4, help="sender processes")
    parser.add_argument("--connections", type=int, default=8, help="connections per sender")
    parser.add_argument("--buffer-mib", type=int, default=32, help="the receiver's buffer_bytes")
    parser.add_argument("--max-samples", type=int, default=3_000_000, help="pre-built samples")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


if __name__ == "__main__":
    main()
