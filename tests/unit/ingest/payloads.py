"""Remote-write 1.0 and 2.0 payloads built with the message classes, for the decoder tests."""

from __future__ import annotations

from warehouse.wire.prometheus import V1, V2


def v1(*series, metadata=()) -> bytes:
    """``series``: (labels as (name, value) pairs, samples as (timestamp, value) pairs);
    ``metadata``: (type, family, help, unit) tuples."""
    request = V1.WriteRequest()
    for labels, samples in series:
        ts = request.timeseries.add()
        for name, value in labels:
            ts.labels.add(name=name, value=value)
        for timestamp, value in samples:
            ts.samples.add(timestamp=timestamp, value=value)
    for kind, family, help_text, unit in metadata:
        request.metadata.add(type=kind, metric_family_name=family, help=help_text, unit=unit)
    return request.SerializeToString()


class Symbols:
    """Builds a 2.0 symbols table."""

    def __init__(self):
        self.table = [""]

    def ref(self, text: str) -> int:
        if text not in self.table:
            self.table.append(text)
        return self.table.index(text)

    def refs(self, labels) -> list[int]:
        return [r for name, value in labels for r in (self.ref(name), self.ref(value))]


def v2(*series, symbols: Symbols | None = None) -> bytes:
    symbols = symbols or Symbols()
    request = V2.Request()
    for labels, samples in series:
        ts = request.timeseries.add()
        ts.labels_refs.extend(symbols.refs(labels))
        for timestamp, value in samples:
            ts.samples.add(timestamp=timestamp, value=value)
    request.symbols.extend(symbols.table)
    return request.SerializeToString()
