-- Remote-written float samples with their series' labels, each sample once whatever the
-- merge state: the view `series_samples` (docs/remote-write.md, "Reading samples in SQL").
--
-- Joined as they are, `samples` and `series` answer in multiples until ClickHouse has
-- merged them: a series' row is written again every series_refresh_seconds (and by every
-- receiver that sees it), and `series` (AggregatingMergeTree) collapses those rows only
-- when it merges; a sample that two writes carried (a retry) is twice in `samples`
-- (ReplacingMergeTree) until then. So the view reads both with FINAL: each series once
-- (its labels depend on its id alone), and of a repeated sample the row a merge keeps
-- (the last written), as remote read does.
--
-- Columns: `id` (the series id), `tenant` (the `__tenant__` label; '' in single-tenant
-- mode), `metric_name`, `labels` (every other label, without `__name__` and
-- `__tenant__`), `timestamp`, `value`. A filter on `metric_name` or `timestamp` reaches
-- the tables' sorting keys; one on `labels` is applied to the series before the join.
--
-- Measured with benchmarks/series_samples.py (chdb, the embedded server's engine: 100k
-- series written twice and unmerged, 100 samples each, a tenth of them twice; median of
-- 11, the candidates taking turns, on the 2-core machine under other load, 7-10), each
-- sample counted once by every candidate. Series side, FINAL against grouped by
-- (metric_name, id) with any(labels), the samples FINAL:
--   all samples 2.0 s / 2.2 s; one metric's newest values 2.9 s / 2.6 s;
--   one label value over 5 min 1.3 s / 2.3 s; one tenant's sum 2.9 s / 4.4 s.
-- Samples side grouped by (id, timestamp) with any(value) instead of FINAL, the series
-- FINAL: 3.1 s, 1.6 s, 0.9 s, 1.8 s. Grouping would pick any of a repeated sample's
-- values where FINAL picks the one a merge keeps, so the view keeps FINAL and its cost.
--
-- SQL SECURITY INVOKER: a tenant reads the view as itself, so the row policies of
-- `samples` and `series` hold it to its own samples (warehouse/store/tenancy.py,
-- TENANT_VIEWS); a DEFINER view would read them as the user that created it.
-- sharding_key: cityHash64(id)
CREATE VIEW IF NOT EXISTS ${db}.series_samples
SQL SECURITY INVOKER
AS SELECT
    sa.id AS id,
    se.series_tenant AS tenant,
    se.metric_name AS metric_name,
    se.series_labels AS labels,
    sa.timestamp AS timestamp,
    sa.value AS value
FROM ${db}.samples AS sa FINAL
INNER JOIN (
    -- Aliases apart from the columns: ClickHouse would read `labels` as an alias.
    SELECT
        id,
        metric_name,
        labels['__tenant__'] AS series_tenant,
        mapFilter((name, value) -> name != '__tenant__', labels) AS series_labels
    FROM ${db}.series FINAL
) AS se ON se.id = sa.id;
