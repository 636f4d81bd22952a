-- The ClickHouse migration of the same name: series ids that begin with their scrape
-- target (the series' own hash, then its target's: warehouse/ingest/remote_write_tables.py).
-- DuckDB keeps no sorting key, so here it only rewrites the ids in place: `series` from
-- its labels, and every table keyed by series id through the map `series_rekey`. The
-- id below is the one the decoders compute (a test holds them equal): the first 8 bytes
-- of each MD5 digest, each in reversed byte order, as ClickHouse's UUID lays them out.
-- Run again after an interruption, it ends the same: the map outlives a run.
CREATE TABLE IF NOT EXISTS ${db}.series_rekey
(
    old UUID NOT NULL,
    new UUID NOT NULL
);

INSERT INTO ${db}.series_rekey
SELECT id, CAST(substr(h, 15, 2) || substr(h, 13, 2) || substr(h, 11, 2) || substr(h, 9, 2) || substr(h, 7, 2) || substr(h, 5, 2) || substr(h, 3, 2) || substr(h, 1, 2)
        || substr(t, 15, 2) || substr(t, 13, 2) || substr(t, 11, 2) || substr(t, 9, 2) || substr(t, 7, 2) || substr(t, 5, 2) || substr(t, 3, 2) || substr(t, 1, 2) AS UUID)
FROM (
    SELECT
        id,
        md5(strlen(metric_name) || ':' || metric_name
            || coalesce(array_to_string(list_transform(list_sort(map_entries(labels)),
                lambda kv: strlen(kv.key) || ':' || kv.key || strlen(kv.value) || ':' || kv.value), ''), '')) AS h,
        md5(coalesce(array_to_string(list_transform(list_filter(list_sort(map_entries(labels)),
                lambda kv: kv.key IN ('__tenant__', 'instance', 'job')),
                lambda kv: strlen(kv.key) || ':' || kv.key || strlen(kv.value) || ':' || kv.value), ''), '')) AS t
    FROM ${db}.series
);

UPDATE ${db}.samples SET id = m.new
FROM (SELECT DISTINCT old, new FROM ${db}.series_rekey) AS m
WHERE samples.id = m.old AND m.old <> m.new;

UPDATE ${db}.histogram_samples SET id = m.new
FROM (SELECT DISTINCT old, new FROM ${db}.series_rekey) AS m
WHERE histogram_samples.id = m.old AND m.old <> m.new;

UPDATE ${db}.exemplars SET id = m.new
FROM (SELECT DISTINCT old, new FROM ${db}.series_rekey) AS m
WHERE exemplars.id = m.old AND m.old <> m.new;

UPDATE ${db}.sample_starts SET id = m.new
FROM (SELECT DISTINCT old, new FROM ${db}.series_rekey) AS m
WHERE sample_starts.id = m.old AND m.old <> m.new;

UPDATE ${db}.series SET id = m.new
FROM (SELECT DISTINCT old, new FROM ${db}.series_rekey) AS m
WHERE series.id = m.old AND m.old <> m.new;

DROP TABLE IF EXISTS ${db}.series_rekey;
