"""Sealing under sustained per-request remote write: does it keep up?

    python benchmarks/sealing.py [--seconds 300] [--connections 32]
        [--seal-after 10] [--seal-every 5] [--max-samples 40000000] [--no-wal] [--json]

Starts ``llmwh serve`` on the embedded ClickHouse and sends pre-built remote-write 1.0
bodies of per-request LLM metrics (``benchmarks/remote_write.py``'s ``high`` workload:
100 requests x 5 metrics a body, every request new) at full speed for ``--seconds``.
While it sends, it reads ``system.view_refreshes`` every half second (each refresh of
the sealing view and how long it took) and counts the active parts of ``requests``
and ``request_parts``. When sending ends it waits for every acknowledged request to
be in ``requests`` and prints:

* the rate (samples and requests a second) and the requests acknowledged;
* the requests in ``requests``, and how many were sealed more than once (0 expected);
* how long after the last write the last acknowledged request was sealed, against
  the promise ``seal_after_seconds + 2 x seal_every_seconds``;
* the longest refresh of the sealing view, against ``seal_every_seconds``;
* the most active parts seen (bounded parts counts: merges keep up);
* the rows a refresh reads and writes (median; ``system.view_refreshes``), and the
  rows the five longest refreshes wrote (a long refresh with a large slice differs
  from one that was starved of CPU);
* how long after the last write the last part reached the store (with the write-ahead
  log, as shipped, the log's inserter stamps parts as received when it writes them, and
  sealing counts from there).

``llmwh serve`` acknowledges writes once in the receiver's write-ahead log, inserted
every 500 ms; ``--no-wal`` runs ``llmwh serve --no-wal`` (acknowledged once stored).
Set ``LLMWH_BENCH_BODIES`` to a directory to keep the built bodies for the next run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from remote_write import SAMPLES_PER_BODY, Receiver, _build_lanes, _log, _replay

from warehouse.store import open_store
from warehouse.store.embedded import server_status

METRICS_PER_REQUEST = 5  # remote_write._LLM_METRICS
POLL_S = 0.5


def main() -> None:
    args = _parse_args()
    os.environ["LLMWH_SEAL_AFTER_SECONDS"] = str(args.seal_after)
    os.environ["LLMWH_SEAL_EVERY_SECONDS"] = str(args.seal_every)
    bodies_per_lane = max(1, args.max_samples // SAMPLES_PER_BODY // args.connections)
    lanes = _build_lanes("high", args.connections, bodies_per_lane)
    with tempfile.TemporaryDirectory(prefix="llmwh-sealing-") as tmp:
        receiver = Receiver("llmwh-no-wal" if args.no_wal else "llmwh", Path(tmp))
        receiver.start()
        try:
            result = _run(receiver, lanes, args)
        finally:
            receiver.stop()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    sys.exit(0 if result["kept_up"] else 1)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seal-after", type=int, default=10)
    parser.add_argument("--seal-every", type=int, default=5)
    parser.add_argument("--max-samples", type=int, default=40_000_000)
    parser.add_argument("--no-wal", action="store_true", help="llmwh serve --no-wal")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


class Watcher(threading.Thread):
    """Reads the sealing view's refreshes and the active parts while the run goes on."""

    def __init__(self, store):
        super().__init__(daemon=True)
        self.store = store
        self.refreshes: dict[str, float] = {}  # last_success_time -> duration (s)
        self.running_since: float | None = None
        self.longest_running = 0.0
        self.max_parts = {"requests": 0, "request_parts": 0}
        self.read_rows: dict[str, int] = {}  # refresh start -> rows read
        self.written_rows: dict[str, int] = {}
        self.errors: set[str] = set()
        self.stopping = threading.Event()

    def longest(self, n: int) -> list[dict]:
        """The n longest refreshes that ended, each with the rows it wrote: a refresh is
        matched to the rows seen for the start its end and duration give."""
        written = {datetime.fromisoformat(k): rows for k, rows in self.written_rows.items()}
        found = []
        for ended, seconds in self.refreshes.items():
            start = datetime.fromisoformat(ended) - timedelta(seconds=seconds)
            near = min(written, key=lambda s: abs(s - start), default=None)
            rows = written[near] if near and abs(near - start) <= timedelta(seconds=1.5) else None
            found.append({"ended": ended, "seconds": seconds, "written_rows": rows})
        return sorted(found, key=lambda r: -r["seconds"])[:n]

    def run(self) -> None:
        db = self.store.database
        while not self.stopping.wait(POLL_S):
            try:
                view = self.store.query_arrow(
                    "SELECT status, toString(last_success_time) AS t, last_success_duration_ms "
                    "AS ms, exception, toString(last_refresh_time) AS started, read_rows, "
                    "written_rows "
                    f"FROM system.view_refreshes WHERE database = '{db}' "
                    "AND view = 'request_parts_seal'"
                ).to_pylist()
                parts = self.store.query_arrow(
                    f"SELECT table, count() AS n FROM system.parts WHERE database = '{db}' "
                    "AND active AND table IN ('requests', 'request_parts') GROUP BY table"
                ).to_pylist()
            except Exception as exc:  # the run goes on; say so at the end
                self.errors.add(f"{type(exc).__name__}: {exc}"[:200])
                continue
            for row in view:
                now = time.monotonic()
                if row["t"] and row["ms"] is not None and row["t"] not in self.refreshes:
                    self.refreshes[row["t"]] = row["ms"] / 1000
                    self.running_since = None  # a refresh ended: the next one is new
                if row["exception"]:
                    self.errors.add(row["exception"][:200])
                if row["started"]:  # rows of the refresh running or last run
                    key = row["started"]
                    self.read_rows[key] = max(self.read_rows.get(key, 0), row["read_rows"] or 0)
                    self.written_rows[key] = max(
                        self.written_rows.get(key, 0), row["written_rows"] or 0
                    )
                if row["status"] == "Running":
                    # A refresh still running: how long so far (it has no duration yet).
                    self.running_since = self.running_since or now
                    self.longest_running = max(self.longest_running, now - self.running_since)
                else:
                    self.running_since = None
            for row in parts:
                self.max_parts[row["table"]] = max(self.max_parts[row["table"]], row["n"])


