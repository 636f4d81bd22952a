"""What the embedded server's tenant reader may read: the policies written into its config."""

from __future__ import annotations

import re

from warehouse.config import Config
from warehouse.store.migrations import discover, render, template_variables
from warehouse.store.tenancy import (
    READER,
    TENANT_TABLES,
    TENANT_VIEWS,
    RollupTables,
    readable_rollups,
    users_config_xml,
)

GRAIN = """ATTACH TABLE _ UUID '1'
(
    `ts` DateTime64(3, 'UTC'),
    `tenant` LowCardinality(String),
    `requests` UInt64
)
ENGINE = AggregatingMergeTree"""
TOTAL = """ATTACH TABLE _ UUID '2'
(
    `ts` DateTime64(3, 'UTC'),
    `requests` UInt64
)
ENGINE = AggregatingMergeTree
COMMENT '{"dimensions": ["tenant"]}'"""
VIEW = """ATTACH MATERIALIZED VIEW _ UUID '3' TO llmwh.slo_chat_1a2b3c4d5e
(
    `tenant` String
) AS SELECT tenant FROM llmwh.requests"""


def test_a_tenant_reads_the_rollup_tables_that_keep_tenants_apart_only():
    found = readable_rollups({
        "slo_chat_1a2b3c4d5e": GRAIN,
        "slo_chat_1a2b3c4d5e_1h": GRAIN,
        "slo_chat_1a2b3c4d5e_1h_total": TOTAL,  # every tenant summed: never
        "slo_chat_1a2b3c4d5e_mv": VIEW,
        "requests": GRAIN,  # not a rollup: its policy is written anyway
        "slo_Chat-odd": GRAIN,  # not a name llmwh gives
    })  # fmt: skip
    assert found == RollupTables(
        ("slo_chat_1a2b3c4d5e", "slo_chat_1a2b3c4d5e_1h"), ("slo_chat_1a2b3c4d5e_mv",)
    )


def test_every_table_the_reader_may_select_carries_a_row_filter():
    xml = users_config_xml({"llmwh": RollupTables(("slo_x_1h",), ("slo_x_1h_mv",))})
    reader = xml[xml.index(f"<{READER}>") : xml.index(f"</{READER}>")]
    for table in (*TENANT_TABLES, "slo_x_1h"):
        assert f"GRANT SELECT ON `llmwh`.`{table}`" in reader
        assert f'<table name="{table}"><filter>' in reader
    for view in TENANT_VIEWS:  # read as the tenant: its tables' filters hold it
        assert f"GRANT SELECT ON `llmwh`.`{view}`" in reader
        assert f'<table name="{view}">' not in reader
    assert reader.count("<filter>") == len(TENANT_TABLES) + 1
    assert reader.count("GRANT SELECT") == len(TENANT_TABLES) + 1 + len(TENANT_VIEWS)
    assert "GRANT SHOW TABLES ON `llmwh`.`slo_x_1h_mv`" in reader


def test_a_view_the_reader_may_select_reads_as_the_reader_from_tenant_tables_only():
    # A DEFINER view would read its tables as its definer (`default`): every tenant's
    # rows (tests/integration/security/test_series_samples_view.py shows it would).
    created = {
        name: statement
        for migration in discover("clickhouse")
        for statement in render(migration.text, "clickhouse", template_variables(Config(), "w"))
        if (name := re.search(r"CREATE VIEW IF NOT EXISTS w\.(\w+)", statement))
        and (name := name.group(1))
    }
    assert set(created) == set(TENANT_VIEWS)
    for statement in created.values():
        assert "\nSQL SECURITY INVOKER\n" in statement
        read = set(re.findall(r"\bw\.(\w+)", statement.split("AS SELECT", 1)[1]))
        assert read and read <= set(TENANT_TABLES), read
