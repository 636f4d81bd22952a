"""``llmwh generate``: seeded synthetic traffic to a file or to a receiver."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from warehouse.cli.options import key_values, nonempty
from warehouse.errors import ConfigError
from warehouse.query.timerange import parse_duration, parse_instant
from warehouse.synthetic import INCIDENT_KINDS, parse_incident, request_batches
from warehouse.synthetic.files import write_requests
from warehouse.synthetic.send import ENDPOINTS, Sender

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")


@app.command("generate")
def generate(
    requests: Annotated[int, typer.Option("--requests", "-n", help="How many requests")] = 100_000,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same data")] = 0,
    span: Annotated[str, typer.Option("--span", help="Time the requests spread over")] = "1d",
    start: Annotated[
        str | None,
        typer.Option(
            "--start", help="First arrival: ISO time or a duration ago [default: --span ago]"
        ),
    ] = None,
    diurnal: Annotated[
        float, typer.Option("--diurnal", help="Depth of the daily cycle of arrivals, 0 to <1")
    ] = 0.5,
    incident: Annotated[
        list[str] | None,
        typer.Option(
            "--incident",
            "-i",
            help=f"Inject KIND[:key=value,...], KIND one of {', '.join(INCIDENT_KINDS)}; "
            "keys: the dimension it hits, at, for (share of the span or a duration), "
            "severity. Repeatable.",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to FILE (.ndjson, .jsonl or .parquet)")
    ] = None,
    send: Annotated[
        str | None,
        typer.Option(
            "--send",
            help="Send to a receiver, e.g. http://127.0.0.1:9201 (--via otlp-grpc: HOST:PORT)",
        ),
    ] = None,
    via: Annotated[
        str, typer.Option("--via", help=f"With --send: {' or '.join(ENDPOINTS)}")
    ] = "events",
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="With --send: requests per second [default: as fast as taken]"),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="With --send: NAME: VALUE sent with every write, e.g. "
            "'Authorization: Bearer TOKEN' or 'X-Scope-OrgID: acme'. Repeatable.",
        ),
    ] = None,
) -> None:
    """Realistic, seeded LLM inference traffic with optional incidents, to a file or a receiver.

    Diurnal arrivals; skewed tenant, service, model, region, client and experiment-arm
    mixes; latencies that grow with prompt and output length, load and KV-cache misses;
    errors of the taxonomy; health-check probes. Same arguments, same data.
    """
    from rich.progress import Progress

    if (out is None) == (send is None):
        raise ConfigError("give exactly one of --out FILE and --send URL")
    if requests < 0:
        raise ConfigError(f"--requests must be >= 0, got {requests}")
    length = parse_duration(span)
    now = datetime.now(UTC).replace(microsecond=0)
    first = parse_instant(start, now) if start else now - length
    incidents = [parse_incident(spec) for spec in incident or ()]
    start_ms, span_ms = int(first.timestamp() * 1000), int(length.total_seconds() * 1000)
    for injected in incidents:
        typer.echo(f"incident {injected.describe(start_ms, span_ms)}", err=True)
    batches = request_batches(requests, seed, first, length, incidents, diurnal)

    with ExitStack() as stack:
        progress = stack.enter_context(Progress(transient=True))
        task = progress.add_task("generating" if out else f"sending ({via})", total=requests)
        advance = partial(progress.advance, task)
        if out is not None:
            written = write_requests(out, batches, advance)
            where = str(out)
        else:
            assert send is not None  # exactly one of out and send, checked above
            headers = key_values(header, "--header", "NAME: VALUE", value=nonempty, sep=":")
            sender = Sender(send, via=via, rate=rate, headers=dict(headers))
            stack.callback(sender.close)
            written = sender.send(batches, advance)
            where = f"{send} ({sender.via})"
    typer.echo(f"generated {written:,} requests (seed {seed}) -> {where}", err=True)
