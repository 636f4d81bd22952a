"""Build the Grafana dashboards in ``dashboards/`` (run: ``python integrations/grafana/build.py``).

The dashboards are data: panels, their SQL and their template variables are defined
here once, and the JSON files Grafana provisions are written from them, so that the
dimension lists and the histogram bucket edges come from ``warehouse.model`` and a
test can check the files are current (tests/integration/test_grafana_dashboards.py).

Every query is written for the grafana-clickhouse-datasource plugin (v4):
- targets are ``{"editorType": "sql", "format": 0|1, "rawSql": ...}``; format 0 (time
  series) wants a first column ``time`` of a DateTime type, sorted ascending, then
  string label columns and numeric value columns (long format, which the plugin
  turns into one series per label set); format 1 is a table;
- the time range and bucket come from the plugin's macros: ``$__timeFilter(ts)``,
  ``$__timeInterval(ts)``, ``$__interval_s``, ``$__toTime``;
- dimension variables are multi-value with "All", and each filter is
  ``$__conditionalAll(dim IN (${dim}), $dim)``: the plugin drops the condition for
  All and quotes the selected values itself (``'a','b'``);
- table names are unqualified: the datasource's ``defaultDatabase`` (``llmwh``)
  picks the database.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
if str(ROOT.parents[1]) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT.parents[1]))

from warehouse.model import (  # noqa: E402
    BUCKET_GROWTH,
    BUCKET_MIN_MS,
    DIMENSIONS,
    SLA_ROLLUP_DIMENSIONS,
)
from warehouse.query.registry import histogram_quantile_sql  # noqa: E402

DASHBOARD_DIR = ROOT / "dashboards"
DATASOURCE = {"type": "grafana-clickhouse-datasource", "uid": "llmwh-clickhouse"}
SCHEMA_VERSION = 39
TAGS = ["llmwh", "llm-sla"]

# Dimensions each table keeps (the rollups keep fewer than raw `requests`): the minute
# rollup and the hourly SLA rollup keep SLA_DIMS, the hourly rollup ROLLUP_DIMS.
SLA_DIMS = tuple(d for d in SLA_ROLLUP_DIMENSIONS if d != "is_probe")
ROLLUP_DIMS = ("tenant", "service", "model", "model_version", "region", "zone", "ab_group")
RAW_DIMS = DIMENSIONS
# Where each dimension variable reads its values: the hourly rollup when it keeps the
# dimension (a few rows per hour), raw rows otherwise.
VARIABLE_SOURCE = {d: "requests_1h" for d in ROLLUP_DIMS}

# Heatmap bands: upper bounds in ms (the last band is open).
TTFT_BANDS_MS = (25, 50, 100, 200, 400, 800, 1600, 3200, 6400)
TPOT_BANDS_MS = (5, 10, 20, 40, 80, 160)

GOOD = (
    "status = 'ok' AND ifNull(ttft_ms, inf) <= $ttft_ms "
    "AND (tpot_ms IS NULL OR tpot_ms <= $tpot_ms)"
)
"""A good request: ok and within every per-request threshold (TPOT missing meets it)."""


# -- building blocks -------------------------------------------------------------------


def filters(dims: tuple[str, ...]) -> str:
    return "\n  AND ".join(f"$__conditionalAll({d} IN (${{{d}}}), ${d})" for d in dims)


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
QUANTILE_VARIABLE = custom_variable(
    "quantile", "percentile", ["0.5", "0.75", "0.9", "0.95", "0.99", "0.999"], "0.95"
)


def panel(
    kind: str,
    title: str,
    sql: str,
    grid: tuple[int, int, int, int],
    *,
    unit: str | None = None,
    description: str = "",
    interval: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One panel; ``grid`` is (x, y, w, h). Time series and heatmaps use format 0."""
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
    uid: str, title: str, description: str, variables: list[dict], panels: list[dict]
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


