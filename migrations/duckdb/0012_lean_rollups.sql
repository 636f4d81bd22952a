-- The rollups of ClickHouse's migration of the same name (see there for why), as views
-- computed at query time like DuckDB's other rollups: per minute over the SLA
-- dimensions, per hour over all nine, per hour over the SLA dimensions. Each latency
-- keeps its sum and one histogram keyed bucket * 2 + ok; no t-digest states, no counts.

CREATE OR REPLACE VIEW ${db}.requests_1m AS
SELECT
    date_trunc('minute', ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ALL;

CREATE OR REPLACE VIEW ${db}.requests_1h AS
SELECT
    date_trunc('hour', ts) AS ts,
    tenant, service, model, model_version, region, zone, ab_group, request_type, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ALL;

CREATE OR REPLACE VIEW ${db}.requests_sla_1h AS
SELECT
    date_trunc('hour', ts) AS ts, tenant, service, model, region, is_probe,
    ${rollup:requests}
FROM ${db}.requests
GROUP BY ALL;

DROP MACRO TABLE IF EXISTS ${db}.requests_rollup;
