"""The retention stage: what of a decoded write the store keeps, and why the rest is refused.

A time the store would drop at once (older than its retention), hold wrongly (past what
its types or TTL can represent) or that is further ahead than ``max_future_seconds`` is
refused, never acknowledged: ClickHouse's TTL drops the old at once, and a time past
2106 wraps in it (docs/security.md). The windows themselves are :mod:`.time_window`'s.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from warehouse.ingest.remote_write_tables import DecodedWrite, series_times_of_kept
from warehouse.ingest.request_pivot import Pivot, pivot_rows, request_times
from warehouse.ingest.time_window import TimeWindow, keep_within

__all__ = ["parts_within", "samples_within"]

Refused = tuple[int, str]
"""How many values a stage refused, and why (the first reason)."""


def samples_within(decoded: DecodedWrite, window: TimeWindow) -> tuple[DecodedWrite, Refused]:
    """The write less the samples, histograms and exemplars outside ``window``; how many
    those were and why."""
    kept, gone, reasons = {}, {}, []
    for name in ("samples", "histograms", "exemplars"):
        kept[name], gone[name], reason = keep_within(getattr(decoded, name), "timestamp", window)
        if reason:
            reasons.append(reason)
    dropped = sum(gone.values())
    if not dropped:
        return decoded, (0, "")
    decoded = replace(
        decoded,
        **kept,
        samples_written=decoded.samples_written - gone["samples"],
        histograms_written=decoded.histograms_written - gone["histograms"],
        exemplars_written=decoded.exemplars_written - gone["exemplars"],
    )
    return series_times_of_kept(decoded), (dropped, f"a sample's {reasons[0]}")


def parts_within(pivot: Pivot, window: TimeWindow) -> tuple[Pivot, Refused]:
    """The pivot less the requests whose per-request metrics carry a time their
    ``requests`` row could not keep (``window``); how many samples those were and why."""
    if not len(pivot.rank):
        return pivot, (0, "")
    outside = np.zeros(len(pivot.rank), dtype=bool)
    reason = ""
    for times in request_times(pivot):
        mask, why = window.outside(pa.array(times, pa.int64()))
        outside |= mask.to_numpy(zero_copy_only=False)
        reason = reason or why
    if not reason:
        return pivot, (0, "")
    refused = int(outside.sum())
    return pivot_rows(pivot, ~outside), (refused, f"a per-request metric's time {reason}")
