"""How far sealing trails the request parts this receiver wrote, and when to push back.

Per-request metrics sent as samples land as ``request_parts`` rows and count once
sealing has made them ``requests`` rows (docs/per-request-metrics.md, "Sealing").
Sealing runs beside the receiver on the same cores: a receiver that acknowledged parts
as fast as it can take them in would leave sealing ever further behind. So the receiver
remembers when it wrote parts that are not sealed yet, and while the oldest of them has
waited longer than :attr:`SealingLag.limit` it refuses writes that carry per-request
metrics with 429 (the sender retries them later); plain series are never refused for it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["SealingLag", "lag_limit"]

_BUCKET_S = 0.1
"""Writes within this long of the first of them are remembered as one: waiting since
the first, sealed with the last."""


def lag_limit(seal_after_seconds: float, seal_every_seconds: float) -> float:
    """The longest a written part may wait to be sealed before writes are refused.

    A part is sealed by the first refresh that starts ``seal_after_seconds`` after it
    came, within ``seal_every_seconds`` of that. Once a refresh has run for a fifth of
    its period the intake of per-request metrics pauses until it is done, so that the
    next refresh has no more to seal than this one could (with half a period of grace,
    refreshes ran as long as the period under sustained full-speed writes).
    """
    return seal_after_seconds + 1.2 * seal_every_seconds


class SealingLag:
    """The write times (Unix seconds) of request parts not yet known to be sealed."""

    def __init__(self, limit: float, clock: Callable[[], float] = time.time):
        self.limit = limit
        self._clock = clock
        self._unsealed: deque[list[float]] = deque()  # [first, last] write times

    def wrote(self, at: float) -> None:
        """Parts were committed whose ``received`` is ``at`` or later."""
        if self._unsealed and at - self._unsealed[-1][0] < _BUCKET_S:
            self._unsealed[-1][1] = max(self._unsealed[-1][1], at)
        else:
            self._unsealed.append([at, at])

    def sealed(self, through: float) -> None:
        """Every part received at or before ``through`` is sealed."""
        while self._unsealed and self._unsealed[0][1] <= through:
            self._unsealed.popleft()

    @property
    def waiting(self) -> bool:
        """Whether any part this receiver wrote may still be unsealed."""
        return bool(self._unsealed)

    def seconds(self) -> float:
        """How long the oldest unsealed part has waited (0 when none)."""
        return max(0.0, self._clock() - self._unsealed[0][0]) if self._unsealed else 0.0

    def behind(self) -> bool:
        """Whether writes of per-request metrics should be refused for now."""
        return self.seconds() > self.limit
