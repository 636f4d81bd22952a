"""The SLA report's compliance windows: a range cut as the raw answer's time buckets cut it.

A rollup answers the whole windows; each partial window at an end of the range is judged
on its own requests, exactly as the raw answer's 5-minute buckets would judge it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from warehouse.query.sla import _windows
from warehouse.query.timerange import time_range

FIVE_MINUTES = timedelta(minutes=5)


def windows(since: str, until: str) -> tuple[str | None, list[str]]:
    whole, ends = _windows(time_range(f"2026-12-04T{since}Z", f"2026-12-04T{until}Z"), FIVE_MINUTES)
    return (None if whole is None else str(whole)), [str(end) for end in ends]


def span(since: str, until: str) -> str:
    return f"[2026-12-04T{since}+00:00, 2026-12-04T{until}+00:00)"


def test_a_long_range_is_its_whole_windows_and_a_partial_one_at_each_end():
    whole, ends = windows("08:07:37", "09:56:48")
    assert whole == span("08:10:00", "09:55:00")
    assert ends == [span("08:07:37", "08:10:00"), span("09:55:00", "09:56:48")]


def test_a_range_across_one_boundary_is_two_partial_windows_judged_apart():
    # No whole window fits, but the requests before 08:10 and after it are two windows.
    whole, ends = windows("08:07:37", "08:12:30")
    assert whole is None
    assert ends == [span("08:07:37", "08:10:00"), span("08:10:00", "08:12:30")]


@pytest.mark.parametrize(
    ("since", "until"),
    [("08:07:37", "08:09:59"), ("08:10:00", "08:12:30"), ("08:07:37", "08:10:00")],
    ids=["inside one window", "from a boundary", "up to a boundary"],
)
def test_a_range_within_one_window_is_that_one_partial_window(since, until):
    whole, ends = windows(since, until)
    assert whole is None
    assert ends == [span(since, until)]


def test_a_range_of_whole_windows_has_no_partial_ones():
    assert windows("08:10:00", "08:30:00") == (span("08:10:00", "08:30:00"), [])
