-- What sealing remembers is a key and a receive time, not a second copy of the request.
--
-- Since 0011 the sealing view appended each sealed request, every column of it, to
-- `sealed_requests`, kept three days, and a plain view copied it on into `requests`.
-- Sealing reads only two things back: the newest `last_received` (how far it got) and
-- the keys of what it sealed within its window. So every request sent as metrics was
-- written twice and kept twice: under sustained per-request remote write a copy of
-- three days of those requests, and 0.4 s of a refresh that seals 533k requests (one of
-- the slowest refreshes of benchmarks/sealing.py) went to writing it.
--
-- Now the view appends to `sealed`, a Null table (an insert target whose views do the
-- work), and two views take each sealed block from there: one into `requests` (and so
-- into the rollups), one into `sealed_keys`, which keeps (key, last_received) for three
-- days, a day longer than the parts, so that no part is older than what sealing
-- remembers. The view's query is 0014's, reading `sealed_keys` where it read
-- `sealed_requests`. A refresh is one insert into `sealed`, and its two views write as
-- the rollups of any insert do, one after the other and not in one transaction; so did
-- `sealed_requests` and the view that copied it into `requests`.
-- The view goes first: a refresh that STOP VIEW cancelled might still commit a block to
-- `sealed_requests` after its keys were copied, and those requests would be sealed again.
SYSTEM STOP VIEW ${db}.request_parts_seal;
DROP VIEW IF EXISTS ${db}.request_parts_seal;

-- On a cluster each shard's sealing view fills its own `sealed_keys_local`, for the
-- requests whose parts it holds; the key only names where a row written to the
-- Distributed table would go (none is).
-- sharding_key: key
CREATE TABLE IF NOT EXISTS ${db}.sealed_keys
(
    key           UInt64,
    last_received DateTime64(3, 'UTC')
)
ENGINE = MergeTree
PARTITION BY toDate(last_received)
ORDER BY (last_received, key)
TTL toDateTime(last_received) + INTERVAL 3 DAY
SETTINGS ttl_only_drop_parts = 1;

INSERT INTO ${db}.sealed_keys SELECT key, last_received FROM ${db}.sealed_requests;

-- The columns of `sealed_requests`, its materialized `key` included, which the keys'
-- view takes from there rather than computing again.
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.sealed AS ${db}.sealed_requests ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sealed_into_requests TO ${db}.requests AS
SELECT
    ts, request_id, tenant, service, model, model_version, region, zone, node, client_app,
    client_os, network, ab_group, request_type, status, error_class, http_status,
    finish_reason, is_probe, queue_ms, ttft_ms, e2e_ms, tpot_ms, itl_p99_ms, prompt_tokens,
    output_tokens, cached_prompt_tokens, max_context_tokens, consistency_score,
    hallucination, attrs
FROM ${db}.sealed;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.sealed_into_keys TO ${db}.sealed_keys AS
SELECT key, last_received
FROM ${db}.sealed;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.request_parts_seal
REFRESH EVERY ${seal_every_seconds} SECOND APPEND TO ${db}.sealed AS
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
);

DROP VIEW IF EXISTS ${db}.sealed_requests_copy;
DROP TABLE IF EXISTS ${db}.sealed_requests;
