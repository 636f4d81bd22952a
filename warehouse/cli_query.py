"""``llmwh`` query commands: drill, timeseries, sla, sql, root-cause, drift and ab.

Each is a thin shell over a :class:`warehouse.Warehouse` method; results go through
:mod:`warehouse.render` as a table (with a footer saying where the answer came from),
JSON, CSV or Parquet. What feeds Prometheus and Grafana is here too: export,
alert-rules and exporters write.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, BinaryIO

import polars as pl
import typer

from warehouse.api import Warehouse
from warehouse.cli_shared import ConfigOption, DataOption, StoreOption, store_for
from warehouse.config import load_config, parse_listen
from warehouse.errors import ConfigError, InvalidArgument
from warehouse.query.named import bind, for_grafana, named_queries, read_query
from warehouse.query.result import Result
from warehouse.query.timerange import time_range
from warehouse.render import FORMATS, footer_to_stderr, write_result

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")
slo_app = typer.Typer(
    help="SLOs compiled into rollups: `llmwh sla` reads them.", rich_markup_mode="markdown"
)

query_app = typer.Typer(
    help="Named queries of sql/: one question each, in SQL that clickhouse-client runs too.",
    rich_markup_mode="markdown",
)
exporters_app = typer.Typer(
    help="The files the warehouse hands to Grafana and Prometheus (the repository's exporters/).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

DEFAULT_MEASURES = "count,error_rate,p95_ttft_ms,p95_tpot_ms,p95_e2e_ms"

ByOption = Annotated[
    list[str] | None,
    typer.Option("--by", "-b", help="Dimensions to group by, comma-separated or repeated"),
]
MeasureOption = Annotated[
    list[str] | None,
    typer.Option(
        "--measure",
        "-m",
        help=f"Measures, comma-separated or repeated [default: {DEFAULT_MEASURES}]",
    ),
]
WhereOption = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        "-w",
        help="Filter DIMENSION=VALUE[,VALUE...]; repeat for several dimensions",
    ),
]
SinceOption = Annotated[
    str, typer.Option("--since", help="Start: a duration back from now (15m, 7d) or ISO time")
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help="End (exclusive) [default: now]", show_default=False)
]
ThresholdOption = Annotated[
    list[str] | None,
    typer.Option(
        "--threshold",
        "-t",
        help="Per-request limit LATENCY=MS for attainment/goodput, e.g. ttft_ms=200",
    ),
]
ExactOption = Annotated[
    bool | None,
    typer.Option(
        "--exact/--approx",
        help="Exact percentiles from raw rows, or approximate ones [default: fastest source]",
        show_default=False,
    ),
]
FormatOption = Annotated[
    str, typer.Option("--format", "-f", help=f"Output format: {'|'.join(FORMATS)}")
]
OutputOption = Annotated[
    Path | None, typer.Option("--output", "-o", help="Write to this file instead of stdout")
]


@app.command("drill")
def drill(
    by: ByOption = None,
    measure: MeasureOption = None,
    where: WhereOption = None,
    since: SinceOption = "1h",
    until: UntilOption = None,
    threshold: ThresholdOption = None,
    exact: ExactOption = None,
    order_by: Annotated[
        str | None, typer.Option("--order-by", help="Column to sort by; -column for descending")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many rows")] = None,
    include_probes: Annotated[
        bool, typer.Option("--include-probes", help="Count health-check probes too")
    ] = False,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Measures per combination of dimensions, e.g. p95 TTFT by model and region."""
    with _warehouse(store, data, config_file) as wh:
        result = wh.drill(
            by=_list(by),
            measures=_list(measure) or _list([DEFAULT_MEASURES]),
            filters=_filters(where),
            since=since,
            until=until,
            thresholds=_thresholds(threshold),
            exact=exact,
            include_probes=include_probes,
            order_by=order_by,
            limit=limit,
        )
        _write(result, fmt, output)


