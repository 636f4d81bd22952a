"""When synthetic requests arrive: a diurnal arrival rate, and health-check probes on a beat.

User traffic follows a daily cycle (busiest mid-afternoon UTC, quietest twelve hours
later); the cycle's depth is ``diurnal``, the trough's rate as a share below the mean.
Probes do not follow users: one fires every few seconds, round the zones in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warehouse.errors import InvalidArgument

__all__ = ["Arrivals", "arrivals", "rate_factor"]

PEAK_HOUR_UTC = 15.0
PROBE_SHARE = 0.005
"""Share of all requests that are health-check probes."""


@dataclass(frozen=True)
class Arrivals:
    """Arrival times (epoch ms, ascending) of every request, which are probes, and the
    load at each arrival (the arrival rate against the mean: 1 is an average moment)."""

    ts: np.ndarray
    is_probe: np.ndarray
    load: np.ndarray


def rate_factor(ts_ms: np.ndarray, diurnal: float) -> np.ndarray:
    """The user arrival rate at ``ts_ms`` against the day's mean rate."""
    hours = (np.asarray(ts_ms, dtype=np.float64) / 3_600_000.0) % 24.0
    return 1.0 + diurnal * np.cos(2 * np.pi * (hours - PEAK_HOUR_UTC) / 24.0)


def arrivals(
    rng: np.random.Generator, n: int, start_ms: int, span_ms: int, diurnal: float
) -> Arrivals:
    """``n`` arrivals over ``[start_ms, start_ms + span_ms)``, probes among them."""
    if not 0 <= diurnal < 1:
        raise InvalidArgument(f"diurnal must be in [0, 1), got {diurnal!r}")
    probes = round(n * PROBE_SHARE)
    users = n - probes
    # Inverse-CDF sampling of the rate on a grid of (at most) one-minute cells.
    cells = max(1, min(span_ms // 60_000, 100_000))
    edges = np.linspace(start_ms, start_ms + span_ms, cells + 1)
    weights = rate_factor((edges[:-1] + edges[1:]) / 2, diurnal)
    cdf = np.concatenate([[0.0], np.cumsum(weights)])
    cdf /= cdf[-1]
    user_ts = np.interp(np.sort(rng.random(users)), cdf, edges).astype(np.int64)
    probe_ts = start_ms + ((np.arange(probes) + 0.5) * span_ms / max(probes, 1)).astype(np.int64)
    ts = np.concatenate([user_ts, probe_ts])
    is_probe = np.concatenate([np.zeros(users, bool), np.ones(probes, bool)])
    order = np.argsort(ts, kind="stable")
    ts, is_probe = ts[order], is_probe[order]
    return Arrivals(ts=ts, is_probe=is_probe, load=rate_factor(ts, diurnal))
