"""Waiting for a state: look at it until it holds, or fail once a deadline passes.

A test that waits for something to happen (a server to come up, a write to be
acknowledged, a refresh to run) polls for that state and fails naming it, with the
last value it saw, when the deadline passes; it never sleeps a fixed time and hopes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    look: Callable[[], T],
    what: str,
    *,
    until: Callable[[T], object] = bool,
    timeout: float = 30.0,
    every: float = 0.2,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``look`` every ``every`` seconds until ``until(value)`` holds; return that value.

    ``what`` names the state awaited, for the failure after ``timeout`` seconds.
    Exceptions in ``ignoring`` (a server not listening yet: ``OSError``) count as the
    state not being there yet; any other exception fails at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = look()
        except ignoring as exc:
            seen: object = exc
        else:
            if until(value):
                return value
            seen = value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; last seen: {seen!r}")
        time.sleep(every)


async def poll_until_async(
    look: Callable[[], T],
    what: str,
    *,
    until: Callable[[T], object] = bool,
    timeout: float = 5.0,
    every: float = 0.001,
) -> T:
    """:func:`poll_until` inside an event loop: the other tasks run between looks."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = look()
        if until(value):
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; last seen: {value!r}")
        await asyncio.sleep(every)


def well_inside_a_minute(spare: float = 10.0) -> None:
    """Return once ``spare`` seconds of the clock's minute are left.

    ``request_parts`` collapses a repeated write into the row it repeats only within one
    minute of receipt (it is sorted by that minute first): writes that a test expects to
    collapse must not straddle a minute's end.
    """
    poll_until(
        lambda: time.time() % 60,
        f"{spare:g} s left in the clock's minute",
        until=lambda second: second < 60 - spare,
        timeout=spare + 1,
        every=0.1,
    )
