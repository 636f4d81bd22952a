"""How far sealing trails the request parts this receiver wrote, and when to push back.

Per-request metrics sent as samples land as ``request_parts`` rows and count once
sealing has made them ``requests`` rows (docs/per-request-metrics.md, "Sealing").
Sealing runs beside the receiver on the same cores: a receiver that acknowledged parts
as fast as it can take them in would leave sealing ever further behind. So the receiver
remembers when it wrote parts that are not sealed yet, per tenant, and while the oldest
of a tenant's has waited longer than :attr:`SealingLag.limit` it refuses that tenant's
writes that carry per-request metrics with 429 (the sender retries them later); plain
series are never refused for it, and no tenant for another's parts. It refuses them too,
to the tenants with parts waiting, while the store's sealing refresh has run longer than
:func:`refresh_limit`: a refresh slowed by the intake competing for the same cores then
gets them, and finishes within its period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable

from warehouse.config import Config
from warehouse.errors import SealingBehind
from warehouse.store.base import Store
from warehouse.store.sealing import SealingProgress, seal

__all__ = ["POLL_SECONDS", "Sealer", "SealingLag", "lag_limit", "refresh_limit"]

log = logging.getLogger("llmwh.receiver")

POLL_SECONDS = 0.5
"""How often a receiver reads how far sealing got, while parts it wrote wait."""

_SAME_MS = 1e-6
"""Times within this of each other are one millisecond read back two ways (a float of
milliseconds, and a stored DateTime64(3) as Unix seconds)."""

_BUCKET_S = 0.1
"""Writes within this long of the first of them are remembered as one: waiting since
the first, sealed with the last."""


def lag_limit(seal_after_seconds: float, seal_every_seconds: float) -> float:
    """The longest a written part may wait to be sealed before writes are refused.

    A part is sealed by the first refresh that starts ``seal_after_seconds`` after it
    came, within ``seal_every_seconds`` of that; the fifth of a period more is for the
    refresh itself, which the intake leaves alone once it has run :func:`refresh_limit`.
    """
    return seal_after_seconds + 1.2 * seal_every_seconds


def refresh_limit(seal_every_seconds: float) -> float:
    """How long a refresh of the sealing view may run before writes are refused.

    A fifth of its period: a refresh that competes with the intake for two cores runs
    at a fraction of its speed, and how much the next one must seal grows with every
    second the intake keeps going. Paused at half its period, the longest refresh still
    ran past the period under sustained full-speed writes (6.5 s of 5); paused at a
    fifth, it ran at most 4.6 s, and the receiver took more, not less: parts waited
    less, so the lag limit refused fewer writes (docs/per-request-metrics.md,
    "Measured"). At least 1 s, two of the receiver's polls: a refresh is seen only when
    a poll finds it running.
    """
    return max(seal_every_seconds / 5, 2 * POLL_SECONDS)


class SealingLag:
    """The write times (Unix seconds) of each tenant's request parts not yet known to be
    sealed, and since when the store's sealing refresh has been running, if it is. The
    tenant ``""`` stands for writes without one (single-tenant mode, the write-ahead
    log's inserts)."""

    def __init__(
        self,
        limit: float,
        clock: Callable[[], float] = time.time,
        refresh_limit: float = float("inf"),
    ):
        self.limit = limit
        self.refresh_limit = refresh_limit
        self._clock = clock
        # [first, last] write times, per tenant
        self._unsealed: dict[str, deque[list[float]]] = {}
        self._refresh: tuple[object, float] | None = None  # (which, first seen)

    def wrote(self, at: float, tenant: str = "") -> None:
        """``tenant``'s parts were committed whose ``received`` is ``at`` or later."""
        # `received` is kept to the millisecond, cut down: a part stamped in the same
        # millisecond as `at`, after it, reads back earlier than `at`, and were it the last
        # part written, sealing would never be seen to reach it (every later write of
        # per-request metrics refused). So the write counts from its millisecond.
        at = math.floor(at * 1000 + 1e-6) / 1000
        waiting = self._unsealed.setdefault(tenant, deque())
        if waiting and at - waiting[-1][0] < _BUCKET_S:
            waiting[-1][1] = max(waiting[-1][1], at)
        else:
            waiting.append([at, at])

    def sealed(self, through: float) -> None:
        """Every part received at or before ``through`` is sealed."""
        for tenant, waiting in list(self._unsealed.items()):
            while waiting and waiting[0][1] <= through + _SAME_MS:
                waiting.popleft()
            if not waiting:
                del self._unsealed[tenant]
        if not self._unsealed:  # not followed while nothing waits: forget it
            self._refresh = None

    def refreshing(self, which: object | None) -> None:
        """The sealing refresh named ``which`` (its start, as the store gives it) is
        running; None: none is, or it is not known. It counts as running since it was
        first seen while parts of ours waited (refreshes are not followed while none
        wait, so one seen then would count from a sight long past)."""
        if which is None or not self._unsealed:
            self._refresh = None
        elif self._refresh is None or self._refresh[0] != which:
            self._refresh = (which, self._clock())

    def refresh_seconds(self) -> float:
        """How long the running refresh has been seen running (0 when none is)."""
        return 0.0 if self._refresh is None else max(0.0, self._clock() - self._refresh[1])

    @property
    def waiting(self) -> bool:
        """Whether any part this receiver wrote may still be unsealed."""
        return bool(self._unsealed)

    def seconds(self, tenant: str | None = None) -> float:
        """How long the oldest unsealed part (of ``tenant``; None: of anyone) has waited
        (0 when none)."""
        if tenant is None:
            firsts = [waiting[0][0] for waiting in self._unsealed.values()]
        else:
            firsts = [self._unsealed[tenant][0][0]] if tenant in self._unsealed else []
        return max(0.0, self._clock() - min(firsts)) if firsts else 0.0

    def behind(self, tenant: str = "") -> bool:
        """Whether ``tenant``'s writes of per-request metrics should be refused for now:
        its oldest unsealed part waited too long, or its parts wait on a refresh that
        runs too long."""
        if self.seconds(tenant) > self.limit:
            return True
        return tenant in self._unsealed and self.refresh_seconds() > self.refresh_limit

    def reason(self, tenant: str = "") -> str:
        """Why :meth:`behind` holds, for the 429's message."""
        if self.seconds(tenant) > self.limit:
            return (
                f"sealing of per-request metrics is {self.seconds(tenant):.0f}s behind the "
                f"parts written (limit {self.limit:g}s)"
            )
        return (
            f"the sealing refresh has run {self.refresh_seconds():.1f}s "
            f"(limit {self.refresh_limit:g}s) with parts waiting"
        )


class Sealer:
    """Keeps a receiver's :class:`SealingLag` current while it runs: it follows the
    store's own sealing where the store has scheduled views, and seals on the
    ``seal_every_seconds`` period where it has none; and it refuses, with 429, a write of
    per-request metrics of a tenant whose parts wait too long."""

    RETRY_AFTER_SECONDS = 1

    def __init__(self, store: Store, config: Config, request_label: str):
        self.store = store
        self.config = config
        self.lag = SealingLag(
            lag_limit(config.seal_after_seconds, config.seal_every_seconds),
            refresh_limit=refresh_limit(config.seal_every_seconds),
        )
        self._request_label = request_label.encode()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        if self.store.capabilities.scheduled_views:
            self._task = asyncio.create_task(self._follow(), name="llmwh-sealing-watch")
        else:
            self._task = asyncio.create_task(self._seal_forever(), name="llmwh-sealer")

    async def stop(self) -> None:
        if self._task is None:
            return
        if self.store.capabilities.scheduled_views:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        else:
            # Not cancelled: a seal running in its thread would go on using the store
            # after stop() returned (and the store was closed). It ends at its next turn.
            self._stopping.set()
            await self._task

    async def seal(self) -> None:
        """Move requests whose parts are complete into `requests` (idempotent)."""
        started = time.time()
        await asyncio.to_thread(seal, self.store)
        self.lag.sealed(started - self.config.seal_after_seconds)

    def refuse_while_behind(self, raw: bytes, tenant: str | None) -> None:
        """429 for a body that may carry per-request metrics while ``tenant``'s sealing
        lags. A body without the request-id label's name anywhere in it carries none."""
        if self.lag.behind(tenant or "") and self._request_label in raw:
            raise SealingBehind(
                f"{self.lag.reason(tenant or '')}: retry later",
                retry_after=self.RETRY_AFTER_SECONDS,
            )

    async def _follow(self) -> None:
        """Follow how far the store's sealing view got, and how long its refresh has
        been running, while parts wait to be sealed."""
        progress = SealingProgress(self.store)
        while True:
            await asyncio.sleep(POLL_SECONDS)
            if not self.lag.waiting:
                continue
            try:
                through, running = await asyncio.to_thread(progress.read)
            except Exception as exc:  # the next poll retries; meanwhile the lag grows
                log.warning("could not read how far sealing got: %s", exc)
                self.lag.refreshing(None)  # not known: the lag limit alone decides
                continue
            if through is not None:
                self.lag.sealed(through)
            self.lag.refreshing(running)

    async def _seal_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.config.seal_every_seconds)
            if self._stopping.is_set():
                return
            try:
                await self.seal()
            except Exception:  # the next round retries; sealing is idempotent
                log.exception("sealing request parts failed")
