"""`llmwh migrate` on every store: from empty, idempotent, refusing edited files."""

import shutil

import pytest

from warehouse.config import Config
from warehouse.errors import ChecksumMismatch
from warehouse.store.migrations import Migrator, migrations_dir
from warehouse.store.retention import sync_ttls

TABLES = {
    "requests",
    "series",
    "samples",
    "metric_metadata",
    "histogram_samples",
    "exemplars",
    "requests_1m",
    "requests_1h",
    "requests_sla_1h",
    "request_parts",
    "sample_starts",
    "schema_migrations",
}


def table_names(store):
    result = store.query_arrow(
        f"SELECT table_name FROM information_schema.tables WHERE table_schema = '{store.database}'"
    )
    return set(result.column("table_name").to_pylist())


def table_definition(store, table, column):
    """A ``system.tables`` column (``engine_full``, ``create_table_query``) of ``table``."""
    found = store.query_arrow(
        f"SELECT {column} AS found FROM system.tables "
        "WHERE database = {db:String} AND name = {table:String}",
        {"db": store.database, "table": table},
    )
    return found.column("found")[0].as_py()


def column_codecs(store, table):
    """Each column of ``table`` and its ``CODEC(...)`` ("" for the default)."""
    found = store.query_arrow(
        "SELECT name, compression_codec FROM system.columns "
        "WHERE database = {db:String} AND table = {table:String}",
        {"db": store.database, "table": table},
    ).to_pylist()
    return {c["name"]: c["compression_codec"] for c in found}


def test_migrating_from_empty_applies_every_file_in_order(store):
    migrator = Migrator(store)
    assert {s.state for s in migrator.status()} == {"pending"}

    applied = migrator.up()

    assert [m.version for m in applied] == sorted(m.version for m in migrator.migrations)
    assert {s.state for s in migrator.status()} == {"applied"}
    assert table_names(store) >= TABLES


def test_status_and_plan_create_nothing(store):
    Migrator(store).status()
    Migrator(store).pending()
    schemata = store.query_arrow(
        "SELECT count(*) AS n FROM information_schema.schemata "
        f"WHERE schema_name = '{store.database}'"
    )
    assert schemata.column("n")[0].as_py() == 0


def test_running_up_again_changes_nothing(migrated):
    before = migrated.query_arrow(
        f"SELECT version, applied_at FROM {migrated.database}.schema_migrations ORDER BY version"
    )
    assert Migrator(migrated).up() == []
    after = migrated.query_arrow(
        f"SELECT version, applied_at FROM {migrated.database}.schema_migrations ORDER BY version"
    )
    assert after.equals(before)


def test_an_edited_applied_migration_is_refused(store, tmp_path):
    root = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), root)
    Migrator(store, root=root).up()
    dialect = store.capabilities.dialect
    edited = sorted((root / dialect).glob("0001_*.sql"))[0]
    edited.write_text(edited.read_text() + "\n-- an afterthought\n")

    migrator = Migrator(store, root=root)
    assert migrator.status()[0].state == "changed"
    with pytest.raises(ChecksumMismatch, match=edited.name):
        migrator.up()


def test_a_new_migration_file_is_applied_on_top(store, tmp_path):
    root = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), root)
    Migrator(store, root=root).up()
    dialect = store.capabilities.dialect
    column = "String" if dialect == "clickhouse" else "VARCHAR"
    (root / dialect / "0099_note.sql").write_text(
        f"ALTER TABLE ${{db}}.metric_metadata ADD COLUMN IF NOT EXISTS note {column};\n"
    )
    applied = Migrator(store, root=root).up()
    assert [(m.version, m.name) for m in applied] == [(99, "note")]
    names = store.query_arrow(
        f"SELECT * FROM {store.database}.metric_metadata LIMIT 0"
    ).column_names
    assert "note" in names


def test_changed_ttl_settings_are_applied_by_the_next_up(migrated):
    if not migrated.capabilities.ttl:
        assert sync_ttls(migrated, Config(requests_ttl_days=7)) == []
        return
    assert sync_ttls(migrated, Config()) == []
    changes = sync_ttls(migrated, Config(requests_ttl_days=7, rollup_1h_ttl_days=90))
    assert {(c.table, c.old_days, c.new_days) for c in changes} == {
        ("requests", 90, 7),
        ("requests_1h", 400, 90),
        ("requests_sla_1h", 400, 90),
    }
    engine = table_definition(migrated, "requests", "engine_full")
    assert "TTL toDateTime(ts) + toIntervalDay(7)" in engine
    assert sync_ttls(migrated, Config(requests_ttl_days=7, rollup_1h_ttl_days=90)) == []


def test_samples_keep_the_codecs_chosen_by_measurement(migrated):
    """0022, 0023 and 0024: the codecs and compressed block size that
    benchmarks/bytes_per_sample.py chose (docs/benchmarks.md, "Bytes per sample"); every
    one lossless, as the store contract's bit-exact test checks."""
    if migrated.capabilities.dialect != "clickhouse":
        pytest.skip("DuckDB chooses its own compression")
    assert column_codecs(migrated, "samples") == {
        "id": "CODEC(ZSTD(1))",
        "timestamp": "CODEC(Delta(8), ZSTD(9))",
        "value": "CODEC(Delta(8), ZSTD(11))",
    }
    create = table_definition(migrated, "samples", "create_table_query")
    assert "min_compress_block_size = 1048576, max_compress_block_size = 1048576" in create


def test_requests_keep_the_codecs_chosen_by_measurement(migrated):
    """0025: the codecs measured on `llmwh compare --rows 10000000`'s requests
    (docs/benchmarks.md, "`requests`"), every one lossless; the rest as 0001 left them."""
    if migrated.capabilities.dialect != "clickhouse":
        pytest.skip("DuckDB chooses its own compression")
    found = column_codecs(migrated, "requests")
    labels = (
        "model_version", "node", "client_app", "client_os", "network", "ab_group",
        "request_type", "status", "error_class", "finish_reason",
    )  # fmt: skip
    assert found["ts"] == "CODEC(Delta(8), ZSTD(1))"
    assert found["request_id"] == "CODEC(ZSTD(1))"
    for name in (*labels, "queue_ms", "ttft_ms", "e2e_ms", "tpot_ms", "itl_p99_ms"):
        assert found[name] == "CODEC(ZSTD(1))", name
    assert found["attrs"] == "CODEC(ZSTD(3))"
    for name in ("tenant", "service", "model", "region", "zone", "is_probe"):
        assert found[name] == "", name
