"""Requests as per-request remote-write samples: what the receiver reads back is the request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import cramjam
import polars as pl
import pytest

from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.remote_write import decode_v1
from warehouse.ingest.request_pivot import parts_table, split_requests
from warehouse.synthetic import synthetic_requests
from warehouse.synthetic.samples import remote_write_body


@pytest.fixture(scope="module")
def sent() -> pl.DataFrame:
    return pl.from_arrow(
        synthetic_requests(
            3_000, seed=8, start=datetime(2026, 11, 2, tzinfo=UTC), span=timedelta(minutes=30)
        )
    )


@pytest.fixture(scope="module")
def parts(sent) -> pl.DataFrame:
    """The receiver's view: the body decoded, its parts pivoted into one row a request."""
    body = remote_write_body(sent.to_arrow())
    write = decode_v1(bytes(cramjam.snappy.decompress_raw(body)))
    _, pivot = split_requests(write, load_mapping(), None, keep_series=False)
    return pl.from_arrow(parts_table(pivot))


def test_every_user_request_arrives_and_no_probe(sent, parts):
    users = sent.filter(~pl.col("is_probe"))
    assert sorted(parts["request_id"]) == sorted(users["request_id"])  # one row each


def test_measures_dimensions_and_failures_survive_the_trip(sent, parts):
    joined = sent.join(parts, on="request_id", suffix="_rw")
    assert (joined["tenant"] == joined["tenant_rw"]).all()
    assert (joined["zone"] == joined["zone_rw"]).all()
    assert (joined["ts"] == joined["start_ts"]).all()
    for column in ("ttft_ms", "e2e_ms"):
        sent_ms, got_ms = joined[column], joined[f"{column}_rw"]
        assert (sent_ms.is_null() == got_ms.is_null()).all()
        assert ((sent_ms - got_ms).abs().drop_nulls() < 1e-3).all()
    assert (joined["prompt_tokens"] == joined["prompt_tokens_rw"]).all()
    failed = joined.filter(pl.col("status") != "ok")
    assert failed.height > 0
    assert (
        failed["status_rank"] == failed["status"].replace_strict({"error": 1, "rejected": 2})
    ).all()
    assert (failed["error_class"] == failed["error_class_rw"]).all()
    assert (joined.filter(pl.col("status") == "ok")["status_rank"] == 0).all()
