"""The Grafana dashboards of ``exporters/grafana/dashboards/``, built from the query layer.

The dashboards are data: panels and their template variables are defined here once, and
:func:`render` gives the text of each JSON file Grafana provisions (``llmwh exporters
write`` puts them in place; a test checks the shipped files are current).

A panel is a question in the query layer's names (:class:`PanelQuestion`: measures,
dimensions, the variables that filter it), and the query builder's Grafana target
(warehouse/query/grafana.py) writes its SQL, choosing rollups or raw rows as the planner
does; docs/exporters.md says how. So no measure is spelled out here. Every panel is for
the grafana-clickhouse-datasource plugin (v4):
- targets are ``{"editorType": "sql", "format": 0|1, "rawSql": ...}``; format 0 (time
  series) wants a first column ``time`` of a DateTime type, sorted ascending, then
  string label columns and numeric value columns (long format, which the plugin
  turns into one series per label set); format 1 is a table;
- dimension variables are multi-value with "All", and each filter is
  ``$__conditionalAll(dim IN (${dim}), $dim)``: the plugin drops the condition for
  All and quotes the selected values itself (``'a','b'``);
- table names are unqualified: the datasource's ``defaultDatabase`` (``llmwh``)
  picks the database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, TypedDict

from sqlglot import exp

from warehouse.model import DIMENSIONS, ROLLUP_DIMENSIONS, SLA_ROLLUP_DIMENSIONS
from warehouse.query import grafana
from warehouse.query.grafana import SQL, PanelQuestion
from warehouse.query.sla import budget_remaining, burn_rate
from warehouse.query.slo import DEFAULT_BURN_WINDOWS
from warehouse.query.stats import critical_value, newcombe_bounds, wilson_bounds
from warehouse.query.timerange import parse_duration

__all__ = ["DASHBOARDS", "DATASOURCE", "questions", "render"]

DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "llmwh-clickhouse"}
SCHEMA_VERSION = 39
TAGS = ["llmwh", "llm-sla"]

# Dimensions each table keeps (the rollups keep fewer than raw `requests`): the minute
# rollup and the hourly SLA rollup keep SLA_DIMS.
SLA_DIMS = tuple(d for d in SLA_ROLLUP_DIMENSIONS if d != "is_probe")
RAW_DIMS = DIMENSIONS
# Where each dimension variable reads its values: the hourly rollup when it keeps the
# dimension (a few rows per hour), raw rows otherwise.
VARIABLE_SOURCE = {d: "requests_1h" for d in ROLLUP_DIMENSIONS if d != "is_probe"}

# Heatmap bands: upper bounds in ms (the last band is open).
TTFT_BANDS_MS = (25, 50, 100, 200, 400, 800, 1600, 3200, 6400)
TPOT_BANDS_MS = (5, 10, 20, 40, 80, 160)

# -- building blocks -------------------------------------------------------------------


def dim_variable(name: str, source: str | None = None) -> dict[str, Any]:
    table = source or VARIABLE_SOURCE.get(name, "requests")
    sql = (
        f"SELECT DISTINCT {name} FROM {table} "
        f"WHERE $__timeFilter(ts) AND {name} != '' ORDER BY {name}"
    )
    return {
        "type": "query",
        "name": name,
        "label": name,
        "datasource": DATASOURCE,
        "definition": sql,
        "query": {"editorType": "sql", "rawSql": sql},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "hide": 0,
    }


def custom_variable(name: str, label: str, values: list[str], default: str) -> dict[str, Any]:
    return {
        "type": "custom",
        "name": name,
        "label": label,
        "query": ",".join(values),
        "includeAll": False,
        "multi": False,
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "hide": 0,
    }


SLO_VARIABLES = [
    custom_variable("slo_target", "SLO target", ["0.9", "0.95", "0.99", "0.995", "0.999"], "0.99"),
    custom_variable("ttft_ms", "TTFT threshold (ms)", ["100", "200", "300", "500", "1000"], "300"),
    custom_variable("tpot_ms", "TPOT threshold (ms)", ["20", "30", "50", "80", "120"], "50"),
]
_QUESTIONS: dict[str, PanelQuestion] = {}
"""The SQL of every panel rendered from a question -> that question: see questions()."""


def panel(
    kind: str,
    title: str,
    query: PanelQuestion | str,
    grid: tuple[int, int, int, int],
    *,
    unit: str | None = None,
    description: str = "",
    interval: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One panel; ``grid`` is (x, y, w, h). Time series and heatmaps use format 0.

    A question is rendered by the query builder's Grafana target, which picks the source
    (its plan ends the description); a time series read from a rollup gets the rollup's
    grain as its minimum interval."""
    if isinstance(query, PanelQuestion):
        rendered = grafana.render(query)
        sql = rendered.sql
        _QUESTIONS[sql] = query
        if rendered.plan.rollup and query.timeseries:
            interval = f"{grafana.INTERVAL // timedelta(minutes=1)}m"
        source = "rollups and raw ragged ends" if rendered.plan.rollup else "raw rows"
        description = f"{description} From {source}.".strip()
    else:
        sql = query
    x, y, w, h = grid
    defaults: dict[str, Any] = {}
    if unit:
        defaults["unit"] = unit
    result: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options or {},
        "targets": [
            {
                "refId": "A",
                "datasource": DATASOURCE,
                "editorType": "sql",
                "format": 0 if kind in ("timeseries", "heatmap") else 1,
                "rawSql": sql.strip(),
            }
        ],
    }
    if interval:
        result["interval"] = interval  # minimum bucket: the rollup's grain
    return result


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[dict[str, Any]],
    panels: list[dict[str, Any]],
) -> dict[str, Any]:
    for number, p in enumerate(panels, start=1):
        p["id"] = number
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": TAGS,
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "links": [
            {
                "type": "dashboards",
                "tags": ["llmwh"],
                "asDropdown": True,
                "title": "llmwh dashboards",
                "keepTime": True,
                "includeVars": False,
            }
        ],
        "annotations": {"list": []},
        "templating": {"list": variables},
        "panels": panels,
    }


