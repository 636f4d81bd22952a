"""Replay pre-built remote-write 1.0 bodies against llmwh, Prometheus and VictoriaMetrics.

    python benchmarks/remote_write.py [--seconds 20] [--connections 4,32]
        [--workload low|high|both] [--receivers llmwh,prometheus,victoria-metrics]
        [--max-samples 4000000] [--json]

Bodies are snappy-compressed ``prometheus.WriteRequest``s of 500 samples, built before
any timing starts, for two workloads:

* ``low``: 2,000 long-lived scrape-like series (node and HTTP metrics with job,
  instance and pod labels). Each connection owns a slice of the series, as a
  Prometheus shard would, and sends its scrapes in order (timestamps +1s), so no
  receiver sees a sample out of order.
* ``high``: every sample a new series: per-request LLM metrics
  (``llm_request_ttft_seconds`` ...) with a unique ``request_id`` and tenant, model,
  region, zone, service and ab_group labels.

Each receiver starts fresh in a temporary directory, on 127.0.0.1 only: ``llmwh serve``
on the embedded ClickHouse, as shipped (its write-ahead log on; ``llmwh-tenants``: the
same in multi-tenant mode, each connection one of 8 tenants, every write held against
its tenant's share of the buffer; ``llmwh-no-wal``: with ``--no-wal``, acknowledging
after the ClickHouse commit; ``llmwh-no-sync``: with ``wal_sync = false``, acknowledging
once in the log file, unsynced, as Prometheus and VictoriaMetrics do),
``prometheus --web.enable-remote-write-receiver`` and ``victoria-metrics``; ``llmwh-1``:
with ``--workers 1``, one receiver process;
``llmwh@DIR``: ``llmwh serve`` as shipped from the code tree DIR (on ``PYTHONPATH``, its C
extensions built in place), to compare two versions in one run.
Connections are threads with keep-alive HTTP/1.1
connections (a lean client of this script's own) sending at full speed until
``--seconds`` pass or the bodies run out (no body is sent twice). Only 2xx responses
count as accepted samples. For llmwh the script then checks that the store holds
exactly the acknowledged samples: in ``samples``, or (per-request metrics) as the
values of ``request_parts`` rows.
The ``cores`` column is the CPU each receiver used while sending (for llmwh: the
receiver process + its embedded ClickHouse), which shows whether a receiver was bound
by CPU or by latency; ``sender`` is what this script itself used. ``B/sample`` is what
each receiver holds on disk after its merges over the samples it accepted (llmwh: every
table of its database after ``OPTIMIZE ... FINAL``; Prometheus: its head written as a
block; VictoriaMetrics: after a forced merge; disk_bytes.py says how), measured after
the timing; ``--no-disk`` leaves it out. These bodies carry uniformly random values,
which no store compresses: benchmarks/bytes_per_sample.py measures bytes a sample on
realistic scrape data.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import cramjam
import disk_bytes

from warehouse.store import open_store
from warehouse.store.embedded import server_status, stop_server
from warehouse.wire.prometheus import V1

SAMPLES_PER_BODY = 500
LOW_SERIES = 2_000
RECEIVERS = (
    "llmwh", "llmwh-1", "llmwh-tenants", "llmwh-no-wal", "llmwh-no-sync", "prometheus",
    "victoria-metrics",
)  # fmt: skip
TENANTS = 8
"""``llmwh-tenants`` runs in multi-tenant mode; its connections name this many tenants,
in turn, in ``X-Scope-OrgID``."""
HEADERS = {
    "Content-Type": "application/x-protobuf",
    "Content-Encoding": "snappy",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


def main() -> None:
    args = _parse_args()
    receivers = [r.strip() for r in args.receivers.split(",") if r.strip()]
    unknown = {r for r in receivers if r not in RECEIVERS and not r.startswith("llmwh@")}
    if unknown:
        sys.exit(f"unknown receivers: {', '.join(sorted(unknown))} (known: {', '.join(RECEIVERS)})")
    workloads = ["low", "high"] if args.workload == "both" else [args.workload]

    results = []
    for workload in workloads:
        for connections in args.connections:
            bodies_per_lane = max(1, args.max_samples // SAMPLES_PER_BODY // connections)
            lanes = _build_lanes(workload, connections, bodies_per_lane)
            for receiver in receivers:
                result = _run_one(receiver, workload, lanes, args.seconds, not args.no_disk)
                results.append(result)
                _log(
                    f"  {workload} x {receiver} x {connections}: "
                    f"{result['samples_per_s']:,} samples/s, non-2xx {result['non_2xx']}"
                )

    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results, args)


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="send for this long at most")
    # A Prometheus that falls behind raises its shard count (one connection each) up
    # to max_shards (200 by default), so a receiver under load sees tens of them.
    parser.add_argument(
        "--connections",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[32],
        help="connections at once; several (4,32) run each",
    )
    parser.add_argument("--workload", choices=["low", "high", "both"], default="both")
    parser.add_argument(
        "--receivers",
        default=",".join(RECEIVERS),
        help="comma-separated: " + ", ".join(RECEIVERS) + ", llmwh@DIR (another code tree)",
    )
    parser.add_argument(
        "--max-samples",
        type=int,
        default=4_000_000,
        help="samples pre-built per workload; a run also stops when they are all sent",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-disk", action="store_true", help="do not measure bytes on disk after the sending"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    random.seed(args.seed)
    return args


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- bodies ------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _labels(pairs: dict[str, str]) -> bytes:
    """The serialized ``labels`` fields of a ``TimeSeries``, in the order given."""
    labels = [V1.Label(name=k, value=v) for k, v in pairs.items()]
    return V1.TimeSeries(labels=labels).SerializeToString()


def _sample(value: float, ts: int) -> bytes:
    """The serialized ``samples`` field of a ``TimeSeries`` holding one sample."""
    return V1.TimeSeries(samples=[V1.Sample(value=value, timestamp=ts)]).SerializeToString()


def _body(series: list[bytes]) -> bytes:
    """A snappy ``WriteRequest`` of serialized ``TimeSeries`` (field 1, length-delimited).

    Serialized messages concatenate into one message, so a series is its label bytes
    followed by its sample bytes; building bodies this way is ten times faster than
    building one message object per label and sample.
    """
    raw = b"".join(b"\x0a" + _varint(len(ts)) + ts for ts in series)
    return bytes(cramjam.snappy.compress_raw(raw))


def _low_series() -> list[bytes]:
    """2,000 scrape-like series: 10 metrics x 4 jobs x 50 pods, labels sorted by name."""
    names = [
        "node_cpu_seconds_total",
        "node_memory_MemAvailable_bytes",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_filesystem_avail_bytes",
        "http_requests_total",
        "http_request_duration_seconds_sum",
        "http_request_duration_seconds_count",
        "process_resident_memory_bytes",
        "up",
    ]
    series = []
    for job in ("node-exporter", "api-gateway", "inference-router", "tokenizer"):
        for pod in range(50):
            for name in names:
                labels = {
                    "__name__": name,
                    "instance": f"10.0.{pod // 10}.{pod}:9100",
                    "job": job,
                    "namespace": "serving",
                    "pod": f"{job}-{pod:03d}-7f9c",
                }
                series.append(_labels(labels))
    return series


def _low_lanes(connections: int, bodies_per_lane: int) -> list[list[bytes]]:
    """Each lane owns a slice of the series and sends its scrapes in order, 500 samples a
    body, as a Prometheus shard batches its queue: a slice smaller than a body puts
    several consecutive scrapes in one body."""
    series = _low_series()
    shards = [series[i::connections] for i in range(connections)]
    step_ms = 1000
    needed = bodies_per_lane * SAMPLES_PER_BODY
    lanes = []
    for shard in shards:
        scrapes = -(-needed // len(shard))
        start = int(time.time() * 1000) - scrapes * step_ms
        stream = (
            labels + _sample(random.random() * 1e6, start + k * step_ms)
            for k in range(scrapes)
            for labels in shard
        )
        lane = []
        for _ in range(bodies_per_lane):
            lane.append(_body([next(stream) for _ in range(SAMPLES_PER_BODY)]))
        lanes.append(lane)
    return lanes


_LLM_METRICS = (
    ("llm_request_ttft_seconds", lambda: random.uniform(0.05, 2.0)),
    ("llm_request_tpot_seconds", lambda: random.uniform(0.01, 0.08)),
    ("llm_request_e2e_seconds", lambda: random.uniform(0.5, 30.0)),
    ("llm_request_queue_seconds", lambda: random.uniform(0.0, 0.5)),
    ("llm_request_prompt_tokens", lambda: float(random.randint(10, 8000))),
)
_MEASURE_COLUMNS = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "prompt_tokens")
"""The `request_parts` columns the metrics above fill (warehouse/ingest/metric_mapping.toml)."""


def _dimensions(n: int) -> list[tuple[bytes, bytes]]:
    """n label sets as (labels sorting before request_id, labels sorting after it)."""
    combos = []
    for _ in range(n):
        before = {
            "ab_group": random.choice(("control", "treatment")),
            "model": random.choice(("llama-3-70b", "llama-3-8b", "mixtral-8x7b", "qwen-72b")),
            "region": random.choice(("us-east-1", "eu-west-1", "ap-south-1")),
        }
        after = {
            "service": random.choice(("chat", "completion", "embedding", "agent")),
            "tenant": f"tenant-{random.randrange(200)}",
            "zone": random.choice("abc"),
        }
        combos.append((_labels(before), _labels(after)))
    return combos


def _high_lanes(connections: int, bodies_per_lane: int) -> list[list[bytes]]:
    """Per-request LLM metrics: a unique request_id, so every sample is a new series."""
    names = [(_labels({"__name__": name}), value) for name, value in _LLM_METRICS]
    dimensions = _dimensions(1024)
    requests_per_body = SAMPLES_PER_BODY // len(names)
    now = int(time.time() * 1000)
    lanes: list[list[bytes]] = [[] for _ in range(connections)]
    n = 0
    for b in range(bodies_per_lane * connections):
        series = []
        for _ in range(requests_per_body):
            n += 1
            before, after = random.choice(dimensions)
            request = _labels({"request_id": f"req-{n:012x}-{random.getrandbits(32):08x}"})
            ts = now - random.randrange(60_000)
            for name, value in names:
                series.append(name + before + request + after + _sample(value(), ts))
        lanes[b % connections].append(_body(series))
    return lanes


def _build_lanes(workload: str, connections: int, bodies_per_lane: int) -> list[list[bytes]]:
    """The bodies each connection sends; kept in ``$LLMWH_BENCH_BODIES`` (a directory)
    when set, since building millions of samples takes minutes."""
    started = time.perf_counter()
    build = _low_lanes if workload == "low" else _high_lanes
    cache = os.environ.get("LLMWH_BENCH_BODIES")
    path = Path(cache or ".") / f"{workload}-{connections}x{bodies_per_lane}.pickle"
    if cache and path.exists():
        lanes = pickle.loads(path.read_bytes())
    else:
        lanes = build(connections, bodies_per_lane)
        if cache:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(lanes, protocol=pickle.HIGHEST_PROTOCOL))
    bodies = sum(len(lane) for lane in lanes)
    size = sum(len(b) for lane in lanes for b in lane)
    _log(
        f"{workload}: built {bodies:,} bodies ({bodies * SAMPLES_PER_BODY:,} samples, "
        f"{size / bodies / 1024:.1f} KiB each) in {time.perf_counter() - started:.1f}s"
    )
    return lanes


# -- receivers ---------------------------------------------------------------------------


@dataclass
class Receiver:
    """A receiver process started by this script, on its own port and data directory."""

    name: str
    root: Path
    port: int = field(default_factory=lambda: _free_port())
    process: subprocess.Popen | None = None

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1/write"

    def command(self) -> tuple[list[str], str]:
        """(argv, readiness path)."""
        data = self.root / "data"
        if self.name.startswith("llmwh"):
            argv = [sys.executable, "-m", "warehouse", "serve", "--data", str(data)]
            argv += ["--http-port", "0", "--tcp-port", "0", "--listen", f"127.0.0.1:{self.port}"]
            if self.name == "llmwh-no-wal":
                argv += ["--no-wal"]
            if self.name == "llmwh-1":
                argv += ["--workers", "1"]
            return argv, "/readyz"
        if self.name == "prometheus":
            config = self.root / "prometheus.yml"
            config.write_text("global:\n  scrape_interval: 1m\n")
            argv = [shutil.which("prometheus") or "/usr/bin/prometheus"]
            argv += [f"--config.file={config}", f"--storage.tsdb.path={data}"]
            argv += [f"--web.listen-address=127.0.0.1:{self.port}"]
            argv += ["--web.enable-remote-write-receiver"]
            argv += ["--web.enable-admin-api"]  # its snapshot: the bytes on disk (disk_bytes.py)
            return argv, "/-/ready"
        argv = [shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"]
        argv += [f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{self.port}"]
        return argv, "/health"

    def start(self) -> None:
        argv, ready = self.command()
        log = open(self.root / "receiver.log", "wb")  # noqa: SIM115 - lives as long as the process
        env = dict(os.environ)
        if self.name == "llmwh-tenants":
            env["LLMWH_TENANT_HEADER"] = "X-Scope-OrgID"
        if self.name == "llmwh-no-sync":
            env["LLMWH_WAL_SYNC"] = "false"
        cwd = None
        if self.name.startswith("llmwh@"):  # llmwh serve from another tree, as shipped
            # `python -m` puts its working directory first on sys.path, before PYTHONPATH.
            cwd = env["PYTHONPATH"] = self.name.partition("@")[2]
        self.process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=cwd
        )
        _log(f"  started {self.name} (pid {self.process.pid}) on 127.0.0.1:{self.port}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.root / 'receiver.log'}")
            if _http_ok(f"http://127.0.0.1:{self.port}{ready}"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {START_TIMEOUT_S:.0f}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.name.startswith("llmwh") and server_status(self.root / "data") is not None:
            stop_server(self.root / "data")  # the embedded ClickHouse, should serve have left it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 200 <= response.status < 300
    except OSError:
        return False


def _stored_samples(root: Path) -> int:
    """Samples stored: as samples, or as the values of request parts (one a measure)."""
    info = server_status(root / "data")
    if info is None:
        raise RuntimeError("the embedded ClickHouse is not running")
    store = open_store(info.store_url())
    db = store.database
    measures = " + ".join(f"count({column})" for column in _MEASURE_COLUMNS)
    try:
        table = store.query_arrow(
            f"SELECT (SELECT count() FROM {db}.samples FINAL) AS samples, "
            f"(SELECT {measures} FROM {db}.request_parts FINAL) AS parts"
        )
        row = table.to_pylist()[0]
        return int(row["samples"] + row["parts"])
    finally:
        store.close()


# -- replay ------------------------------------------------------------------------------


_TALLY_LOCK = threading.Lock()


class _Connection:
    """Keep-alive HTTP/1.1 POSTs on a plain socket: the load generator's client.

    ``http.client`` parses every response's headers with the ``email`` package; at
    2,000 writes a second that took the sending script 0.33 cores of this 2-core
    machine, three times what this client takes, CPU the receivers under test then
    lacked (docs/benchmarks.md). This client sends the same request bytes and reads a
    response only as far as it must: the status line, the headers, and a body by
    Content-Length or chunks.
    """

    def __init__(self, port: int, path: str, headers: dict[str, str]):
        self.port = port
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        ).encode()
        self.sock: socket.socket | None = None
        self.pending = b""

    def post(self, body: bytes) -> tuple[int, dict[str, str]]:
        """Send ``body``; the response's status and headers (names in lower case)."""
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.pending = b""
        self.sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (self.head, len(body), body))
        data = self.pending
        while (end := data.find(b"\r\n\r\n")) < 0:
            data += self._recv()
        lines = data[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        rest = data[end + 4 :]
        if status == 204 or status == 304 or status < 200:
            length = 0
        elif "content-length" in fields:
            length = int(fields["content-length"])
        elif fields.get("transfer-encoding", "").lower() == "chunked":
            length = self._chunked_length(rest)
            rest = self.pending  # _chunked_length read on from ``rest`` into it
        else:
            raise ConnectionError(f"a {status} response without a length")
        while len(rest) < length:
            rest += self._recv()
        self.pending = rest[length:]
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, fields

    def _chunked_length(self, data: bytes) -> int:
        """Read a chunked body (RFC 9112, 7.1) whose bytes start ``data``; leaves every
        byte read in ``self.pending`` and returns the body's length there."""
        at = 0
        while True:
            while (eol := data.find(b"\r\n", at)) < 0:
                data += self._recv()
            size = int(data[at:eol].split(b";")[0], 16)
            at = eol + 2
            if size == 0:  # trailer fields, then an empty line
                while (end := data.find(b"\r\n", at)) != at:
                    if end < 0:
                        data += self._recv()
                    else:
                        at = end + 2
                self.pending = data
                return at + 2
            while len(data) < at + size + 2:
                data += self._recv()
            at += size + 2

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the receiver closed the connection")
        return chunk

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _send_lane(
    port: int, lane: list[bytes], deadline: float, tally: Counter, headers: dict[str, str]
) -> None:
    """Send the lane's bodies in order on one keep-alive connection until the deadline;
    a body refused with 429 is sent again after its Retry-After."""
    statuses: Counter = Counter()
    connection = _Connection(port, "/api/v1/write", headers)
    try:
        for body in lane:
            while time.monotonic() < deadline:
                try:
                    status, fields = connection.post(body)
                except (OSError, ValueError, IndexError) as exc:  # IndexError: a bad answer
                    statuses[f"error: {type(exc).__name__}"] += 1
                    connection.close()
                    break
                statuses[status] += 1
                if status != 429:
                    break
                # As Prometheus does (retry_on_http_429): the same body after Retry-After.
                time.sleep(float(fields.get("retry-after") or 1))
            else:
                break
    finally:
        connection.close()
        with _TALLY_LOCK:
            tally.update(statuses)


def _replay(
    port: int, lanes: list[list[bytes]], seconds: float, tenants: int = 0
) -> tuple[Counter, float]:
    tally: Counter = Counter()
    started = time.monotonic()
    deadline = started + seconds
    headers = [
        {**HEADERS, "X-Scope-OrgID": f"tenant-{k % tenants}"} if tenants else HEADERS
        for k in range(len(lanes))
    ]
    threads = [
        threading.Thread(
            target=_send_lane, args=(port, lane, deadline, tally, headers[k]), daemon=True
        )
        for k, lane in enumerate(lanes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    return tally, time.monotonic() - started


def _run_one(
    name: str, workload: str, lanes: list[list[bytes]], seconds: float, disk: bool = True
) -> dict:
    label = name.replace("/", "_")  # llmwh@DIR names a directory
    with tempfile.TemporaryDirectory(prefix=f"llmwh-rw-{label}-") as tmp:
        receiver = Receiver(name, Path(tmp))
        try:
            receiver.start()
            before = _cpu_seconds(receiver.process.pid)
            sender_before = _own_cpu_seconds()
            tenants = TENANTS if name == "llmwh-tenants" else 0
            tally, elapsed = _replay(receiver.port, lanes, seconds, tenants)
            sender_cores = (_own_cpu_seconds() - sender_before) / elapsed
            if name.startswith("llmwh") and name != "llmwh-no-wal":
                # Its CPU includes inserting what it acknowledged, and what it stored is
                # counted once its write-ahead log is empty.
                wait_wal_inserted(receiver.port)
            after = _cpu_seconds(receiver.process.pid)
            ok = sum(n for status, n in tally.items() if isinstance(status, int) and status < 300)
            result = {
                "workload": workload,
                "receiver": name,
                "connections": len(lanes),
                "seconds": round(elapsed, 2),
                "accepted_samples": ok * SAMPLES_PER_BODY,
                "samples_per_s": round(ok * SAMPLES_PER_BODY / elapsed),
                "non_2xx": {str(s): n for s, n in tally.items() if not _is_2xx(s)},
                # Cores used while sending: the receiver process, and the processes it
                # started (llmwh's embedded ClickHouse).
                "cores": round((after[0] - before[0]) / elapsed, 2),
                "child_cores": round((after[1] - before[1]) / elapsed, 2),
                # This script's own CPU: on a small machine, taken from the receiver.
                "sender_cores": round(sender_cores, 2),
                "cpu_s_per_million": round(
                    (after[0] - before[0] + after[1] - before[1])
                    / max(ok, 1)
                    / SAMPLES_PER_BODY
                    * 1e6,
                    1,
                ),
            }
            if name.startswith("llmwh"):
                result["stored_samples"] = _stored_samples(receiver.root)
            if disk:
                on_disk = disk_bytes.measure(name, receiver.root, receiver.port)["bytes"]
                result["disk_bytes"] = on_disk
                result["disk_bytes_per_sample"] = round(on_disk / max(ok * SAMPLES_PER_BODY, 1), 3)
            return result
        finally:
            receiver.stop()


def wait_wal_inserted(port: int, timeout: float = 120) -> None:
    """Poll the receiver's metrics until its write-ahead log holds nothing uninserted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            lines = response.read().decode().splitlines()
        pending = [line for line in lines if line.startswith("llmwh_receiver_wal_pending_bytes")]
        # One line, or one a receiver process (labelled worker="i"), each 0.0 once empty.
        if pending and all(line.endswith(" 0.0") for line in pending):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the write-ahead log still held writes after {timeout:.0f}s")


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) used so far by ``pid`` and its live children but an
    embedded ClickHouse, and by that ClickHouse."""
    tick = os.sysconf("SC_CLK_TCK")

    def read(p: int) -> tuple[int, float]:
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / tick

    own = read(pid)[1]
    children = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent, used = read(int(entry.name))
                store = b"_embedded_child" in (entry / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile, or not readable
            if parent == pid and store:
                children += used
            elif parent == pid:  # llmwh serve's receiver processes (--workers): its own
                own += used
    return own, children


def _own_cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used so far, every thread."""
    times = os.times()
    return times.user + times.system


def _is_2xx(status: int | str) -> bool:
    return isinstance(status, int) and 200 <= status < 300


# -- report ------------------------------------------------------------------------------


def _print_table(results: list[dict], args: argparse.Namespace) -> None:
    print(
        f"\nremote write 1.0, {SAMPLES_PER_BODY} samples/body, "
        f"up to {args.seconds:g}s or {args.max_samples:,} samples, {os.cpu_count()} cores"
    )
    header = (
        f"{'workload':<9} {'conns':>5} {'receiver':<17} {'samples/s':>10} {'accepted':>11} "
        f"{'seconds':>8} {'non-2xx':>8} {'cores':>11} {'CPU-s/M':>8} {'sender':>6} "
        f"{'B/sample':>8}  llmwh stored"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        stored = r.get("stored_samples")
        check = (
            ""
            if stored is None
            else f"{stored:,} ({'=' if stored == r['accepted_samples'] else '!='})"
        )
        cores = f"{r['cores']:.2f}"
        if r["child_cores"]:
            cores += f"+{r['child_cores']:.2f}"
        print(
            f"{r['workload']:<9} {r['connections']:>5} {r['receiver']:<17} "
            f"{r['samples_per_s']:>10,} {r['accepted_samples']:>11,} {r['seconds']:>8.2f} "
            f"{sum(r['non_2xx'].values()):>8} {cores:>11} {r['cpu_s_per_million']:>8} "
            f"{r['sender_cores']:>6.2f} {r.get('disk_bytes_per_sample', ''):>8}  {check}"
        )
    runs = dict.fromkeys((r["workload"], r["connections"]) for r in results)
    for workload, connections in runs:
        rates = {
            r["receiver"]: r["samples_per_s"]
            for r in results
            if (r["workload"], r["connections"]) == (workload, connections)
        }
        for ours in ("llmwh", "llmwh-1", "llmwh-no-wal", "llmwh-no-sync"):
            for peer in ("prometheus", "victoria-metrics"):
                if ours in rates and rates.get(peer):
                    print(
                        f"{workload}, {connections} connections: {ours} / {peer} = "
                        f"{rates[ours] / rates[peer]:.2f}x"
                    )
        if rates.get("llmwh") and "llmwh-tenants" in rates:
            print(
                f"{workload}, {connections} connections: llmwh-tenants / llmwh = "
                f"{rates['llmwh-tenants'] / rates['llmwh']:.2f}x"
            )
    print("cores: CPU used while sending, receiver process + the processes it started")
    print("CPU-s/M: CPU seconds (all of a receiver's processes) per million samples accepted")
    print("sender: cores this script used sending (taken from the receiver's two)")
    print("B/sample: bytes on disk after merges over the samples accepted (random values)")
    print(f"llmwh-tenants: llmwh serve in multi-tenant mode, {TENANTS} tenants")
    print("llmwh: llmwh serve as shipped (acknowledged once in its write-ahead log); its CPU")
    print("  includes inserting every acknowledged write after the sending ended")
    print("llmwh-1: llmwh serve --workers 1 (one receiver process)")
    print("llmwh-no-wal: llmwh serve --no-wal (acknowledged once ClickHouse committed it)")
    print("llmwh-no-sync: wal_sync = false (acknowledged once in the log file, unsynced)")
    for r in results:
        if r["non_2xx"]:
            print(f"{r['workload']} x {r['receiver']} non-2xx: {r['non_2xx']}")


if __name__ == "__main__":
    main()
