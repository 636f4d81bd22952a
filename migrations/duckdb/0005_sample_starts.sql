-- Start timestamps of float samples, once per distinct value of a series (see the
-- ClickHouse file).

CREATE TABLE IF NOT EXISTS ${db}.sample_starts
(
    id              UUID NOT NULL,
    start_timestamp TIMESTAMPTZ NOT NULL
);
