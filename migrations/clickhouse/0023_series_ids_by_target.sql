-- Series ids that begin with their scrape target (docs/benchmarks.md, "Bytes per
-- sample"; the id: warehouse/ingest/remote_write_tables.py and docs/remote-write.md).
--
-- A series' id was the MD5 digest of its key (metric name and sorted labels). It is
-- now the first 8 bytes of that digest, then the first 8 bytes of the MD5 digest of
-- its target labels (`__tenant__`, `instance`, `job`), as ClickHouse lays a UUID out.
-- ClickHouse sorts UUIDs by their second half first, so `samples`' key (id, timestamp)
-- keeps a target's series together: they share every scrape's timestamp, and a
-- histogram's buckets their shapes, which ZSTD finds once the compressed blocks are
-- large enough to hold several series (1 MB, at ZSTD(9)). On the seeded scrape data of
-- benchmarks/bytes_per_sample.py, `samples` took 2.64 bytes a sample with 0022 and
-- 1.63 with this (VictoriaMetrics 1.79: 1.64); a series is still found by its id.
--
-- Every table keyed by series id is rewritten with the new ids: `series` (from its
-- labels), and `samples`, `histogram_samples`, `exemplars`, `sample_starts` through
-- the map `series_rekey` (each stored id -> its new one). A row whose id has no
-- `series` row keeps its id. Each table is copied into a new one, swapped in with
-- EXCHANGE TABLES (row policies and views name the table, so they follow) and the old
-- one dropped. Interrupted anywhere, the migration runs again to the same end: the map
-- outlives a run, rows whose id is new already are not in it and keep their id, and a
-- copy left over is dropped first.
--
-- On a cluster each shard copies its rows into the new tables through their
-- Distributed table (`-- reshard`), so that a row lands on the shard of its new id, as
-- later writes do (`cityHash64(id)`); every shard must take this migration together.
--
-- The id expression below is SERIES_ID_SQL as this migration was written (a test holds
-- them equal): a later change to the id is a new migration.

-- sharding_key: cityHash64(old)
CREATE TABLE IF NOT EXISTS ${db}.series_rekey
(
    old UUID,
    new UUID
)
ENGINE = ReplacingMergeTree
ORDER BY old;

INSERT INTO ${db}.series_rekey (old, new)
SELECT id, reinterpretAsUUID(concat(substring(MD5(concat(toString(length(metric_name)), ':', metric_name, arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, toString(length(kv.2)), ':', kv.2), arraySort(kv -> kv.1, arrayZip(mapKeys(labels), mapValues(labels))))))), 1, 8), substring(MD5(arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, toString(length(kv.2)), ':', kv.2), arrayFilter(kv -> kv.1 IN ('__tenant__', 'instance', 'job'), arraySort(kv -> kv.1, arrayZip(mapKeys(labels), mapValues(labels))))))), 1, 8)))
FROM ${db}.series;

DROP TABLE IF EXISTS ${db}.samples_rekeyed;

