"""What ``llmwh serve`` prints once the warehouse is ready: where each endpoint listens."""

from __future__ import annotations

from warehouse.config import Config

__all__ = ["banner"]

_DEMO_HINTS = """\
  in another terminal, try (from this directory):
    llmwh sla --slo chat-assistant --since 6h --by zone   SLA report per zone
    llmwh drill --by zone -m count,p95_ttft_ms --since 1h
    llmwh root-cause --slo chat-assistant --since 1h      what carries the bad requests
    llmwh timeseries -m p95_ttft_ms --by zone --since 3h --interval 15m
  (llmwh is .venv/bin/llmwh after `make run`; the README's "Try it" has more)
"""


def banner(
    store_url: str, config: Config, host: str, port: int, *, demo: bool, program: str
) -> str:
    """The endpoints of a receiver on ``host:port`` over ``store_url``, then what to try:
    with ``demo``, questions about the demo's incident; else a ``program`` command."""
    grpc = f"  OTLP/gRPC:     {config.otlp_grpc_listen}\n" if config.otlp_grpc_listen else ""
    hints = _DEMO_HINTS if demo else f"  try: {program} migrate status\n"
    return (
        f"warehouse ready: store {store_url}\n"
        f"  remote write:  http://{host}:{port}/api/v1/write\n"
        f"  events:        http://{host}:{port}/api/v1/requests\n"
        f"  remote read:   http://{host}:{port}/api/v1/read\n"
        f"{grpc}"
        f"  overview page: http://{host}:{port}/\n"
        f"{hints}"
        "Ctrl-C stops it."
    )
