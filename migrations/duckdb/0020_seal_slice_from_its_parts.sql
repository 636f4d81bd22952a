-- The ClickHouse migration of the same name changes how its sealing view finds the
-- requests to seal; DuckDB seals from the receiver through the
-- `request_parts_sealable` view, so nothing changes here.
SELECT 1;
