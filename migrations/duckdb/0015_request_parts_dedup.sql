-- The ClickHouse migration of the same name gives request_parts a deduplication window
-- for retried inserts; DuckDB keeps every insert's token in a table of its own for all
-- tables (warehouse/store/duckdb.py) and needs no change.
SELECT 1;
