-- name: models_by_kv_cache_hits
-- answers: Per model, the share of prompt tokens served from the KV cache, and the
--   95th percentile of TTFT for requests that hit the cache against those that missed
--   it entirely: what prefix caching buys each model.
-- param since DateTime64(3, 'UTC') = 1d: start of the window
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
SELECT
    model,
    count() AS requests,
    sum(cached_prompt_tokens) / sum(prompt_tokens) AS kv_hit_ratio,
    countIf(cached_prompt_tokens > 0) AS cache_hits,
    quantileExactInclusiveIf(0.95)(ttft_ms, cached_prompt_tokens > 0) AS p95_ttft_ms_hit,
    quantileExactInclusiveIf(0.95)(ttft_ms, cached_prompt_tokens = 0) AS p95_ttft_ms_miss
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
GROUP BY model
ORDER BY kv_hit_ratio DESC, model
