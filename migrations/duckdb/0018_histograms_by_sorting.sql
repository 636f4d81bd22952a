-- The ClickHouse migration of the same name changes how its rollup views count the
-- latency histograms; DuckDB's rollups are views over `requests`, computed as they are
-- read, and need no change.
SELECT 1;
