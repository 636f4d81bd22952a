"""100k realistic requests go in as Arrow and come back identical, on every store."""

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from warehouse.errors import StoreError
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
    sample = requests_100k.slice(0, 10_000)  # failures are rare: about 8 without latencies
    migrated.insert_arrow("requests", sample)
    back = read_back(migrated)
    # The fixture has them: a test of nothing would pass too easily.
    assert sample.column("ttft_ms").null_count > 0
    assert any(sample.column("attrs").to_pylist())
    assert back.column("ttft_ms").null_count == sample.column("ttft_ms").null_count
    assert back.column("attrs").to_pylist() == sample.column("attrs").to_pylist()


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"status": "exploded"}, "status"),
        ({"ttft_ms": float("nan")}, "ttft_ms"),
        ({"ttft_ms": float("inf")}, "ttft_ms"),
        ({"e2e_ms": -5.0}, "e2e_ms"),
        ({"prompt_tokens": 100, "cached_prompt_tokens": 200}, "cached"),
    ],
)
def test_garbage_is_refused_and_nothing_of_the_insert_is_written(
    module_migrated, requests_100k, bad, named
):
    migrated = module_migrated  # every case is refused: nothing lands in the shared store
    batch = requests_100k.slice(0, 10)
    for column, value in bad.items():
        index = REQUESTS_SCHEMA.get_field_index(column)
        values = [*batch.column(column).to_pylist()[:9], value]
        field = REQUESTS_SCHEMA.field(column)
        batch = batch.set_column(index, field, pa.array(values, field.type))
    with pytest.raises(StoreError, match=named):
        migrated.insert_arrow("requests", batch)
    count = migrated.query_arrow(f"SELECT count(*) AS n FROM {migrated.database}.requests")
    assert count.column("n")[0].as_py() == 0