def _run(receiver: Receiver, lanes: list[list[bytes]], args: argparse.Namespace) -> dict:
    info = server_status(receiver.root / "data")
    store = open_store(info.store_url())
    watcher = Watcher(store)
    watcher.start()
    _log(f"sending per-request remote write for up to {args.seconds:g}s")
    tally, elapsed = _replay(receiver.port, lanes, args.seconds)
    last_write = time.monotonic()
    last_write_at = time.time()
    ok = sum(n for status, n in tally.items() if isinstance(status, int) and status < 300)
    acknowledged = ok * SAMPLES_PER_BODY // METRICS_PER_REQUEST
    promise = args.seal_after + 2 * args.seal_every
    sealed = 0
    deadline = last_write + max(4 * promise, 120)
    caught_up_after = None
    while time.monotonic() < deadline:
        # A query reads the parts there were when it began, so a complete count means
        # sealing was done by then; a count of distinct requests would take seconds of
        # its own at tens of millions of rows, so duplicates are counted once, after.
        asked = time.monotonic()
        sealed = store.query_arrow(
            f"SELECT count() AS n FROM {store.database}.requests"
        ).to_pylist()[0]["n"]
        if sealed >= acknowledged:
            caught_up_after = asked - last_write
            break
        time.sleep(POLL_S)
    duplicates = (
        sealed
        - store.query_arrow(
            f"SELECT uniqExact(tenant, request_id) AS n FROM {store.database}.requests"
        ).to_pylist()[0]["n"]
    )
    watcher.stopping.set()
    watcher.join()
    # Sealing counts from when a part reached the store (with the log, when its
    # inserter wrote it), not from its acknowledgement.
    newest = store.query_arrow(
        f"SELECT toUnixTimestamp64Milli(max(received)) AS ms FROM {store.database}.request_parts"
    ).to_pylist()[0]["ms"]
    last_stored = round(newest / 1000 - last_write_at, 1)
    store.close()
    durations = sorted(watcher.refreshes.values())
    longest = max([*durations, watcher.longest_running], default=0.0)
    kept_up = (
        caught_up_after is not None
        and caught_up_after <= promise
        and duplicates == 0
        and sealed == acknowledged
        and longest <= args.seal_every
    )
    return {
        "seconds": round(elapsed, 1),
        "connections": len(lanes),
        "samples_per_s": round(ok * SAMPLES_PER_BODY / elapsed),
        "requests_per_s": round(acknowledged / elapsed),
        "acknowledged_requests": acknowledged,
        "non_2xx": {str(s): n for s, n in tally.items() if not (isinstance(s, int) and s < 300)},
        "sealed_requests": sealed,
        "sealed_twice": duplicates,
        "all_sealed_after_last_write_s": (
            None if caught_up_after is None else round(caught_up_after, 1)
        ),
        "promise_s": promise,
        "refreshes": len(durations),
        "refresh_p50_s": round(durations[len(durations) // 2], 2) if durations else None,
        "refresh_max_s": round(longest, 2),
        "seal_every_s": args.seal_every,
        "max_active_parts": watcher.max_parts,
        "refresh_read_rows_p50": _median(list(watcher.read_rows.values())),
        "refresh_written_rows_p50": _median(list(watcher.written_rows.values())),
        "longest_refreshes": watcher.longest(5),
        "last_part_stored_after_last_write_s": last_stored,
        "errors": sorted(watcher.errors),
        "kept_up": kept_up,
    }


def _median(values: list[int]) -> int:
    return sorted(values)[len(values) // 2] if values else 0


def _print(r: dict) -> None:
    print(
        f"sent {r['seconds']}s on {r['connections']} connections: {r['samples_per_s']:,} samples/s"
        f" = {r['requests_per_s']:,} requests/s; {r['acknowledged_requests']:,} requests "
        f"acknowledged; non-2xx {r['non_2xx']}"
    )
    after = r["all_sealed_after_last_write_s"]
    print(
        f"sealed {r['sealed_requests']:,} ({r['sealed_twice']} twice); all sealed "
        f"{'never' if after is None else f'{after}s'} after the last write "
        f"(promise: {r['promise_s']}s)"
    )
    print(
        f"sealing view: {r['refreshes']} refreshes, median {r['refresh_p50_s']}s, longest "
        f"{r['refresh_max_s']}s (seal_every_seconds: {r['seal_every_s']}s)"
    )
    print(f"most active parts: {r['max_active_parts']}")
    print(
        f"a refresh (median): read {r['refresh_read_rows_p50']:,} rows, wrote "
        f"{r['refresh_written_rows_p50']:,} (system.view_refreshes)"
    )
    longest = ", ".join(
        f"{x['seconds']}s ({x['written_rows'] or 0:,} rows)" for x in r["longest_refreshes"]
    )
    print(f"longest refreshes: {longest}")
    stored = r["last_part_stored_after_last_write_s"]
    print(f"the last part reached the store {stored}s after the last write")
    for error in r["errors"]:
        print(f"error seen: {error}")
    print("KEPT UP" if r["kept_up"] else "DID NOT KEEP UP")


if __name__ == "__main__":
    main()
