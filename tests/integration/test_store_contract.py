"""What every Store promises, checked on each backend."""

import time
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from warehouse.errors import ConfigError, StoreError, StoreUnavailable
from warehouse.store import Store, open_store
from warehouse.store.migrations import Migrator
from warehouse.synthetic import synthetic_requests


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


def test_a_time_is_bound_to_the_millisecond(store):
    """A zoned time keeps its milliseconds (ClickHouse's client alone sends whole
    seconds) and its instant (sent in UTC)."""
    moment = datetime(2026, 3, 1, 9, 30, 15, 123000, tzinfo=timezone(timedelta(hours=2)))
    t = placeholder(store, "t", "DateTime64(3, 'UTC')")
    cast = "" if store.capabilities.dialect == "clickhouse" else "::TIMESTAMPTZ"
    [row] = store.query_arrow(f"SELECT {t}{cast} AS t", {"t": moment}).to_pylist()
    assert row["t"] == moment


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
    other = "2" if before == "1" else "1"
    assert setting(store, name, {name: other}) == other
    assert setting(store, name) == before


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


@pytest.mark.parametrize("method", ["zstd", "false"])
def test_the_url_chooses_http_compression(embedded_server, method):
    """Off by default on loopback (CPU for nothing), any clickhouse-connect method on demand."""
    store = open_store(f"{embedded_server.store_url('default')}?compress={method}")
    try:
        table = store.query_arrow("SELECT number FROM numbers(100000)")
        assert table.num_rows == 100000
    finally:
        store.close()


@pytest.mark.parametrize(("method", "compressed"), [("false", False), ("lz4", True)])
def test_arrow_answers_are_compressed_only_when_the_connection_is(
    embedded_server, method, compressed
):
    store = open_store(f"{embedded_server.store_url('default')}?compress={method}")
    try:
        setting = "SELECT getSetting('output_format_arrow_compression_method') AS m"
        [found] = store.query_arrow(setting).column("m").to_pylist()
        assert (found != "none") == compressed
    finally:
        store.close()


@pytest.mark.parametrize("method", ["false", "lz4", "zstd"])
def test_inserts_arrive_whole_however_the_connection_compresses(
    embedded_server, method, monkeypatch
):
    """An insert is one Arrow file: its buffers compressed when the connection is."""
    store = open_store(f"{embedded_server.store_url('default')}?compress={method}")
    sizes: list[int] = []
    send = store._client.raw_insert

    def recording(table, columns, block, *args, **options):
        sizes.append(block.size)
        return send(table, columns, block, *args, **options)

    monkeypatch.setattr(store._client, "raw_insert", recording)
    table = f"inserted_{method}"
    rows = pa.table(
        {
            "n": pa.array(range(50_000), pa.uint64()),
            "label": [f"model-{i % 7}" for i in range(50_000)],
        }
    )
    try:
        store.command(
            f"CREATE OR REPLACE TABLE default.{table} (n UInt64, label String) "
            "ENGINE = MergeTree ORDER BY n"
        )
        store.insert_arrow(table, rows)
        store.insert_arrow(table, rows.slice(0, 0))  # an empty insert adds nothing
        back = store.query_arrow(f"SELECT n, label FROM default.{table} ORDER BY n")
        assert back.to_pydict() == rows.to_pydict()
        assert (sizes[0] < rows.nbytes / 2) == (method != "false")
    finally:
        store.command(f"DROP TABLE IF EXISTS default.{table}")
        store.close()


def test_arrow_answers_in_process_are_not_compressed(chdb_path):
    store = open_store(f"chdb://{chdb_path}?database=arrow_plain")
    try:
        setting = "SELECT getSetting('output_format_arrow_compression_method') AS m"
        assert store.query_arrow(setting).column("m").to_pylist() == ["none"]
        # Calls that ask for readonly run on a session of their own: the same there.
        for level in (1, 2):
            answer = store.query_arrow(setting, settings={"readonly": level})
            assert answer.column("m").to_pylist() == ["none"]
    finally:
        store.close()


def test_an_unknown_compression_is_refused_by_name():
    with pytest.raises(ConfigError, match="compress='fast'"):
        open_store("http://127.0.0.1:1/llmwh?compress=fast")


def test_unqualified_names_resolve_in_the_warehouse_database(migrated):
    count = migrated.query_arrow("SELECT count(*) AS n FROM requests")
    assert count.column("n")[0].as_py() == 0


def test_two_in_process_stores_keep_their_own_databases(chdb_path):
    first = open_store(f"chdb://{chdb_path}?database=iso_first")
    second = open_store(f"chdb://{chdb_path}?database=iso_second")
    try:
        for store in (first, second):
            store.command(f"CREATE DATABASE IF NOT EXISTS {store.database}")
            store.command(f"CREATE TABLE {store.database}.t (who String) ENGINE = Memory")
            store.command(f"INSERT INTO {store.database}.t VALUES ('{store.database}')")
        assert first.query_arrow("SELECT who FROM t").column("who").to_pylist() == ["iso_first"]
        assert second.query_arrow("SELECT who FROM t").column("who").to_pylist() == ["iso_second"]
    finally:
        for store in (first, second):
            store.command(f"DROP DATABASE IF EXISTS {store.database}")
            store.close()


