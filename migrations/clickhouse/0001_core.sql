-- Core schema: per-request LLM metrics, Prometheus series and samples, metric metadata.
--
-- Placeholders (the database, TTL days) are filled from settings, see
-- warehouse/config.py; `llmwh migrate plan` prints this file rendered.
-- `-- sharding_key:` lines name the key of the Distributed table when the schema is
-- rendered for a cluster (`llmwh migrate plan --cluster NAME`).

CREATE DATABASE IF NOT EXISTS ${db};

-- One row per LLM request.
-- ORDER BY starts with the low-cardinality columns people filter on (tenant, then
-- service and model), then the hour, so that "this tenant/model over the last hour"
-- reads a few granules; region and zone follow for drill-downs inside an hour, and
-- ts last keeps each granule time-sorted (DoubleDelta then compresses ts to ~1 byte).
-- Partitions are days: TTL drops whole partitions and a day is the unit of backfill.
-- Dimensions are LowCardinality (dictionary-encoded, tens to thousands of values);
-- absent dimensions are '' rather than NULL, so GROUP BY needs no null handling.
-- Latencies are Float32 milliseconds (7 significant digits is sub-microsecond at
-- request scale); measures may be NULL when unknown (TTFT of a rejected request),
-- and NULL stays out of every statistic.
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.requests
(
    ts                   DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    request_id           String CODEC(ZSTD(3)),
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
    http_status          UInt16 CODEC(T64, ZSTD(1)),
    finish_reason        LowCardinality(String),
    is_probe             Bool,
    queue_ms             Nullable(Float32) CODEC(ZSTD(1)),
    ttft_ms              Nullable(Float32) CODEC(ZSTD(1)),
    e2e_ms               Nullable(Float32) CODEC(ZSTD(1)),
    tpot_ms              Nullable(Float32) CODEC(ZSTD(1)),
    itl_p99_ms           Nullable(Float32) CODEC(ZSTD(1)),
    prompt_tokens        Nullable(UInt32) CODEC(T64, ZSTD(1)),
    output_tokens        Nullable(UInt32) CODEC(T64, ZSTD(1)),
    cached_prompt_tokens Nullable(UInt32) CODEC(T64, ZSTD(1)),
    max_context_tokens   Nullable(UInt32) CODEC(T64, ZSTD(1)),
    consistency_score    Nullable(Float32) CODEC(ZSTD(1)),
    hallucination        Nullable(Float32) CODEC(ZSTD(1)),
    attrs                Map(LowCardinality(String), String) CODEC(ZSTD(3)),
    -- Garbage is refused at the door (the whole insert fails, naming the constraint)
    -- rather than skewing every statistic later; the rollups' bucket arithmetic
    -- also needs finite, non-negative latencies.
    CONSTRAINT status_known CHECK status IN ('ok', 'error', 'rejected'),
    CONSTRAINT latencies_finite_non_negative CHECK
        isFinite(ifNull(queue_ms, 0)) AND ifNull(queue_ms, 0) >= 0
        AND isFinite(ifNull(ttft_ms, 0)) AND ifNull(ttft_ms, 0) >= 0
        AND isFinite(ifNull(e2e_ms, 0)) AND ifNull(e2e_ms, 0) >= 0
        AND isFinite(ifNull(tpot_ms, 0)) AND ifNull(tpot_ms, 0) >= 0
        AND isFinite(ifNull(itl_p99_ms, 0)) AND ifNull(itl_p99_ms, 0) >= 0,
    CONSTRAINT cached_within_prompt CHECK
        cached_prompt_tokens IS NULL OR prompt_tokens IS NULL
        OR cached_prompt_tokens <= prompt_tokens
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, service, model, toStartOfHour(ts), region, zone, ts)
TTL toDateTime(ts) + INTERVAL ${requests_ttl_days} DAY
-- The deduplication window makes a retried insert with the same
-- insert_deduplication_token (the receiver derives it from the body) a no-op, here
-- and in the rollups below: a retried write changes no figure.
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1,
         non_replicated_deduplication_window = 10000;

-- Prometheus series, laid out as ClickHouse's TimeSeries engine lays out its tags
-- table: an id hashed from the metric name and the labels sorted by name, the
-- labels in a Map, and the first and last sample time seen. Repeated writes of a
-- series collapse on merge (AggregatingMergeTree keeps min/max of the times; the
-- labels depend on the id alone, so `any` keeps them).
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.series
(
    id          UUID,
    metric_name LowCardinality(String),
    labels      SimpleAggregateFunction(any, Map(String, String)) CODEC(ZSTD(3)),
    min_time    SimpleAggregateFunction(min, DateTime64(3, 'UTC')),
    max_time    SimpleAggregateFunction(max, DateTime64(3, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (metric_name, id)
SETTINGS index_granularity = 8192;

-- Float samples. (id, timestamp) identifies a sample, as in Prometheus: a retried
-- write replaces rather than adds (ReplacingMergeTree; exact reads use FINAL or
-- argMax). Gorilla suits slowly changing float series and keeps every bit, so NaN,
-- the staleness marker and infinities come back exactly as written.
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.samples
(
    id        UUID,
    timestamp DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    value     Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(timestamp)
ORDER BY (id, timestamp)
TTL toDateTime(timestamp) + INTERVAL ${samples_ttl_days} DAY
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1;

-- Metric metadata (TYPE, HELP, UNIT) as remote write sends it; the newest wins.
-- sharding_key: cityHash64(metric_family_name)
CREATE TABLE IF NOT EXISTS ${db}.metric_metadata
(
    metric_family_name LowCardinality(String),
    type               LowCardinality(String),
    unit               LowCardinality(String),
    help               String,
    updated_at         DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY metric_family_name;
