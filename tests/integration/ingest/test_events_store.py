"""A decoded NDJSON body lands in `requests` and reads back identically, on every store."""

import json
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.events import decode_ndjson, encode_ndjson
from warehouse.model import REQUESTS_SCHEMA
from warehouse.synthetic import synthetic_requests


def read_back(store) -> pa.Table:
    result = store.query_arrow(f"SELECT * FROM {store.database}.requests ORDER BY request_id")
    return result.select(REQUESTS_SCHEMA.names).cast(REQUESTS_SCHEMA)


def test_a_decoded_ndjson_body_inserts_and_reads_back_identically(migrated):
    table = synthetic_requests(5000, seed=23)
    table = table.take(pc.sort_indices(table, [("request_id", "ascending")]))
    body = encode_ndjson(table)
    # A sender leaves tpot_ms out and gives ts as text: derived and converted on the way
    # (a body mixing integer and text ts also takes the per-line path).
    # (Recent: ClickHouse's TTL would drop an old row at insert.)
    moment = datetime.now(UTC).replace(microsecond=250_000) - timedelta(minutes=5)
    sent = {
        "ts": moment.astimezone(timezone(timedelta(hours=2))).isoformat(timespec="milliseconds"),
        "request_id": "zz-derived",
        "status": "ok",
        "ttft_ms": 10,
        "e2e_ms": 1010,
        "output_tokens": 11,
        "attrs": {"gpu": "h100"},
    }
    body += json.dumps(sent).encode() + b"\n"

    decoded = decode_ndjson(body)
    migrated.insert_arrow("requests", decoded)
    back = read_back(migrated)

    assert back.num_rows == decoded.num_rows == table.num_rows + 1
    for name in REQUESTS_SCHEMA.names:
        assert back.column(name).equals(decoded.column(name)), name
    assert back.slice(0, table.num_rows).equals(table)
    last = back.slice(table.num_rows).to_pylist()[0]
    assert last["tpot_ms"] == 100.0
    assert last["ts"] == moment
    assert last["attrs"] == [("gpu", "h100")]
