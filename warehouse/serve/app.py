"""The composition root of ``llmwh serve``: one ASGI app with every way in and out.

The receiver (:mod:`warehouse.ingest.app`) brings the write endpoints and the checks
every request takes; this module mounts the reads on it (:mod:`warehouse.serve.reads`)
and, with ``otlp_grpc_listen``, starts and stops the OTLP/gRPC server with it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from warehouse.config import Config
from warehouse.ingest.app import Receiver, Route
from warehouse.serve.reads import (
    READ_CONCURRENCY,
    READ_PATH,
    SLO_PATH,
    Pages,
    RemoteRead,
    slo_names,
)
from warehouse.store.base import Store

__all__ = ["build_app"]


def build_app(store: Store, config: Config | None = None) -> Receiver:
    """The warehouse's ASGI app on ``store``: writes, reads, pages and (when configured)
    OTLP/gRPC. Its lifespan starts and drains them all."""
    receiver = Receiver(store, config)
    reads = ThreadPoolExecutor(max_workers=READ_CONCURRENCY, thread_name_prefix="llmwh-read")
    pages = Pages(receiver, reads)
    receiver.mount(Route("POST", READ_PATH, RemoteRead(receiver, reads), "read"))
    receiver.mount(Route("GET", "/", pages.overview, "read"))
    receiver.mount(Route("GET", "/report", pages.report, "read"))
    for name in slo_names(store, receiver.config):
        receiver.mount(Route("GET", SLO_PATH + name, pages.slo(name), "read"))

    async def stop_reads() -> None:
        reads.shutdown()

    receiver.on_stop(stop_reads)
    if receiver.config.otlp_grpc_listen:
        from warehouse.ingest.otlp.grpc_server import OtlpGrpcServer  # grpc: when asked

        grpc = OtlpGrpcServer(receiver.otlp, receiver.access, receiver.config.otlp_grpc_listen)
        receiver.on_start(grpc.start)
        receiver.on_stop(grpc.stop)
    return receiver
