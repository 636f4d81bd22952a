-- The ClickHouse migration of the same name re-sorts request_parts by the minute of
-- receipt, for its sealing view's reads; DuckDB seals in the receiver, by a view over
-- the same table, and needs no change.
SELECT 1;
