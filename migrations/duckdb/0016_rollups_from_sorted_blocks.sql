-- The ClickHouse migration of the same name makes its rollup views sort each inserted
-- block before aggregating it; DuckDB's rollups are views over `requests`, computed as
-- they are read, and need no change.
SELECT 1;
