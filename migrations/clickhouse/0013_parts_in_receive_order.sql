-- request_parts in receive order: a refresh of the sealing view reads the parts received
-- in its slice and window by the primary key, instead of scanning every part of the day.
--
-- 0011 sorted the parts by (tenant, request_id), so that a retried write collapsed into
-- the row it repeats, and relied on a min-max index on `received` to skip older parts.
-- But merges interleave the receive times of the parts they merge, so after a few
-- minutes every granule of a merged part spans most of the day and the index skips
-- nothing: under sustained per-request remote write (benchmarks/sealing.py) a refresh
-- read every part received that day, twice, to seal five seconds' worth (4.2M rows read
-- for 248k sealed 90 s into a run, and more each minute).
--
-- Now the minute of receipt leads the sorting key. Reads by receive time use the
-- primary index (a window of a minute reads a few granules, however long the table
-- has grown), and a retried write still collapses into the row it repeats when it comes
-- within the same minute. Parts of one request in different minutes stay separate rows
-- until sealing groups them, as they already were when they came in different flushes.
SYSTEM STOP VIEW ${db}.request_parts_seal;
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.request_parts_next AS ${db}.request_parts
ENGINE = AggregatingMergeTree
PARTITION BY toDate(received)
ORDER BY (toStartOfMinute(received), tenant, request_id)
TTL toDateTime(received) + INTERVAL 2 DAY
SETTINGS ttl_only_drop_parts = 1;
INSERT INTO ${db}.request_parts_next SELECT * FROM ${db}.request_parts;
DROP TABLE IF EXISTS ${db}.request_parts;
-- sharding_key: cityHash64(request_id)
CREATE TABLE IF NOT EXISTS ${db}.request_parts AS ${db}.request_parts_next
ENGINE = AggregatingMergeTree
PARTITION BY toDate(received)
ORDER BY (toStartOfMinute(received), tenant, request_id)
TTL toDateTime(received) + INTERVAL 2 DAY
SETTINGS ttl_only_drop_parts = 1;
INSERT INTO ${db}.request_parts SELECT * FROM ${db}.request_parts_next;
DROP TABLE IF EXISTS ${db}.request_parts_next;
SYSTEM START VIEW ${db}.request_parts_seal;
