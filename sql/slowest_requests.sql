-- name: slowest_requests
-- answers: The slowest requests of a window, with every dimension, slowest end-to-end
--   first: where the tail of latency comes from, request by request. The columns a
--   terminal shows first (`llmwh query run` shows those that fit) come first.
-- param since DateTime64(3, 'UTC') = 1h: start of the window (a duration back from now, or a time)
-- param until DateTime64(3, 'UTC') = now: end of the window (exclusive)
-- param limit UInt32 = 20: how many requests
SELECT
    request_id, e2e_ms, ttft_ms, tpot_ms, output_tokens, model, zone, node, ts,
    status, finish_reason, queue_ms, prompt_tokens, cached_prompt_tokens,
    tenant, service, model_version, region, client_app, ab_group, request_type, error_class
FROM requests
WHERE NOT is_probe
    AND ts >= {since:DateTime64(3, 'UTC')} AND ts < {until:DateTime64(3, 'UTC')}
    AND e2e_ms IS NOT NULL
ORDER BY e2e_ms DESC, request_id
LIMIT {limit:UInt32}
