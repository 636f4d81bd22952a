"""The receiver's view of how far sealing trails the parts it wrote."""

from __future__ import annotations

from warehouse.ingest.sealing import SealingLag, lag_limit, refresh_limit


class Clock:
    def __init__(self, now: float = 1_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_limit_is_seal_after_and_one_and_a_fifth_periods():
    assert lag_limit(10, 5) == 16
    assert lag_limit(1, 1) == 2.2


def test_nothing_written_is_never_behind():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock)
    clock.now += 3600
    assert (lag.waiting, lag.seconds(), lag.behind()) == (False, 0.0, False)


def test_the_oldest_unsealed_write_sets_the_lag():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock)
    lag.wrote(1_000.0)
    lag.wrote(1_001.0)
    clock.now = 1_002.0
    assert lag.seconds() == 2.0 and not lag.behind()
    clock.now = 1_002.6
    assert lag.behind()
    lag.sealed(through=1_000.5)  # the first write is sealed, the second is not
    assert abs(lag.seconds() - 1.6) < 1e-9
    assert not lag.behind()
    lag.sealed(through=1_001.0)  # sealed through exactly its time: sealed
    assert not lag.waiting and lag.seconds() == 0.0


def test_sealed_through_a_time_before_the_write_leaves_it_waiting():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock)
    lag.wrote(1_000.0)
    lag.sealed(through=999.999)
    assert lag.waiting


def test_writes_close_together_wait_since_the_first_and_are_sealed_with_the_last():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock)
    for i in range(1_000):
        lag.wrote(1_000.0 + i * 0.001)  # a second of writes, one a millisecond
    clock.now = 1_003.0
    assert lag.seconds() == 3.0
    lag.sealed(through=1_000.95)
    # Never counted sealed early; counted waiting from at most 0.1 s too early.
    assert lag.waiting and 2.0 < lag.seconds() <= 2.15
    lag.sealed(through=1_000.999)
    assert not lag.waiting


def test_a_refresh_may_run_a_fifth_of_its_period_before_writes_are_refused():
    assert refresh_limit(5) == 1.0
    assert refresh_limit(30) == 6.0
    assert refresh_limit(1) == 1.0  # never less than two polls of it


def test_writes_are_refused_while_a_long_refresh_runs_with_parts_waiting():
    clock = Clock()
    lag = SealingLag(limit=16, clock=clock, refresh_limit=2.5)
    lag.wrote(1_000.0)
    lag.refreshing(1_000)  # first seen running now
    clock.now += 2.0
    lag.refreshing(1_000)  # seen again: still counted from the first sight
    assert not lag.behind()
    clock.now += 0.6
    assert lag.behind() and "has run 2.6s (limit 2.5s)" in lag.reason()
    lag.refreshing(None)  # it ended
    assert not lag.behind() and lag.refresh_seconds() == 0.0
    lag.refreshing(1_005)  # the next one counts from its own first sight
    clock.now += 1.0
    assert lag.refresh_seconds() == 1.0 and not lag.behind()


def test_a_refresh_seen_while_no_part_of_ours_waits_is_not_counted():
    clock = Clock()
    lag = SealingLag(limit=16, clock=clock, refresh_limit=2.5)
    lag.refreshing(1_000)
    clock.now += 30
    lag.wrote(clock.now)
    assert lag.refresh_seconds() == 0.0 and not lag.behind()
    lag.refreshing(1_000)  # the next poll: counted from this sight
    clock.now += 2.6
    assert lag.behind()


def test_a_refresh_is_forgotten_once_everything_of_ours_is_sealed():
    """As the receiver's poll reports it: how far sealing got, then the refresh."""
    clock = Clock()
    lag = SealingLag(limit=16, clock=clock, refresh_limit=2.5)
    lag.wrote(1_000.0)
    clock.now = 1_003.0
    lag.sealed(through=1_000.0)
    lag.refreshing(1_002)  # the last refresh is still finishing
    clock.now = 1_060.0  # nothing waits, so no one looks at refreshes meanwhile
    lag.wrote(clock.now)
    assert lag.refresh_seconds() == 0.0 and not lag.behind()


def test_a_refresh_not_known_counts_as_none():
    clock = Clock()
    lag = SealingLag(limit=16, clock=clock, refresh_limit=2.5)
    lag.wrote(1_000.0)
    lag.refreshing(1_000)
    clock.now += 2.0
    lag.refreshing(None)  # a poll failed
    clock.now += 5.0
    assert not lag.behind()


def test_the_lag_is_named_first_when_both_hold():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock, refresh_limit=2.5)
    lag.wrote(1_000.0)
    lag.refreshing(1_000)
    clock.now = 1_003.0
    assert lag.behind() and "3s behind the parts written (limit 2.5s)" in lag.reason()


def test_a_refresh_seen_before_everything_was_sealed_is_forgotten():
    clock = Clock()
    lag = SealingLag(limit=16, clock=clock, refresh_limit=2.5)
    lag.wrote(1_000.0)
    lag.refreshing(1_000)
    lag.sealed(through=1_000.0)
    clock.now += 60  # nothing waits, so no one looks at refreshes meanwhile
    lag.wrote(clock.now)
    assert lag.refresh_seconds() == 0.0 and not lag.behind()


def test_one_tenants_unsealed_parts_throttle_that_tenant_only():
    clock = Clock()
    lag = SealingLag(limit=2.5, clock=clock, refresh_limit=1.0)
    lag.wrote(1_000.0, "acme")  # say, parts sealing never reaches
    clock.now = 1_003.0
    assert lag.behind("acme") and "3s behind" in lag.reason("acme")
    assert not lag.behind("bravo") and lag.seconds("bravo") == 0.0
    assert lag.seconds() == 3.0  # the receiver's own gauge: the oldest of anyone's
    lag.wrote(1_002.9, "bravo")
    lag.refreshing("refresh-1")
    clock.now = 1_004.5  # the refresh has run 1.5 s, past its limit
    assert lag.behind("bravo") and not lag.behind("globex")  # globex has nothing waiting
    lag.sealed(through=1_003.0)
    assert not lag.waiting and not lag.behind("acme")


def test_a_part_stamped_in_the_millisecond_of_its_write_is_seen_sealed():
    # `received` is stored to the millisecond, cut down: written at 1000.0004 s, the
    # part reads back as received at 1000.000. Sealed through that, the write is sealed,
    # or the last write before a quiet spell would hold every later one back for good.
    lag = SealingLag(limit=2.5, clock=Clock())
    lag.wrote(1_000.0004)
    lag.sealed(through=1_000.000)
    assert not lag.waiting
