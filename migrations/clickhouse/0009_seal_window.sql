-- Sealing reads a window of recent parts instead of a day of them.
--
-- 0004's view grouped every part received in the last day on each refresh (every few
-- seconds), then dropped the requests already sealed: with 10M parts in that day one
-- refresh took 8-15 s on 2 cores, so under sustained per-request ingest sealing fell
-- behind and took the CPU. Now each refresh groups the parts received within
-- ${seal_window_seconds} seconds of the newest part, and costs in proportion to them
-- (about 2 s for 1.6M parts). The window is anchored on the newest part rather than
-- on now() so that after an outage the parts written before it are still sealed. The parts of one request must arrive within that window of each other;
-- later ones stay in `request_parts` (kept two days) but are not merged into `requests`.
ALTER TABLE ${db}.request_parts_seal MODIFY QUERY
WITH sealable AS
(
    SELECT
        tenant,
        request_id,
        ifNull(anyLast(start_ts), min(first_ts)) AS ts,
        max(received) AS last_received,
        ifNull(anyLast(service), '') AS service,
        ifNull(anyLast(model), '') AS model,
        ifNull(anyLast(model_version), '') AS model_version,
        ifNull(anyLast(region), '') AS region,
        ifNull(anyLast(zone), '') AS zone,
        ifNull(anyLast(node), '') AS node,
        ifNull(anyLast(client_app), '') AS client_app,
        ifNull(anyLast(client_os), '') AS client_os,
        ifNull(anyLast(network), '') AS network,
        ifNull(anyLast(ab_group), '') AS ab_group,
        ifNull(anyLast(request_type), '') AS request_type,
        ifNull(anyLast(finish_reason), '') AS finish_reason,
        max(status_rank) AS rank,
        ifNull(anyLast(error_class), '') AS error_class,
        ifNull(anyLast(http_status), 0) AS http_status,
        anyLast(tpot_ms) AS given_tpot_ms,
        anyLast(queue_ms) AS queue_ms,
        anyLast(ttft_ms) AS ttft_ms,
        anyLast(e2e_ms) AS e2e_ms,
        anyLast(itl_p99_ms) AS itl_p99_ms,
        anyLast(prompt_tokens) AS prompt_tokens,
        anyLast(output_tokens) AS output_tokens,
        anyLast(cached_prompt_tokens) AS cached_prompt_tokens,
        anyLast(max_context_tokens) AS max_context_tokens,
        maxMap(attrs) AS attrs
    FROM ${db}.request_parts
    WHERE received >= (SELECT max(received) FROM ${db}.request_parts)
        - INTERVAL ${seal_window_seconds} SECOND
    GROUP BY tenant, request_id
    HAVING last_received < now64(3) - INTERVAL ${seal_after_seconds} SECOND
)
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node, client_app, client_os, network, ab_group, request_type,
    multiIf(rank = 2, 'rejected', rank = 1, 'error', 'ok') AS status,
    error_class, http_status, finish_reason, false AS is_probe,
    queue_ms, ttft_ms, e2e_ms,
    -- TPOT as docs/querying.md defines it, when the sender did not give it.
    ifNull(given_tpot_ms, if(output_tokens > 1,
        toFloat32((e2e_ms - ttft_ms) / (output_tokens - 1)), NULL)) AS tpot_ms,
    itl_p99_ms, prompt_tokens, output_tokens, cached_prompt_tokens, max_context_tokens,
    attrs
FROM sealable
WHERE (tenant, request_id) NOT IN
(
    SELECT tenant, request_id FROM ${db}.requests
    WHERE ts >= (SELECT min(ts) FROM sealable) AND ts <= (SELECT max(ts) FROM sealable)
);
