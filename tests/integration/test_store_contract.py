"""What every Store promises, checked on each backend."""

import pyarrow as pa
import pytest

from warehouse.errors import StoreError, StoreUnavailable
from warehouse.store import Store, open_store


def placeholder(store: Store, name: str, clickhouse_type: str) -> str:
    if store.capabilities.dialect == "clickhouse":
        return f"{{{name}:{clickhouse_type}}}"
    return f"${name}"


def test_parameters_are_bound_by_the_database_never_spliced(store):
    hostile = "x'; DROP TABLE t; --"
    v, n = placeholder(store, "v", "String"), placeholder(store, "n", "Int64")
    sql = f"SELECT {v} AS v, {n} + 1 AS n"
    row = store.query_arrow(sql, {"v": hostile, "n": 41}).to_pylist()[0]
    assert row == {"v": hostile, "n": 42}


def test_database_errors_carry_the_databases_own_message(store):
    with pytest.raises(StoreError) as caught:
        store.query_arrow("SELECT no_such_column FROM (SELECT 1 AS a)")
    assert "no_such_column" in caught.value.database_message
    assert "no_such_column" in str(caught.value)


def setting(store: Store, name: str, settings: dict | None = None):
    if store.capabilities.dialect == "clickhouse":
        sql = f"SELECT toString(getSetting('{name}')) AS v"
    else:
        sql = f"SELECT current_setting('{name}')::VARCHAR AS v"
    return store.query_arrow(sql, settings=settings).column("v")[0].as_py()


def test_per_query_settings_apply_to_that_query_only(store):
    name = "max_threads" if store.capabilities.dialect == "clickhouse" else "threads"
    before = setting(store, name)
    assert setting(store, name, {name: 1}) == "1"
    assert setting(store, name) == before != "1"


def test_readonly_queries_refuse_writes_and_leave_the_session_writable(migrated):
    if migrated.capabilities.dialect != "clickhouse":
        pytest.skip("DuckDB is made read-only per connection, not per query")
    table = f"{migrated.database}.metric_metadata"
    with pytest.raises(StoreError, match="readonly"):
        migrated.query_arrow(
            f"INSERT INTO {table} (metric_family_name) VALUES ('x')", settings={"readonly": 1}
        )
    migrated.command(f"INSERT INTO {table} (metric_family_name) VALUES ('y')")
    assert setting(migrated, "readonly") == "0"


def test_insert_then_query_round_trips_arrow(migrated):
    rows = pa.table(
        {
            "metric_family_name": ["llm_request_ttft_seconds"],
            "type": ["histogram"],
            "unit": ["seconds"],
            "help": ["Time to first token"],
            "updated_at": pa.array([1_700_000_000_000], pa.timestamp("ms", tz="UTC")),
        }
    )
    migrated.insert_arrow("metric_metadata", rows)
    back = migrated.query_arrow(
        f"SELECT metric_family_name, type, unit, help FROM {migrated.database}.metric_metadata"
    )
    assert back.to_pylist() == [
        {
            "metric_family_name": "llm_request_ttft_seconds",
            "type": "histogram",
            "unit": "seconds",
            "help": "Time to first token",
        }
    ]


def test_an_unreachable_server_is_store_unavailable():
    with pytest.raises(StoreUnavailable, match="unreachable"):
        open_store("http://127.0.0.1:1/llmwh?connect_timeout=2")
