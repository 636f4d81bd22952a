"""Time ranges: durations back from now, ISO 8601 strings and datetimes, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from warehouse.errors import QueryError
from warehouse.query.timerange import parse_duration, time_range

NOW = datetime(2026, 11, 30, 8, 30, 15, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("6h", timedelta(hours=6)),
        ("7d", timedelta(days=7)),
        ("4w", timedelta(weeks=4)),
        ("1h30m", timedelta(minutes=90)),
        ("1d12h", timedelta(hours=36)),
        ("1.5h", timedelta(minutes=90)),
        ("250ms", timedelta(milliseconds=250)),
        (" 90s ", timedelta(seconds=90)),
    ],
)
def test_durations_are_a_number_and_a_unit(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("5x", "expected a number and a unit"),
        ("", "expected a number and a unit"),
        ("-5m", "expected a number and a unit"),
        ("5", "expected a number and a unit"),
        ("5 m", "expected a number and a unit"),
        ("30m1h", "from the largest down"),
        ("1h1h", "from the largest down"),
        ("0m", "longer than zero"),
        (300, "expected a number and a unit"),
    ],
)
def test_bad_durations_are_refused_by_name(text, complaint):
    with pytest.raises(QueryError, match=complaint) as info:
        parse_duration(text)
    assert repr(text) in str(info.value)


def test_a_duration_counts_back_from_now_and_until_defaults_to_now():
    r = time_range("15m", now=NOW)
    assert r.until == datetime(2026, 11, 30, 8, 30, 15, 123000, tzinfo=UTC)
    assert r.since == r.until - timedelta(minutes=15)


def test_the_clocks_now_is_its_next_whole_second_so_a_range_ending_now_holds_now():
    before = datetime.now(UTC)
    r = time_range("7d")
    after = datetime.now(UTC)
    assert before <= r.until < after + timedelta(seconds=1)
    assert r.until.microsecond == 0 and r.since.microsecond == 0
    assert r.since == r.until - timedelta(days=7)
    assert time_range("5m", "now").until.microsecond == 0


def test_iso_strings_and_datetimes_are_utc():
    r = time_range("2026-11-30T01:00:00+01:00", datetime(2026, 11, 30, 1), now=NOW)
    assert r.since == datetime(2026, 11, 30, 0, tzinfo=UTC)
    assert r.until == datetime(2026, 11, 30, 1, tzinfo=UTC)
    east = timezone(timedelta(hours=2))
    r = time_range("2026-11-30T00:00Z", datetime(2026, 11, 30, 3, tzinfo=east))
    assert r.seconds == 3600


def test_alignment_to_a_grain():
    assert time_range("2026-11-30T00:00Z", "2026-11-30T02:00Z").aligned_to(timedelta(hours=1))
    assert not time_range("2026-11-30T00:01Z", "2026-11-30T02:00Z").aligned_to(timedelta(hours=1))
    assert time_range("2026-11-30T00:01Z", "2026-11-30T02:00Z").aligned_to(timedelta(minutes=1))


@pytest.mark.parametrize(
    ("since", "until", "complaint"),
    [
        ("yesterday", None, "bad time 'yesterday'"),
        ("2026-13-01", None, "bad time"),
        (12, None, "bad time 12"),
        ("1h", "2h", "is not before until"),
        ("2026-11-30T00:00Z", "2026-11-30T00:00Z", "is not before until"),
    ],
)
def test_bad_ranges_are_refused(since, until, complaint):
    with pytest.raises(QueryError, match=complaint):
        time_range(since, until, now=NOW)
