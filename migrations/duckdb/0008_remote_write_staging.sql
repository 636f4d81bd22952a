-- Remote write 1.0 decoded by ClickHouse itself (see the ClickHouse migration of the
-- same name). DuckDB cannot read protobuf: the receiver decodes every write in Python
-- and inserts Arrow tables, so there is nothing to create here.
SELECT 1;
