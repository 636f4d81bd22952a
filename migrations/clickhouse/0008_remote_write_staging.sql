-- Remote write 1.0 decoded by ClickHouse itself.
--
-- The receiver sends the decompressed WriteRequest bodies of a flush, joined byte for
-- byte (repeated fields concatenate, so they form one valid WriteRequest), in a single
-- `INSERT INTO remote_write_v1 SELECT ... FROM input(...) FORMAT ProtobufSingle`; see
-- warehouse/ingest/remote_write_native.py. The statement yields one row per float
-- sample, with the series id computed as warehouse.ingest.remote_write defines it and,
-- for samples the per-request metric mapping names, the request part fields. This
-- table keeps nothing (Null engine): the views below fan each insert out to
-- `samples`, `series` and `request_parts` as the Arrow path would have written them.
-- sharding_key: cityHash64(id)
CREATE TABLE IF NOT EXISTS ${db}.remote_write_v1
(
    id           UUID,
    metric_name  String,
    labels       Map(String, String),
    timestamp    DateTime64(3, 'UTC'),
    value        Float64,
    tenant       String,
    request_id   String,
    part_column  LowCardinality(String),
    part_value   Float64,
    part_attrs   Map(String, String)
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.remote_write_v1_samples TO ${db}.samples AS
SELECT id, timestamp, value
FROM ${db}.remote_write_v1;

-- Grouping by the labels too (which the id determines) is several times cheaper than
-- any(labels) when every sample is a new series.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.remote_write_v1_series TO ${db}.series AS
SELECT id, metric_name, labels, min(timestamp) AS min_time, max(timestamp) AS max_time
FROM ${db}.remote_write_v1
GROUP BY id, metric_name, labels;

-- The same rows as warehouse.ingest.llm_metrics.request_parts builds in Arrow.
CREATE MATERIALIZED VIEW IF NOT EXISTS ${db}.remote_write_v1_request_parts TO ${db}.request_parts AS
SELECT
    tenant,
    request_id,
    timestamp AS first_ts,
    if(part_column = 'ts', fromUnixTimestamp64Milli(toInt64(round(part_value)), 'UTC'), NULL)
        AS start_ts,
    now64(3, 'UTC') AS received,
    nullIf(labels['service'], '') AS service,
    nullIf(labels['model'], '') AS model,
    nullIf(labels['model_version'], '') AS model_version,
    nullIf(labels['region'], '') AS region,
    nullIf(labels['zone'], '') AS zone,
    nullIf(labels['node'], '') AS node,
    nullIf(labels['client_app'], '') AS client_app,
    nullIf(labels['client_os'], '') AS client_os,
    nullIf(labels['network'], '') AS network,
    nullIf(labels['ab_group'], '') AS ab_group,
    nullIf(labels['request_type'], '') AS request_type,
    nullIf(labels['finish_reason'], '') AS finish_reason,
    toUInt8(multiIf(
        part_column = 'error' AND value > 0
            AND labels['error_class'] IN ('rate_limited', 'overloaded'), 2,
        part_column = 'error' AND value > 0, 1,
        0)) AS status_rank,
    if(part_column = 'error' AND value > 0, nullIf(labels['error_class'], ''), NULL)
        AS error_class,
    if(part_column = 'http_status', toUInt16(part_value), NULL) AS http_status,
    if(part_column = 'queue_ms', toFloat32(part_value), NULL) AS queue_ms,
    if(part_column = 'ttft_ms', toFloat32(part_value), NULL) AS ttft_ms,
    if(part_column = 'e2e_ms', toFloat32(part_value), NULL) AS e2e_ms,
    if(part_column = 'tpot_ms', toFloat32(part_value), NULL) AS tpot_ms,
    if(part_column = 'itl_p99_ms', toFloat32(part_value), NULL) AS itl_p99_ms,
    if(part_column = 'prompt_tokens', toUInt32(part_value), NULL) AS prompt_tokens,
    if(part_column = 'output_tokens', toUInt32(part_value), NULL) AS output_tokens,
    if(part_column = 'cached_prompt_tokens', toUInt32(part_value), NULL) AS cached_prompt_tokens,
    if(part_column = 'max_context_tokens', toUInt32(part_value), NULL) AS max_context_tokens,
    part_attrs AS attrs
FROM ${db}.remote_write_v1
WHERE request_id != '';
