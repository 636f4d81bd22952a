-- Rollups much smaller than what they summarise, and cheap to fill.
--
-- Before this migration the rollups took more disk than `requests` (48 MB against 41 MB
-- for 1M requests over a day) and a load with them ran at a quarter of the rate without
-- (88k against 452k rows/s, benchmarks/insert_requests.py). Measured one piece at a
-- time (benchmarks/rollup_costs.py), the costs were:
--   * rows: a minute x nine dimensions holds 0.43 rows per request at 1M requests a day
--     (0.22 with five dimensions and zone, 0.12 with five, 0.034 for an hour x nine);
--   * columns: the four t-digest states were 44% of the rollup's bytes and served only
--     the dashboards (the query layer reads percentiles from the histograms); the
--     histogram of all requests and that of successful ones held the same buckets twice;
--     `<latency>_count` repeated the histogram's total;
--   * filling: the latency histograms are the dearest part of an insert (each a map
--     built and summed per request), then the grouping itself.
-- So now:
--   * requests_1m: per minute, over the dimensions SLAs are written against (tenant,
--     service, model, region; is_probe), for recent windows, burn rates and dashboards;
--   * requests_1h: per hour, over all nine dimensions, for drill-downs over hours and days;
--   * requests_sla_1h: per hour over the SLA dimensions, filled from requests_1m, for
--     reports over weeks.
-- Each keeps, per latency, one histogram whose key says both the bucket and whether the
-- request succeeded (key = bucket * 2 + ok): the sum over both halves is the histogram of
-- all requests (percentiles, "share under X ms"), the odd keys that of successful ones
-- (attainment for a threshold). The sum beside it gives exact averages. Buckets are as
-- before: bucket 0 holds values below ${bucket_min_ms} ms, bucket k >= 1 holds
-- [${bucket_min_ms} * ${bucket_growth}^(k-1), ${bucket_min_ms} * ${bucket_growth}^k).
-- Probes stay in the rollups under is_probe.
-- The two rollups filled from `requests` are independent views, so an insert may fill
-- them side by side (parallel_view_processing, set by the stores on their inserts).

SYSTEM STOP VIEW ${db}.request_parts_seal;

DROP VIEW IF EXISTS ${db}.requests_sla_1h_mv;
DROP VIEW IF EXISTS ${db}.requests_1h_mv;
DROP VIEW IF EXISTS ${db}.requests_1m_mv;
DROP TABLE IF EXISTS ${db}.requests_sla_1h;
DROP TABLE IF EXISTS ${db}.requests_1h;
DROP TABLE IF EXISTS ${db}.requests_1m;

-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_1m
(
    ts                       DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    tenant                   LowCardinality(String),
    service                  LowCardinality(String),
    model                    LowCardinality(String),
    region                   LowCardinality(String),
    is_probe                 Bool,
    ${rollup:columns}
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, service, model, ts, region, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1m_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_1h
(
    ts                       DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    tenant                   LowCardinality(String),
    service                  LowCardinality(String),
    model                    LowCardinality(String),
    model_version            LowCardinality(String),
    region                   LowCardinality(String),
    zone                     LowCardinality(String),
    ab_group                 LowCardinality(String),
    request_type             LowCardinality(String),
    is_probe                 Bool,
    ${rollup:columns}
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, service, model, ts, region, zone, model_version, ab_group, request_type, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1h_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_sla_1h AS ${db}.requests_1m
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, service, model, ts, region, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1h_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

-- Fill them from what is there, before their views exist (no request counted twice:
-- sealing is stopped, and migrations run before the receiver starts).
INSERT INTO ${db}.requests_1m
SELECT
    toStartOfMinute(ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ts, tenant, service, model, region, is_probe;

INSERT INTO ${db}.requests_1h
SELECT
    toStartOfHour(ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;

INSERT INTO ${db}.requests_sla_1h
SELECT
    toStartOfHour(ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:rollup}
FROM ${db}.requests_1m
GROUP BY ts, tenant, service, model, region, is_probe;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_1m_mv TO ${db}.requests_1m AS
SELECT
    toStartOfMinute(ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ts, tenant, service, model, region, is_probe;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_1h_mv TO ${db}.requests_1h AS
SELECT
    toStartOfHour(ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;

-- The hourly SLA rollup merges the minute rows as they are written (a cascading view).
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_sla_1h_mv TO ${db}.requests_sla_1h AS
SELECT
    toStartOfHour(ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:rollup}
FROM ${db}.requests_1m
GROUP BY ts, tenant, service, model, region, is_probe;

SYSTEM START VIEW ${db}.request_parts_seal;
