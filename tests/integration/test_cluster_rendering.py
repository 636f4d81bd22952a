"""`migrate plan --cluster`: every statement parses in ClickHouse and the engines are right.

No Keeper runs here, so ON CLUSTER DDL cannot execute; ClickHouse's own parser
(`formatQuery`) checks each rendered statement instead.
"""

import re

import pytest
from test_migrations import TABLES

from warehouse import dialects
from warehouse.config import Config
from warehouse.errors import MigrationError
from warehouse.query.slo import load_slo
from warehouse.query.slo_rollup import SloRollup
from warehouse.store import open_store
from warehouse.store.cluster_ddl import render_for_cluster
from warehouse.store.migrations import discover, render, template_variables


@pytest.fixture(scope="module")
def rendered() -> list[str]:
    variables = template_variables(Config(), "llmwh")
    statements = [
        s for m in discover("clickhouse") for s in render(m.text, "clickhouse", variables)
    ]
    return render_for_cluster(statements, "c2", "llmwh")


@pytest.fixture(scope="module")
def parser(chdb_path):
    store = open_store(f"chdb://{chdb_path}")

    def format_query(sql: str) -> str:
        result = store.query_arrow("SELECT formatQuery({sql:String}) AS q", {"sql": sql})
        return result.column("q")[0].as_py()

    return format_query


def test_every_rendered_statement_is_accepted_by_clickhouse_parser(rendered, parser):
    for statement in rendered:
        formatted = parser(statement)
        # SYSTEM ... VIEW takes no ON CLUSTER, and each shard runs a backfill INSERT over
        # its own local tables; every other statement runs on the whole cluster.
        if not formatted.startswith(("SYSTEM", "INSERT")):
            assert "ON CLUSTER c2" in formatted