def heatmap(column: str, bands_ms: tuple[int, ...], dims: tuple[str, ...]) -> PanelQuestion:
    """Requests per latency band and time bucket, a column per band named by its upper
    bound (Grafana's heatmap reads them "le"), the last one open (``+Inf``): differences of
    the registry's ``count_<latency>_le_<ms>``."""
    below = [f"count_{column}_le_{bound}" for bound in bands_ms]
    derived: dict[str, Any] = {str(bands_ms[0]): lambda col, var: col(below[0])}
    for bound, lower, upper in zip(bands_ms[1:], below[:-1], below[1:], strict=True):
        derived[str(bound)] = lambda col, var, lower=lower, upper=upper: col(upper) - col(lower)
    derived["+Inf"] = lambda col, var: col(f"count_{column}") - col(below[-1])
    return PanelQuestion(
        [f"count_{column}", *below], filters=dims, timeseries=True, derived=derived
    )


# -- dashboards -------------------------------------------------------------------------


GOOD = {"ttft_ms": "ttft_ms", "tpot_ms": "tpot_ms"}
"""A good request: ok and within the dashboard's TTFT and TPOT thresholds."""


class _Shared(TypedDict, total=False):
    """:class:`PanelQuestion` arguments several panels of a dashboard share."""

    filters: Sequence[str]
    fixed: Mapping[str, Sequence[str]]
    thresholds: Mapping[str, str]


def burn(col: Any, var: Any) -> Any:
    return burn_rate(col("attainment"), 1 - var("slo_target"))


