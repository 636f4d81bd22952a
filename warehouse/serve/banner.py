"""What ``llmwh serve`` prints once the warehouse is ready: when it acknowledges a write
(and where its write-ahead log is), and where each endpoint listens."""

from __future__ import annotations

from warehouse.config import Config

__all__ = ["acknowledged", "banner"]

# The paths are spelled here rather than imported from the receiver, so that every
# command's start-up does not load the OTLP protobufs; tests/unit/test_serve_banner.py
# holds them to the receiver's own constants.
_DEMO_HINTS = """\
  in another terminal, with the venv active (. .venv/bin/activate), try:
    llmwh sla --slo chat-assistant --since 6h --by zone   SLA report per zone
    llmwh drill --by zone -m count,p95_ttft_ms --since 1h
    llmwh root-cause --slo chat-assistant --since 1h      what carries the bad requests
    llmwh timeseries -m p95_ttft_ms --by zone --since 3h --interval 15m
  (the README's "Try it" has more)
"""


def banner(
    store_url: str, config: Config, host: str, port: int, *, demo: bool, program: str
) -> str:
    """The endpoints of a receiver on ``host:port`` over ``store_url``, then what to try:
    with ``demo``, questions about the demo's incident; else a ``program`` command."""
    base = f"http://{host}:{port}"
    grpc = config.otlp_grpc_listen or "off (serve --otlp-grpc-listen HOST:PORT turns it on)"
    hints = _DEMO_HINTS if demo else f"  try: {program} migrate status\n"
    return (
        f"warehouse ready: store {store_url}\n"
        f"  acknowledged:  {acknowledged(config)}\n"
        f"  remote write:  {base}/api/v1/write\n"
        f"  events:        {base}/api/v1/requests\n"
        f"  OTLP/HTTP:     {base}/v1/traces and {base}/v1/metrics\n"
        f"  OTLP/gRPC:     {grpc}\n"
        f"  remote read:   {base}/api/v1/read\n"
        f"  overview page: {base}/\n"
        f"{hints}"
        "Ctrl-C stops it."
    )


def acknowledged(config: Config) -> str:
    """When the receiver of ``config`` answers a write 2xx, and where its log is."""
    directory = config.wal_directory()
    if directory is None:
        return "once committed in the store (no write-ahead log: --no-wal)"
    where = directory.absolute()
    return f"once synced to the write-ahead log in {where} (--no-wal: once in the store)"
