-- Native histograms and exemplars for DuckDB local mode: the same logical tables as
-- ClickHouse (see migrations/clickhouse/0003_histograms_exemplars.sql for what each
-- column holds). Bucket counts are absolute; spans are kept as sent.

CREATE TABLE IF NOT EXISTS ${db}.histogram_samples
(
    id                    UUID NOT NULL,
    timestamp             TIMESTAMPTZ NOT NULL,
    start_timestamp       TIMESTAMPTZ,
    count                 DOUBLE NOT NULL,
    sum                   DOUBLE NOT NULL,
    schema                INTEGER NOT NULL,
    zero_threshold        DOUBLE NOT NULL,
    zero_count            DOUBLE NOT NULL,
    positive_span_offsets INTEGER[] NOT NULL,
    positive_span_lengths UINTEGER[] NOT NULL,
    positive_counts       DOUBLE[] NOT NULL,
    negative_span_offsets INTEGER[] NOT NULL,
    negative_span_lengths UINTEGER[] NOT NULL,
    negative_counts       DOUBLE[] NOT NULL,
    reset_hint            VARCHAR NOT NULL,
    custom_values         DOUBLE[] NOT NULL
);

CREATE TABLE IF NOT EXISTS ${db}.exemplars
(
    id        UUID NOT NULL,
    timestamp TIMESTAMPTZ NOT NULL,
    value     DOUBLE NOT NULL,
    labels    MAP(VARCHAR, VARCHAR) NOT NULL
);
