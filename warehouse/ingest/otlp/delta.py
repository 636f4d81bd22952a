"""Delta points made cumulative, stream by stream, as Prometheus series need them.

A Prometheus counter or histogram holds running totals; an OpenTelemetry sender with
delta temporality sends what changed since its last point. The compatibility
specification asks for the deltas to be summed into a cumulative stream, each new
point starting where the stream's last one ended. That rule is also what keeps a
retried export from counting twice (docs/otlp.md, "Delta temporality"):

* a point that starts where the stream ended is added;
* one of the stream's last few points sent again (same start and end) gives the totals
  it gave then, which the store collapses into the sample it has;
* a point that starts after the stream ended (points went missing, came out of order,
  or the sender restarted) starts a new stream from its own start: a counter reset,
  which ``rate`` reads as one. So does a point of a shape the stream's cannot be brought
  to (other bucket bounds); exponential histograms of another scale are both brought to
  the coarser one;
* a point that starts inside what the stream has summed, and is not one of its last
  points again, cannot be placed and is refused.

An export's points are summed in a :class:`DeltaBatch`, which the streams take only
once the export is committed (:meth:`DeltaStreams.commit`): a refused or failed export
moves no stream, so its retry is summed as if it came the first time.

The streams live in the receiver's memory, bounded in number and in values held (the
least recently written go first; their next point starts a new stream). After a
restart every stream starts anew, as a sender's own restart would.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from warehouse.errors import Overlap

__all__ = ["DeltaBatch", "DeltaStreams", "Overlap"]

Totals = dict[Hashable, float]
Reshape = Callable[
    [Totals, Hashable, Mapping[Hashable, float], Hashable],
    tuple[Totals, Mapping[Hashable, float], Hashable] | None,
]
"""(totals, their shape, a point's values, its shape) -> both in one shape, or None."""
RECENT = 8
"""Points of a stream remembered, so a retried export of several gives each its totals."""


@dataclass
class Summed:
    """A delta point's place in its stream: what to write for it."""

    start: int
    """Nanoseconds: when the cumulative stream began (the samples' start time)."""
    totals: Totals
    shape: Hashable
    """The shape the totals are in (an exponential histogram's may be coarser now)."""


@dataclass
class _Stream:
    start: int
    end: int
    """Nanoseconds: the end of the last point summed."""
    shape: Hashable
    totals: Totals
    recent: deque[tuple[int, int, Summed]] = field(default_factory=lambda: deque(maxlen=RECENT))
    """(start, end, Summed) of the last points summed."""

    def copy(self) -> _Stream:
        return _Stream(self.start, self.end, self.shape, dict(self.totals), deque(self.recent))

    def took(self, start: int, end: int) -> Summed:
        summed = Summed(self.start, dict(self.totals), self.shape)
        self.recent.append((start, end, summed))
        return summed


class DeltaStreams:
    """The running totals of delta streams, safe to use from several threads."""

    def __init__(self, max_streams: int = 200_000, max_values: int = 4_000_000):
        self.max_streams = max_streams
        self.max_values = max_values
        """Totals held across all streams (a histogram's buckets each count)."""
        self._streams: OrderedDict[Hashable, _Stream] = OrderedDict()
        self._values = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._streams)

    def batch(self) -> DeltaBatch:
        """An export's points, summed apart until :meth:`commit`."""
        return DeltaBatch(self)

    def commit(self, batch: DeltaBatch) -> None:
        """Take an export's streams, once the export is committed."""
        with self._lock:
            for key, stream in batch.touched.items():
                old = self._streams.pop(key, None)
                self._values += len(stream.totals) - (len(old.totals) if old else 0)
                self._streams[key] = stream
            while self._streams and (
                len(self._streams) > self.max_streams or self._values > self.max_values
            ):
                _, gone = self._streams.popitem(last=False)
                self._values -= len(gone.totals)

    def _copy(self, key: Hashable) -> _Stream | None:
        with self._lock:
            stream = self._streams.get(key)
            return None if stream is None else stream.copy()


class DeltaBatch:
    """The delta points of one export, summed onto copies of their streams."""

    def __init__(self, streams: DeltaStreams):
        self._streams = streams
        self.touched: dict[Hashable, _Stream] = {}

    def add(
        self,
        key: Hashable,
        start: int,
        end: int,
        shape: Hashable,
        values: Mapping[Hashable, float],
        reshape: Reshape | None = None,
    ) -> Summed:
        """Sum one delta point (``start``/``end`` in ns) into stream ``key``. Raises
        :class:`Overlap`. ``reshape`` brings a stream and a point of another shape to one."""
        if end <= start:
            raise Overlap(f"a delta point must end after it starts ({start} to {end} ns)")
        stream = self.touched.get(key) or self._streams._copy(key)
        if stream is not None:
            for seen_start, seen_end, summed in stream.recent:
                if (seen_start, seen_end) == (start, end):
                    return summed  # sent again: what it gave the first time
            if start == stream.end and stream.shape != shape:
                both = reshape(stream.totals, stream.shape, values, shape) if reshape else None
                if both is None:
                    stream = None  # cannot be brought together: a new stream
                else:
                    stream.totals, values, stream.shape = both
                    shape = stream.shape
        if stream is not None and start == stream.end:
            for name, value in values.items():
                stream.totals[name] = stream.totals.get(name, 0) + value
            stream.end = end
        elif stream is None or start > stream.end:
            stream = _Stream(start, end, shape, dict(values))
        else:
            raise Overlap(
                f"a delta point from {start} to {end} ns overlaps its stream, "
                f"summed up to {stream.end} ns"
            )
        self.touched[key] = stream
        return stream.took(start, end)
