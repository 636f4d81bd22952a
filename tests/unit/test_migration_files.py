"""Migration files: naming, templating and statement splitting, without a database."""

import pytest

from warehouse.config import Config
from warehouse.errors import MigrationError
from warehouse.store.migrations import discover, render, split_statements, template_variables


def test_both_backends_have_the_same_migration_versions_and_names():
    clickhouse = [(m.version, m.name) for m in discover("clickhouse")]
    duckdb = [(m.version, m.name) for m in discover("duckdb")]
    assert clickhouse == duckdb
    assert [v for v, _ in clickhouse] == list(range(1, len(clickhouse) + 1))


def test_ttl_settings_reach_the_ddl():
    text = discover("clickhouse")[0].text
    statements = render(text, "clickhouse", template_variables(Config(requests_ttl_days=7), "w"))
    requests_ddl = next(s for s in statements if "w.requests\n" in s)
    assert "INTERVAL 7 DAY" in requests_ddl


def test_unknown_placeholders_are_refused():
    with pytest.raises(MigrationError, match="unknown template variable"):
        render("SELECT ${nope}", "clickhouse", {})
    with pytest.raises(MigrationError, match="unknown macro"):
        render("SELECT ${nope:x}", "duckdb", {})


def test_misnamed_files_are_refused(tmp_path):
    (tmp_path / "clickhouse").mkdir()
    (tmp_path / "clickhouse" / "1_init.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_name\.sql"):
        discover("clickhouse", tmp_path)


def test_statements_split_on_semicolons_outside_strings_and_comments():
    sql = """
    -- a comment; with a semicolon
    CREATE TABLE t (s String DEFAULT 'a;b');
    -- sharding_key: cityHash64(x)
    INSERT INTO t VALUES ('it''s; fine');
    /* a block comment; with a semicolon */
    -- trailing comment only
    """
    statements = split_statements(sql)
    assert len(statements) == 2
    assert statements[0].endswith("DEFAULT 'a;b')")
    assert statements[1].startswith("-- sharding_key: cityHash64(x)")


class _RecordedStore:
    """Just enough of a ClickHouse store for `Migrator.status`: recorded checksums."""

    def __init__(self, records):
        from warehouse.store.clickhouse import SERVER

        self.capabilities, self.database, self.url = SERVER, "w", "fake://"
        self._records = records

    def query_arrow(self, sql, parameters=None, settings=None):
        import pyarrow as pa

        if "information_schema" in sql:
            return pa.table({"n": [1]})
        return pa.table(
            {
                "version": list(self._records),
                "name": [m.name for m in discover("clickhouse") if m.version in self._records],
                "checksum": list(self._records.values()),
                "applied_at": [None] * len(self._records),
            }
        )


def test_a_comment_only_edit_of_an_applied_migration_is_not_a_change():
    from warehouse.store.migrations import COMMENT_ONLY_EDITS, Migrator

    (earlier,) = COMMENT_ONLY_EDITS[("clickhouse", 4)]
    current = discover("clickhouse")[3]
    assert current.version == 4 and current.checksum != earlier
    states = {
        s.version: s.state
        for s in Migrator(_RecordedStore({4: earlier, 5: "0" * 64})).status()
        if s.version in (4, 5)
    }
    assert states == {4: "applied", 5: "changed"}