def heatmap_sql(column: str, bands_ms: tuple[int, ...], where: str) -> str:
    """Counts per latency band and time bucket from a rollup's log-bucket histogram.

    Bucket k >= 1 holds [MIN * G^(k-1), MIN * G^k): a bucket goes to the first band whose
    upper bound its upper edge does not pass, so band edges are exact to one 2%-wide
    bucket. The histogram's keys are bucket * 2 + ok. Columns are named by their upper
    bound (Grafana's heatmap reads them "le").
    """
    edges = [
        math.floor(math.log(b / BUCKET_MIN_MS) / math.log(BUCKET_GROWTH) + 1e-9) for b in bands_ms
    ]
    columns = []
    low = -1
    for bound, key in zip(bands_ms, edges, strict=True):
        columns.append(
            "arraySum(mapValues(mapFilter((k, c) -> intDiv(k, 2) > "
            f"{low} AND intDiv(k, 2) <= {key}, h))) AS `{bound}`"
        )
        low = key
    columns.append(f"arraySum(mapValues(mapFilter((k, c) -> intDiv(k, 2) > {low}, h))) AS `+Inf`")
    body = ",\n  ".join(columns)
    return f"""
SELECT time,
  {body}
FROM (
  SELECT $__timeInterval(ts) AS time, sumMap({column}_hist) AS h
  FROM requests_1m
  WHERE $__timeFilter(ts) AND NOT is_probe
  AND {where}
  GROUP BY time
)
ORDER BY time
"""


# -- dashboards -------------------------------------------------------------------------