def test_every_mergetree_table_becomes_replicated_local_plus_distributed(rendered, parser):
    local = {}
    distributed = {}
    for statement in map(parser, rendered):
        if m := re.search(
            r"CREATE TABLE IF NOT EXISTS llmwh\.(\w+)_local ON CLUSTER c2", statement
        ):
            local[m.group(1)] = statement
        elif m := re.search(r"CREATE TABLE IF NOT EXISTS llmwh\.(\w+) ON CLUSTER c2", statement):
            distributed[m.group(1)] = statement
    # A view's Distributed table is over views on the shards (test below), not tables.
    distributed.pop("series_samples")
    # Every table the migrations create (0008's staging table too, which 0010 drops, and
    # the copy of request_parts while 0011 and 0013 rebuild it, and what sealing remembers), less
    # the bookkeeping one the migrator owns.
    created = {"remote_write_v1", "request_parts_next", "sealed_requests", "sealed", "sealed_keys"}
    # 0023 rewrites every table keyed by series id into a copy, through a map of the ids.
    rekeyed = ("samples", "histogram_samples", "exemplars", "sample_starts", "series")
    created |= {f"{t}_rekeyed" for t in rekeyed} | {"series_rekey"}
    assert set(local) == set(distributed) == TABLES - {"schema_migrations"} | created
    # A Null table stays Null on every node: it keeps nothing to replicate.
    assert "ENGINE = `Null`" in local.pop("remote_write_v1")
    assert "ENGINE = `Null`" in local.pop("sealed")
    assert "remote_write_v1_local, cityHash64(id))" in distributed["remote_write_v1"]
    drops = [s for s in map(parser, rendered) if s.startswith("DROP TABLE")]
    # 0011 and 0013 rebuild request_parts through a copy.
    rebuild_parts = [
        f"DROP TABLE IF EXISTS llmwh.{table}{suffix} ON CLUSTER c2"
        for table in ("request_parts", "request_parts_next")
        for suffix in ("", "_local")
    ]
    assert drops == [
        "DROP TABLE IF EXISTS llmwh.remote_write_v1 ON CLUSTER c2",
        "DROP TABLE IF EXISTS llmwh.remote_write_v1_local ON CLUSTER c2",
        *rebuild_parts,
        *(
            f"DROP TABLE IF EXISTS llmwh.{table}{suffix} ON CLUSTER c2"
            for table in ("requests_sla_1h", "requests_1h", "requests_1m")
            for suffix in ("", "_local")
        ),
        *rebuild_parts,
        # 0017: sealing remembers keys, no longer whole requests.
        "DROP TABLE IF EXISTS llmwh.sealed_requests ON CLUSTER c2",
        "DROP TABLE IF EXISTS llmwh.sealed_requests_local ON CLUSTER c2",
        *(
            f"DROP TABLE IF EXISTS llmwh.{table}_rekeyed{suffix} ON CLUSTER c2"
            for table in rekeyed
            for _ in ("before", "after the swap")
            for suffix in ("", "_local")
        ),
        "DROP TABLE IF EXISTS llmwh.series_rekey ON CLUSTER c2",
        "DROP TABLE IF EXISTS llmwh.series_rekey_local ON CLUSTER c2",
    ]
    # A copy swapped in keeps its Keeper path under the live name: a path of its own.
    for table in rekeyed:
        assert "'/clickhouse/tables/{uuid}/{shard}', '{replica}'" in local.pop(f"{table}_rekeyed")
    for table, statement in local.items():
        engine = re.search(
            r"ENGINE = (Replicated\w*MergeTree)\('([^']*)', '([^']*)'(.*?)\)\n", statement
        )
        assert engine, statement
        assert engine.group(2) == f"/clickhouse/tables/{{shard}}/llmwh/{table}_local"
        assert engine.group(3) == "{replica}"
    assert "ReplicatedReplacingMergeTree(" in local["metric_metadata"]
    assert local["metric_metadata"].split("ENGINE = ")[1].split(")")[0].endswith("updated_at")
    assert "ReplicatedAggregatingMergeTree(" in local["requests_1m"]
    assert "AS llmwh.requests_1m_local" in local["requests_sla_1h"]
    assert (
        "Distributed(c2, llmwh, requests_local, cityHash64(request_id))" in distributed["requests"]
    )
    assert "Distributed(c2, llmwh, samples_local, cityHash64(id))" in distributed["samples"]


def test_a_view_over_tables_of_one_sharding_key_joins_on_each_shard(rendered, parser):
    # series_samples joins samples to series, both sharded by cityHash64(id): each
    # shard's view joins its own local tables, and a Distributed table asks every shard.
    (view,) = [parser(s) for s in rendered if "VIEW IF NOT EXISTS llmwh.series_samples_local" in s]
    assert view.startswith("CREATE VIEW IF NOT EXISTS llmwh.series_samples_local ON CLUSTER c2")
    assert "SQL SECURITY INVOKER" in view
    assert "FROM llmwh.samples_local AS sa" in view and "FROM llmwh.series_local" in view
    assert "llmwh.samples " not in view and "llmwh.series\n" not in view
    (distributed,) = [
        parser(s) for s in rendered if "TABLE IF NOT EXISTS llmwh.series_samples " in s
    ]
    assert distributed == (
        "CREATE TABLE IF NOT EXISTS llmwh.series_samples ON CLUSTER c2 AS "
        "llmwh.series_samples_local\nENGINE = Distributed(c2, llmwh, series_samples_local, "
        "cityHash64(id))"
    )


def test_dropping_such_a_view_drops_its_distributed_table_and_each_shards_view():
    variables = template_variables(Config(), "llmwh")
    every = [s for m in discover("clickhouse") for s in render(m.text, "clickhouse", variables)]
    dropped = render_for_cluster(
        ["DROP VIEW IF EXISTS llmwh.series_samples SYNC"], "c2", "llmwh", context=every
    )
    assert dropped == [  # DROP VIEW refuses a Distributed table ("is not a View")
        "DROP TABLE IF EXISTS llmwh.series_samples ON CLUSTER c2 SYNC",
        "DROP VIEW IF EXISTS llmwh.series_samples_local ON CLUSTER c2 SYNC",
    ]


