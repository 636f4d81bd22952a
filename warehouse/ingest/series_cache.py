"""The series a receiver has written, so that a flush writes only the new or widened rows.

A long-lived series sends a sample every scrape, with the same label fields byte for
byte. Writing its ``series`` row on every flush costs ClickHouse an insert (a part of a
dozen files, merged away later) for a row that collapses into the one already there,
and reading its labels, sorting them and hashing them into its id costs the receiver
most of what it spends on the sample. :class:`WrittenSeries` files each series whose
row is committed under its label fields (and tenant), with its id and the time range
the rows written so far cover; the C decoder, given it, maps those bytes straight to
the id and gives a row only when the series is new to this receiver, reaches back
before that range, or into a later refresh period than its end. Periods are
``refresh_seconds`` long and aligned on the epoch, so the series of a scrape cross into
the next period together and their rewrites share a flush instead of trickling into
every one. So ``series.min_time`` stays exact and ``series.max_time`` trails a live
series' newest sample by less than ``refresh_seconds``. The table lives in C
(``_known_series.h``); past ``capacity`` series it starts again empty, which costs one
more row of each.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from warehouse.ingest._v1_fast import KnownSeries
from warehouse.ingest.remote_write_tables import DecodedWrite

__all__ = ["WrittenSeries", "id_bytes"]


class WrittenSeries:
    """The series rows a receiver has committed (see the module docstring).

    Pass :attr:`known` to the C decoder (``decode_v1_batch(..., known=...)``); its
    ``series`` table then holds only the rows still to write. One table serves one
    receiver's decoder, with one set of limits and one metric mapping.
    """

    def __init__(self, capacity: int, refresh_seconds: float):
        # The C hash is keyed with a secret of the process, so a sender cannot aim label
        # fields at one slot; the table bounds how far an entry sits from its slot and
        # how many key bytes it holds all the same.
        self.known = KnownSeries(capacity, int(refresh_seconds * 1000))

    def __len__(self) -> int:
        return len(self.known)

    def remember(self, decoded: DecodedWrite) -> None:
        """``decoded``'s rows are committed: file them."""
        if decoded.filing:
            self.known.remember(*decoded.filing)

    def clear(self) -> None:
        """Forget every series (each is written again at its next flush)."""
        self.known.clear()


def id_bytes(series: pa.Table) -> np.ndarray:
    """The 16-byte ids of a ``series`` table, back to back, as the C tables take them."""
    ids = series.column("id").combine_chunks().storage  # fixed_size_binary(16)
    raw = np.frombuffer(ids.buffers()[1], np.uint8)[ids.offset * 16 : (ids.offset + len(ids)) * 16]
    return np.ascontiguousarray(raw)