@app.command("timeseries")
def timeseries(
    measure: MeasureOption = None,
    by: ByOption = None,
    interval: Annotated[str, typer.Option("--interval", help="Bucket width (1m, 5m, 1h)")] = "5m",
    where: WhereOption = None,
    since: SinceOption = "1h",
    until: UntilOption = None,
    threshold: ThresholdOption = None,
    exact: ExactOption = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Measures per time bucket (a `time` column first), optionally per group."""
    with _warehouse(store, data, config_file) as wh:
        result = wh.timeseries(
            measures=_list(measure) or _list([DEFAULT_MEASURES]),
            by=_list(by),
            interval=interval,
            filters=_filters(where),
            since=since,
            until=until,
            thresholds=_thresholds(threshold),
            exact=exact,
        )
        _write(result, fmt, output)


@app.command("sla")
def sla(
    slo: Annotated[
        str,
        typer.Option(
            "--slo",
            help="A shipped SLO (chat-assistant, batch-summarization, "
            "code-completion) or the path of an SLO TOML file",
        ),
    ],
    by: ByOption = None,
    where: WhereOption = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Start [default: the SLO's period back from now]"),
    ] = None,
    until: UntilOption = None,
    exact: ExactOption = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Evaluate an SLO: objectives, attainment, compliance, budget and burn rates."""
    with _warehouse(store, data, config_file) as wh:
        result = wh.sla(
            slo, by=_list(by), filters=_filters(where), since=since, until=until, exact=exact
        )
        _write(result, fmt, output)


@app.command("report")
def report(
    slo: Annotated[
        list[str],
        typer.Option("--slo", help="An SLO to report on: a shipped name or a TOML path (repeat)"),
    ],
    since: Annotated[str, typer.Option("--since", help="Start of the report's range")] = "7d",
    until: UntilOption = None,
    by: Annotated[
        str | None, typer.Option("--by", help="A dimension to rank the worst groups by")
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="The file to write")] = Path("report.html"),
    fmt: Annotated[
        str, typer.Option("--format", help="html (self-contained) or pdf (needs the pdf extra)")
    ] = "html",
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Write an SLA report: one self-contained HTML file with charts, per SLO (its
    objectives, attainment, budget burn-down, worst groups, root cause, drift)."""
    from warehouse.exporters.report import gather, render  # matplotlib: only when asked
    from warehouse.exporters.report.pdf import to_pdf

    if fmt not in ("html", "pdf"):
        raise ConfigError(f"unknown --format {fmt!r}: use html or pdf")
    with _warehouse(store, data, config_file, read_only=True) as wh:
        window = time_range(since, until)
        figures = [gather(wh, name, window, by) for name in slo]
    document = render(figures)
    if fmt == "pdf":
        out.write_bytes(to_pdf(document))
    else:
        out.write_text(document, encoding="utf-8")
    empty = [f.slo.name for f in figures if f.empty]
    note = f" (no request in range for {', '.join(empty)})" if empty else ""
    typer.echo(f"wrote {out}{note}")


@slo_app.command("apply")
def slo_apply(
    slo: Annotated[
        list[str] | None,
        typer.Option(
            "--slo",
            help="SLOs to compile: shipped names or TOML paths (repeat; default: the slos "
            "setting, else every shipped SLO)",
        ),
    ] = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Compile SLOs into rollups, backfilled from requests; older versions are dropped."""
    with _warehouse(store, data, config_file) as wh:
        for applied in wh.slo_apply(_list(slo) or None):
            dropped = f" (dropped {', '.join(applied.dropped)})" if applied.dropped else ""
            typer.echo(f"{applied.slo}: {applied.table}: {applied.action}{dropped}")


@slo_app.command("status")
def slo_status(
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """List each SLO rollup: its SLO, version, state, rows, bytes and newest minute."""
    with _warehouse(store, data, config_file) as wh:
        _write(wh.slo_status(), fmt, output)


@app.command("sql")
def sql(
    query: Annotated[
        str, typer.Argument(help="One read-only query in ClickHouse SQL; - reads stdin")
    ],
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Run a read-only ClickHouse SQL query (transpiled for DuckDB stores)."""
    text = sys.stdin.read() if query == "-" else query
    with _warehouse(store, data, config_file, read_only=True) as wh:
        _write(wh.sql(text), fmt, output)


@query_app.command("list")
def query_list(fmt: FormatOption = "table", output: OutputOption = None) -> None:
    """List the named queries: name, parameters (with defaults) and what each answers."""
    rows = [
        {
            "name": q.name,
            "parameters": ", ".join(
                p.name + (f"={p.default}" if p.default is not None else "") for p in q.parameters
            ),
            "answers": q.answers,
        }
        for q in named_queries()
    ]
    _write(pl.DataFrame(rows), fmt, output)


@query_app.command("show")
def query_show(
    name: Annotated[str, typer.Argument(help="A named query, or a .sql file")],
    grafana: Annotated[
        bool,
        typer.Option(
            "--grafana",
            help="For a Grafana panel: the dashboard's time range and variables in place of "
            "the parameters",
        ),
    ] = False,
) -> None:
    """Print a named query's file: its header and its SQL, as clickhouse-client runs it."""
    query = read_query(name)
    typer.echo(for_grafana(query) if grafana else query.text, nl=False)


@query_app.command("run")
def query_run(
    name: Annotated[str, typer.Argument(help="A named query (llmwh query list), or a .sql file")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="NAME=VALUE for a parameter of the query; repeat"),
    ] = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Run a named query read-only, its parameters checked and defaults filled in."""
    given: dict[str, str] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad --param {item!r}: expected NAME=VALUE")
        given[key.strip()] = value
    query = read_query(name)
    bind(query, given)  # a bad name or value is an error before any store is opened
    with _warehouse(store, data, config_file, read_only=True) as wh:
        _write(wh.named_query(query, **given), fmt, output)


@app.command("alert-rules")
def alert_rules(
    output: OutputOption = None,
) -> None:
    """Print the Prometheus alerting rules on `llmwh export`'s figures (multi-window burn
    rates, spent budget, failing exporter); exporters/prometheus/alerts.yml is this."""
    from warehouse.exporters.alerts import render_rules

    if output is None:
        typer.echo(render_rules(), nl=False)
    else:
        output.write_text(render_rules())


@exporters_app.command("write")
def exporters_write(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="Where to write them (run from the repository: its exporters/)"
        ),
    ] = Path("exporters"),
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 naming each file that differs"),
    ] = False,
) -> None:
    """Write the Grafana dashboards and provisioning files and the Prometheus alerting
    rules, as the code builds them (only files whose text changed are rewritten)."""
    from warehouse.exporters.shipped import differences, write_files

    if not check:
        for path in write_files(folder):
            typer.echo(f"wrote {folder / path}")
        return
    wrong = differences(folder)
    for path, why in wrong.items():
        typer.echo(f"{folder / path}: {why}", err=True)
    if wrong:
        typer.echo(
            f"run `llmwh exporters write {folder}` (and remove what it does not build)", err=True
        )
        raise typer.Exit(1)
    typer.echo(f"{folder}: every file is as the code builds it")


@app.command("root-cause")
def root_cause(
    slo: Annotated[
        str | None, typer.Option("--slo", help="Take thresholds and scope from this SLO")
    ] = None,
    threshold: ThresholdOption = None,
    dimension: Annotated[
        list[str] | None,
        typer.Option("--dimension", "-d", help="Dimensions to search [default: all labels]"),
    ] = None,
    where: WhereOption = None,
    since: SinceOption = "1h",
    until: UntilOption = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows")] = 20,
    exact: ExactOption = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Which dimension values carry the bad requests, beyond their share of traffic."""
    from warehouse.query.root_cause import DEFAULT_DIMENSIONS

    with _warehouse(store, data, config_file) as wh:
        result = wh.root_cause(
            slo=slo,
            thresholds=_thresholds(threshold),
            dimensions=_list(dimension) or DEFAULT_DIMENSIONS,
            filters=_filters(where),
            since=since,
            until=until,
            limit=limit,
            exact=exact,
        )
        _write(result, fmt, output)


@app.command("drift")
def drift(
    measure: Annotated[str, typer.Option("--measure", "-m", help="The measure to watch")] = (
        "p95_ttft_ms"
    ),
    by: ByOption = None,
    interval: Annotated[str, typer.Option("--interval", help="Window width")] = "5m",
    baseline: Annotated[int, typer.Option("--baseline", help="Trailing windows")] = 12,
    alert_after: Annotated[
        int, typer.Option("--alert-after", help="Consecutive breaching windows that alert")
    ] = 3,
    where: WhereOption = None,
    since: SinceOption = "6h",
    until: UntilOption = None,
    threshold: ThresholdOption = None,
    direction: Annotated[
        str | None,
        typer.Option("--direction", help="up, down or both [default: the bad one for the measure]"),
    ] = None,
    alerts_only: Annotated[
        bool, typer.Option("--alerts-only", help="Only the windows that alert")
    ] = False,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Each window of a measure against its trailing baseline (z-score and EWMA)."""
    with _warehouse(store, data, config_file) as wh:
        result = wh.drift(
            measure,
            by=_list(by),
            interval=interval,
            filters=_filters(where),
            since=since,
            until=until,
            baseline=baseline,
            alert_after=alert_after,
            direction=direction,
            thresholds=_thresholds(threshold),
        )
        if alerts_only:
            result = Result.of(result.filter(pl.col("alert")), result.plan, result.elapsed_ms)
        _write(result, fmt, output)


@app.command("ab")
def ab(
    measure: Annotated[
        str,
        typer.Option(
            "--measure", "-m", help="attainment, error_rate, rejection_rate or p<q>_<latency>"
        ),
    ] = "attainment",
    dimension: Annotated[str, typer.Option("--dimension", "-d", help="The arms")] = "ab_group",
    a: Annotated[str | None, typer.Option("--a", help="Control arm")] = None,
    b: Annotated[
        list[str] | None, typer.Option("--b", help="Arm(s) compared [default: all others]")
    ] = None,
    level: Annotated[float, typer.Option("--level", help="Confidence level")] = 0.95,
    where: WhereOption = None,
    since: SinceOption = "1h",
    until: UntilOption = None,
    threshold: ThresholdOption = None,
    fmt: FormatOption = "table",
    output: OutputOption = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """A/B: each arm against the control, with the difference's confidence interval."""
    with _warehouse(store, data, config_file) as wh:
        result = wh.compare_groups(
            measure,
            dimension,
            a=a,
            b=_list(b) or None,
            filters=_filters(where),
            since=since,
            until=until,
            thresholds=_thresholds(threshold),
            level=level,
        )
        _write(result, fmt, output)


@contextmanager
def _warehouse(
    store: str | None, data: str | None, config_file: Path | None, read_only: bool = False
) -> Iterator[Warehouse]:
    config = load_config(config_file, store=store, data_dir=data)
    with Warehouse(store_for(config, read_only=read_only), config) as wh:
        yield wh


def _write(result: pl.DataFrame, fmt: str, output: Path | None) -> None:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
    footer = result.footer() if isinstance(result, Result) else None
    if footer is not None and footer_to_stderr(fmt):
        typer.echo(footer, err=True)
        footer = None
    if output is None:
        _write_to(result, fmt, sys.stdout.buffer, footer)
        return
    with output.open("wb") as stream:
        _write_to(result, fmt, stream, footer)


def _write_to(result: pl.DataFrame, fmt: str, stream: BinaryIO, footer: str | None) -> None:
    try:
        write_result(result, fmt, stream, footer=footer)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _list(values: list[str] | None) -> list[str]:
    return [item.strip() for value in values or [] for item in value.split(",") if item.strip()]


def _filters(where: list[str] | None) -> dict[str, list[str]]:
    filters: dict[str, list[str]] = {}
    for clause in where or []:
        key, sep, values = clause.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise ConfigError(f"bad --where {clause!r}: expected DIMENSION=VALUE[,VALUE...]")
        filters.setdefault(key.strip(), []).extend(v.strip() for v in values.split(","))
    return filters


def _thresholds(thresholds: list[str] | None) -> dict[str, float]:
    limits: dict[str, float] = {}
    for clause in thresholds or []:
        key, sep, value = clause.partition("=")
        try:
            limits[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ConfigError(f"bad --threshold {clause!r}: expected LATENCY=MILLISECONDS")
    return limits


@app.command("export")
def export(
    slo: Annotated[
        list[str] | None,
        typer.Option(
            "--slo",
            help="SLOs to export: shipped names or TOML paths (repeat; default: the slos "
            "setting, else every shipped SLO)",
        ),
    ] = None,
    by: ByOption = None,
    listen: Annotated[
        str, typer.Option("--listen", help="Serve /metrics on HOST:PORT")
    ] = "127.0.0.1:9202",
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between computations")
    ] = 30.0,
    top: Annotated[
        int, typer.Option("--top", help="Label values kept per dimension; the rest are 'other'")
    ] = 10,
    window: Annotated[
        list[str] | None,
        typer.Option("--window", help="Windows besides the SLOs' burn windows (repeat)"),
    ] = None,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Serve SLA figures (attainment, burn rates, budget, objectives) for Prometheus."""
    import logging
    import threading

    from prometheus_client import CollectorRegistry

    from warehouse.exporters.http import serve_metrics
    from warehouse.exporters.sla import DEFAULT_WINDOWS, SLAExporter
    from warehouse.query import registry
    from warehouse.query.slo import load_slo

    if not math.isfinite(interval) or interval < 1:
        raise InvalidArgument(f"--interval must be at least 1 second, got {interval}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    host, port = parse_listen(listen)
    with _warehouse(store, data, config_file) as wh:
        names = _list(slo) or wh.configured_slos()
        slos = [load_slo(name, validate_measure=registry.measure) for name in names]
        exporter = SLAExporter(wh, slos, _list(by), _list(window) or DEFAULT_WINDOWS, top)
        exporter.refresh()
        metrics = CollectorRegistry()
        metrics.register(exporter)
        config = wh.config
        try:
            server = serve_metrics(metrics, host, port, config.auth_token, config.basic_auth)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {listen}: {exc.strerror}") from None
        typer.echo(f"exporting {', '.join(s.name for s in slos)} on http://{listen}/metrics")
        stop = threading.Event()
        try:
            exporter.run(interval, stop)
        except KeyboardInterrupt:
            stop.set()
        finally:
            server.shutdown()
