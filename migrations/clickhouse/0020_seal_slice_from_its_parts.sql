-- A refresh finds its slice from the parts received in it, not by grouping the window.
--
-- Until now a refresh found the requests to seal by grouping the keys and receive
-- times of every part of the window (seal_window_seconds before the slice, and the
-- slice) to keep the keys whose last part came in the slice. Under sustained
-- per-request remote write (45k requests/s) that is about 4M parts grouped to find
-- 225k, every period, and the hash table behind it held most of a refresh's memory.
-- The rule is the same; only how it is computed changes. A request's last part is in
-- the slice exactly when it has a part received in the slice and none received after
-- it, and both are range reads of the primary index (request_parts is sorted by the
-- minute of receipt). A request could only have been sealed already if it is in
-- sealed_keys within the window, so sealed_keys is read for the slice's keys only,
-- instead of building a set of every key sealed within the window. The final grouping
-- by (tenant, request_id) and its check are unchanged.
--
-- Measured on the embedded server, idle, 4.05M parts over 90 s and 225k requests to
-- seal: the view's query 0.54 s -> 0.39 s and 272 -> 83 MiB, the same requests sealed
-- (docs/per-request-metrics.md has the sustained-write figures).
--
-- The refresh also fills the views of `sealed` and of `requests` side by side
-- (parallel_view_processing), as the receiver's inserts into `requests` already do:
-- the rollups, `requests` and `sealed_keys` are independent, and writing them one after
-- the other left one core idle (same data: 0.58 s -> 0.45 s for the writes).
ALTER TABLE ${db}.request_parts_seal MODIFY QUERY
WITH
    (SELECT max(last_received) FROM ${db}.sealed_keys) AS sealed_through,
    sealed_through - toIntervalSecond(2 * ${seal_every_seconds}) AS slice_start,
    slice_start - toIntervalSecond(${seal_window_seconds}) AS window_start,
    now64(3, 'UTC') - INTERVAL ${seal_after_seconds} SECOND AS slice_end
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node, client_app,
    client_os, network, ab_group, request_type,
    multiIf(rank = 2, 'rejected', rank = 1, 'error', 'ok') AS status,
    error_class, http_status, finish_reason, false AS is_probe,
    queue_ms, ttft_ms, e2e_ms,
    -- TPOT as the README defines it, when the sender did not give it.
    ifNull(given_tpot_ms, if(output_tokens > 1 AND e2e_ms >= ttft_ms,
        toFloat32((e2e_ms - ttft_ms) / (output_tokens - 1)), NULL)) AS tpot_ms,
    itl_p99_ms, prompt_tokens, output_tokens,
    if(cached_prompt_tokens <= prompt_tokens OR prompt_tokens IS NULL,
        cached_prompt_tokens, NULL) AS cached_prompt_tokens,
    max_context_tokens,
    CAST(NULL, 'Nullable(Float32)') AS consistency_score,
    CAST(NULL, 'Nullable(Float32)') AS hallucination,
    attrs, last_received
FROM
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
    WHERE received > window_start
        AND key IN
        (
            -- the slice: requests with a part received in it and none after it ...
            SELECT key
            FROM ${db}.request_parts
            WHERE received > slice_start AND received <= slice_end
                AND key NOT IN (SELECT key FROM ${db}.request_parts WHERE received > slice_end)
                -- ... less those sealed already, looked up among the slice's keys only
                AND key NOT IN
                (
                    SELECT key
                    FROM ${db}.sealed_keys
                    WHERE last_received > window_start AND key IN
                    (
                        SELECT key
                        FROM ${db}.request_parts
                        WHERE received > slice_start AND received <= slice_end
                    )
                )
        )
    GROUP BY tenant, request_id
    HAVING last_received > slice_start AND last_received <= slice_end
)
SETTINGS optimize_on_insert = 0, parallel_view_processing = 1;
