"""Time ranges of questions: "15m", "7d", ISO 8601 strings or datetimes, always UTC.

A range is half-open, ``[since, until)``, at millisecond precision like ``requests.ts``.
Relative times count back from ``now`` (the clock's next whole second, unless a caller
gives it); naive datetimes and ISO strings without an
offset are taken as UTC, as everything in the warehouse is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from warehouse.errors import QueryError

__all__ = [
    "Instant",
    "TimeRange",
    "ceil_to",
    "floor_to",
    "parse_duration",
    "parse_instant",
    "time_range",
]

Instant = str | datetime | None

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|w|d|h|m|s)")
_DURATION = re.compile(r"^\s*(?:\d+(?:\.\d+)?(?:ms|w|d|h|m|s))+\s*$")


def parse_duration(text: str) -> timedelta:
    """``"30s"``, ``"5m"``, ``"1h30m"``, ``"7d"``, ``"4w"``, ``"250ms"`` as a timedelta.

    Units run from the largest down (``1h30m``, not ``30m1h``); the whole must be
    longer than zero.
    """
    if not isinstance(text, str) or not _DURATION.match(text):
        raise QueryError(
            f"bad duration {text!r}: "
            "expected a number and a unit (w, d, h, m, s, ms), as in 5m, 7d or 1h30m"
        )
    parts = _PART.findall(text)
    ranks = [list(_UNITS).index(unit) for _, unit in parts]
    if ranks != sorted(set(ranks)):
        raise QueryError(f"bad duration {text!r}: write units from the largest down, as in 1h30m")
    try:
        duration = timedelta(seconds=sum(float(n) * _UNITS[unit] for n, unit in parts))
    except OverflowError:
        raise QueryError(f"bad duration {text!r}: too long") from None
    if duration <= timedelta(0):
        raise QueryError(f"bad duration {text!r}: must be longer than zero")
    return duration


def parse_instant(value: Instant, now: datetime) -> datetime:
    """A point in time: a duration back from ``now``, an ISO 8601 string, or a datetime."""
    if value is None or value == "now":
        return now
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if not isinstance(value, str):
        raise QueryError(
            f"bad time {value!r}: expected a duration such as 1h, an ISO 8601 time or a datetime"
        )
    if _DURATION.match(value):
        return now - parse_duration(value)
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"bad time {value!r}: expected a duration such as 15m or 7d, or an ISO 8601 time "
            "such as 2026-11-30T08:00:00Z"
        ) from None
    return parse_instant(moment, now)


@dataclass(frozen=True)
class TimeRange:
    """The half-open interval ``[since, until)`` in UTC, at millisecond precision."""

    since: datetime
    until: datetime

    @property
    def seconds(self) -> float:
        return (self.until - self.since).total_seconds()

    @property
    def since_ms(self) -> int:
        return _epoch_ms(self.since)

    @property
    def until_ms(self) -> int:
        return _epoch_ms(self.until)

    def aligned_to(self, grain: timedelta) -> bool:
        """Whether both ends fall on a multiple of ``grain`` since the Unix epoch."""
        step = int(grain.total_seconds() * 1000)
        return self.since_ms % step == 0 and self.until_ms % step == 0

    def split(self, grain: timedelta) -> tuple[TimeRange | None, list[TimeRange]]:
        """The whole ``grain`` buckets inside the range, and the ragged ends around them.

        ``[14:01:37, 15:01:12)`` by minutes is ``[14:02, 15:01)`` and the ends
        ``[14:01:37, 14:02)``, ``[15:01, 15:01:12)``; no middle when no whole bucket fits.
        """
        first, last = ceil_to(self.since, grain), floor_to(self.until, grain)
        if first >= last:
            return None, [self]
        middle = TimeRange(first, last)
        ends = []
        if self.since < first:
            ends.append(TimeRange(self.since, middle.since))
        if last < self.until:
            ends.append(TimeRange(middle.until, self.until))
        return middle, ends

    def __str__(self) -> str:
        return f"[{self.since.isoformat()}, {self.until.isoformat()})"


def time_range(
    since: Instant = "1h", until: Instant = None, now: datetime | None = None
) -> TimeRange:
    """The range a question names; ``until`` defaults to now, ``since`` to an hour before.

    Unless ``now`` is given, now is the clock's next whole second: a range ending now holds
    everything written until now, and ranges counted back from it start on whole seconds,
    which an SLO's totals per second answer without reading a request one by one
    (docs/slo-rollups.md, "The ragged ends").
    """
    now = _to_ms(now) if now is not None else ceil_to(_to_ms(datetime.now(UTC)), _SECOND)
    try:
        start = _to_ms(parse_instant(since if since is not None else "1h", now))
        end = _to_ms(parse_instant(until, now))
    except OverflowError:  # a duration back from now past the year 1
        raise QueryError(f"bad time range: {since!r} reaches before the year 1") from None
    if start >= end:
        raise QueryError(
            f"bad time range: since ({start.isoformat()}) is not before until ({end.isoformat()})"
        )
    return TimeRange(start, end)


def _to_ms(moment: datetime) -> datetime:
    moment = parse_instant(moment, moment)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)


def floor_to(moment: datetime, step: timedelta) -> datetime:
    """The start of the ``step`` bucket holding ``moment`` (buckets count from 1970, UTC)."""
    return moment - (moment - _EPOCH) % step


def ceil_to(moment: datetime, step: timedelta) -> datetime:
    """The first ``step`` boundary at or after ``moment``."""
    floor = floor_to(moment, step)
    return floor if floor == moment else floor + step


def _epoch_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)
