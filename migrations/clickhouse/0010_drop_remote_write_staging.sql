-- Remote write 1.0 is no longer decoded by ClickHouse (0008): the receiver decodes a
-- whole flush in C (warehouse/ingest/_v1_fast.c) at about twice the rate, and inserts
-- Arrow tables like every other write. The staging table and its views go.
DROP VIEW IF EXISTS ${db}.remote_write_v1_samples;
DROP VIEW IF EXISTS ${db}.remote_write_v1_series;
DROP VIEW IF EXISTS ${db}.remote_write_v1_request_parts;
DROP TABLE IF EXISTS ${db}.remote_write_v1;