def test_duckdb_reads_time_in_utc_whatever_the_machine_zone(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30: hours split differently
    time.tzset()
    try:
        store = open_store(f"duckdb://{tmp_path / 'tz.duckdb'}")
        Migrator(store).up()
        start = datetime(2026, 1, 1, 10, 15, tzinfo=UTC)
        store.insert_arrow(
            "requests", synthetic_requests(50, seed=1, start=start, span=timedelta(minutes=30))
        )
        hours = store.query_arrow("SELECT DISTINCT ts FROM requests_1h").column("ts")
        assert [t.as_py() for t in hours] == [datetime(2026, 1, 1, 10, 0, tzinfo=UTC)]
        store.close()
    finally:
        monkeypatch.undo()
        time.tzset()


def test_request_rows_land_as_sent_whatever_their_chunks_hold(migrated):
    # Each chunk of a column brings labels the others lack: ClickHouse stores receive
    # label columns as Arrow dictionaries, one dictionary shared by every chunk.
    first, second = synthetic_requests(30, seed=8), synthetic_requests(30, seed=9)
    second = second.set_column(
        second.schema.get_field_index("tenant"),
        "tenant",
        pa.array([f"only-in-second-{i % 4}" for i in range(30)]),
    )
    second = second.set_column(
        second.schema.get_field_index("zone"), "zone", pa.array([""] * 15 + ["z-é"] * 15)
    )
    rows = pa.concat_tables([first, second.cast(first.schema)])
    assert rows.column("tenant").num_chunks == 2
    migrated.insert_arrow("requests", rows)
    columns = ["request_id", "tenant", "zone", "model", "status", "error_class"]
    back = migrated.query_arrow(
        f"SELECT {', '.join(columns)} FROM {migrated.database}.requests ORDER BY request_id"
    )
    sent = rows.select(columns).sort_by("request_id")
    assert back.to_pylist() == sent.to_pylist()


def test_clickhouse_stores_send_label_columns_as_dictionaries(migrated, monkeypatch):
    if migrated.capabilities.dialect != "clickhouse":
        pytest.skip("DuckDB reads the Arrow table in process; nothing is sent")
    sent: list[pa.Schema] = []
    client = migrated._client
    send = client.raw_insert

    def recording(table, columns, block, *args, **options):
        sent.append(pa.ipc.open_file(block).schema)  # the Arrow file the server reads
        return send(table, columns, block, *args, **options)

    monkeypatch.setattr(client, "raw_insert", recording)
    # With a token, chdb inserts through the client too (its Python() path is for bulk rows).
    migrated.insert_arrow("requests", synthetic_requests(10, seed=2), dedup_token="labels")
    [schema] = sent
    assert pa.types.is_dictionary(schema.field("tenant").type)
    assert pa.types.is_dictionary(schema.field("finish_reason").type)
    assert schema.field("request_id").type == pa.string()  # a String column, not LowCardinality


def test_a_deduplication_token_makes_a_second_insert_a_no_op(migrated):
    rows = synthetic_requests(20, seed=3)
    migrated.insert_arrow("requests", rows, dedup_token="body-1")
    migrated.insert_arrow("requests", rows, dedup_token="body-1")
    migrated.insert_arrow("requests", rows.slice(0, 5), dedup_token="body-2")
    count = migrated.query_arrow(f"SELECT count(*) AS n FROM {migrated.database}.requests")
    assert count.column("n")[0].as_py() == 25


def test_a_deduplication_token_is_data_never_sql(migrated):
    rows = synthetic_requests(4, seed=5)
    token = "it's a \\'token\\"
    migrated.insert_arrow("requests", rows, dedup_token=token)
    migrated.insert_arrow("requests", rows, dedup_token=token)
    migrated.insert_arrow("requests", rows, dedup_token=token + "'")
    count = migrated.query_arrow(f"SELECT count(*) AS n FROM {migrated.database}.requests")
    assert count.column("n")[0].as_py() == 8


def test_duckdb_forgets_tokens_after_a_day(tmp_path):
    store = open_store(f"duckdb://{tmp_path / 'tokens.duckdb'}")
    Migrator(store).up()
    rows = synthetic_requests(3, seed=4)
    store.insert_arrow("requests", rows, dedup_token="old")
    store.command("UPDATE insert_tokens SET inserted_at = now() - INTERVAL 2 DAY")
    store.insert_arrow("requests", rows, dedup_token="new")
    tokens = store.query_arrow("SELECT token FROM insert_tokens").column("token").to_pylist()
    assert tokens == ["requests:new"]
    store.close()
