-- The ClickHouse migration of the same name changes how its sealing view finds its
-- slice; DuckDB seals in the receiver, by a view over a window of parts, unchanged.
SELECT 1;
