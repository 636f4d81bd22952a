-- The ClickHouse migration of the same name changes the compression codecs of
-- `requests`; DuckDB chooses its own compression per column segment and needs no change.
SELECT 1;