def test_materialized_views_read_and_write_local_tables(rendered, parser):
    views = {
        view: parser(statement)
        for statement in rendered
        if (view := re.search(r"MATERIALIZED VIEW IF NOT EXISTS llmwh\.(\w+)", statement))
        and (view := view.group(1))
    }
    assert set(views) == {
        "requests_1m_mv",
        "requests_1h_mv",
        "requests_sla_1h_mv",
        "request_parts_seal",
        "sealed_requests_copy",
        "sealed_into_requests",
        "sealed_into_keys",
        "remote_write_v1_samples",
        "remote_write_v1_series",
        "remote_write_v1_request_parts",
    }
    for target in ("samples", "series", "request_parts"):
        view = views[f"remote_write_v1_{target}"]
        assert f"TO llmwh.{target}_local" in view and "FROM llmwh.remote_write_v1_local" in view
    minute, hour, seal = (
        views["requests_1m_mv"],
        views["requests_1h_mv"],
        views["request_parts_seal"],
    )
    assert "TO llmwh.requests_1m_local" in minute and "FROM llmwh.requests_local" in minute
    assert "TO llmwh.requests_1h_local" in hour and "FROM llmwh.requests_local" in hour
    sla = views["requests_sla_1h_mv"]
    assert "TO llmwh.requests_sla_1h_local" in sla and "FROM llmwh.requests_1m_local" in sla
    # A backfill reads and fills each shard's own local tables.
    backfills = [s for s in map(parser, rendered) if s.startswith("INSERT")]
    assert backfills and all("_local" in s and " llmwh.requests " not in s for s in backfills)
    # Parts and requests share the sharding key, so each shard seals its own requests.
    assert "APPEND TO llmwh.sealed_local" in seal
    assert "FROM llmwh.request_parts_local" in seal and "FROM llmwh.sealed_keys_local" in seal
    copy = views["sealed_into_requests"]
    assert "TO llmwh.requests_local" in copy and "FROM llmwh.sealed_local" in copy
    keys = views["sealed_into_keys"]
    assert "TO llmwh.sealed_keys_local" in keys and "FROM llmwh.sealed_local" in keys


def test_a_table_without_sharding_key_is_refused():
    statement = "CREATE TABLE IF NOT EXISTS llmwh.t (a UInt8) ENGINE = MergeTree ORDER BY a"
    with pytest.raises(MigrationError, match="sharding_key"):
        render_for_cluster([statement], "c2", "llmwh")


def test_unknown_statements_are_refused_not_passed_through():
    with pytest.raises(MigrationError, match="cannot render"):
        render_for_cluster(["INSERT INTO llmwh.t VALUES (1)"], "c2", "llmwh")


def test_a_later_migration_rendered_alone_still_knows_the_sharded_tables():
    variables = template_variables(Config(), "llmwh")
    core, rollups = (render(m.text, "clickhouse", variables) for m in discover("clickhouse")[:2])
    alone = render_for_cluster(rollups, "c2", "llmwh", context=core + rollups)
    minute_view = next(s for s in alone if "requests_1m_mv" in s)
    assert "FROM llmwh.requests_local" in minute_view
    alter = render_for_cluster(
        ["ALTER TABLE llmwh.requests ADD COLUMN IF NOT EXISTS gpu String"],
        "c2",
        "llmwh",
        context=core,
    )
    assert alter == [
        "ALTER TABLE llmwh.requests_local ON CLUSTER c2 ADD COLUMN IF NOT EXISTS gpu String",
        "ALTER TABLE llmwh.requests ON CLUSTER c2 ADD COLUMN IF NOT EXISTS gpu String",
    ]


