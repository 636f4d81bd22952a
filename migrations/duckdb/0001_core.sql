-- Core schema for DuckDB local mode: the same logical tables as ClickHouse.
-- ${db} is a DuckDB schema, so `llmwh.requests` names the table on both backends.
-- DuckDB has no TTL, codecs or sort keys in DDL: it compresses column segments
-- itself and keeps zone maps per row group; retention is the caller's business.
-- Timestamps are TIMESTAMPTZ read in UTC (the store sets TimeZone = 'UTC').

CREATE SCHEMA IF NOT EXISTS ${db};

CREATE TABLE IF NOT EXISTS ${db}.requests
(
    ts                   TIMESTAMPTZ NOT NULL,
    request_id           VARCHAR NOT NULL,
    tenant               VARCHAR NOT NULL DEFAULT '',
    service              VARCHAR NOT NULL DEFAULT '',
    model                VARCHAR NOT NULL DEFAULT '',
    model_version        VARCHAR NOT NULL DEFAULT '',
    region               VARCHAR NOT NULL DEFAULT '',
    zone                 VARCHAR NOT NULL DEFAULT '',
    node                 VARCHAR NOT NULL DEFAULT '',
    client_app           VARCHAR NOT NULL DEFAULT '',
    client_os            VARCHAR NOT NULL DEFAULT '',
    network              VARCHAR NOT NULL DEFAULT '',
    ab_group             VARCHAR NOT NULL DEFAULT '',
    request_type         VARCHAR NOT NULL DEFAULT '',
    status               VARCHAR NOT NULL CHECK (status IN ('ok', 'error', 'rejected')),
    error_class          VARCHAR NOT NULL DEFAULT '',
    http_status          USMALLINT NOT NULL DEFAULT 0,
    finish_reason        VARCHAR NOT NULL DEFAULT '',
    is_probe             BOOLEAN NOT NULL DEFAULT false,
    queue_ms             FLOAT CHECK (queue_ms >= 0 AND isfinite(queue_ms)),
    ttft_ms              FLOAT CHECK (ttft_ms >= 0 AND isfinite(ttft_ms)),
    e2e_ms               FLOAT CHECK (e2e_ms >= 0 AND isfinite(e2e_ms)),
    tpot_ms              FLOAT CHECK (tpot_ms >= 0 AND isfinite(tpot_ms)),
    itl_p99_ms           FLOAT CHECK (itl_p99_ms >= 0 AND isfinite(itl_p99_ms)),
    prompt_tokens        UINTEGER,
    output_tokens        UINTEGER,
    cached_prompt_tokens UINTEGER,
    max_context_tokens   UINTEGER,
    consistency_score    FLOAT,
    hallucination        FLOAT,
    attrs                MAP(VARCHAR, VARCHAR) NOT NULL DEFAULT MAP {},
    CONSTRAINT cached_within_prompt CHECK (cached_prompt_tokens <= prompt_tokens)
);

CREATE TABLE IF NOT EXISTS ${db}.series
(
    id          UUID NOT NULL,
    metric_name VARCHAR NOT NULL,
    labels      MAP(VARCHAR, VARCHAR) NOT NULL,
    min_time    TIMESTAMPTZ NOT NULL,
    max_time    TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS ${db}.samples
(
    id        UUID NOT NULL,
    timestamp TIMESTAMPTZ NOT NULL,
    value     DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS ${db}.metric_metadata
(
    metric_family_name VARCHAR NOT NULL,
    type               VARCHAR NOT NULL DEFAULT '',
    unit               VARCHAR NOT NULL DEFAULT '',
    help               VARCHAR NOT NULL DEFAULT '',
    updated_at         TIMESTAMPTZ NOT NULL
);
