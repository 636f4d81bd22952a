-- name: slowest_requests
-- answers: The slowest requests of a window, with every dimension, slowest end-to-end
--   first: where the tail of latency comes from, request by request.
-- param since DateTime64(3, 'UTC') = 1h: start of the window (a duration back from now, or a time)
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
-- param limit UInt32 = 20: how many requests
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node,
    client_app, ab_group, request_type, status, error_class, finish_reason,
    e2e_ms, ttft_ms, tpot_ms, queue_ms, prompt_tokens, output_tokens, cached_prompt_tokens
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    AND e2e_ms IS NOT NULL
ORDER BY e2e_ms DESC, request_id
LIMIT {limit:UInt32}
