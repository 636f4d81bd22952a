"""One PromQL range query over 2,000 series x 1 day: Prometheus's own TSDB against a
Prometheus that reads the same data from the warehouse through remote read.

    python benchmarks/remote_read.py [--series 2000] [--hours 24] [--interval 15]
        [--runs 3] [--json]

The same samples (counters, one per series every ``--interval`` seconds over the last
``--hours``) are remote-written, in time order, to ``prometheus
--web.enable-remote-write-receiver`` (A) and to ``llmwh serve`` on the embedded
ClickHouse. A second Prometheus (B) with an empty TSDB and ``remote_read`` pointed at the
warehouse then answers the query, and so does A. Printed per side: the query's median
wall time over ``--runs``, whether both answers are equal, and peak resident memory
while querying (VmHWM, reset before the queries) of A, of B, of the receiver and of its
ClickHouse server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import cramjam
import numpy as np
from remote_write import HEADERS, Receiver, _log, wait_wal_inserted

from warehouse.store.embedded import server_status
from warehouse.wire.prometheus import V1, delimited, encode_samples

QUERY = "sum by (model) (rate(vllm:request_success_total[5m]))"
MODELS = 10
MINUTES_PER_BODY = 10


def main() -> None:
    args = _parse_args()
    end = int(time.time() // 60 * 60)
    start = end - args.hours * 3600
    bodies = _bodies(args.series, start, end, args.interval)
    samples = args.series * ((end - start) // args.interval)
    os.environ["LLMWH_REMOTE_READ_MAX_SAMPLES"] = str(max(samples * 2, 10_000_000))
    with tempfile.TemporaryDirectory(prefix="llmwh-read-bench-") as tmp:
        root = Path(tmp)
        (root / "a").mkdir()
        (root / "llmwh").mkdir()
        a = Receiver("prometheus", root / "a")
        warehouse = Receiver("llmwh", root / "llmwh")
        b = None
        try:
            for receiver in (a, warehouse):
                receiver.start()
                started = time.perf_counter()
                for body in bodies:
                    _post(receiver.write_url, body)
                _log(f"  wrote {samples:,} samples to {receiver.name} "
                     f"in {time.perf_counter() - started:.1f}s")  # fmt: skip
            wait_wal_inserted(warehouse.port)  # what its log acknowledged, readable
            b = _reader(root / "b", f"http://127.0.0.1:{warehouse.port}/api/v1/read")
            clickhouse = server_status(root / "llmwh" / "data")
            pids = {
                "Prometheus A (its TSDB)": a.process.pid,
                "Prometheus B (remote read)": b.process.pid,
                "llmwh serve": warehouse.process.pid,
                "its ClickHouse": clickhouse.pid if clickhouse else None,
            }
            for pid in pids.values():
                _reset_peak(pid)
            params = {"query": QUERY, "start": start, "end": end, "step": 60}
            own, own_answer = _time(a.port, params, args.runs)
            read, read_answer = _time(b.port, params, args.runs)
            peaks = {name: _peak_mib(pid) for name, pid in pids.items()}
        finally:
            for process in (b, warehouse, a):
                if process is not None:
                    process.stop()
    result = {
        "series": args.series,
        "samples": samples,
        "query": QUERY,
        "prometheus_tsdb_s": own,
        "remote_read_s": read,
        "ratio": read / own,
        "same_answer": own_answer == read_answer,
        "peak_mib": peaks,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"\n{args.series:,} series x {args.hours} h every {args.interval}s = {samples:,} samples")
    print(f"query_range {QUERY}, step 60s, median of {args.runs}:")
    print(f"  Prometheus's own TSDB        {own * 1000:9.0f} ms")
    print(f"  Prometheus via remote read   {read * 1000:9.0f} ms  ({read / own:.1f}x)")
    print(f"  same answer: {'yes' if result['same_answer'] else 'NO'}")
    print("peak resident memory while querying (VmHWM):")
    for name, mib in peaks.items():
        print(f"  {name:28} {mib:9.0f} MiB")


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--interval", type=int, default=15, help="seconds between samples")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def _bodies(series: int, start: int, end: int, interval: int) -> list[bytes]:
    """Snappy 1.0 write bodies, each every series over ``MINUTES_PER_BODY`` minutes, in
    time order (Prometheus's head takes a series' samples in order only)."""
    rng = np.random.default_rng(7)
    heads = [
        V1.TimeSeries(
            labels=[
                V1.Label(name="__name__", value="vllm:request_success_total"),
                V1.Label(name="model", value=f"model-{k % MODELS}"),
                V1.Label(name="pod", value=f"vllm-{k:05d}"),
            ]
        ).SerializeToString()
        for k in range(series)
    ]
    times = np.arange(start, end, interval, dtype=np.int64) * 1000
    counters = np.cumsum(rng.poisson(3.0, (series, len(times))), axis=1).astype(np.float64)
    per_body = MINUTES_PER_BODY * 60 // interval
    bodies = []
    for first in range(0, len(times), per_body):
        stamps = times[first : first + per_body]
        values = counters[:, first : first + per_body]
        encoded, starts = encode_samples(values.ravel(), np.tile(stamps, series))
        n = len(stamps)
        request = b"".join(
            delimited(1, head + encoded[starts[k * n] : starts[(k + 1) * n]])
            for k, head in enumerate(heads)
        )
        bodies.append(bytes(cramjam.snappy.compress_raw(request)))
    return bodies


def _post(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, headers=HEADERS)
    with urllib.request.urlopen(request, timeout=300) as response:
        if not 200 <= response.status < 300:
            raise RuntimeError(f"{url}: HTTP {response.status}")


class _Reader(Receiver):
    """Prometheus with an empty TSDB whose every answer comes through remote read."""

    def __init__(self, root: Path, read_url: str):
        super().__init__("prometheus", root)
        self.read_url = read_url

    def command(self) -> tuple[list[str], str]:
        argv, ready = super().command()
        (self.root / "prometheus.yml").write_text(
            f"global:\n  scrape_interval: 1m\nremote_read:\n"
            f"  - url: {self.read_url}\n    read_recent: true\n"
        )
        return argv, ready


def _reader(root: Path, read_url: str) -> _Reader:
    root.mkdir()
    reader = _Reader(root, read_url)
    reader.start()
    return reader


def _time(port: int, params: dict, runs: int) -> tuple[float, list]:
    url = f"http://127.0.0.1:{port}/api/v1/query_range?{urllib.parse.urlencode(params)}"
    times, answer = [], None
    for _ in range(runs):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=600) as response:
            answer = json.loads(response.read())
        times.append(time.perf_counter() - started)
        if answer["status"] != "success":
            raise RuntimeError(f"port {port}: {answer}")
    result = sorted(answer["data"]["result"], key=lambda r: sorted(r["metric"].items()))
    return statistics.median(times), result


def _reset_peak(pid: int | None) -> None:
    if pid is not None:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to VmRSS


def _peak_mib(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


if __name__ == "__main__":
    main()