-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.samples_rekeyed
(
    id        UUID CODEC(ZSTD(1)),
    timestamp DateTime64(3, 'UTC') CODEC(Delta, ZSTD(9)),
    value     Float64 CODEC(Delta, ZSTD(9))
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(timestamp)
ORDER BY (id, timestamp)
TTL toDateTime(timestamp) + INTERVAL ${samples_ttl_days} DAY
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1,
         min_compress_block_size = 1048576, max_compress_block_size = 1048576;

-- reshard
INSERT INTO ${db}.samples_rekeyed (id, timestamp, value)
SELECT if(m.new = toUUID('00000000-0000-0000-0000-000000000000'), t.id, m.new), t.timestamp, t.value
FROM ${db}.samples AS t
ANY LEFT JOIN ${db}.series_rekey AS m ON m.old = t.id
SETTINGS distributed_foreground_insert = 1;

EXCHANGE TABLES ${db}.samples AND ${db}.samples_rekeyed;

DROP TABLE IF EXISTS ${db}.samples_rekeyed;

DROP TABLE IF EXISTS ${db}.histogram_samples_rekeyed;

-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.histogram_samples_rekeyed
(
    id                    UUID,
    timestamp             DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    start_timestamp       Nullable(DateTime64(3, 'UTC')) CODEC(ZSTD(1)),
    count                 Float64 CODEC(Gorilla, ZSTD(1)),
    sum                   Float64 CODEC(Gorilla, ZSTD(1)),
    schema                Int32 CODEC(ZSTD(1)),
    zero_threshold        Float64 CODEC(ZSTD(1)),
    zero_count            Float64 CODEC(Gorilla, ZSTD(1)),
    positive_span_offsets Array(Int32) CODEC(ZSTD(1)),
    positive_span_lengths Array(UInt32) CODEC(ZSTD(1)),
    positive_counts       Array(Float64) CODEC(ZSTD(1)),
    negative_span_offsets Array(Int32) CODEC(ZSTD(1)),
    negative_span_lengths Array(UInt32) CODEC(ZSTD(1)),
    negative_counts       Array(Float64) CODEC(ZSTD(1)),
    reset_hint            LowCardinality(String),
    custom_values         Array(Float64) CODEC(ZSTD(1))
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(timestamp)
ORDER BY (id, timestamp)
TTL toDateTime(timestamp) + INTERVAL ${samples_ttl_days} DAY
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1;

-- reshard
INSERT INTO ${db}.histogram_samples_rekeyed (id, timestamp, start_timestamp, count, sum, schema, zero_threshold, zero_count, positive_span_offsets, positive_span_lengths, positive_counts, negative_span_offsets, negative_span_lengths, negative_counts, reset_hint, custom_values)
SELECT if(m.new = toUUID('00000000-0000-0000-0000-000000000000'), t.id, m.new), t.timestamp, t.start_timestamp, t.count, t.sum, t.schema, t.zero_threshold, t.zero_count, t.positive_span_offsets, t.positive_span_lengths, t.positive_counts, t.negative_span_offsets, t.negative_span_lengths, t.negative_counts, t.reset_hint, t.custom_values
FROM ${db}.histogram_samples AS t
ANY LEFT JOIN ${db}.series_rekey AS m ON m.old = t.id
SETTINGS distributed_foreground_insert = 1;

EXCHANGE TABLES ${db}.histogram_samples AND ${db}.histogram_samples_rekeyed;

DROP TABLE IF EXISTS ${db}.histogram_samples_rekeyed;

DROP TABLE IF EXISTS ${db}.exemplars_rekeyed;

-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.exemplars_rekeyed
(
    id        UUID,
    timestamp DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    value     Float64 CODEC(Gorilla, ZSTD(1)),
    labels    Map(String, String) CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(timestamp)
ORDER BY (id, timestamp)
TTL toDateTime(timestamp) + INTERVAL ${samples_ttl_days} DAY
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1;

-- reshard
INSERT INTO ${db}.exemplars_rekeyed (id, timestamp, value, labels)
SELECT if(m.new = toUUID('00000000-0000-0000-0000-000000000000'), t.id, m.new), t.timestamp, t.value, t.labels
FROM ${db}.exemplars AS t
ANY LEFT JOIN ${db}.series_rekey AS m ON m.old = t.id
SETTINGS distributed_foreground_insert = 1;

EXCHANGE TABLES ${db}.exemplars AND ${db}.exemplars_rekeyed;

DROP TABLE IF EXISTS ${db}.exemplars_rekeyed;

DROP TABLE IF EXISTS ${db}.sample_starts_rekeyed;

-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.sample_starts_rekeyed
(
    id              UUID,
    start_timestamp DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))
)
ENGINE = ReplacingMergeTree
ORDER BY (id, start_timestamp)
TTL toDateTime(start_timestamp) + INTERVAL ${samples_ttl_days} DAY;

-- reshard
INSERT INTO ${db}.sample_starts_rekeyed (id, start_timestamp)
SELECT if(m.new = toUUID('00000000-0000-0000-0000-000000000000'), t.id, m.new), t.start_timestamp
FROM ${db}.sample_starts AS t
ANY LEFT JOIN ${db}.series_rekey AS m ON m.old = t.id
SETTINGS distributed_foreground_insert = 1;

EXCHANGE TABLES ${db}.sample_starts AND ${db}.sample_starts_rekeyed;

DROP TABLE IF EXISTS ${db}.sample_starts_rekeyed;

DROP TABLE IF EXISTS ${db}.series_rekeyed;

-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.series_rekeyed
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

-- reshard
INSERT INTO ${db}.series_rekeyed (id, metric_name, labels, min_time, max_time)
SELECT reinterpretAsUUID(concat(substring(MD5(concat(toString(length(metric_name)), ':', metric_name, arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, toString(length(kv.2)), ':', kv.2), arraySort(kv -> kv.1, arrayZip(mapKeys(labels), mapValues(labels))))))), 1, 8), substring(MD5(arrayStringConcat(arrayMap(kv -> concat(toString(length(kv.1)), ':', kv.1, toString(length(kv.2)), ':', kv.2), arrayFilter(kv -> kv.1 IN ('__tenant__', 'instance', 'job'), arraySort(kv -> kv.1, arrayZip(mapKeys(labels), mapValues(labels))))))), 1, 8))), metric_name, labels, min_time, max_time
FROM ${db}.series
SETTINGS distributed_foreground_insert = 1;

EXCHANGE TABLES ${db}.series AND ${db}.series_rekeyed;

DROP TABLE IF EXISTS ${db}.series_rekeyed;

DROP TABLE IF EXISTS ${db}.series_rekey;
