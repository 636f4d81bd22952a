"""Requests as per-request remote-write samples: what the receiver reads back is the request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import cramjam
import polars as pl
import pytest

from warehouse.ingest.llm_metrics import load_mapping, request_parts
from warehouse.ingest.remote_write import decode_v1
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
    """The receiver's view: the body decoded and mapped to request parts, merged per request."""
    body = remote_write_body(sent.to_arrow())
    write = decode_v1(bytes(cramjam.snappy.decompress_raw(body)))
    rows = pl.from_arrow(request_parts(write.series, write.samples, load_mapping()))
    return rows.group_by("request_id").agg(
        pl.col("tenant", "zone", "model", "ab_group").first(),
        pl.col("start_ts").max(),
        pl.col("status_rank").max(),
        pl.col("error_class").drop_nulls().first(),
        pl.col("ttft_ms", "e2e_ms", "prompt_tokens", "cached_prompt_tokens", "http_status").max(),
    )


def test_every_user_request_arrives_and_no_probe(sent, parts):
    users = sent.filter(~pl.col("is_probe"))
    assert sorted(parts["request_id"]) == sorted(users["request_id"])


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
