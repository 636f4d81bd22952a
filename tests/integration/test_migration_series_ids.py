"""Migration 0023 on every store: series ids written before it (the whole MD5 of the key)
become ids that begin with their target, in every table keyed by series id, with every
answer the same before and after."""

from __future__ import annotations

import hashlib
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from ingest.test_remote_write_store import T0, normalized, v1_body, v2_body

from warehouse.ingest.remote_write import SERIES_ID_SQL, decode_v1, decode_v2
from warehouse.ingest.remote_write_tables import STARTS_SCHEMA, DecodedWrite, series_key
from warehouse.store.migrations import Migrator, discover, migrations_dir

TABLES = {
    "series": "series",
    "samples": "samples",
    "histograms": "histogram_samples",
    "exemplars": "exemplars",
    "starts": "sample_starts",
}
KEYED = ("samples", "histogram_samples", "exemplars", "sample_starts")


def old_id(metric: str, labels: dict[str, str]) -> bytes:
    """The id before 0023: the key's whole MD5 digest, as ClickHouse's UUID holds it."""
    digest = hashlib.md5(series_key(metric, labels)).digest()
    return digest[7::-1] + digest[15:7:-1]


def with_old_ids(decoded: DecodedWrite) -> dict[str, pa.Table]:
    """The write's tables as the code before 0023 wrote them, a start timestamp added."""
    series = decoded.series
    new = [u.bytes for u in series.column("id").to_pylist()]
    old = [
        old_id(m, dict(labels))
        for m, labels in zip(
            series.column("metric_name").to_pylist(),
            series.column("labels").to_pylist(),
            strict=True,
        )
    ]
    renamed = dict(zip(new, old, strict=True))
    tables = {
        "starts": pa.table(
            {
                "id": pa.array([series.column("id")[0].as_py()], pa.uuid()),
                "start_timestamp": pa.array([T0 - 60_000], pa.int64()).cast(
                    pa.timestamp("ms", tz="UTC")
                ),
            },
            schema=STARTS_SCHEMA,
        )
    }
    for attribute in ("series", "samples", "histograms", "exemplars"):
        tables[attribute] = getattr(decoded, attribute)
    out = {}
    for attribute, table in tables.items():
        if not table.num_rows:
            continue
        ids = [renamed[u.bytes] for u in table.column("id").to_pylist()]
        index = table.schema.get_field_index("id")
        out[attribute] = table.set_column(
            index, table.schema.field(index), pa.array(ids, pa.binary(16)).cast(pa.uuid())
        )
    return out


def answers(store) -> dict[str, list[tuple]]:
    """What a reader sees, by labels rather than ids: each table's rows with the id
    replaced by its series' metric name and labels."""
    db = store.database
    out = {}
    for table in KEYED:
        columns = [c for c in store.query_arrow(f"SELECT * FROM {db}.{table} LIMIT 0").column_names]
        rest = ", ".join(f"t.{c} AS row_{c}" for c in columns if c != "id")
        rows = store.query_arrow(
            f"SELECT s.metric_name AS series_metric, s.labels AS series_labels, {rest} "
            f"FROM {db}.{table} AS t INNER JOIN "
            f"(SELECT DISTINCT id, metric_name, labels FROM {db}.series) AS s ON s.id = t.id"
        )
        out[table] = normalized(rows)
    out["series_samples"] = normalized(
        store.query_arrow(
            f"SELECT metric_name, labels, tenant, timestamp, value FROM {db}.series_samples"
        )
    )
    out["counts"] = [
        store.query_arrow(f"SELECT count() AS n FROM {db}.{t}").column("n")[0].as_py()
        for t in ("series", *KEYED)
    ]
    return out


def from_0023(dialect: str) -> list[int]:
    """The versions an upgrade from before 0023 applies: 0023 and every later one."""
    return [m.version for m in discover(dialect) if m.version >= 23]


