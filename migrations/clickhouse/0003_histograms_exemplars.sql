-- Native histograms and exemplars, as remote write 1.0 and 2.0 send them.
--
-- Both key on the series id of `series` (see warehouse/ingest/remote_write.py for how
-- it is computed) and follow `samples`: day partitions, TTL from
-- ${samples_ttl_days}, ReplacingMergeTree so that a retried write replaces rather
-- than adds.
--
-- Float samples get no start_timestamp column: 1.0 never sends one, 2.0 only for
-- cumulative series, and it changes only at a counter reset; a column on every
-- float sample would grow each insert by a quarter for that; they are kept once per
-- distinct value in `sample_starts` (0005). Histograms, fewer and much wider, keep
-- theirs.

-- One row per native histogram sample. (id, timestamp) identifies it, as for float
-- samples. Integer histograms arrive as bucket deltas; they are stored resolved to
-- absolute counts (Float64, exact up to 2^53), like float histograms, so that a
-- bucket reads without a running sum. Spans are kept as sent: span k covers
-- positive_span_lengths[k] buckets starting positive_span_offsets[k] after the end
-- of span k-1 (the first offset is the first bucket's index), and positive_counts
-- lists the counts of those buckets in order; likewise for the negative side.
-- custom_values holds the bucket bounds of schema -53 (custom buckets).
-- start_timestamp is NULL when the sender gave none (1.0, or 0 on the wire in 2.0).
-- Counts and sums change slowly within a series: Gorilla, as for float samples;
-- the small integers (schema, span layout) are mostly constant per series and
-- compress to almost nothing under ZSTD.
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.histogram_samples
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

-- Exemplars: a value and labels (typically trace_id) attached to a series at a time.
-- 2.0 requires a timestamp, so (id, timestamp) identifies an exemplar and a retried
-- write replaces it. The label set is small and free-form: a Map, ZSTD-compressed.
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.exemplars
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
