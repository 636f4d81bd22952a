-- The ClickHouse migration of the same name has its sealing view remember keys and
-- receive times rather than whole requests; on DuckDB the receiver seals through the
-- `request_parts_sealable` view and keeps no such record, so nothing changes here.
SELECT 1;
