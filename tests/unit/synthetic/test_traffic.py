"""The synthetic traffic generator: deterministic, valid, and shaped like a real fleet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from warehouse.ingest.events import decode_arrow_table
from warehouse.model import ERROR_CLASSES, REQUESTS_SCHEMA
from warehouse.synthetic import BLOCK_ROWS, request_batches, synthetic_requests

START = datetime(2026, 11, 2, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def day() -> pl.DataFrame:
    """A day of traffic, every request but the probes."""
    return pl.from_arrow(synthetic_requests(200_000, seed=7, start=START, span=DAY))


def users(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(~pl.col("is_probe"))


class TestDeterminism:
    def test_the_same_seed_gives_the_same_rows(self):
        first = synthetic_requests(5_000, seed=3, start=START, span=DAY)
        again = synthetic_requests(5_000, seed=3, start=START, span=DAY)
        assert first.equals(again)

    def test_another_seed_gives_other_rows(self):
        first = synthetic_requests(5_000, seed=3, start=START, span=DAY)
        other = synthetic_requests(5_000, seed=4, start=START, span=DAY)
        assert first.column("request_id") != other.column("request_id")
        assert first.column("ttft_ms") != other.column("ttft_ms")

    def test_batches_are_the_same_rows_in_blocks_in_time_order(self):
        n = BLOCK_ROWS * 2 + 123
        batches = list(request_batches(n, seed=5, start=START, span=DAY))
        assert [b.num_rows for b in batches] == [BLOCK_ROWS, BLOCK_ROWS, 123]
        whole = synthetic_requests(n, seed=5, start=START, span=DAY)
        assert pa.concat_tables(batches).equals(whole)
        ts = whole.column("ts").cast(pa.int64()).to_numpy()
        assert (np.diff(ts) >= 0).all()


class TestShape:
    def test_rows_pass_the_receivers_validation(self):
        table = synthetic_requests(20_000, seed=1, start=START, span=DAY)
        assert table.schema == REQUESTS_SCHEMA
        assert decode_arrow_table(table).num_rows == 20_000  # raises on any invalid row

    def test_arrivals_follow_the_day_busiest_in_the_afternoon_utc(self, day):
        per_hour = users(day).group_by(pl.col("ts").dt.hour().alias("h")).len()
        count = dict(zip(per_hour["h"], per_hour["len"], strict=True))
        assert count[15] > 2.5 * count[3]  # peak against trough, diurnal depth 0.5

    def test_latency_grows_with_load(self, day):
        ok = users(day).filter(pl.col("status") == "ok")
        hour = pl.col("ts").dt.hour()
        peak = ok.filter(hour.is_between(13, 17))["queue_ms"].mean()
        trough = ok.filter(hour.is_between(1, 5))["queue_ms"].mean()
        assert peak > 1.5 * trough

    def test_ttft_grows_with_the_uncached_prompt(self, day):
        ok = users(day).filter(pl.col("ttft_ms").is_not_null())
        uncached = ok["prompt_tokens"] - ok["cached_prompt_tokens"]
        long = ok.filter(uncached > uncached.quantile(0.9))["ttft_ms"].median()
        short = ok.filter(uncached < uncached.quantile(0.1))["ttft_ms"].median()
        assert long > 1.5 * short

    def test_the_kv_cache_hits_more_on_chat_than_on_summaries(self, day):
        ratio = (
            users(day)
            .group_by("service")
            .agg(pl.col("cached_prompt_tokens").sum() / pl.col("prompt_tokens").sum())
        )
        hit = dict(zip(ratio["service"], ratio["cached_prompt_tokens"], strict=True))
        assert hit["chat"] > 0.4 > hit["summarize"]

    def test_errors_and_rejections_are_rare_and_of_the_taxonomy(self, day):
        valid = users(day)
        error_rate = (valid["status"] == "error").mean()
        rejection_rate = (valid["status"] == "rejected").mean()
        # A fleet sized for its daily peak: about 1 in 1,000 fail, fewer are shed.
        assert 0.0005 < error_rate < 0.005 and 0.0001 < rejection_rate < error_rate
        failed = valid.filter(pl.col("status") != "ok")
        assert set(failed["error_class"]) <= set(ERROR_CLASSES)
        rejected = valid.filter(pl.col("status") == "rejected")
        assert set(rejected["error_class"]) == {"rate_limited", "overloaded"}
        assert (rejected["http_status"] == 429).all()
        assert rejected["ttft_ms"].is_null().all()

    def test_code_completions_are_short_and_fast(self, day):
        ok = users(day).filter(pl.col("status") == "ok")
        code, chat = (ok.filter(pl.col("service") == s) for s in ("code", "chat"))
        assert set(code["model"]) == {"coder-7b"}
        assert code["output_tokens"].median() < 20 < chat["output_tokens"].median()
        assert code["e2e_ms"].quantile(0.95) < 400 < chat["e2e_ms"].median()

    def test_mixes_are_skewed(self, day):
        tenants = users(day)["tenant"].value_counts(sort=True)
        assert tenants["count"][0] > 3 * tenants["count"][-1]

    def test_probes_come_on_a_beat_from_the_platform(self, day):
        probes = day.filter(pl.col("is_probe"))
        assert 0.003 < probes.height / day.height < 0.007
        assert set(probes["tenant"]) == {"platform"}
        assert set(probes["client_app"]) == {"healthcheck"}
        gaps = probes["ts"].diff().drop_nulls().dt.total_milliseconds()
        assert gaps.max() - gaps.min() <= 1  # evenly spaced, whatever the user load
