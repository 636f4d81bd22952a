-- Remote-written float samples with their series' labels, each sample once: the
-- `series_samples` view, as on ClickHouse (the migration of the same name there says
-- why). DuckDB keeps every row it is given, so a series rewritten every
-- series_refresh_seconds is in `series` once per rewrite, for good, and a sample that
-- two writes carried is in `samples` twice: the view groups both. Of a sample written
-- twice with different values, `any_value` keeps one of them, as remote read does here
-- (ClickHouse keeps the last written).
CREATE OR REPLACE VIEW ${db}.series_samples AS
SELECT
    sa.id AS id,
    se.tenant AS tenant,
    se.metric_name AS metric_name,
    se.labels AS labels,
    sa.timestamp AS timestamp,
    sa.value AS value
FROM (
    SELECT id, timestamp, any_value(value) AS value
    FROM ${db}.samples
    GROUP BY id, timestamp
) AS sa
INNER JOIN (
    SELECT
        id,
        any_value(metric_name) AS metric_name,
        coalesce(any_value(labels)['__tenant__'], '') AS tenant,
        map_from_entries(
            list_filter(map_entries(any_value(labels)), lambda e: e.key <> '__tenant__')
        ) AS labels
    FROM ${db}.series
    GROUP BY id
) AS se ON se.id = sa.id;
