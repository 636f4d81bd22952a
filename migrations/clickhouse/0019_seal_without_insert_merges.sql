-- The sealing view's refresh inserts without merging each block on insert.
--
-- A refresh is one insert into `sealed`, whose views write the sealed requests into
-- `requests` and from there into the rollups. Every block they write has one row per
-- key of its table (a request, a rollup group), so merging it on insert finds nothing
-- to merge, and for the rollups' maps it cost as much as filling them: on 800k
-- requests inserted with the rollup views, 1.1 s of 2.9 s in the tables' sinks
-- (system.processors_profile_log). Inserts into `requests` from the receiver and the
-- CLI already skip it (optimize_on_insert = 0); this gives the refresh the same. A
-- refreshable view's insert takes the settings of its query's SETTINGS clause.
--
-- The query is 0017's, unchanged; only the SETTINGS clause is new.
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
            -- the slice: requests whose last part came in it, less those sealed already
            SELECT key
            FROM ${db}.request_parts
            WHERE received > window_start
            GROUP BY key
            HAVING max(received) > slice_start AND max(received) <= slice_end
                AND (min(received) > sealed_through OR key NOT IN
                (
                    SELECT key FROM ${db}.sealed_keys WHERE last_received > window_start
                ))
        )
    GROUP BY tenant, request_id
    HAVING last_received > slice_start AND last_received <= slice_end
)
SETTINGS optimize_on_insert = 0;
