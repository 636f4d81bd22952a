-- Sealing by slices: each refresh seals the requests whose last part came since the
-- previous one, instead of grouping every part of a window on each refresh.
--
-- 0009's view grouped all parts received within ${seal_window_seconds} s of the newest
-- one on every refresh, every column of them, and then dropped the requests already in
-- `requests` by reading `requests` over the requests' time range. Under sustained
-- per-request remote write (56k requests/s on 2 cores, benchmarks/sealing.py) a refresh
-- took 10-50 s against a period of ${seal_every_seconds} s: each part was grouped dozens
-- of times, and the anti-join read an hour of `requests`.
--
-- Now the view appends to `sealed_requests`, which remembers what was sealed (its
-- newest `last_received` is how far sealing got), and a plain materialized view copies
-- each sealed request into `requests` as it is written, so the rollups fill as before.
-- Each refresh:
--   1. takes the slice of requests whose last part came after that point (less a
--      margin of two periods, for parts whose insert was still running) and at least
--      ${seal_after_seconds} s ago: a narrow GROUP BY of keys and receive times over the
--      parts received since then;
--   2. drops those sealed already (in `sealed_requests` within the window: the margin,
--      or a part that came after its request was sealed), looked up by receive time;
--   3. groups every column of the parts of the requests left, over the parts received
--      up to ${seal_window_seconds} s before the slice (the parts of one request must
--      arrive within that of each other).
-- So a refresh costs in proportion to the requests it seals, plus a narrow pass over
-- the last few periods. `request_parts` is partitioned by the day of receipt and has a
-- min-max index on `received`, so that reads by receive time skip older parts and
-- "how far" is answered from part metadata.
-- The target and the state are one table, so a refresh that fails or is cut short
-- leaves either all of its slice sealed or none of it; the copy into `requests` is a
-- materialized view, as atomic as the rollups are.
-- Sealed rows are valid `requests` rows by construction: a TPOT is derived only when
-- E2E is not below TTFT, and cached tokens above prompt tokens are left out, so that
-- no sender's data can stop sealing by failing a constraint of `requests`.

SYSTEM STOP VIEW ${db}.request_parts_seal;

DROP VIEW IF EXISTS ${db}.request_parts_seal;

-- The same table, partitioned by the day of receipt, with an index on receive times.
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.request_parts_next
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
    attrs                SimpleAggregateFunction(maxMap, Map(String, String)),
    INDEX received_range received TYPE minmax GRANULARITY 1
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(received)
ORDER BY (tenant, request_id)
TTL toDateTime(received) + INTERVAL 2 DAY
SETTINGS ttl_only_drop_parts = 1;

INSERT INTO ${db}.request_parts_next SELECT * FROM ${db}.request_parts;

DROP TABLE IF EXISTS ${db}.request_parts;

-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.request_parts AS ${db}.request_parts_next
ENGINE = AggregatingMergeTree
PARTITION BY toDate(received)
ORDER BY (tenant, request_id)
TTL toDateTime(received) + INTERVAL 2 DAY
SETTINGS ttl_only_drop_parts = 1;

INSERT INTO ${db}.request_parts SELECT * FROM ${db}.request_parts_next;

DROP TABLE IF EXISTS ${db}.request_parts_next;

-- Every request sealed from parts, with the receive time of its last part; kept a day
-- longer than the parts, so that no part is ever older than what sealing remembers.
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.sealed_requests
(
    ts                   DateTime64(3, 'UTC'),
    request_id           String,
    tenant               LowCardinality(String),
    service              LowCardinality(String),
    model                LowCardinality(String),
    model_version        LowCardinality(String),
    region               LowCardinality(String),
    zone                 LowCardinality(String),
    node                 LowCardinality(String),
    client_app           LowCardinality(String),
    client_os            LowCardinality(String),
    network              LowCardinality(String),
    ab_group             LowCardinality(String),
    request_type         LowCardinality(String),
    status               LowCardinality(String),
    error_class          LowCardinality(String),
    http_status          UInt16,
    finish_reason        LowCardinality(String),
    is_probe             Bool,
    queue_ms             Nullable(Float32),
    ttft_ms              Nullable(Float32),
    e2e_ms               Nullable(Float32),
    tpot_ms              Nullable(Float32),
    itl_p99_ms           Nullable(Float32),
    prompt_tokens        Nullable(UInt32),
    output_tokens        Nullable(UInt32),
    cached_prompt_tokens Nullable(UInt32),
    max_context_tokens   Nullable(UInt32),
    consistency_score    Nullable(Float32),
    hallucination        Nullable(Float32),
    attrs                Map(LowCardinality(String), String),
    last_received        DateTime64(3, 'UTC')
)
ENGINE = MergeTree
PARTITION BY toDate(last_received)
ORDER BY (last_received, tenant, request_id)
TTL toDateTime(last_received) + INTERVAL 3 DAY
SETTINGS ttl_only_drop_parts = 1;

-- Requests the previous view sealed, so that the new one does not seal them again: every
-- request in `requests` that has parts. They count as sealed ten minutes before the
-- newest part, so the first refresh looks at the last ten minutes of parts again and
-- seals what the previous view had not.
INSERT INTO ${db}.sealed_requests
SELECT *, (SELECT max(received) FROM ${db}.request_parts) - INTERVAL 600 SECOND
FROM ${db}.requests
WHERE ts >= (SELECT min(first_ts) FROM ${db}.request_parts) - INTERVAL 1 DAY
    AND (tenant, request_id) GLOBAL IN (SELECT tenant, request_id FROM ${db}.request_parts);

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sealed_requests_copy TO ${db}.requests AS
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node, client_app,
    client_os, network, ab_group, request_type, status, error_class, http_status,
    finish_reason, is_probe, queue_ms, ttft_ms, e2e_ms, tpot_ms, itl_p99_ms, prompt_tokens,
    output_tokens, cached_prompt_tokens, max_context_tokens, consistency_score,
    hallucination, attrs
FROM ${db}.sealed_requests;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.request_parts_seal
REFRESH EVERY ${seal_every_seconds} SECOND APPEND TO ${db}.sealed_requests AS
WITH
    (SELECT max(last_received) FROM ${db}.sealed_requests)
        - toIntervalSecond(2 * ${seal_every_seconds}) AS slice_start,
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
    WHERE received > slice_start - INTERVAL ${seal_window_seconds} SECOND
        AND (tenant, request_id) IN
        (
            -- 1. the slice: requests whose last part came in it; 2. less those sealed
            -- already (the join's hash table is the slice, the smaller side)
            SELECT slice.tenant, slice.request_id
            FROM
            (
                SELECT tenant, request_id
                FROM ${db}.sealed_requests
                WHERE last_received > slice_start - INTERVAL ${seal_window_seconds} SECOND
            ) AS sealed
            RIGHT ANTI JOIN
            (
                SELECT tenant, request_id
                FROM ${db}.request_parts
                WHERE received > slice_start
                GROUP BY tenant, request_id
                HAVING max(received) <= slice_end
            ) AS slice ON sealed.tenant = slice.tenant AND sealed.request_id = slice.request_id
        )
    GROUP BY tenant, request_id
);
