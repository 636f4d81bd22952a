"""What one write may hold: series per write, labels per series, label name and value bytes.

Each limit is a setting (0 turns it off) and each has its own error, naming the
setting, the limit and the first series over it, so that an operator can tell a
misbehaving sender from a limit set too low. A write over a limit is refused whole
(HTTP 400: resending it cannot help); nothing of it is stored.

The defaults are those of Grafana Mimir's distributor (30 labels, 1024-byte names,
2048-byte values), which real exporters live within, and 100,000 series a write
(Prometheus sends 2,000 samples a write, vmagent up to 10,000 rows a block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.config import Config
from warehouse.errors import LimitExceeded

__all__ = ["LimitExceeded", "WriteLimits"]


@dataclass(frozen=True)
class WriteLimits:
    """The receiver's per-write limits; 0 means none."""

    series_per_write: int = 100_000
    labels_per_series: int = 30
    label_name_bytes: int = 1024
    label_value_bytes: int = 2048

    @classmethod
    def from_config(cls, config: Config) -> WriteLimits:
        return cls(
            config.max_series_per_write,
            config.max_labels_per_series,
            config.max_label_name_bytes,
            config.max_label_value_bytes,
        )

    def as_tuple(self) -> tuple[int, int, int, int]:
        """In the order the C decoder takes them."""
        return (
            self.series_per_write,
            self.labels_per_series,
            self.label_name_bytes,
            self.label_value_bytes,
        )

    def check_series(self, series: pa.Table) -> None:
        """Refuse a decoded write's ``series`` table (metric_name, labels) over a limit."""
        n = series.num_rows
        if self.series_per_write and n > self.series_per_write:
            raise LimitExceeded(
                f"the write holds {n:,} series; the limit is {self.series_per_write:,} "
                "(max_series_per_write): send smaller writes"
            )
        if not n:
            return
        labels = series.column("labels").combine_chunks()
        metric = series.column("metric_name").combine_chunks()
        counts = np.diff(labels.offsets.to_numpy()) + 1  # with __name__
        if (
            self.labels_per_series
            and (over := np.flatnonzero(counts > self.labels_per_series)).size
        ):
            k = int(over[0])
            raise LimitExceeded(
                f"series {_name(metric, k)} has {counts[k]} labels; the limit is "
                f"{self.labels_per_series} (max_labels_per_series)"
            )
        owner = np.repeat(np.arange(n), counts - 1)
        names, values = labels.keys, labels.items
        if self.label_name_bytes:
            self._check_bytes(names, owner, metric, self.label_name_bytes, "name", names)
        if self.label_value_bytes:
            self._check_bytes(metric, np.arange(n), metric, self.label_value_bytes, "value", None)
            self._check_bytes(values, owner, metric, self.label_value_bytes, "value", names)

    def check_requests(self, requests: pa.Table) -> None:
        """Refuse per-request events whose labels are over a limit: ``attrs`` entries
        count as labels, and every text column's value (``request_id`` too) as a label
        value."""
        if not requests.num_rows:
            return
        attrs = requests.column("attrs").combine_chunks()
        counts = np.diff(attrs.offsets.to_numpy())
        if (
            self.labels_per_series
            and (over := np.flatnonzero(counts > self.labels_per_series)).size
        ):
            raise LimitExceeded(
                f"row {int(over[0]) + 1}: attrs has {counts[over[0]]} labels; the limit is "
                f"{self.labels_per_series} (max_labels_per_series)"
            )
        owner = np.repeat(np.arange(requests.num_rows), counts)
        checks = [("attrs", attrs.keys, owner, self.label_name_bytes, "name")]
        checks.append(("attrs", attrs.items, owner, self.label_value_bytes, "value"))
        everyone = np.arange(requests.num_rows)
        # Every text column counts as a label value: the dimensions, and request_id,
        # error_class and the like (a 10 MB request id was once stored as sent).
        for field in requests.schema:
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                values = requests.column(field.name).combine_chunks()
                checks.append((field.name, values, everyone, self.label_value_bytes, "value"))
        for where, strings, rows, limit, what in checks:
            if limit and (found := _first_over(strings, limit)):
                k, length = found
                raise LimitExceeded(
                    f"row {int(rows[k]) + 1}, field {where}: a label {what} of {length:,} "
                    f"bytes; the limit is {limit:,} (max_label_{what}_bytes)"
                )

    @staticmethod
    def _check_bytes(
        strings: pa.Array,
        owner: np.ndarray,
        metric: pa.Array,
        limit: int,
        what: str,
        names: pa.Array | None,
    ) -> None:
        found = _first_over(strings, limit)
        if found is None:
            return
        k, length = found
        label = "__name__" if names is None else names[k].as_py()
        subject = f"label name {_short(label)}" if what == "name" else f"the value of {label}"
        raise LimitExceeded(
            f"series {_name(metric, int(owner[k]))}: {subject} is {length:,} bytes; the "
            f"limit is {limit:,} (max_label_{what}_bytes)"
        )


def _first_over(strings: pa.Array, limit: int) -> tuple[int, int] | None:
    """The index and UTF-8 length of the first string longer than ``limit`` bytes."""
    lengths = pc.binary_length(strings).to_numpy(zero_copy_only=False)
    over = np.flatnonzero(lengths > limit)
    return (int(over[0]), int(lengths[over[0]])) if over.size else None


def _name(metric: pa.Array, k: int) -> str:
    return _short(metric[k].as_py())


def _short(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:60]) + "..."
