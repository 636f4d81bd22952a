"""Decoded remote writes land in every store as they are and read back identically."""

from __future__ import annotations

import struct
import time

import numpy as np
import pyarrow as pa
import pytest

from warehouse.ingest.remote_write import (
    SERIES_ID_SQL,
    DecodedWrite,
    decode_v1,
    decode_v2,
    series_id,
)
from warehouse.wire.prometheus import V1, V2

STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8DEADBEEF0001))[0]
SPECIAL = [STALE, NAN_PAYLOAD, float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.5]
# Recent enough that the stores' TTL keeps the rows.
T0 = (int(time.time()) - 3600) * 1000

STORE_TABLES = {
    "series": "series",
    "samples": "samples",
    "histograms": "histogram_samples",
    "exemplars": "exemplars",
    "metadata": "metric_metadata",
}


def v2_body() -> bytes:
    symbols = [""]

    def ref(text: str) -> int:
        if text not in symbols:
            symbols.append(text)
        return symbols.index(text)

    request = V2.Request()
    floats = request.timeseries.add()
    floats.labels_refs.extend(
        ref(s) for s in ("__name__", "llm_tokens_total", "model", "llama-3", "zone", "é:1")
    )
    for k, value in enumerate(SPECIAL):
        floats.samples.add(value=value, timestamp=T0 + k * 1000)
    floats.metadata.type = 1
    floats.metadata.help_ref = ref("Tokens generated")
    floats.metadata.unit_ref = ref("tokens")
    exemplar = floats.exemplars.add(value=3.0, timestamp=T0 + 500)
    exemplar.labels_refs.extend((ref("trace_id"), ref("0af7651916cd43dd")))

    hist = request.timeseries.add()
    hist.labels_refs.extend(ref(s) for s in ("__name__", "llm_ttft_seconds", "model", "llama-3"))
    h = hist.histograms.add(
        count_int=12,
        sum=3.25,
        schema=2,
        zero_threshold=1e-128,
        zero_count_int=2,
        timestamp=T0,
        start_timestamp=T0 - 60_000,
        reset_hint=2,
    )
    h.positive_spans.add(offset=-3, length=2)
    h.positive_spans.add(offset=4, length=2)
    h.positive_deltas.extend([1, 2, -1, 3])
    h.negative_spans.add(offset=1, length=1)
    h.negative_deltas.extend([1])
    custom = hist.histograms.add(count_float=4.5, sum=NAN_PAYLOAD, schema=-53, timestamp=T0 + 1)
    custom.positive_spans.add(offset=0, length=3)
    custom.positive_counts.extend([0.5, 1.0, 3.0])
    custom.custom_values.extend([0.1, 0.5, 1.0])
    request.symbols.extend(symbols)
    return request.SerializeToString()


def v1_body() -> bytes:
    request = V1.WriteRequest()
    ts = request.timeseries.add()
    for name, value in (("job", "gateway"), ("__name__", "up"), ("instance", "a:9090")):
        ts.labels.add(name=name, value=value)
    ts.samples.add(value=1.0, timestamp=T0)
    ts.samples.add(value=0.0, timestamp=T0 + 15_000)
    request.metadata.add(type=2, metric_family_name="up", help="Target up", unit="")
    return request.SerializeToString()


def insert(store, decoded: DecodedWrite) -> None:
    for attribute, table in STORE_TABLES.items():
        data = getattr(decoded, attribute)
        if data.num_rows:
            store.insert_arrow(table, data)


def read(store, table: str, columns: list[str]) -> pa.Table:
    return store.query_arrow(f"SELECT {', '.join(columns)} FROM {store.database}.{table}")


def normalized(table: pa.Table) -> list[tuple]:
    """Rows as comparable tuples: ids as text, times as ms, floats as bits, maps sorted."""
    columns = []
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        kind = column.type
        if isinstance(kind, pa.ExtensionType):
            values = [str(v) for v in column.to_pylist()]
        elif pa.types.is_timestamp(kind):
            values = column.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_pylist()
        elif pa.types.is_floating(kind):
            values = np.asarray(column.to_numpy(zero_copy_only=False), np.float64)
            values = values.view(np.uint64).tolist()
        elif pa.types.is_map(kind):
            values = [tuple(sorted(v)) for v in column.to_pylist()]
        elif pa.types.is_list(kind) and pa.types.is_floating(kind.value_type):
            values = [
                tuple(np.asarray(v, np.float64).view(np.uint64).tolist())
                for v in column.to_pylist()
            ]
        elif pa.types.is_list(kind):
            values = [tuple(v) for v in column.to_pylist()]
        else:
            values = [str(v) if name == "id" else v for v in column.to_pylist()]
        columns.append(values)
    return sorted(zip(*columns, strict=True))


@pytest.mark.parametrize("decode, body", [(decode_v1, v1_body), (decode_v2, v2_body)])
def test_decoded_tables_insert_and_read_back_identically(migrated, decode, body):
    decoded = decode(body())
    insert(migrated, decoded)
    for attribute, table in STORE_TABLES.items():
        written = getattr(decoded, attribute)
        if attribute == "metadata":
            written = written.drop_columns(["updated_at"])
        back = read(migrated, table, written.column_names)
        assert normalized(back) == normalized(written), table


def test_special_floats_round_trip_bit_exactly(migrated):
    decoded = decode_v2(v2_body())
    insert(migrated, decoded)
    back = read(migrated, "samples", ["timestamp", "value"]).sort_by("timestamp")
    values = np.asarray(back.column("value").to_numpy(), np.float64)
    assert values.view(np.uint64).tolist() == np.array(SPECIAL).view(np.uint64).tolist()
    histogram_sums = read(migrated, "histogram_samples", ["timestamp", "sum"]).sort_by("timestamp")
    sums = np.asarray(histogram_sums.column("sum").to_numpy(), np.float64)
    assert sums.view(np.uint64).tolist()[1] == np.float64(NAN_PAYLOAD).view(np.uint64)


def test_clickhouse_computes_the_same_series_id(migrated):
    if migrated.capabilities.dialect != "clickhouse":
        pytest.skip("the id is defined with ClickHouse's MD5 and reinterpretAsUUID")
    insert(migrated, decode_v2(v2_body()))
    insert(migrated, decode_v1(v1_body()))
    check = migrated.query_arrow(
        f"SELECT toString(id) AS stored, toString({SERIES_ID_SQL}) AS computed "
        f"FROM {migrated.database}.series"
    )
    assert check.num_rows == 3
    assert check.column("stored").to_pylist() == check.column("computed").to_pylist()
    # And from literals, with a multi-byte value and separators inside strings.
    literal = migrated.query_arrow(
        f"SELECT toString({SERIES_ID_SQL}) AS id FROM (SELECT 'up' AS metric_name, "
        "map('zone', 'é:1', 'job', '3:x', 'a', '') AS labels)"
    )
    assert literal.column("id")[0].as_py() == series_id(
        "up", {"zone": "é:1", "job": "3:x", "a": ""}
    )
