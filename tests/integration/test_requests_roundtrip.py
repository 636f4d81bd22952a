"""100k realistic requests go in as Arrow and come back identical, on every store."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from warehouse.model import REQUESTS_SCHEMA
from warehouse.synthetic import synthetic_requests


@pytest.fixture(scope="module")
def requests_100k() -> pa.Table:
    table = synthetic_requests(100_000, seed=7)
    return table.take(pc.sort_indices(table, [("request_id", "ascending")]))


def read_back(store) -> pa.Table:
    result = store.query_arrow(f"SELECT * FROM {store.database}.requests ORDER BY request_id")
    return result.select(REQUESTS_SCHEMA.names).cast(REQUESTS_SCHEMA)


def test_every_column_comes_back_identical(migrated, requests_100k):
    migrated.insert_arrow("requests", requests_100k)
    back = read_back(migrated)
    assert back.num_rows == requests_100k.num_rows
    for name in REQUESTS_SCHEMA.names:
        assert back.column(name).equals(requests_100k.column(name)), name


def test_nulls_and_map_labels_survive(migrated, requests_100k):
    sample = requests_100k.slice(0, 2000)
    migrated.insert_arrow("requests", sample)
    back = read_back(migrated)
    # The fixture has them: a test of nothing would pass too easily.
    assert sample.column("ttft_ms").null_count > 0
    assert any(sample.column("attrs").to_pylist())
    assert back.column("ttft_ms").null_count == sample.column("ttft_ms").null_count
    assert back.column("attrs").to_pylist() == sample.column("attrs").to_pylist()


def test_an_unknown_status_is_refused_and_nothing_is_written(migrated, requests_100k):
    bad = requests_100k.slice(0, 10).set_column(
        REQUESTS_SCHEMA.get_field_index("status"),
        REQUESTS_SCHEMA.field("status"),
        pa.array(["ok"] * 9 + ["exploded"]),
    )
    with pytest.raises(Exception, match="status"):
        migrated.insert_arrow("requests", bad)
    count = migrated.query_arrow(f"SELECT count(*) AS n FROM {migrated.database}.requests")
    assert count.column("n")[0].as_py() == 0
