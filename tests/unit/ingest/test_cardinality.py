"""New series per tenant per minute: charged once per series, refused whole, reset each minute."""

from __future__ import annotations

import pytest
from payloads import v1

from warehouse.ingest.cardinality import NewSeriesBudget, TooManyNewSeries
from warehouse.ingest.remote_write import decode_v1

NOW = 1_790_000_000_000


def series(*pods: str):
    """The series table of a write with one `up` series per pod."""
    body = v1(*(([("__name__", "up"), ("pod", pod)], [(NOW, 1.0)]) for pod in pods))
    return decode_v1(body).series


class Clock:
    def __init__(self, now: float = 1_790_000_000.0):  # 20 s into a minute
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_known_series_are_not_charged_again(clock):
    budget = NewSeriesBudget(limit=3, capacity=100, clock=clock)
    budget.charge("acme", series("a", "b", "c"))
    budget.charge("acme", series("a", "b", "c"))  # the same three: nothing new
    with pytest.raises(TooManyNewSeries, match=r"tenant 'acme' would add 1 new series, 3 already"):
        budget.charge("acme", series("a", "d"))


def test_a_refused_write_is_refused_whole_and_charges_nothing(clock):
    budget = NewSeriesBudget(limit=3, capacity=100, clock=clock)
    budget.charge("acme", series("a", "b"))
    with pytest.raises(TooManyNewSeries) as refused:
        budget.charge("acme", series("c", "d"))
    assert refused.value.http_status == 429
    assert refused.value.retry_after == 41  # to the next minute, and a second
    assert "(max_new_series_per_minute)" in str(refused.value)
    budget.charge("acme", series("c"))  # c was not remembered: it is new now, and fits


def test_each_tenant_has_its_own_budget_and_it_renews_each_minute(clock):
    budget = NewSeriesBudget(limit=2, capacity=100, clock=clock)
    budget.charge("acme", series("a", "b"))
    budget.charge("globex", series("c", "d"))
    with pytest.raises(TooManyNewSeries):
        budget.charge("acme", series("e"))
    clock.now += 40  # the next minute
    budget.charge("acme", series("e", "f"))


def test_series_known_to_another_tenant_are_not_new(clock):
    """Series ids do not hold the tenant: a series any tenant sent is known."""
    budget = NewSeriesBudget(limit=1, capacity=100, clock=clock)
    budget.charge("acme", series("a"))
    budget.charge("globex", series("a"))


def test_recent_series_stay_known_across_a_generation(clock):
    budget = NewSeriesBudget(limit=1_000, capacity=4, clock=clock)
    budget.charge("acme", series("a", "b", "c"))
    budget.charge("acme", series("d", "e"))  # the current generation is full: a new one
    clock.now += 60
    budget.charge("acme", series(*"abcde"))
    assert budget._spent["acme"][1] == 0  # all five still known


def test_zero_is_no_limit(clock):
    budget = NewSeriesBudget(limit=0, capacity=10, clock=clock)
    budget.charge("acme", series(*(f"p{i}" for i in range(50))))