def sla_overview() -> dict[str, Any]:
    where = filters(SLA_DIMS)
    raw = f"FROM requests\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}"
    att = f"countIf({GOOD}) / nullIf(count(), 0)"

    def burn(window: str) -> str:
        inside = f"ts > $__toTime - INTERVAL {window}"
        return (
            f"(1 - countIf({GOOD} AND {inside}) / nullIf(countIf({inside}), 0))"
            f" / (1 - $slo_target) AS burn_rate_{window.split()[0]}{window.split()[1][0].lower()}"
        )

    panels = [
        panel(
            "stat",
            "Attainment",
            f"SELECT {att} AS attainment\n{raw}",
            (0, 0, 4, 5),
            unit="percentunit",
            description="Share of valid requests (probes left out) that are ok within the TTFT "
            "and TPOT thresholds, from raw rows.",
        ),
        panel(
            "stat",
            "Error budget remaining",
            f"SELECT 1 - (1 - {att}) / (1 - $slo_target) AS budget_remaining\n{raw}",
            (4, 0, 4, 5),
            unit="percentunit",
            description="1 - (1 - attainment) / (1 - target) over the range; negative once spent.",
        ),
        panel(
            "stat",
            "Burn rates",
            "SELECT\n  "
            + ",\n  ".join(burn(w) for w in ("5 MINUTE", "1 HOUR", "6 HOUR"))
            + "\nFROM requests\nWHERE ts > $__toTime - INTERVAL 6 HOUR AND ts <= $__toTime"
            + f" AND NOT is_probe\n  AND {where}",
            (8, 0, 8, 5),
            description="(1 - attainment over the last window) / (1 - target), windows ending "
            "at the end of the range: 1 spends the budget exactly over the SLO period.",
        ),
        panel(
            "stat",
            "Requests, error and rejection rate",
            "SELECT sum(requests) AS count,\n"
            "  sum(errors) / nullIf(sum(requests), 0) AS error_rate,\n"
            "  sum(rejections) / nullIf(sum(requests), 0) AS rejection_rate\n"
            f"FROM requests_sla_1h\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}",
            (16, 0, 8, 5),
            description="From the hourly SLA rollup: hours starting inside the range.",
        ),
        panel(
            "timeseries",
            "Attainment over time",
            f"SELECT $__timeInterval(ts) AS time, {att} AS attainment\n{raw}\n"
            "GROUP BY time\nORDER BY time",
            (0, 5, 12, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "Burn rate per interval",
            f"SELECT $__timeInterval(ts) AS time,\n  (1 - {att}) / (1 - $slo_target) AS burn_rate\n"
            f"{raw}\nGROUP BY time\nORDER BY time",
            (12, 5, 12, 8),
        ),
        panel(
            "table",
            "SLA by model and region",
            "SELECT model, region, sum(requests) AS count,\n"
            "  sum(errors) / nullIf(sum(requests), 0) AS error_rate,\n"
            "  sum(rejections) / nullIf(sum(requests), 0) AS rejection_rate,\n"
            f"  {histogram_quantile_sql('ttft_ms', '0.95')} AS p95_ttft_ms,\n"
            f"  {histogram_quantile_sql('tpot_ms', '0.95')} AS p95_tpot_ms,\n"
            f"  {histogram_quantile_sql('e2e_ms', '0.95')} AS p95_e2e_ms,\n"
            "  sum(cached_prompt_tokens_sum) / nullIf(sum(prompt_tokens_sum), 0) AS kv_hit_ratio\n"
            f"FROM requests_sla_1h\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}\n"
            "GROUP BY model, region\nORDER BY count DESC",
            (0, 13, 24, 9),
            description="Hourly SLA rollup; percentiles from its 2%-wide latency buckets.",
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
    where = filters(dims)

    def percentile(column: str, title: str, grid: tuple[int, int, int, int]) -> dict:
        return panel(
            "timeseries",
            title,
            f"SELECT $__timeInterval(ts) AS time, model, region,\n"
            f"  {histogram_quantile_sql(column, '$quantile')} AS {column}\n"
            f"FROM requests_1m\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}\n"
            "GROUP BY time, model, region\nORDER BY time",
            grid,
            unit="ms",
            interval="1m",
            description="Per model and region, from the minute rollup's 2%-wide latency buckets.",
        )

    heat = {"calculate": False, "rowsFrame": {"layout": "le"}, "yAxis": {"unit": "ms"}}
    panels = [
        percentile("ttft_ms", "TTFT p$quantile by model and region", (0, 0, 12, 8)),
        percentile("tpot_ms", "TPOT p$quantile by model and region", (12, 0, 12, 8)),
        percentile("e2e_ms", "E2E p$quantile by model and region", (0, 8, 12, 8)),
        percentile("queue_ms", "Queue p$quantile by model and region", (12, 8, 12, 8)),
        panel(
            "heatmap",
            "TTFT heatmap",
            heatmap_sql("ttft_ms", TTFT_BANDS_MS, where),
            (0, 16, 12, 9),
            interval="1m",
            options=heat,
            description="Requests per TTFT band (column = band's upper bound in ms).",
        ),
        panel(
            "heatmap",
            "TPOT heatmap",
            heatmap_sql("tpot_ms", TPOT_BANDS_MS, where),
            (12, 16, 12, 9),
            interval="1m",
            options=heat,
            description="Requests per TPOT band (column = band's upper bound in ms).",
        ),
    ]
    return dashboard(
        "llmwh-latency",
        "LLM latency",
        "Latency percentiles over time per model and region, TTFT and TPOT heatmaps.",
        [*(dim_variable(d) for d in dims), QUANTILE_VARIABLE],
        panels,
    )


def drilldown() -> dict[str, Any]:
    where = filters(RAW_DIMS)
    raw = f"FROM requests\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}"
    group_by = custom_variable("group_by", "split by", list(RAW_DIMS), "model")

    def series(title: str, measure: str, unit: str | None) -> tuple[str, str, str | None]:
        sql = (
            f"SELECT $__timeInterval(ts) AS time, $group_by,\n  {measure}\n{raw}\n"
            "GROUP BY time, $group_by\nORDER BY time"
        )
        return title, sql, unit

    charts = [
        series("Requests/s by $group_by", "count() / $__interval_s AS rps", "reqps"),
        series(
            "Error rate by $group_by",
            "countIf(status = 'error') / count() AS error_rate",
            "percentunit",
        ),
        series(
            "TTFT p$quantile by $group_by",
            "quantileExactInclusive($quantile)(ttft_ms) AS ttft_ms",
            "ms",
        ),
        series(
            "TPOT p$quantile by $group_by",
            "quantileExactInclusive($quantile)(tpot_ms) AS tpot_ms",
            "ms",
        ),
    ]
    panels = [
        panel("timeseries", title, sql, ((i % 2) * 12, (i // 2) * 8, 12, 8), unit=unit)
        for i, (title, sql, unit) in enumerate(charts)
    ]
    panels.append(
        panel(
            "table",
            "Breakdown by $group_by",
            "SELECT $group_by, count() AS count,\n"
            "  count() / dateDiff('second', $__fromTime, $__toTime) AS rps,\n"
            "  countIf(status = 'error') / count() AS error_rate,\n"
            "  countIf(status = 'rejected') / count() AS rejection_rate,\n"
            "  quantileExactInclusive(0.5)(ttft_ms) AS p50_ttft_ms,\n"
            "  quantileExactInclusive(0.95)(ttft_ms) AS p95_ttft_ms,\n"
            "  quantileExactInclusive(0.99)(ttft_ms) AS p99_ttft_ms,\n"
            "  quantileExactInclusive(0.95)(tpot_ms) AS p95_tpot_ms,\n"
            "  quantileExactInclusive(0.95)(e2e_ms) AS p95_e2e_ms,\n"
            "  sum(cached_prompt_tokens) / nullIf(sum(prompt_tokens), 0) AS kv_hit_ratio,\n"
            "  1000 * sumIf(output_tokens - 1, output_tokens > 1 AND e2e_ms > ttft_ms)\n"
            "    / nullIf(sumIf(e2e_ms - ttft_ms, output_tokens > 1 AND e2e_ms > ttft_ms), 0)"
            " AS decode_tps\n"
            f"{raw}\nGROUP BY $group_by\nORDER BY count DESC",
            (0, 16, 24, 10),
            description="Exact figures from raw rows (percentiles: quantileExactInclusive).",
        )
    )
    return dashboard(
        "llmwh-drilldown",
        "LLM drill-down",
        "Every request dimension as a filter; split any chart by one of them.",
        [*(dim_variable(d) for d in RAW_DIMS), group_by, QUANTILE_VARIABLE],
        panels,
    )


def errors() -> dict[str, Any]:
    dims = ("tenant", "service", "model", "region")
    where = filters(dims)
    class_filter = "$__conditionalAll(error_class IN (${error_class}), $error_class)"
    panels = [
        panel(
            "timeseries",
            "Errors by class",
            "SELECT $__timeInterval(ts) AS time, error_class, sum(n) AS errors\n"
            "FROM requests_1m\n"
            "ARRAY JOIN mapKeys(errors_by_class) AS error_class, mapValues(errors_by_class) AS n\n"
            f"WHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}\n  AND {class_filter}\n"
            "GROUP BY time, error_class\nORDER BY time",
            (0, 0, 12, 8),
            interval="1m",
            description="The LLM error taxonomy (error_class), from the minute rollup.",
        ),
        panel(
            "timeseries",
            "Error and rejection rate",
            "SELECT $__timeInterval(ts) AS time,\n"
            "  sum(errors) / nullIf(sum(requests), 0) AS error_rate,\n"
            "  sum(rejections) / nullIf(sum(requests), 0) AS rejection_rate\n"
            f"FROM requests_1m\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}\n"
            "GROUP BY time\nORDER BY time",
            (12, 0, 12, 8),
            unit="percentunit",
            interval="1m",
        ),
        panel(
            "table",
            "Errors by class and model",
            "SELECT error_class, model, count() AS errors,\n"
            "  count() / sum(count()) OVER () AS share,\n"
            "  arrayStringConcat(arrayMap(x -> toString(x), topK(3)(http_status)), ', ')"
            " AS http_statuses\n"
            f"FROM requests\nWHERE $__timeFilter(ts) AND NOT is_probe AND status = 'error'\n"
            f"  AND {where}\n  AND {class_filter}\n"
            "GROUP BY error_class, model\nORDER BY errors DESC",
            (0, 8, 24, 9),
            description="From raw rows: share of all errors, most frequent HTTP statuses.",
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
    where = filters(dims)
    rollup = f"FROM requests_1m\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}"
    ratio = "sum(cached_prompt_tokens_sum) / nullIf(sum(prompt_tokens_sum), 0)"
    panels = [
        panel(
            "stat",
            "KV-cache hit ratio",
            f"SELECT {ratio} AS kv_hit_ratio\n{rollup}",
            (0, 0, 6, 8),
            unit="percentunit",
            interval="1m",
            description="sum(cached_prompt_tokens) / sum(prompt_tokens): a ratio of sums.",
        ),
        panel(
            "timeseries",
            "KV-cache hit ratio by model",
            f"SELECT $__timeInterval(ts) AS time, model, {ratio} AS kv_hit_ratio\n{rollup}\n"
            "GROUP BY time, model\nORDER BY time",
            (6, 0, 18, 8),
            unit="percentunit",
            interval="1m",
        ),
        panel(
            "timeseries",
            "Decode throughput by model",
            "SELECT $__timeInterval(ts) AS time, model,\n"
            "  1000 * sum(decode_tokens_sum) / nullIf(sum(decode_ms_sum), 0) AS decode_tps\n"
            f"{rollup}\nGROUP BY time, model\nORDER BY time",
            (0, 8, 12, 8),
            description="Output tokens per second of decoding, per request, as a ratio of sums.",
            interval="1m",
        ),
        panel(
            "timeseries",
            "Token rates",
            "SELECT $__timeInterval(ts) AS time,\n"
            "  sum(prompt_tokens_sum) / $__interval_s AS prompt_tokens_per_s,\n"
            "  sum(cached_prompt_tokens_sum) / $__interval_s AS cached_prompt_tokens_per_s,\n"
            "  sum(output_tokens_sum) / $__interval_s AS output_tokens_per_s\n"
            f"{rollup}\nGROUP BY time\nORDER BY time",
            (12, 8, 12, 8),
            interval="1m",
        ),
        panel(
            "table",
            "KV-cache hit ratio by tenant and model",
            f"SELECT tenant, model, sum(requests) AS count, {ratio} AS kv_hit_ratio,\n"
            "  sum(prompt_tokens_sum) AS sum_prompt_tokens,\n"
            "  sum(cached_prompt_tokens_sum) AS sum_cached_prompt_tokens\n"
            f"FROM requests_1h\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}\n"
            "GROUP BY tenant, model\nORDER BY count DESC",
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


def ab_comparison() -> dict[str, Any]:
    dims = ("tenant", "service", "model", "region")
    where = filters(dims)
    raw = f"FROM requests\nWHERE $__timeFilter(ts) AND NOT is_probe\n  AND {where}"
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
            f"SELECT $__timeInterval(ts) AS time, ab_group,\n"
            f"  countIf({GOOD}) / count() AS attainment\n{raw}\n"
            "GROUP BY time, ab_group\nORDER BY time",
            (0, 0, 12, 8),
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "TTFT p$quantile by arm",
            "SELECT $__timeInterval(ts) AS time, ab_group,\n"
            "  quantileExactInclusive($quantile)(ttft_ms) AS ttft_ms\n"
            f"{raw}\n"
            "GROUP BY time, ab_group\nORDER BY time",
            (12, 0, 12, 8),
            unit="ms",
            interval="1m",
        ),
        panel(
            "table",
            "Arms",
            f"SELECT ab_group, count() AS count,\n  countIf({GOOD}) / count() AS attainment,\n"
            "  countIf(status = 'error') / count() AS error_rate,\n"
            "  quantileExactInclusive(0.5)(ttft_ms) AS p50_ttft_ms,\n"
            "  quantileExactInclusive(0.95)(ttft_ms) AS p95_ttft_ms,\n"
            "  quantileExactInclusive(0.95)(tpot_ms) AS p95_tpot_ms,\n"
            "  sum(cached_prompt_tokens) / nullIf(sum(prompt_tokens), 0) AS kv_hit_ratio\n"
            f"{raw}\nGROUP BY ab_group\nORDER BY ab_group",
            (0, 8, 24, 7),
        ),
        panel(
            "table",
            "Attainment difference against the control arm",
            "WITH arms AS (\n"
            f"  SELECT ab_group, count() AS n, countIf({GOOD}) / count() AS p\n"
            f"  {raw}\n  GROUP BY ab_group\n)\n"
            "SELECT b.ab_group AS ab_group, b.n AS count, b.p AS attainment,\n"
            "  a.p AS control_attainment, b.p - a.p AS difference,\n"
            "  b.p - a.p - 1.96 * sqrt(b.p * (1 - b.p) / b.n + a.p * (1 - a.p) / a.n) AS ci_low,\n"
            "  b.p - a.p + 1.96 * sqrt(b.p * (1 - b.p) / b.n + a.p * (1 - a.p) / a.n) AS ci_high\n"
            "FROM arms AS b CROSS JOIN (SELECT n, p FROM arms WHERE ab_group = '${control}') AS a\n"
            "WHERE b.ab_group != '${control}'\nORDER BY ab_group",
            (0, 15, 24, 7),
            description="b - a with a 95% Wald interval (`llmwh ab` uses Newcombe's interval, "
            "which is better for attainment near 1).",
        ),
    ]
    return dashboard(
        "llmwh-ab",
        "LLM A/B comparison",
        "Experiment arms (ab_group) side by side and against the control arm.",
        [*(dim_variable(d) for d in dims), control, *SLO_VARIABLES[1:], QUANTILE_VARIABLE],
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
            "Rows per interval by event time",
            "SELECT time, kind, rows FROM (\n"
            "  SELECT $__timeInterval(ts) AS time, 'requests' AS kind, sum(requests) AS rows\n"
            "  FROM requests_1m WHERE $__timeFilter(ts) GROUP BY time\n"
            "  UNION ALL\n"
            "  SELECT $__timeInterval(timestamp) AS time, 'samples' AS kind, count() AS rows\n"
            "  FROM samples WHERE $__timeFilter(timestamp) GROUP BY time\n"
            ")\nORDER BY time",
            (0, 6, 24, 8),
            interval="1m",
            description="Requests and Prometheus samples landed, by their own timestamps "
            "(ClickHouse keeps no insert times here: system.part_log and system.query_log "
            "are off on the embedded server). The receiver's own counters are at its "
            "/metrics endpoint, for Prometheus.",
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


def main() -> None:
    DASHBOARD_DIR.mkdir(exist_ok=True)
    for name, text in render().items():
        (DASHBOARD_DIR / name).write_text(text)
        print(DASHBOARD_DIR / name)


if __name__ == "__main__":
    main()
