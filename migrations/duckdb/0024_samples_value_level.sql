-- The ClickHouse migration of the same name changes the compression level of
-- `samples.value`; DuckDB chooses its own compression per column segment and needs no change.
SELECT 1;
