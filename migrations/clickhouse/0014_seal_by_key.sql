-- Sealing finds its slice by 64-bit keys, and reads strings only for what it seals.
--
-- 0011's refresh found the requests of its slice and dropped those sealed already by
-- reading (tenant, request_id) strings of `request_parts` and of `sealed_requests` over
-- the whole ${seal_window_seconds} s window plus the margin, twice for the parts: under
-- sustained per-request remote write (benchmarks/sealing.py, 26k requests/s) a refresh
-- read 25 rows for each one it sealed (5.4M for 216k) and took about its whole period.
--
-- Now both tables carry `key`, cityHash64(tenant, request_id), computed at insert. One
-- pass over the window's keys and receive times finds the requests whose last part came
-- in the slice; only those whose first part came before the point sealing had reached
-- can have been sealed already (a sealed request had a part at or before it), and only
-- they are looked up, by key, in `sealed_requests`. Then every column is grouped for
-- the parts of those keys. The window's reads are 16 bytes a row instead of strings,
-- and the grouping by key is a hash of one integer. Grouping and the final check are on
-- (tenant, request_id), so two requests that share a key (about one in 2^64) are still
-- sealed as two.
ALTER TABLE ${db}.request_parts
    ADD COLUMN IF NOT EXISTS key UInt64 MATERIALIZED cityHash64(tenant, request_id);
ALTER TABLE ${db}.sealed_requests
    ADD COLUMN IF NOT EXISTS key UInt64 MATERIALIZED cityHash64(tenant, request_id);
ALTER TABLE ${db}.request_parts_seal MODIFY QUERY
WITH
    (SELECT max(last_received) FROM ${db}.sealed_requests) AS sealed_through,
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
                    SELECT key FROM ${db}.sealed_requests WHERE last_received > window_start
                ))
        )
    GROUP BY tenant, request_id
    HAVING last_received > slice_start AND last_received <= slice_end
);
