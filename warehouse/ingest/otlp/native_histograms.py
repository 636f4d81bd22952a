"""Exponential histogram buckets as Prometheus native histogram buckets.

Both index their buckets by powers of ``2 ** (2 ** -scale)``, but OpenTelemetry's bucket
``i`` holds values above the ``i``-th boundary and Prometheus's holds values up to it:
Prometheus's index is OpenTelemetry's + 1. Merging a scale down by one pairs
OpenTelemetry buckets ``2k`` and ``2k + 1`` into ``k``, so merging down ``shift`` scales
is ``i >> shift`` on OpenTelemetry's index.

Buckets here are ``{Prometheus index: count}``; accumulated histograms keep them under
``("p", index)`` and ``("n", index)`` keys beside ``count``, ``sum`` and ``zero``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

__all__ = ["coarser_scale", "from_otlp", "spans_and_deltas"]


def from_otlp(offset: int, counts: Iterable[int], shift: int = 0) -> dict[int, int]:
    """OTLP's dense buckets (first index ``offset``) by Prometheus index, merged down
    ``shift`` scales; empty buckets left out."""
    merged: dict[int, int] = {}
    for index, count in enumerate(counts, start=offset):
        if count:
            key = _merged(index + 1, shift)
            merged[key] = merged.get(key, 0) + count
    return merged


def coarser_scale(
    totals: Mapping[Hashable, float],
    shape: tuple[int, float],
    values: Mapping[Hashable, float],
    other: tuple[int, float],
) -> tuple[dict[Hashable, float], dict[Hashable, float], tuple[int, float]] | None:
    """A stream's accumulated values and a point's, both at the coarser of their
    scales; None when they cannot meet (their zero thresholds differ).

    ``shape`` and ``other`` are ``(scale, zero_threshold)``.
    """
    (scale, threshold), (other_scale, other_threshold) = shape, other
    if threshold != other_threshold:
        return None
    coarse = min(scale, other_scale)
    return (
        _downscaled(totals, scale - coarse),
        _downscaled(values, other_scale - coarse),
        (coarse, threshold),
    )


def spans_and_deltas(buckets: Mapping[int, int]) -> tuple[list[tuple[int, int]], list[int]]:
    """A native histogram's ``(offset, length)`` spans and count deltas for buckets by
    Prometheus index: each span starts ``offset`` buckets after the last one ended (the
    first, at its index), and each count is written as the change from the last."""
    spans: list[list[int]] = []
    deltas: list[int] = []
    last_index, last_count = None, 0
    for index in sorted(buckets):
        if last_index is None or index != last_index + 1:
            spans.append([index if last_index is None else index - last_index - 1, 0])
        spans[-1][1] += 1
        count = int(buckets[index])
        deltas.append(count - last_count)
        last_index, last_count = index, count
    return [(offset, length) for offset, length in spans], deltas


def _merged(prometheus_index: int, shift: int) -> int:
    """A Prometheus bucket index ``shift`` scales down."""
    return ((prometheus_index - 1) >> shift) + 1 if shift else prometheus_index


def _downscaled(values: Mapping[Hashable, float], shift: int) -> dict[Hashable, float]:
    merged: dict[Hashable, float] = {}
    for key, count in values.items():
        if isinstance(key, tuple):  # (sign, Prometheus index)
            key = (key[0], _merged(key[1], shift))
        merged[key] = merged.get(key, 0) + count
    return merged
