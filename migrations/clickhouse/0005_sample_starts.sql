-- Start timestamps of float samples (remote write 2.0 `Sample.start_timestamp`: when
-- a cumulative series last started counting). They change only at a counter reset, so
-- rather than a column on every sample they are kept once per distinct value of a
-- series: (id, start_timestamp) identifies a row, and repeats collapse on merge.
-- Histograms keep theirs on each row (see 0003).
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.sample_starts
(
    id              UUID,
    start_timestamp DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))
)
ENGINE = ReplacingMergeTree
ORDER BY (id, start_timestamp)
TTL toDateTime(start_timestamp) + INTERVAL ${samples_ttl_days} DAY;
