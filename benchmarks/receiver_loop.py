"""The event loop's CPU a remote write: uvicorn's protocol and the receiver driven in
process over fake sockets, with a flush that writes nothing (every body taken at once).

    python benchmarks/receiver_loop.py fast|asgi CONNECTIONS WRITES

``fast``: the protocol ``llmwh serve`` runs (remote write 1.0 below the ASGI cycle,
warehouse/serve/fast_write.py); ``asgi``: uvicorn's own, every request through the ASGI
cycle. Bodies are the low workload's of ``benchmarks/remote_write.py`` (built there with
``LLMWH_BENCH_BODIES=DIR``, read from ``DIR/low-32x750.pickle``). What it leaves out: the
sockets' system calls, the C decoder and the flush's own work, which run elsewhere.
"""

import asyncio
import os
import pickle
import sys
import time
from pathlib import Path

import uvloop
from uvicorn.config import Config as UConfig
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from warehouse.config import Config
from warehouse.ingest.app import Receiver
from warehouse.store.clickhouse import SERVER

mode, conns, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lanes = pickle.loads((Path(os.environ["LLMWH_BENCH_BODIES"]) / "low-32x750.pickle").read_bytes())
bodies = [b for lane in lanes for b in lane[:20]]


class Store:
    capabilities = SERVER


class Transport:
    def __init__(self, conn):
        self.conn, self.closed = conn, False

    def write(self, data):
        self.conn.received(data)

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 9201), "peername": ("127.0.0.1", 40000)}.get(
            name, default
        )

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def get_write_buffer_size(self):
        return 0


class Conn:
    def __init__(self, index, proto, loop, state):
        self.index, self.proto, self.loop, self.state = index, proto, loop, state
        self.transport = Transport(self)
        proto.connection_made(self.transport)
        self.sent = 0

    def send(self):
        body = bodies[(self.index * 7 + self.sent) % len(bodies)]
        self.sent += 1
        head = (
            b"POST /api/v1/write HTTP/1.1\r\nHost: 127.0.0.1:9201\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\n"
            b"X-Prometheus-Remote-Write-Version: 0.1.0\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        self.proto.data_received(head + body)

    def received(self, data):
        if not data:
            return
        assert data.startswith(b"HTTP/1.1 204"), data[:200]
        self.state["done"] += 1
        if self.state["sent"] < total:
            self.state["sent"] += 1
            self.loop.call_soon(self.send)
        elif self.state["done"] >= total:
            self.state["finished"].set()


async def main():
    config = Config(wal=False)
    receiver = Receiver(Store(), config)
    committer = receiver.writes.committer
    committer.concurrency = 1
    committer.insert_bodies = lambda groups: {}
    await committer.start()
    if mode == "fast":
        from warehouse.serve.fast_write import protocol_for

        cls = protocol_for(receiver)
    else:
        cls = HttpToolsProtocol
    uconfig = UConfig(receiver, http=cls, lifespan="off", proxy_headers=False, access_log=False)
    uconfig.load()
    server_state = ServerState()
    server_state.default_headers = [
        (b"date", b"Sun, 06 Dec 2026 03:00:00 GMT"),
        (b"server", b"uvicorn"),
    ]
    loop = asyncio.get_running_loop()
    state = {"done": 0, "sent": 0, "finished": asyncio.Event()}
    connections = [
        Conn(
            i,
            uconfig.http_protocol_class(
                config=uconfig, server_state=server_state, app_state={}, _loop=loop
            ),
            loop,
            state,
        )
        for i in range(conns)
    ]
    for c in connections:
        state["sent"] += 1
        c.send()
    await asyncio.sleep(0)
    started, cpu = time.perf_counter(), time.process_time()
    await state["finished"].wait()
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    cpu_us, wall_us = used / total * 1e6, elapsed / total * 1e6
    print(f"{mode} x{conns}: {total} writes, {cpu_us:.1f} us CPU a write ({wall_us:.1f} us wall)")
    await committer.close()


uvloop.run(main())
