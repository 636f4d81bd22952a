"""WrittenSeries: a flush writes only the `series` rows not yet written, and reads a
known series' labels no more.

Each case decodes 1.0 bodies as the receiver's flush does (``decode_v1_batch`` with the
table), then files the rows as a committed flush would.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from payloads import v1

from warehouse.config import Config
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.remote_write import DecodedWrite, decode_v1_batch
from warehouse.ingest.request_pivot import c_spec

series_cache = pytest.importorskip(
    "warehouse.ingest.series_cache", reason="the C extensions were not built (no C compiler)"
)
WrittenSeries = series_cache.WrittenSeries
KnownSeries = pytest.importorskip("warehouse.ingest._v1_fast").KnownSeries

MIN = -(2**63)
MINUTE = 60_000
T0 = 1_700_000_000_000
T0_PERIOD = T0 - T0 % MINUTE  # the start of T0's refresh period (epoch-aligned minutes)

UP = [("__name__", "up"), ("instance", "10.0.0.1:9100"), ("job", "node")]
RSS = [
    ("__name__", "process_resident_memory_bytes"),
    ("instance", "10.0.0.1:9100"),
    ("job", "node"),
]


def decode(cache: WrittenSeries | None, *bodies: bytes, tenant=None, spec=None) -> DecodedWrite:
    decoded, _, left = decode_v1_batch(
        list(bodies),
        MIN,
        (0, 0, 0, 0),
        spec,
        2**63 - 1,
        tenant,
        cache.known if cache is not None else None,
    )
    assert left == []
    return decoded


def rows(decoded: DecodedWrite) -> list[tuple[str, int, int]]:
    """The series rows a flush writes: (metric, min_time, max_time) in Unix ms."""
    series = decoded.series
    times = [series.column(c).cast(pa.int64()).to_pylist() for c in ("min_time", "max_time")]
    return list(zip(series.column("metric_name").to_pylist(), *times, strict=True))


def write(cache: WrittenSeries, *series) -> list[tuple[str, int, int]]:
    """A flush of one body of ``series`` ((labels, samples) pairs), committed."""
    decoded = decode(cache, v1(*series))
    cache.remember(decoded)
    return rows(decoded)


def test_a_series_is_written_once_then_once_per_refresh_period():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    start = T0_PERIOD
    assert write(cache, (UP, [(start + 1, 1.0)])) == [("up", start + 1, start + 1)]
    assert write(cache, (UP, [(start + 15_000, 1.0), (start + 30_000, 1.0)])) == []
    assert write(cache, (UP, [(start + MINUTE - 1, 1.0)])) == []
    assert write(cache, (UP, [(start + MINUTE, 1.0)])) == [("up", start + MINUTE, start + MINUTE)]
    assert write(cache, (UP, [(start + MINUTE, 1.0), (start + 2 * MINUTE - 1, 1.0)])) == []


def test_a_known_series_samples_carry_the_id_and_a_late_row_the_labels_a_fresh_decode_gives():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(T0_PERIOD, 1.0)]), (RSS, [(T0_PERIOD, 2.0)]))
    later = v1((UP, [(T0_PERIOD + 5_000, 3.0)]), (RSS, [(T0_PERIOD + MINUTE, 4.0)]))
    known, fresh = decode(cache, later), decode(None, later)
    assert known.samples.equals(fresh.samples)
    assert known.series.equals(fresh.series.slice(1))  # only rss reached the next period
    assert (known.series_count, fresh.series_count) == (2, 2)


def test_series_cross_into_the_next_period_together_whatever_their_phase():
    """Series scraped at different offsets are rewritten in the same round."""
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(T0_PERIOD + 5_000, 1.0)]))
    write(cache, (RSS, [(T0_PERIOD + 50_000, 1.0)]))
    next_round = write(
        cache, (UP, [(T0_PERIOD + MINUTE + 5_000, 1.0)]), (RSS, [(T0_PERIOD + MINUTE + 6_000, 1.0)])
    )
    assert [metric for metric, _, _ in next_round] == ["up", "process_resident_memory_bytes"]


def test_a_sample_before_the_written_range_writes_the_row_so_min_time_stays_exact():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(T0, 1.0)]))
    assert write(cache, (UP, [(T0 - 1, 1.0), (T0, 1.0)])) == [("up", T0 - 1, T0)]


def test_only_committed_rows_are_remembered():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    body = v1((UP, [(T0, 1.0)]), (RSS, [(T0, 1.0)]))
    assert len(rows(decode(cache, body))) == 2  # the insert failed: not remembered
    decoded = decode(cache, body)
    assert len(rows(decoded)) == 2
    cache.remember(decoded)
    assert rows(decode(cache, body)) == []


def test_periods_before_the_epoch_are_periods_too():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(-MINUTE, 1.0)]))
    assert write(cache, (UP, [(-MINUTE, 1.0), (-1, 1.0)])) == []
    assert write(cache, (UP, [(-MINUTE, 1.0), (0, 1.0)])) == [("up", -MINUTE, 0)]


def test_zero_refresh_writes_every_advance_of_max_time():
    cache = WrittenSeries(capacity=100, refresh_seconds=0)
    assert write(cache, (UP, [(T0, 1.0)])) == [("up", T0, T0)]
    assert write(cache, (UP, [(T0, 1.0)])) == []
    assert write(cache, (UP, [(T0 + 1, 1.0)])) == [("up", T0 + 1, T0 + 1)]


def test_past_its_capacity_the_table_starts_again_and_forgets_nothing_it_should_write():
    cache = WrittenSeries(capacity=3, refresh_seconds=60)
    first = [([("__name__", f"s{i}")], [(T0, 1.0)]) for i in range(3)]
    assert len(write(cache, *first)) == 3 and len(cache) == 3
    write(cache, ([("__name__", "s3")], [(T0, 1.0)]))  # a fourth: the table empties first
    assert len(cache) == 1
    assert [m for m, _, _ in rows(decode(cache, v1(*first)))] == ["s0", "s1", "s2"]


def test_extreme_timestamps_do_not_overflow_the_comparison():
    cache = WrittenSeries(capacity=10, refresh_seconds=60)
    low, high = -(2**63), 2**63 - 1
    write(cache, (UP, [(low, 1.0)]))
    assert write(cache, (UP, [(low, 1.0), (high, 1.0)])) == [("up", low, high)]
    assert write(cache, (UP, [(low, 1.0), (high, 1.0)])) == []


def test_the_same_label_fields_of_two_tenants_are_two_series():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    body = v1((UP, [(T0, 1.0)]))
    cache.remember(decode(cache, body, tenant="acme"))
    assert rows(decode(cache, body, tenant="acme")) == []
    other = decode(cache, body, tenant="globex")
    assert rows(other) == [("up", T0, T0)]
    assert other.samples.equals(decode(None, body, tenant="globex").samples)
    assert rows(decode(cache, body)) == [("up", T0, T0)]  # and no tenant is a third


def test_the_same_series_in_other_bytes_keeps_its_id():
    """Labels in another order (as vmagent may send them) are one more entry; labels with
    an empty value, which no sender sends and no limit counts, are read every time."""
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(T0, 1.0)]))
    reordered, padded = list(reversed(UP)), [*UP, ("zone", "")]
    for fields in (reordered, padded):
        assert write(cache, (fields, [(T0 + 1, 1.0)])) == [("up", T0 + 1, T0 + 1)]
        again = decode(cache, v1((fields, [(T0, 1.0)])))
        assert again.samples.column("id").equals(
            decode(cache, v1((UP, [(T0, 1.0)]))).samples.column("id")
        )
    assert write(cache, (reordered, [(T0 + 2, 1.0)])) == []  # filed
    assert write(cache, (padded, [(T0 + 2, 1.0)])) == [("up", T0 + 2, T0 + 2)]  # never
    assert len(cache) == 2


def test_per_request_parts_are_never_filed_as_known_series():
    """A mapped metric with a request id stays a part of its request on every flush, even
    when its samples are kept as series too."""
    config = Config(request_samples_as_series=True)
    spec = c_spec(load_mapping(), None, config.request_samples_as_series)
    part = [("__name__", "llm_request_ttft_seconds"), ("model", "m"), ("request_id", "r1")]
    body = v1((part, [(T0, 0.2)]), (UP, [(T0, 1.0)]))
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    for _ in range(2):
        decoded, pivot, left = decode_v1_batch(
            [body], MIN, (0, 0, 0, 0), spec, 2**63 - 1, None, cache.known
        )
        assert left == [] and len(pivot.rank) == 1
        cache.remember(decoded)
    assert len(cache) == 1  # up alone


def test_a_body_left_out_after_known_series_leaves_nothing_behind():
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    write(cache, (UP, [(T0_PERIOD, 1.0)]))
    good = v1((UP, [(T0_PERIOD + MINUTE, 1.0)]))
    bad = v1((UP, [(T0_PERIOD + 2 * MINUTE, 1.0)]), ([("job", "no-name")], [(T0, 1.0)]))
    decoded, _, left = decode_v1_batch(
        [good, bad], MIN, (0, 0, 0, 0), None, 2**63 - 1, None, cache.known
    )
    assert left == [1]
    assert rows(decoded) == [("up", T0_PERIOD + MINUTE, T0_PERIOD + MINUTE)]
    assert decoded.samples.equals(decode(None, good).samples)


def test_the_c_table_refuses_misuse_with_an_error_not_a_crash():
    bare = KnownSeries.__new__(KnownSeries)  # __init__ never ran
    with pytest.raises(RuntimeError, match="__init__"):
        bare.clear()
    with pytest.raises(RuntimeError, match="__init__"):
        decode_v1_batch([v1((UP, [(T0, 1.0)]))], MIN, (0, 0, 0, 0), None, 2**63 - 1, None, bare)
    with pytest.raises(TypeError, match="KnownSeries"):
        decode_v1_batch([v1((UP, [(T0, 1.0)]))], MIN, (0, 0, 0, 0), None, 2**63 - 1, None, object())
    with pytest.raises(ValueError, match="capacity"):
        KnownSeries(2**62 + 1, 0)
    with pytest.raises(ValueError, match="columns"):
        KnownSeries(4, 0).remember(b"\1" * 16, b"\0" * 8, b"\0" * 8, b"\0" * 8, b"\0" * 4, b"")


def test_a_sender_cannot_make_the_table_hold_keys_of_any_length():
    # Empty-valued labels are absent labels, so no limit counts them: one series id in
    # ever new label fields of megabytes would otherwise fill the table's arena.
    cache = WrittenSeries(capacity=100, refresh_seconds=60)
    padded = UP + [(f"empty_{i}_" + "n" * 1000, "") for i in range(20)]
    assert write(cache, (padded, [(T0, 1.0)])) == [("up", T0, T0)]
    assert len(cache) == 0  # not filed: decoded afresh, its row written again
    assert write(cache, (padded, [(T0, 1.0)])) == [("up", T0, T0)]
    # Keys within the bounds are filed, and past capacity * 1 KiB of keys the table
    # starts again, as it does past capacity series.
    small = WrittenSeries(capacity=2, refresh_seconds=60)
    long_value = [("__name__", "up"), ("v", "x" * 1500)]
    write(small, (long_value, [(T0, 1.0)]))
    assert len(small) == 1
    write(small, ([("__name__", "up"), ("v", "y" * 1500)], [(T0, 1.0)]))
    assert len(small) == 1
