-- Per-request LLM metrics that arrive as Prometheus samples
-- (llm_request_ttft_seconds{request_id="..."} and the like, mapped by
-- warehouse/ingest/llm_metrics.toml) are parts of one request, and the parts of a
-- request may come in different writes, even through different receivers.
--
-- Each part lands here first; rows of one request collapse into one on merge
-- (AggregatingMergeTree on (tenant, request_id): anyLast of each known measure,
-- NULL meaning "not in this part"), and a retried write changes nothing.
-- A refreshable materialized view then seals every request whose last part came more
-- than ${seal_after_seconds} s ago into `requests`, once: the anti-join against
-- `requests` makes a refresh that is repeated, or a request sealed twice by two
-- refreshes, impossible (refreshes of one view never overlap). Queries read
-- `requests` only, so no query counts a request twice, or half of one.
-- Parts that arrive after their request was sealed are not merged in (they would
-- change figures already reported); `request_parts` keeps them for two days.
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.request_parts
(
    tenant               LowCardinality(String),
    request_id           String,
    first_ts             SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    start_ts             SimpleAggregateFunction(anyLast, Nullable(DateTime64(3, 'UTC'))),
    received             SimpleAggregateFunction(max, DateTime64(3, 'UTC')),
    service              SimpleAggregateFunction(anyLast, Nullable(String)),
    model                SimpleAggregateFunction(anyLast, Nullable(String)),
    model_version        SimpleAggregateFunction(anyLast, Nullable(String)),
    region               SimpleAggregateFunction(anyLast, Nullable(String)),
    zone                 SimpleAggregateFunction(anyLast, Nullable(String)),
    node                 SimpleAggregateFunction(anyLast, Nullable(String)),
    client_app           SimpleAggregateFunction(anyLast, Nullable(String)),
    client_os            SimpleAggregateFunction(anyLast, Nullable(String)),
    network              SimpleAggregateFunction(anyLast, Nullable(String)),
    ab_group             SimpleAggregateFunction(anyLast, Nullable(String)),
    request_type         SimpleAggregateFunction(anyLast, Nullable(String)),
    finish_reason        SimpleAggregateFunction(anyLast, Nullable(String)),
    status_rank          SimpleAggregateFunction(max, UInt8),
    error_class          SimpleAggregateFunction(anyLast, Nullable(String)),
    http_status          SimpleAggregateFunction(anyLast, Nullable(UInt16)),
    queue_ms             SimpleAggregateFunction(anyLast, Nullable(Float32)),
    ttft_ms              SimpleAggregateFunction(anyLast, Nullable(Float32)),
    e2e_ms               SimpleAggregateFunction(anyLast, Nullable(Float32)),
    tpot_ms              SimpleAggregateFunction(anyLast, Nullable(Float32)),
    itl_p99_ms           SimpleAggregateFunction(anyLast, Nullable(Float32)),
    prompt_tokens        SimpleAggregateFunction(anyLast, Nullable(UInt32)),
    output_tokens        SimpleAggregateFunction(anyLast, Nullable(UInt32)),
    cached_prompt_tokens SimpleAggregateFunction(anyLast, Nullable(UInt32)),
    max_context_tokens   SimpleAggregateFunction(anyLast, Nullable(UInt32)),
    attrs                SimpleAggregateFunction(maxMap, Map(String, String))
)
ENGINE = AggregatingMergeTree
ORDER BY (tenant, request_id)
TTL toDateTime(received) + INTERVAL 2 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.request_parts_seal
REFRESH EVERY ${seal_every_seconds} SECOND APPEND TO ${db}.requests AS
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
    WHERE received >= now64(3) - INTERVAL 1 DAY
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
