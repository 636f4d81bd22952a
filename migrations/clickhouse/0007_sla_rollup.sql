-- An hourly rollup over the dimensions SLAs are written against (tenant, service,
-- model, region), for SLA reports and dashboards over days and weeks. requests_1h
-- keeps nine dimensions, so a week of traffic from a real fleet holds hundreds of
-- thousands of rows there, and merging their t-digest states costs about as much as
-- reading raw rows; with four dimensions the same week is a few thousand rows. The
-- query layer reads the narrowest rollup that covers a question.
-- Same columns as requests_1h; filled from it as it is written (a cascading view).
-- sharding_key: cityHash64(tenant, service, model)
CREATE TABLE IF NOT EXISTS ${db}.requests_sla_1h
(
    ts                       DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    tenant                   LowCardinality(String),
    service                  LowCardinality(String),
    model                    LowCardinality(String),
    region                   LowCardinality(String),
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
    queue_ms_ok_hist         SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    ttft_ms_sum              SimpleAggregateFunction(sum, Float64),
    ttft_ms_count            SimpleAggregateFunction(sum, UInt64),
    ttft_ms_tdigest          AggregateFunction(quantileTDigest, Float32),
    ttft_ms_hist             SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    ttft_ms_ok_hist          SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    tpot_ms_sum              SimpleAggregateFunction(sum, Float64),
    tpot_ms_count            SimpleAggregateFunction(sum, UInt64),
    tpot_ms_tdigest          AggregateFunction(quantileTDigest, Float32),
    tpot_ms_hist             SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    tpot_ms_ok_hist          SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    e2e_ms_sum               SimpleAggregateFunction(sum, Float64),
    e2e_ms_count             SimpleAggregateFunction(sum, UInt64),
    e2e_ms_tdigest           AggregateFunction(quantileTDigest, Float32),
    e2e_ms_hist              SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)),
    e2e_ms_ok_hist           SimpleAggregateFunction(sumMap, Map(UInt16, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (tenant, service, model, ts, region, is_probe)
TTL toDateTime(ts) + INTERVAL ${rollup_1h_ttl_days} DAY
SETTINGS ttl_only_drop_parts = 1, non_replicated_deduplication_window = 10000;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.requests_sla_1h_mv TO ${db}.requests_sla_1h AS
SELECT
    ts, tenant, service, model, region, is_probe,
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
    sumMap(queue_ms_ok_hist) AS queue_ms_ok_hist,
    sum(ttft_ms_sum) AS ttft_ms_sum,
    sum(ttft_ms_count) AS ttft_ms_count,
    quantileTDigestMergeState(ttft_ms_tdigest) AS ttft_ms_tdigest,
    sumMap(ttft_ms_hist) AS ttft_ms_hist,
    sumMap(ttft_ms_ok_hist) AS ttft_ms_ok_hist,
    sum(tpot_ms_sum) AS tpot_ms_sum,
    sum(tpot_ms_count) AS tpot_ms_count,
    quantileTDigestMergeState(tpot_ms_tdigest) AS tpot_ms_tdigest,
    sumMap(tpot_ms_hist) AS tpot_ms_hist,
    sumMap(tpot_ms_ok_hist) AS tpot_ms_ok_hist,
    sum(e2e_ms_sum) AS e2e_ms_sum,
    sum(e2e_ms_count) AS e2e_ms_count,
    quantileTDigestMergeState(e2e_ms_tdigest) AS e2e_ms_tdigest,
    sumMap(e2e_ms_hist) AS e2e_ms_hist,
    sumMap(e2e_ms_ok_hist) AS e2e_ms_ok_hist
FROM ${db}.requests_1h
GROUP BY ts, tenant, service, model, region, is_probe;

-- Fill it from the hourly rows already there, with the sealing view stopped so that no
-- request lands in both the view and this insert (see 0006).
SYSTEM STOP VIEW ${db}.request_parts_seal;

INSERT INTO ${db}.requests_sla_1h
SELECT
    ts, tenant, service, model, region, is_probe,
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
    sumMap(queue_ms_ok_hist) AS queue_ms_ok_hist,
    sum(ttft_ms_sum) AS ttft_ms_sum,
    sum(ttft_ms_count) AS ttft_ms_count,
    quantileTDigestMergeState(ttft_ms_tdigest) AS ttft_ms_tdigest,
    sumMap(ttft_ms_hist) AS ttft_ms_hist,
    sumMap(ttft_ms_ok_hist) AS ttft_ms_ok_hist,
    sum(tpot_ms_sum) AS tpot_ms_sum,
    sum(tpot_ms_count) AS tpot_ms_count,
    quantileTDigestMergeState(tpot_ms_tdigest) AS tpot_ms_tdigest,
    sumMap(tpot_ms_hist) AS tpot_ms_hist,
    sumMap(tpot_ms_ok_hist) AS tpot_ms_ok_hist,
    sum(e2e_ms_sum) AS e2e_ms_sum,
    sum(e2e_ms_count) AS e2e_ms_count,
    quantileTDigestMergeState(e2e_ms_tdigest) AS e2e_ms_tdigest,
    sumMap(e2e_ms_hist) AS e2e_ms_hist,
    sumMap(e2e_ms_ok_hist) AS e2e_ms_ok_hist
FROM ${db}.requests_1h
GROUP BY ts, tenant, service, model, region, is_probe;

SYSTEM START VIEW ${db}.request_parts_seal;
