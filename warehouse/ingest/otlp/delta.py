"""Delta points made cumulative, stream by stream, as Prometheus series need them.

A Prometheus counter or histogram holds running totals; an OpenTelemetry sender with
delta temporality sends what changed since its last point. The compatibility
specification asks for the deltas to be summed into a cumulative stream, each new
point starting where the stream's last one ended. That rule is also what keeps a
retried export from counting twice (docs/otlp.md, "Delta temporality"):

* a point that starts where the stream ended is added;
* the stream's last point sent again (same start and end) gives the same totals
  again, which the store collapses into the sample it has;
* a point that starts after the stream ended (points went missing, or the sender
  restarted) or has another shape that cannot be brought to the stream's (other
  bucket bounds) starts a new stream, from that point's start: a counter reset, which
  ``rate`` reads as one (exponential histograms of another scale are both brought to
  the coarser one);
* a point that starts before the stream ended and is not the last one again cannot be
  placed, and is refused.

The streams live in the receiver's memory, at most ``max_streams`` of them (the least
recently written go first; their next point starts a new stream). After a restart
every stream starts anew, as a sender's own restart would.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

__all__ = ["DeltaStreams", "Overlap"]

Totals = dict[Hashable, float]
Reshape = Callable[[Totals, Hashable, Mapping, Hashable], tuple[Totals, Mapping, Hashable] | None]
"""(totals, their shape, a point's values, its shape) -> both in one shape, or None."""


class Overlap(Exception):
    """A delta point that starts inside what its stream has already summed."""


@dataclass
class _Stream:
    start: int
    """Nanoseconds: when the cumulative stream began."""
    end: int
    """Nanoseconds: the end of the last point summed."""
    last_start: int
    """The start of the last point summed (its retry is recognised)."""
    shape: Hashable
    totals: Totals


class DeltaStreams:
    """The running totals of delta streams, safe to use from several threads."""

    def __init__(self, max_streams: int = 200_000):
        self.max_streams = max_streams
        self._streams: OrderedDict[Hashable, _Stream] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._streams)

    def add(
        self,
        key: Hashable,
        start: int,
        end: int,
        shape: Hashable,
        values: Mapping,
        reshape: Reshape | None = None,
    ) -> tuple[int, Totals]:
        """Sum one delta point (``start``/``end`` in ns) into stream ``key``; returns the
        stream's start and its totals after the point. Raises :class:`Overlap`.

        ``reshape`` brings a stream's totals and a point of another shape to one shape.
        """
        with self._lock:
            stream = self._streams.get(key)
            if stream is not None and stream.shape != shape and reshape is not None:
                both = reshape(stream.totals, stream.shape, values, shape)
                if both is not None:
                    stream.totals, values, shape = both
                    stream.shape = shape
            if stream is None or stream.shape != shape or start > stream.end:
                stream = _Stream(start, end, start, shape, dict(values))
            elif start == stream.end and end > start:
                totals = stream.totals
                for name, value in values.items():
                    totals[name] = totals.get(name, 0) + value
                stream.last_start, stream.end = start, end
            elif start != stream.last_start or end != stream.end:
                raise Overlap(
                    f"a delta point from {start} to {end} ns overlaps its stream, "
                    f"summed up to {stream.end} ns"
                )
            self._streams[key] = stream
            self._streams.move_to_end(key)
            while len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
            return stream.start, dict(stream.totals)
