-- Rollups of `requests` per minute and per hour, filled by materialized views at
-- insert time. They answer the common questions (counts, rates, token sums, latency
-- percentiles and "share under X ms") over the common dimensions without a raw scan.
--
-- Per latency (queue, TTFT, TPOT, E2E) each row holds:
--   <col>_sum / <col>_count  for averages (NULLs left out, as everywhere);
--   <col>_tdigest            a mergeable t-digest state of the non-NULL values, with no
--                            level in its type, so quantileTDigestMerge(q)(...) reads
--                            any q; rank error typically well under 1%;
--   <col>_hist               a sparse log-bucket histogram: bucket 0 holds values
--                            below ${bucket_min_ms} ms, bucket k >= 1 holds
--                            [${bucket_min_ms} * ${bucket_growth}^(k-1), ${bucket_min_ms} * ${bucket_growth}^k).
--                            Counts are exact per bucket, so "share under X ms" is
--                            exact at bucket edges and, interpolated inside a bucket,
--                            off by at most that bucket's share (each bucket spans
--                            2% of value, far narrower than 1 percentage point of
--                            mass for real latency distributions); a percentile read
--                            from it is within 1% of the true value.
-- Probes stay in the rollups under is_probe, so SLA queries can drop them as they
-- do on raw rows.