def sla_overview() -> dict[str, Any]:
    good: _Shared = {"filters": SLA_DIMS, "thresholds": GOOD}

    def burn_panel(label: str, x: int, w: int) -> dict[str, Any]:
        return panel(
            "stat",
            f"Burn rate {label}",
            PanelQuestion(
                ["attainment"],
                **good,
                window=parse_duration(label),
                derived={f"burn_rate_{label}": burn},
            ),
            (x, 0, w, 5),
            description=f"(1 - attainment over the last {label} of the range) / (1 - target): "
            "1 spends the budget exactly over the SLO period.",
        )

    panels = [
        panel(
            "stat",
            "Attainment",
            PanelQuestion(["attainment"], **good),
            (0, 0, 4, 5),
            unit="percentunit",
            description="Share of valid requests (probes left out) that are ok within the TTFT "
            "and TPOT thresholds.",
        ),
        panel(
            "stat",
            "Error budget remaining",
            PanelQuestion(
                ["attainment"],
                **good,
                derived={
                    "budget_remaining": lambda col, var: budget_remaining(
                        col("attainment"), 1 - var("slo_target")
                    )
                },
            ),
            (4, 0, 4, 5),
            unit="percentunit",
            description="1 - (1 - attainment) / (1 - target) over the range; negative once spent.",
        ),
        *(burn_panel(label, 8 + 3 * i, 3) for i, label in enumerate(DEFAULT_BURN_WINDOWS)),
        panel(
            "stat",
            "Requests, error and rejection rate",
            PanelQuestion(["count", "error_rate", "rejection_rate"], filters=SLA_DIMS),
            (17, 0, 7, 5),
        ),
        panel(
            "timeseries",
            "Attainment over time",
            PanelQuestion(["attainment"], **good, timeseries=True),
            (0, 5, 12, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "Burn rate per interval",
            PanelQuestion(["attainment"], **good, timeseries=True, derived={"burn_rate": burn}),
            (12, 5, 12, 8),
        ),
        panel(
            "table",
            "SLA by model and region",
            PanelQuestion(
                [
                    "count",
                    "error_rate",
                    "rejection_rate",
                    "p95_ttft_ms",
                    "p95_tpot_ms",
                    "p95_e2e_ms",
                    "kv_hit_ratio",
                ],
                by=("model", "region"),
                filters=SLA_DIMS,
                order_by="-count",
            ),
            (0, 13, 24, 9),
        ),
    ]
    return dashboard(
        "llmwh-sla-overview",
        "LLM SLA overview",
        "Attainment, error budget and burn rates against per-request thresholds.",
        [*(dim_variable(d) for d in SLA_DIMS), *SLO_VARIABLES],
        panels,
    )


def latency() -> dict[str, Any]:
    dims = SLA_DIMS  # what the minute rollup keeps; the drill-down has every dimension

    def percentile(column: str, title: str, grid: tuple[int, int, int, int]) -> dict[str, Any]:
        return panel(
            "timeseries",
            title,
            PanelQuestion([f"p95_{column}"], by=("model", "region"), filters=dims, timeseries=True),
            grid,
            unit="ms",
        )

    heat = {"calculate": False, "rowsFrame": {"layout": "le"}, "yAxis": {"unit": "ms"}}
    panels = [
        percentile("ttft_ms", "TTFT p95 by model and region", (0, 0, 12, 8)),
        percentile("tpot_ms", "TPOT p95 by model and region", (12, 0, 12, 8)),
        percentile("e2e_ms", "E2E p95 by model and region", (0, 8, 12, 8)),
        percentile("queue_ms", "Queue p95 by model and region", (12, 8, 12, 8)),
        panel(
            "heatmap",
            "TTFT heatmap",
            heatmap("ttft_ms", TTFT_BANDS_MS, dims),
            (0, 16, 12, 9),
            options=heat,
            description="Requests per TTFT band (column = band's upper bound in ms).",
        ),
        panel(
            "heatmap",
            "TPOT heatmap",
            heatmap("tpot_ms", TPOT_BANDS_MS, dims),
            (12, 16, 12, 9),
            options=heat,
            description="Requests per TPOT band (column = band's upper bound in ms).",
        ),
    ]
    return dashboard(
        "llmwh-latency",
        "LLM latency",
        "Latency percentiles over time per model and region, TTFT and TPOT heatmaps.",
        [dim_variable(d) for d in dims],
        panels,
    )


def drilldown() -> dict[str, Any]:
    group_by = custom_variable("group_by", "split by", list(RAW_DIMS), "model")

    def split(title: str, measure: str, unit: str | None, number: int) -> dict[str, Any]:
        return panel(
            "timeseries",
            f"{title} by $group_by",
            PanelQuestion([measure], filters=RAW_DIMS, by_variable="group_by", timeseries=True),
            ((number % 2) * 12, (number // 2) * 8, 12, 8),
            unit=unit,
        )

    panels = [
        split("Requests/s", "rps", "reqps", 0),
        split("Error rate", "error_rate", "percentunit", 1),
        split("TTFT p95", "p95_ttft_ms", "ms", 2),
        split("TPOT p95", "p95_tpot_ms", "ms", 3),
        panel(
            "table",
            "Breakdown by $group_by",
            PanelQuestion(
                [
                    "count",
                    "rps",
                    "error_rate",
                    "rejection_rate",
                    "p50_ttft_ms",
                    "p95_ttft_ms",
                    "p99_ttft_ms",
                    "p95_tpot_ms",
                    "p95_e2e_ms",
                    "kv_hit_ratio",
                    "decode_tps",
                ],
                filters=RAW_DIMS,
                by_variable="group_by",
                order_by="-count",
            ),
            (0, 16, 24, 10),
            description="Exact figures from raw rows.",
        ),
    ]
    return dashboard(
        "llmwh-drilldown",
        "LLM drill-down",
        "Every request dimension as a filter; split any chart by one of them.",
        [*(dim_variable(d) for d in RAW_DIMS), group_by],
        panels,
    )


def errors() -> dict[str, Any]:
    dims = ("tenant", "service", "model", "region")
    errors_only: _Shared = {"fixed": {"status": ["error"]}, "filters": (*dims, "error_class")}
    panels = [
        panel(
            "timeseries",
            "Errors by class",
            PanelQuestion(["error_count"], by=("error_class",), timeseries=True, **errors_only),
            (0, 0, 12, 8),
            description="The LLM error taxonomy (error_class).",
        ),
        panel(
            "timeseries",
            "Error and rejection rate",
            PanelQuestion(["error_rate", "rejection_rate"], filters=dims, timeseries=True),
            (12, 0, 12, 8),
            unit="percentunit",
        ),
        panel(
            "table",
            "Errors by class and model",
            PanelQuestion(
                ["error_count"], by=("error_class", "model"), order_by="-error_count", **errors_only
            ),
            (0, 8, 24, 9),
        ),
    ]
    return dashboard(
        "llmwh-errors",
        "LLM error taxonomy",
        "Errors by class (timeout, rate_limited, safety_block, ...), error and rejection rates.",
        [*(dim_variable(d) for d in dims), dim_variable("error_class")],
        panels,
    )


def kv_cache() -> dict[str, Any]:
    dims = ("tenant", "service", "model", "region")
    tokens = ("prompt_tokens", "cached_prompt_tokens", "output_tokens")

    def per_second(column: str) -> Any:
        return lambda col, var: col(f"sum_{column}") / var("__interval_s")

    panels = [
        panel(
            "stat",
            "KV-cache hit ratio",
            PanelQuestion(["kv_hit_ratio"], filters=dims),
            (0, 0, 6, 8),
            unit="percentunit",
            description="sum(cached_prompt_tokens) / sum(prompt_tokens): a ratio of sums.",
        ),
        panel(
            "timeseries",
            "KV-cache hit ratio by model",
            PanelQuestion(["kv_hit_ratio"], by=("model",), filters=dims, timeseries=True),
            (6, 0, 18, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "Decode throughput by model",
            PanelQuestion(["decode_tps"], by=("model",), filters=dims, timeseries=True),
            (0, 8, 12, 8),
            description="Output tokens per second of decoding, per request, as a ratio of sums.",
        ),
        panel(
            "timeseries",
            "Token rates",
            PanelQuestion(
                [f"sum_{c}" for c in tokens],
                filters=dims,
                timeseries=True,
                derived={f"{c}_per_s": per_second(c) for c in tokens},
            ),
            (12, 8, 12, 8),
        ),
        panel(
            "table",
            "KV-cache hit ratio by tenant and model",
            PanelQuestion(
                ["count", "kv_hit_ratio", "sum_prompt_tokens", "sum_cached_prompt_tokens"],
                by=("tenant", "model"),
                filters=dims,
                order_by="-count",
            ),
            (0, 16, 24, 9),
        ),
    ]
    return dashboard(
        "llmwh-kv-cache",
        "LLM KV cache and tokens",
        "KV-cache hit ratio, decode throughput and token rates.",
        [dim_variable(d) for d in dims],
        panels,
    )


AB_LEVEL = 0.95
"""Confidence level of the A/B dashboard's interval (``llmwh ab --level`` defaults to it)."""


def ab_difference_sql(dims: tuple[str, ...], level: float) -> str:
    """Each arm against ``$control``: attainments, difference and Newcombe's interval, by
    the formulas of warehouse.query.stats rendered in SQL (one read: the control arm's
    figures reach the other rows by a window)."""
    arms = grafana.render(
        PanelQuestion(["count", "attainment"], by=("ab_group",), filters=dims, thresholds=GOOD)
    ).sql
    col = exp.column
    low, high = wilson_bounds(col("attainment"), col("n"), critical_value(level), SQL)
    ci_low, ci_high = newcombe_bounds(
        col("control_attainment"),
        (col("control_low"), col("control_high")),
        col("attainment"),
        (col("low"), col("high")),
        SQL,
    )
    control = "ab_group = '${control}'"
    return f"""SELECT ab_group, count, attainment, control_attainment,
  attainment - control_attainment AS difference,
  {ci_low.sql("clickhouse")} AS ci_low,
  {ci_high.sql("clickhouse")} AS ci_high
FROM (
  SELECT *,
    anyIf(attainment, {control}) OVER () AS control_attainment,
    anyIf(low, {control}) OVER () AS control_low,
    anyIf(high, {control}) OVER () AS control_high,
    countIf({control}) OVER () AS has_control
  FROM (
    SELECT ab_group, count, attainment,
      {low.sql("clickhouse")} AS low,
      {high.sql("clickhouse")} AS high
    FROM (
      SELECT ab_group, count, toFloat64(count) AS n, attainment
      FROM (
{arms}
      )
    )
  )
)
WHERE NOT {control} AND has_control > 0
ORDER BY ab_group"""


def ab_comparison() -> dict[str, Any]:
    dims = ("tenant", "service", "model", "region")
    control = dim_variable("ab_group")
    control.update(
        name="control",
        label="control arm",
        includeAll=False,
        multi=False,
        current={"selected": True, "text": "control", "value": "control"},
    )
    panels = [
        panel(
            "timeseries",
            "Attainment by arm",
            PanelQuestion(
                ["attainment"], by=("ab_group",), filters=dims, thresholds=GOOD, timeseries=True
            ),
            (0, 0, 12, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "TTFT p95 by arm",
            PanelQuestion(["p95_ttft_ms"], by=("ab_group",), filters=dims, timeseries=True),
            (12, 0, 12, 8),
            unit="ms",
        ),
        panel(
            "table",
            "Arms",
            PanelQuestion(
                [
                    "count",
                    "attainment",
                    "error_rate",
                    "p50_ttft_ms",
                    "p95_ttft_ms",
                    "p95_tpot_ms",
                    "kv_hit_ratio",
                ],
                by=("ab_group",),
                filters=dims,
                thresholds=GOOD,
            ),
            (0, 8, 24, 7),
        ),
        panel(
            "table",
            "Attainment difference against the control arm",
            ab_difference_sql(dims, AB_LEVEL),
            (0, 15, 24, 7),
            description=f"b - a with a {AB_LEVEL:.0%} Newcombe hybrid score interval, "
            "as `llmwh ab` computes it.",
        ),
    ]
    return dashboard(
        "llmwh-ab",
        "LLM A/B comparison",
        "Experiment arms (ab_group) side by side and against the control arm.",
        [*(dim_variable(d) for d in dims), control, *SLO_VARIABLES[1:]],
        panels,
    )


def ingest_health() -> dict[str, Any]:
    panels = [
        panel(
            "stat",
            "Ingestion lag",
            "SELECT\n"
            "  (SELECT if(count() = 0, NULL, dateDiff('second', max(ts), now()))\n"
            "   FROM requests WHERE ts > now() - INTERVAL 1 DAY) AS requests_lag_s,\n"
            "  (SELECT if(count() = 0, NULL, dateDiff('second', max(timestamp), now()))\n"
            "   FROM samples WHERE timestamp > now() - INTERVAL 1 DAY) AS samples_lag_s",
            (0, 0, 8, 6),
            unit="s",
            description="now() - the newest event time landed (last day); empty when nothing "
            "landed in a day. Late senders and stopped receivers both show here.",
        ),
        panel(
            "stat",
            "Seconds since the last write",
            "SELECT dateDiff('second', max(modification_time), now()) AS since_last_part_s\n"
            "FROM system.parts\n"
            "WHERE database = currentDatabase() AND active AND table IN ('requests', 'samples')",
            (8, 0, 8, 6),
            unit="s",
            description="Age of the newest active data part of requests and samples: every "
            "insert writes a part (merges also do, so it is a lower bound).",
        ),
        panel(
            "table",
            "Tables",
            "SELECT table, count() AS active_parts, sum(rows) AS rows,\n"
            "  sum(bytes_on_disk) AS bytes, max(modification_time) AS last_part\n"
            "FROM system.parts\nWHERE database = currentDatabase() AND active\n"
            "GROUP BY table\nORDER BY table",
            (16, 0, 8, 6),
            description="Many active parts in one table means small, frequent inserts.",
        ),
        panel(
            "timeseries",
            "Requests per interval by event time",
            PanelQuestion(["count"], include_probes=True, timeseries=True),
            (0, 6, 12, 8),
            description="Requests landed, probes included, by their own timestamps "
            "(ClickHouse keeps no insert times here: system.part_log and system.query_log "
            "are off on the embedded server). The receiver's own counters are at its "
            "/metrics endpoint, for Prometheus.",
        ),
        panel(
            "timeseries",
            "Prometheus samples per interval by sample time",
            "SELECT $__timeInterval(timestamp) AS time, count() AS samples\n"
            "FROM samples\nWHERE $__timeFilter(timestamp)\nGROUP BY time\nORDER BY time",
            (12, 6, 12, 8),
            description="Float samples landed by remote write (a retried write's repeats "
            "count until ClickHouse merges them away).",
        ),
    ]
    return dashboard(
        "llmwh-ingest",
        "llmwh ingest health",
        "What ClickHouse knows about ingestion: lag, rows landed, parts.",
        [],
        panels,
    )


DASHBOARDS = {
    "sla-overview.json": sla_overview,
    "latency.json": latency,
    "drilldown.json": drilldown,
    "errors.json": errors,
    "kv-cache.json": kv_cache,
    "ab-comparison.json": ab_comparison,
    "ingest-health.json": ingest_health,
}


def render() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
        for name, build in DASHBOARDS.items()
    }


def questions() -> dict[str, PanelQuestion]:
    """The SQL of every panel rendered from a question -> that question, so that a test
    can ask the Python API the same."""
    _QUESTIONS.clear()
    render()
    return dict(_QUESTIONS)
