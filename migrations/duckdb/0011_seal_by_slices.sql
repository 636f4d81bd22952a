-- Sealing as ClickHouse's migration of the same name seals, in DuckDB's own way: the
-- receiver still runs it over a window of recent parts (DuckDB makes no speed claim),
-- now the window of the new settings (the parts of one request arrive within
-- ${seal_window_seconds} s of each other, sealed ${seal_after_seconds} s after the last,
-- two runs of margin). Rows are valid `requests` rows whatever the parts said: a TPOT
-- is derived only when E2E is not below TTFT, cached tokens above prompt tokens are
-- left out, and attrs that disagree between parts keep the greatest value per name
-- (as ClickHouse's maxMap), where DuckDB's map refused the duplicate name.
CREATE OR REPLACE VIEW ${db}.request_parts_sealable AS
WITH window_parts AS
(
    SELECT * FROM ${db}.request_parts
    WHERE received >= (SELECT max(received) FROM ${db}.request_parts)
        - to_seconds(${seal_window_seconds} + ${seal_after_seconds} + 2 * ${seal_every_seconds})
),
-- attrs merged as ClickHouse's maxMap merges them: per name, the greatest value
merged_attrs AS
(
    SELECT tenant, request_id, map_from_entries(list({'key': name, 'value': value})) AS attrs
    FROM
    (
        SELECT tenant, request_id, entry.key AS name, max(entry.value) AS value
        FROM (SELECT tenant, request_id, unnest(map_entries(attrs)) AS entry FROM window_parts)
        GROUP BY tenant, request_id, entry.key
    )
    GROUP BY tenant, request_id
),
sealable AS
(
    SELECT
        tenant,
        request_id,
        coalesce(last(start_ts ORDER BY received) FILTER (WHERE start_ts IS NOT NULL), min(first_ts)) AS ts,
        max(received) AS last_received,
        coalesce(last(service ORDER BY received) FILTER (WHERE service IS NOT NULL), '') AS service,
        coalesce(last(model ORDER BY received) FILTER (WHERE model IS NOT NULL), '') AS model,
        coalesce(last(model_version ORDER BY received) FILTER (WHERE model_version IS NOT NULL), '') AS model_version,
        coalesce(last(region ORDER BY received) FILTER (WHERE region IS NOT NULL), '') AS region,
        coalesce(last(zone ORDER BY received) FILTER (WHERE zone IS NOT NULL), '') AS zone,
        coalesce(last(node ORDER BY received) FILTER (WHERE node IS NOT NULL), '') AS node,
        coalesce(last(client_app ORDER BY received) FILTER (WHERE client_app IS NOT NULL), '') AS client_app,
        coalesce(last(client_os ORDER BY received) FILTER (WHERE client_os IS NOT NULL), '') AS client_os,
        coalesce(last(network ORDER BY received) FILTER (WHERE network IS NOT NULL), '') AS network,
        coalesce(last(ab_group ORDER BY received) FILTER (WHERE ab_group IS NOT NULL), '') AS ab_group,
        coalesce(last(request_type ORDER BY received) FILTER (WHERE request_type IS NOT NULL), '') AS request_type,
        coalesce(last(finish_reason ORDER BY received) FILTER (WHERE finish_reason IS NOT NULL), '') AS finish_reason,
        max(status_rank) AS rank,
        coalesce(last(error_class ORDER BY received) FILTER (WHERE error_class IS NOT NULL), '') AS error_class,
        coalesce(last(http_status ORDER BY received) FILTER (WHERE http_status IS NOT NULL), 0) AS http_status,
        last(tpot_ms ORDER BY received) FILTER (WHERE tpot_ms IS NOT NULL) AS given_tpot_ms,
        last(queue_ms ORDER BY received) FILTER (WHERE queue_ms IS NOT NULL) AS queue_ms,
        last(ttft_ms ORDER BY received) FILTER (WHERE ttft_ms IS NOT NULL) AS ttft_ms,
        last(e2e_ms ORDER BY received) FILTER (WHERE e2e_ms IS NOT NULL) AS e2e_ms,
        last(itl_p99_ms ORDER BY received) FILTER (WHERE itl_p99_ms IS NOT NULL) AS itl_p99_ms,
        last(prompt_tokens ORDER BY received) FILTER (WHERE prompt_tokens IS NOT NULL) AS prompt_tokens,
        last(output_tokens ORDER BY received) FILTER (WHERE output_tokens IS NOT NULL) AS output_tokens,
        last(cached_prompt_tokens ORDER BY received) FILTER (WHERE cached_prompt_tokens IS NOT NULL) AS cached_prompt_tokens,
        last(max_context_tokens ORDER BY received) FILTER (WHERE max_context_tokens IS NOT NULL) AS max_context_tokens
    FROM window_parts
    GROUP BY tenant, request_id
    HAVING max(received) < now() - to_seconds(${seal_after_seconds})
)
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node, client_app, client_os, network, ab_group, request_type,
    CASE rank WHEN 2 THEN 'rejected' WHEN 1 THEN 'error' ELSE 'ok' END AS status,
    error_class, http_status, finish_reason, false AS is_probe,
    queue_ms, ttft_ms, e2e_ms,
    coalesce(given_tpot_ms, CASE WHEN output_tokens > 1 AND e2e_ms >= ttft_ms
        THEN ((e2e_ms - ttft_ms) / (output_tokens - 1))::FLOAT END) AS tpot_ms,
    itl_p99_ms, prompt_tokens, output_tokens,
    CASE WHEN prompt_tokens IS NULL OR cached_prompt_tokens <= prompt_tokens
        THEN cached_prompt_tokens END AS cached_prompt_tokens,
    max_context_tokens,
    coalesce(merged_attrs.attrs, MAP {}::MAP(VARCHAR, VARCHAR)) AS attrs
FROM sealable
LEFT JOIN merged_attrs USING (tenant, request_id)
WHERE NOT EXISTS
(
    SELECT 1 FROM ${db}.requests AS r
    WHERE r.tenant = sealable.tenant AND r.request_id = sealable.request_id
);