def test_an_slo_rollup_renders_as_the_migrations_do(rendered, parser):
    """`llmwh slo apply` on a cluster: the query layer's quoted names, `DROP ... SYNC` and
    `TRUNCATE` render for the local tables, and every statement parses."""
    variables = template_variables(Config(), "llmwh")
    core = [s for m in discover("clickhouse") for s in render(m.text, "clickhouse", variables)]
    rollup = SloRollup(load_slo("chat-assistant"))
    layout = rollup.layout("llmwh", 90)
    creates = list(layout.creates)
    fill = dialects.render(rollup.rows("llmwh"), "clickhouse")
    statements = [
        *creates,
        f'DROP VIEW IF EXISTS "llmwh".{rollup.view} SYNC',
        f'TRUNCATE TABLE "llmwh".{rollup.table}',
        f'INSERT INTO "llmwh".{rollup.table}\n{fill}',
        *layout.create_views,
    ]
    out = render_for_cluster(statements, "c2", "llmwh", context=core + creates)
    for statement in out:
        parser(statement)
    local = f"llmwh.{rollup.table}_local"
    assert f"CREATE TABLE IF NOT EXISTS {local} ON CLUSTER c2" in out[0]
    assert "ReplicatedAggregatingMergeTree" in out[0]
    assert f"Distributed(c2, llmwh, {rollup.table}_local" in out[1]
    assert f"DROP VIEW IF EXISTS llmwh.{rollup.view} ON CLUSTER c2 SYNC" in out
    assert f"TRUNCATE TABLE {local} ON CLUSTER c2" in out
    backfill = next(s for s in out if s.startswith("INSERT"))
    assert backfill.startswith(f"INSERT INTO {local}") and "llmwh.requests_local" in backfill
    view = f"CREATE MATERIALIZED VIEW IF NOT EXISTS llmwh.{rollup.view} "
    minute_view = next(s for s in out if s.startswith(view))
    assert f"TO {local}" in minute_view and "llmwh.requests_local" in minute_view
    # Its table of requests: a local table per shard, filled from the shard's own requests.
    mine = f"llmwh.{rollup.requests_table}_local"
    assert any(s.startswith(f"CREATE TABLE IF NOT EXISTS {mine} ON CLUSTER c2") for s in out)
    tail_view = next(
        s
        for s in out
        if s.startswith(f"CREATE MATERIALIZED VIEW IF NOT EXISTS llmwh.{rollup.requests_table}_mv")
    )
    assert f"TO {mine}" in tail_view and "llmwh.requests_local" in tail_view


def test_a_rewrite_of_series_ids_swaps_local_tables_and_writes_through_distributed():
    """0023: each shard reads its own rows and writes them through the Distributed copy,
    so that they land on the shard of their new id; the copy's local table is swapped in."""
    variables = template_variables(Config(), "llmwh")
    every = [s for m in discover("clickhouse") for s in render(m.text, "clickhouse", variables)]
    rekey = next(m for m in discover("clickhouse") if m.version == 23)
    alone = render_for_cluster(
        render(rekey.text, "clickhouse", variables), "c2", "llmwh", context=every, keeper=False
    )
    insert = next(s for s in alone if s.startswith("INSERT INTO llmwh.samples_rekeyed "))
    assert "FROM llmwh.samples_local AS t" in insert
    assert "JOIN llmwh.series_rekey_local AS m" in insert
    assert "EXCHANGE TABLES llmwh.samples_local AND llmwh.samples_rekeyed_local" in alone
    backfill = next(s for s in alone if s.startswith("INSERT INTO llmwh.series_rekey"))
    assert backfill.startswith("INSERT INTO llmwh.series_rekey_local")
    with pytest.raises(MigrationError, match="both must be sharded"):
        render_for_cluster(["EXCHANGE TABLES llmwh.a AND llmwh.samples"], "c2", "llmwh",
                           context=every)  # fmt: skip
