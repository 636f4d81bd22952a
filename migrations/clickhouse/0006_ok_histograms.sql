-- Latency histograms of successful requests, beside those of all requests (0002), so
-- that the rollups answer request attainment for a per-request latency threshold: the
-- share of valid requests that succeeded within X ms, read from the ok-histogram with
-- the same edges and the same in-bucket interpolation as "share under X ms".
-- A threshold on TPOT counts requests without a TPOT (one output token) as meeting it,
-- as goodput does: ok requests minus those in the TPOT ok-histogram.
-- Attainment for several thresholds at once needs the joint distribution, which only
-- raw rows hold.

ALTER TABLE ${db}.requests_1m
    ADD COLUMN IF NOT EXISTS queue_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER queue_ms_hist,
    ADD COLUMN IF NOT EXISTS ttft_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER ttft_ms_hist,
    ADD COLUMN IF NOT EXISTS tpot_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER tpot_ms_hist,
    ADD COLUMN IF NOT EXISTS e2e_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER e2e_ms_hist;

ALTER TABLE ${db}.requests_1h
    ADD COLUMN IF NOT EXISTS queue_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER queue_ms_hist,
    ADD COLUMN IF NOT EXISTS ttft_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER ttft_ms_hist,
    ADD COLUMN IF NOT EXISTS tpot_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER tpot_ms_hist,
    ADD COLUMN IF NOT EXISTS e2e_ms_ok_hist SimpleAggregateFunction(sumMap, Map(UInt16, UInt64)) AFTER e2e_ms_hist;

ALTER TABLE ${db}.requests_1m_mv MODIFY QUERY
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
    sumMapIf(map(${latency_bucket:queue_ms}, toUInt64(1)), queue_ms IS NOT NULL AND status = 'ok') AS queue_ms_ok_hist,
    sum(toFloat64(ifNull(ttft_ms, 0))) AS ttft_ms_sum,
    count(ttft_ms) AS ttft_ms_count,
    quantileTDigestStateIf(assumeNotNull(ttft_ms), ttft_ms IS NOT NULL) AS ttft_ms_tdigest,
    sumMapIf(map(${latency_bucket:ttft_ms}, toUInt64(1)), ttft_ms IS NOT NULL) AS ttft_ms_hist,
    sumMapIf(map(${latency_bucket:ttft_ms}, toUInt64(1)), ttft_ms IS NOT NULL AND status = 'ok') AS ttft_ms_ok_hist,
    sum(toFloat64(ifNull(tpot_ms, 0))) AS tpot_ms_sum,
    count(tpot_ms) AS tpot_ms_count,
    quantileTDigestStateIf(assumeNotNull(tpot_ms), tpot_ms IS NOT NULL) AS tpot_ms_tdigest,
    sumMapIf(map(${latency_bucket:tpot_ms}, toUInt64(1)), tpot_ms IS NOT NULL) AS tpot_ms_hist,
    sumMapIf(map(${latency_bucket:tpot_ms}, toUInt64(1)), tpot_ms IS NOT NULL AND status = 'ok') AS tpot_ms_ok_hist,
    sum(toFloat64(ifNull(e2e_ms, 0))) AS e2e_ms_sum,
    count(e2e_ms) AS e2e_ms_count,
    quantileTDigestStateIf(assumeNotNull(e2e_ms), e2e_ms IS NOT NULL) AS e2e_ms_tdigest,
    sumMapIf(map(${latency_bucket:e2e_ms}, toUInt64(1)), e2e_ms IS NOT NULL) AS e2e_ms_hist,
    sumMapIf(map(${latency_bucket:e2e_ms}, toUInt64(1)), e2e_ms IS NOT NULL AND status = 'ok') AS e2e_ms_ok_hist
FROM ${db}.requests
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;;

ALTER TABLE ${db}.requests_1h_mv MODIFY QUERY
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
FROM ${db}.requests_1m
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;;

-- Fill the new columns for the rows already rolled up. The sealing view writes into
-- `requests` on its own schedule, so it is stopped meanwhile: a request it sealed
-- between the view change above and this insert would be counted twice. The rows
-- added here carry only the histograms (every other column adds zero when merged),
-- and the hourly rollup gets them through its view.
SYSTEM STOP VIEW ${db}.request_parts_seal;

INSERT INTO ${db}.requests_1m (ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe, queue_ms_ok_hist, ttft_ms_ok_hist, tpot_ms_ok_hist, e2e_ms_ok_hist)
SELECT
    toStartOfMinute(ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    sumMapIf(map(${latency_bucket:queue_ms}, toUInt64(1)), queue_ms IS NOT NULL AND status = 'ok') AS queue_ms_ok_hist,
    sumMapIf(map(${latency_bucket:ttft_ms}, toUInt64(1)), ttft_ms IS NOT NULL AND status = 'ok') AS ttft_ms_ok_hist,
    sumMapIf(map(${latency_bucket:tpot_ms}, toUInt64(1)), tpot_ms IS NOT NULL AND status = 'ok') AS tpot_ms_ok_hist,
    sumMapIf(map(${latency_bucket:e2e_ms}, toUInt64(1)), e2e_ms IS NOT NULL AND status = 'ok') AS e2e_ms_ok_hist
FROM ${db}.requests
GROUP BY ts, tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe;

SYSTEM START VIEW ${db}.request_parts_seal;
