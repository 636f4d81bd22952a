"""The same requests into `llmwh serve` as OTLP spans (HTTP and gRPC) and as events.

    python benchmarks/otlp_ingest.py [--requests 200000] [--per-write 512]
        [--connections 4] [--rounds 2] [--json]

Synthetic requests are encoded before any timing starts, ``--per-write`` a body: as
OTLP ``ExportTraceServiceRequest`` protobuf (spans shaped as vLLM's ``llm_request``,
what ``llmwh generate --via otlp`` sends) and as Arrow IPC events. Each round starts a
fresh ``llmwh serve`` on the embedded ClickHouse per path and posts every body over
``--connections`` keep-alive connections; the rate is acknowledged requests per
second, ``cores`` the receiver process's CPU (and its ClickHouse's) while sending.
The target of the OTLP work: spans at 70% or more of the events' requests/s.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pyarrow as pa
import pyarrow.compute as pc
from remote_write import Receiver, _Connection, _cpu_seconds, _free_port, wait_wal_inserted

from warehouse.ingest.otlp.grpc_server import TRACES_METHOD
from warehouse.store import open_store
from warehouse.store.embedded import server_status
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.spans import otlp_traces_body

PATHS = {
    "otlp": ("/v1/traces", {"Content-Type": "application/x-protobuf"}),
    "otlp-grpc": (TRACES_METHOD, {}),
    "events": ("/api/v1/requests", {"Content-Type": "application/vnd.apache.arrow.stream"}),
}


@dataclass
class _GrpcReceiver(Receiver):
    """`llmwh serve` that also listens for OTLP/gRPC."""

    grpc_port: int = field(default_factory=_free_port)

    def command(self) -> tuple[list[str], str]:
        argv, ready = super().command()
        return [*argv, "--otlp-grpc-listen", f"127.0.0.1:{self.grpc_port}"], ready


class _Channel:
    """One gRPC channel sending trace exports as the bytes given; the status as HTTP's."""

    def __init__(self, port: int):
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._export = self._channel.unary_unary(TRACES_METHOD)

    def post(self, body: bytes) -> tuple[int, bytes]:
        try:
            return 200, self._export(body, timeout=60)
        except grpc.RpcError as exc:
            return 503 if exc.code() == grpc.StatusCode.UNAVAILABLE else 400, b""

    def close(self) -> None:
        self._channel.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--per-write", type=int, default=512)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    table = synthetic_requests(args.requests, seed=1)
    table = table.filter(pc.invert(table.column("is_probe")))  # spans carry no probes
    chunks = [table.slice(i, args.per_write) for i in range(0, table.num_rows, args.per_write)]
    started = time.perf_counter()
    spans = [otlp_traces_body(c) for c in chunks]
    bodies = {"otlp": spans, "otlp-grpc": spans, "events": [_ipc(c) for c in chunks]}
    print(
        f"{table.num_rows:,} requests in {len(chunks):,} writes, encoded in "
        f"{time.perf_counter() - started:.1f}s; bytes a request: "
        + ", ".join(
            f"{k} {sum(map(len, bodies[k])) / table.num_rows:.0f}" for k in ("otlp", "events")
        ),
        flush=True,
    )
    results = []
    for round_ in range(args.rounds):
        for path in PATHS:
            result = _run(path, bodies[path], chunks, args.connections)
            result["round"] = round_ + 1
            results.append(result)
            print(
                f"  round {round_ + 1} {path}: {result['requests_per_s']:,} requests/s, "
                f"cores {result['cores']}+{result['child_cores']}, stored {result['stored']:,}",
                flush=True,
            )
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for round_ in range(1, args.rounds + 1):
        rates = {r["path"]: r["requests_per_s"] for r in results if r["round"] == round_}
        print(
            f"round {round_}: otlp / events = {rates['otlp'] / rates['events']:.2f}, "
            f"otlp-grpc / events = {rates['otlp-grpc'] / rates['events']:.2f}"
        )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _run(path: str, bodies: list[bytes], chunks: list[pa.Table], connections: int) -> dict:
    endpoint, headers = PATHS[path]
    with tempfile.TemporaryDirectory(prefix=f"llmwh-otlp-{path}-") as tmp:
        grpc_path = path == "otlp-grpc"
        receiver = (_GrpcReceiver if grpc_path else Receiver)("llmwh", Path(tmp))
        try:
            receiver.start()
            before = _cpu_seconds(receiver.process.pid)
            statuses: Counter = Counter()
            lock = threading.Lock()
            queue = list(range(len(bodies)))

            def send() -> None:
                if grpc_path:
                    connection = _Channel(receiver.grpc_port)
                else:
                    connection = _Connection(receiver.port, endpoint, headers)
                try:
                    while True:
                        with lock:
                            if not queue:
                                return
                            index = queue.pop()
                        status, _ = connection.post(bodies[index])
                        with lock:
                            statuses[status] += chunks[index].num_rows
                finally:
                    connection.close()

            threads = [threading.Thread(target=send) for _ in range(connections)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - started
            wait_wal_inserted(receiver.port)  # its CPU includes inserting what it acknowledged
            after = _cpu_seconds(receiver.process.pid)
            accepted = statuses[200]
            return {
                "path": path,
                "requests": sum(statuses.values()),
                "accepted": accepted,
                "statuses": {str(k): v for k, v in statuses.items()},
                "seconds": round(elapsed, 2),
                "requests_per_s": round(accepted / elapsed),
                "cores": round((after[0] - before[0]) / elapsed, 2),
                "child_cores": round((after[1] - before[1]) / elapsed, 2),
                "stored": _stored_requests(receiver.root),
            }
        finally:
            receiver.stop()


def _stored_requests(root: Path) -> int:
    info = server_status(root / "data")
    if info is None:
        raise RuntimeError("the embedded ClickHouse is not running")
    store = open_store(info.store_url())
    try:
        return store.query_arrow(f"SELECT count() FROM {store.database}.requests")[0][0].as_py()
    finally:
        store.close()


if __name__ == "__main__":
    main()
