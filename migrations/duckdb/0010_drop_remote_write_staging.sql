-- The ClickHouse migration of the same name drops what 0008 created there; 0008
-- created nothing here.
SELECT 1;