def test_an_upgrade_rekeys_every_table_and_keeps_every_answer(store, tmp_path: Path):
    root = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), root)
    dialect = store.capabilities.dialect
    for path in (root / dialect).glob("002[3-9]_*.sql"):  # 0023 and after
        path.unlink()
    Migrator(store, root=root).up()  # as deployed before 0023
    for decoded in (decode_v2(v2_body()), decode_v1(v1_body())):
        for attribute, table in with_old_ids(decoded).items():
            store.insert_arrow(TABLES[attribute], table)
    # A sample whose series row is missing keeps its id.
    orphan = uuid.UUID(int=12345)
    store.insert_arrow(
        "samples",
        pa.table(
            {
                "id": pa.array([orphan.bytes], pa.binary(16)).cast(pa.uuid()),
                "timestamp": pa.array([T0], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                "value": [7.0],
            }
        ),
    )
    before = answers(store)
    assert before["counts"] == [3, 11, 2, 1, 2]

    applied = Migrator(store).up()

    assert [m.version for m in applied] == from_0023(dialect)
    assert answers(store) == before
    db = store.database
    if dialect == "clickhouse":
        check = store.query_arrow(
            f"SELECT toString(id) AS stored, toString({SERIES_ID_SQL}) AS computed FROM {db}.series"
        )
        assert check.column("stored").to_pylist() == check.column("computed").to_pylist()
    series_ids = {
        str(u) for u in store.query_arrow(f"SELECT id FROM {db}.series").column("id").to_pylist()
    }
    expected = {str(u) for d in (decode_v2(v2_body()), decode_v1(v1_body()))
                for u in d.series.column("id").to_pylist()}  # fmt: skip
    assert series_ids == expected  # what the decoders give now
    ids = {
        str(u) for u in store.query_arrow(f"SELECT id FROM {db}.samples").column("id").to_pylist()
    }
    assert str(orphan) in ids and ids <= series_ids | {str(orphan)}
    # The same series written again now are the same series.
    for attribute, table in (("series", decode_v1(v1_body()).series),
                             ("samples", decode_v1(v1_body()).samples)):  # fmt: skip
        store.insert_arrow(TABLES[attribute], table)
    distinct = store.query_arrow(f"SELECT count(DISTINCT id) AS n FROM {db}.series")
    assert distinct.column("n")[0].as_py() == 3
    # No table of the rewrite is left behind.
    names = store.query_arrow(
        "SELECT table_name FROM information_schema.tables "
        f"WHERE table_schema = '{db}' AND table_name LIKE '%rekey%'"
    )
    assert names.num_rows == 0


def test_an_interrupted_upgrade_run_again_ends_the_same(store, tmp_path: Path):
    """0023 run again from any statement (after a crash): the same ids, nothing lost."""
    root = tmp_path / "migrations"
    shutil.copytree(migrations_dir(), root)
    dialect = store.capabilities.dialect
    text = next((root / dialect).glob("0023_*.sql")).read_text()
    for path in (root / dialect).glob("002[3-9]_*.sql"):  # 0023 and after
        path.unlink()
    Migrator(store, root=root).up()
    for decoded in (decode_v2(v2_body()), decode_v1(v1_body())):
        for attribute, table in with_old_ids(decoded).items():
            store.insert_arrow(TABLES[attribute], table)
    before = answers(store)
    migrator = Migrator(store)
    statements = migrator.statements(migrator.pending()[0])
    # Half of it ran (up to the samples' swap and beyond), then the whole again.
    for statement in statements[: len(statements) // 2]:
        store.command(statement)
    assert text  # the file as shipped is what runs
    assert [m.version for m in Migrator(store).up()] == from_0023(dialect)
    assert answers(store) == before


def test_the_migration_computes_the_id_the_decoders_compute():
    text = (migrations_dir() / "clickhouse" / "0023_series_ids_by_target.sql").read_text()
    assert SERIES_ID_SQL in text


@pytest.mark.parametrize("dialect", ["clickhouse", "duckdb"])
def test_every_table_keyed_by_series_id_is_rekeyed(dialect):
    text = (migrations_dir() / dialect / "0023_series_ids_by_target.sql").read_text()
    for table in ("series", *KEYED):
        assert f"${{db}}.{table} " in text or f"${{db}}.{table}\n" in text, table
