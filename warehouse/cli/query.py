"""``llmwh`` questions to the store: drill, timeseries, sla, root-cause, drift, ab and sql.

Each is a thin shell over a :class:`warehouse.Warehouse` method; results go through
:mod:`warehouse.render` as a table (with a footer saying where the answer came from),
JSON, CSV or Parquet. A table shows the columns an SRE reads first, chosen here to fit
100 characters; ``--wide`` and ``--columns`` show the rest (drill and timeseries show
what ``--by`` and ``--measure`` asked for, and sql what its SELECT did).
"""

from __future__ import annotations

import sys
from typing import Annotated

import polars as pl
import typer

from warehouse.cli.options import (
    DEFAULT_MEASURES,
    ByOption,
    ColumnsOption,
    ConfigOption,
    DataOption,
    ExactOption,
    FormatOption,
    MeasureOption,
    OutputOption,
    SinceOption,
    StoreOption,
    ThresholdOption,
    UntilOption,
    WhereOption,
    WideOption,
    columns,
    comma_list,
    filters,
    open_warehouse,
    thresholds,
)
from warehouse.cli.output import write
from warehouse.query.result import Result
from warehouse.query.slo import SLO

SLA_COLUMNS = ("count", "attainment", "budget_remaining", "burn_rate_*")
"""``sla``'s table besides the ``--by`` dimensions; the target is in the note above the
source (a column of one value would not fit beside the burn rates)."""
ROOT_CAUSE_COLUMNS = (
    "dimension",
    "value",
    "count",
    "bad_rate",
    "traffic_share",
    "bad_share",
    "lift",
    "contribution",
)
DRIFT_COLUMNS = ("time", "baseline_mean", "z", "consecutive", "alert")
"""``drift``'s table besides the ``--by`` dimensions and the measure."""
AB_COLUMNS = ("a", "b", "value_a", "value_b", "difference", "low", "high", "significant")

__all__ = ["app"]

app = typer.Typer(rich_markup_mode="markdown")


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
    with open_warehouse(store, data, config_file) as wh:
        result = wh.drill(
            by=comma_list(by),
            measures=comma_list(measure) or comma_list([DEFAULT_MEASURES]),
            filters=filters(where),
            since=since,
            until=until,
            thresholds=thresholds(threshold),
            exact=exact,
            include_probes=include_probes,
            order_by=order_by,
            limit=limit,
        )
        write(result, fmt, output)


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
    with open_warehouse(store, data, config_file) as wh:
        result = wh.timeseries(
            measures=comma_list(measure) or comma_list([DEFAULT_MEASURES]),
            by=comma_list(by),
            interval=interval,
            filters=filters(where),
            since=since,
            until=until,
            thresholds=thresholds(threshold),
            exact=exact,
        )
        write(result, fmt, output)


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
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Evaluate an SLO: objectives, attainment, compliance, budget and burn rates.

    The table shows count, attainment, budget_remaining and the burn rates per group;
    `--wide` adds each objective, compliance and score."""
    from warehouse.query import registry
    from warehouse.query.slo import load_slo

    objective = load_slo(slo, validate_measure=registry.measure)
    groups = comma_list(by)
    with open_warehouse(store, data, config_file) as wh:
        result = wh.sla(
            objective, by=groups, filters=filters(where), since=since, until=until, exact=exact
        )
        shown = columns(column, wide, [*groups, *SLA_COLUMNS])
        write(result, fmt, output, shown, note=_target(objective))


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
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Which dimension values carry the bad requests, beyond their share of traffic."""
    from warehouse.query.root_cause import DEFAULT_DIMENSIONS

    with open_warehouse(store, data, config_file) as wh:
        result = wh.root_cause(
            slo=slo,
            thresholds=thresholds(threshold),
            dimensions=comma_list(dimension) or DEFAULT_DIMENSIONS,
            filters=filters(where),
            since=since,
            until=until,
            limit=limit,
            exact=exact,
        )
        write(result, fmt, output, columns(column, wide, ROOT_CAUSE_COLUMNS))


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
    min_change: Annotated[
        float | None,
        typer.Option(
            "--min-change",
            help="Smallest change from the baseline, as a fraction of it, that may breach "
            "[default: 0.1 for latencies, 0 otherwise]",
        ),
    ] = None,
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
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Each window of a measure against its trailing baseline (z-score and EWMA)."""
    groups = comma_list(by)
    with open_warehouse(store, data, config_file) as wh:
        result = wh.drift(
            measure,
            by=groups,
            interval=interval,
            filters=filters(where),
            since=since,
            until=until,
            baseline=baseline,
            alert_after=alert_after,
            direction=direction,
            thresholds=thresholds(threshold),
            min_change=min_change,
        )
        if alerts_only:
            result = Result.of(result.filter(pl.col("alert")), result.plan, result.elapsed_ms)
        write(result, fmt, output, columns(column, wide, [*groups, measure, *DRIFT_COLUMNS]))


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
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """A/B: each arm against the control, with the difference's confidence interval."""
    with open_warehouse(store, data, config_file) as wh:
        result = wh.compare_groups(
            measure,
            dimension,
            a=a,
            b=comma_list(b) or None,
            filters=filters(where),
            since=since,
            until=until,
            thresholds=thresholds(threshold),
            level=level,
        )
        write(result, fmt, output, columns(column, wide, AB_COLUMNS))


@app.command("sql")
def sql(
    query: Annotated[
        str, typer.Argument(help="One read-only query in ClickHouse SQL; - reads stdin")
    ],
    fmt: FormatOption = "table",
    output: OutputOption = None,
    column: ColumnsOption = None,
    wide: WideOption = False,
    store: StoreOption = None,
    data: DataOption = None,
    config_file: ConfigOption = None,
) -> None:
    """Run a read-only ClickHouse SQL query (transpiled for DuckDB stores).

    The table shows the leftmost columns that fit 100 characters; `--wide` shows all."""
    text = sys.stdin.read() if query == "-" else query
    with open_warehouse(store, data, config_file, read_only=True) as wh:
        write(wh.sql(text), fmt, output, columns(column, wide, None))


def _target(slo: SLO) -> str:
    """The note above ``sla``'s source: what budget_remaining and the burn rates count."""
    days = slo.period.total_seconds() / 86400
    period = f"{days:g} days" if days >= 1 else f"{slo.period.total_seconds():g} s"
    return (
        f"SLO {slo.name}: target {slo.target:g}, an error budget of {slo.error_budget:.4g} "
        f"of requests over {period}"
    )
