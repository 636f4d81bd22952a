"""Remote-write 1.0 payloads built with the message classes, for the decoder tests."""

from __future__ import annotations

from warehouse.ingest.proto import V1


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
