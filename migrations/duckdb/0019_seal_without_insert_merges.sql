-- The ClickHouse migration of the same name gives its sealing view's refresh the
-- insert settings the receiver's own inserts use; DuckDB seals from the receiver
-- through the `request_parts_sealable` view, so nothing changes here.
SELECT 1;