-- ts is DateTime64 like requests.ts (Arrow carries it as a timestamp; plain DateTime
-- would arrive as a bare UInt32), and costs the same once DoubleDelta-coded.
-- ORDER BY follows `requests` (tenant, service, model, time first), then the rest
-- of the rollup's dimensions, which together form the aggregation key.
-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_1m
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
    requests                 SimpleAggregateFunction(sum, UInt64),
    errors                   SimpleAggregateFunction(sum, UInt64),
    rejections               SimpleAggregateFunction(sum, UInt64),
    errors_by_class          SimpleAggregateFunction(sumMap, Map(String, UInt64)),
    prompt_tokens_sum        SimpleAggregateFunction(sum, UInt64),
    output_tokens_sum        SimpleAggregateFunction(sum, UInt64),
    cached_prompt_tokens_sum SimpleAggregateFunction(sum, UInt64),
    decode_tokens_sum        SimpleAggregateFunction(sum, UInt64),
    decode_ms_sum            SimpleAggregateFunction(sum, Float64),
    queue_ms_sum             SimpleAggregateFunction(sum, Float64),
    queue_ms_count           SimpleAggregateFunction(sum, UInt64),
    queue_ms_tdigest         AggregateFunction(quantileTDigest, Float32),
    queue_ms_hist            SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    ttft_ms_sum              SimpleAggregateFunction(sum, Float64),
    ttft_ms_count            SimpleAggregateFunction(sum, UInt64),
    ttft_ms_tdigest          AggregateFunction(quantileTDigest, Float32),
    ttft_ms_hist             SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    tpot_ms_sum              SimpleAggregateFunction(sum, Float64),
    tpot_ms_count            SimpleAggregateFunction(sum, UInt64),
    tpot_ms_tdigest          AggregateFunction(quantileTDigest, Float32),
    tpot_ms_hist             SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    e2e_ms_sum               SimpleAggregateFunction(sum, Float64),
    e2e_ms_count             SimpleAggregateFunction(sum, UInt64),
    e2e_ms_tdigest           AggregateFunction(quantileTDigest, Float32),
    e2e_ms_hist              SimpleAggregateFunction(sumMap, Map(UInt16, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, service, model, ts, region, zone, model_version, ab_group, request_type, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1m_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

-- Same columns per hour; partitions are months since an hour row is small.
-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_1h AS ${db}.requests_1m
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, service, model, ts, region, zone, model_version, ab_group, request_type, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1h_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_1m_mv TO ${db}.requests_1m AS
SELECT
    toStartOfMinute(ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    count() AS requests,
    countIf(status = 'error') AS errors,
    countIf(status = 'rejected') AS rejections,
    sumMapIf(map(toString(error_class), toUInt64(1)), error_class != '') AS errors_by_class,
    sum(toUInt64(ifNull(prompt_tokens, 0))) AS prompt_tokens_sum,
    sum(toUInt64(ifNull(output_tokens, 0))) AS output_tokens_sum,
    sum(toUInt64(ifNull(cached_prompt_tokens, 0))) AS cached_prompt_tokens_sum,
    sumIf(toUInt64(assumeNotNull(output_tokens) - 1), output_tokens > 1 AND e2e_ms > ttft_ms)
        AS decode_tokens_sum,
    sumIf(toFloat64(assumeNotNull(e2e_ms)) - assumeNotNull(ttft_ms), output_tokens > 1 AND e2e_ms > ttft_ms)
        AS decode_ms_sum,
    sum(toFloat64(ifNull(queue_ms, 0))) AS queue_ms_sum,
    count(queue_ms) AS queue_ms_count,
    quantileTDigestStateIf(assumeNotNull(queue_ms), queue_ms IS NOT NULL) AS queue_ms_tdigest,
    sumMapIf(map(${latency_bucket:queue_ms}, toUInt64(1)), queue_ms IS NOT NULL) AS queue_ms_hist,
    sum(toFloat64(ifNull(ttft_ms, 0))) AS ttft_ms_sum,
    count(ttft_ms) AS ttft_ms_count,
    quantileTDigestStateIf(assumeNotNull(ttft_ms), ttft_ms IS NOT NULL) AS ttft_ms_tdigest,
    sumMapIf(map(${latency_bucket:ttft_ms}, toUInt64(1)), ttft_ms IS NOT NULL) AS ttft_ms_hist,
    sum(toFloat64(ifNull(tpot_ms, 0))) AS tpot_ms_sum,
    count(tpot_ms) AS tpot_ms_count,
    quantileTDigestStateIf(assumeNotNull(tpot_ms), tpot_ms IS NOT NULL) AS tpot_ms_tdigest,
    sumMapIf(map(${latency_bucket:tpot_ms}, toUInt64(1)), tpot_ms IS NOT NULL) AS tpot_ms_hist,
    sum(toFloat64(ifNull(e2e_ms, 0))) AS e2e_ms_sum,
    count(e2e_ms) AS e2e_ms_count,
    quantileTDigestStateIf(assumeNotNull(e2e_ms), e2e_ms IS NOT NULL) AS e2e_ms_tdigest,
    sumMapIf(map(${latency_bucket:e2e_ms}, toUInt64(1)), e2e_ms IS NOT NULL) AS e2e_ms_hist
FROM ${db}.requests
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;

-- The hourly rollup merges the minute rows as they are written (a cascading view),
-- so raw rows are aggregated once.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_1h_mv TO ${db}.requests_1h AS
SELECT
    toStartOfHour(ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    sum(requests) AS requests,
    sum(errors) AS errors,
    sum(rejections) AS rejections,
    sumMap(errors_by_class) AS errors_by_class,
    sum(prompt_tokens_sum) AS prompt_tokens_sum,
    sum(output_tokens_sum) AS output_tokens_sum,
    sum(cached_prompt_tokens_sum) AS cached_prompt_tokens_sum,
    sum(decode_tokens_sum) AS decode_tokens_sum,
    sum(decode_ms_sum) AS decode_ms_sum,
    sum(queue_ms_sum) AS queue_ms_sum,
    sum(queue_ms_count) AS queue_ms_count,
    quantileTDigestMergeState(queue_ms_tdigest) AS queue_ms_tdigest,
    sumMap(queue_ms_hist) AS queue_ms_hist,
    sum(ttft_ms_sum) AS ttft_ms_sum,
    sum(ttft_ms_count) AS ttft_ms_count,
    quantileTDigestMergeState(ttft_ms_tdigest) AS ttft_ms_tdigest,
    sumMap(ttft_ms_hist) AS ttft_ms_hist,
    sum(tpot_ms_sum) AS tpot_ms_sum,
    sum(tpot_ms_count) AS tpot_ms_count,
    quantileTDigestMergeState(tpot_ms_tdigest) AS tpot_ms_tdigest,
    sumMap(tpot_ms_hist) AS tpot_ms_hist,
    sum(e2e_ms_sum) AS e2e_ms_sum,
    sum(e2e_ms_count) AS e2e_ms_count,
    quantileTDigestMergeState(e2e_ms_tdigest) AS e2e_ms_tdigest,
    sumMap(e2e_ms_hist) AS e2e_ms_hist
FROM ${db}.requests_1m
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;
