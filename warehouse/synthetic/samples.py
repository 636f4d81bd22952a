"""Requests as the per-request Prometheus samples a gateway would remote-write.

The metric names are the receiver's defaults (``warehouse/ingest/metric_mapping.toml``):
one series per request and measure, labelled with ``request_id`` and the request's
dimensions, the sample stamped at the request's arrival. A failed request adds
``llm_request_error 1`` with its ``error_class``.

Probes are left out: the per-request metric mapping has no probe marker, so a probe
sent this way would count as user traffic.
"""

from __future__ import annotations

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.ingest.metric_mapping import DIMENSIONS
from warehouse.wire.prometheus import V1

__all__ = ["METRICS", "remote_write_body"]

METRICS = {
    # metric name: (requests column, multiplier from the column's unit)
    "llm_request_start_time_seconds": ("ts", 0.001),
    "llm_request_queue_seconds": ("queue_ms", 0.001),
    "llm_request_ttft_seconds": ("ttft_ms", 0.001),
    "llm_request_tpot_seconds": ("tpot_ms", 0.001),
    "llm_request_e2e_seconds": ("e2e_ms", 0.001),
    "llm_request_itl_p99_seconds": ("itl_p99_ms", 0.001),
    "llm_request_prompt_tokens": ("prompt_tokens", 1.0),
    "llm_request_output_tokens": ("output_tokens", 1.0),
    "llm_request_cached_tokens": ("cached_prompt_tokens", 1.0),
    "llm_request_max_context_tokens": ("max_context_tokens", 1.0),
    "llm_request_http_status": ("http_status", 1.0),
}
_LABELS = ("tenant", *DIMENSIONS)
_RESERVED = {"request_id", "error_class"}


def remote_write_body(requests: pa.Table) -> bytes:
    """A snappy-compressed remote-write 1.0 body carrying ``requests`` (probes left out)."""
    requests = requests.filter(pc.invert(requests.column("is_probe")))
    ts = requests.column("ts").cast(pa.int64()).to_numpy()
    ids = requests.column("request_id").to_pylist()
    labels = {name: requests.column(name).to_pylist() for name in _LABELS}
    attrs = requests.column("attrs").to_pylist()
    values = {}
    for metric, (column, scale) in METRICS.items():
        array = requests.column(column)
        if column == "ts":
            array = array.cast(pa.int64())
        values[metric] = (
            array.cast(pa.float64()).fill_null(np.nan).to_numpy() * scale,
            array.is_null().to_numpy(zero_copy_only=False),
        )
    failed = requests.column("status").to_numpy(zero_copy_only=False) != "ok"
    error_class = requests.column("error_class").to_pylist()

    write = V1.WriteRequest()
    for row in range(requests.num_rows):
        # Prometheus sorts labels by name; the receiver checks that they are.
        common = {name: labels[name][row] for name in _LABELS if labels[name][row]}
        # attrs never override a column's label or a reserved one (__name__ ...).
        common.update(
            (key, value)
            for key, value in (attrs[row] or ())
            if value and key not in common and key not in _RESERVED and not key.startswith("__")
        )
        common["request_id"] = ids[row]
        stamp = int(ts[row])
        for metric, (value, missing) in values.items():
            if not missing[row]:
                _series(write, {**common, "__name__": metric}, stamp, float(value[row]))
        if failed[row]:
            tagged = {**common, "__name__": "llm_request_error", "error_class": error_class[row]}
            _series(write, tagged, stamp, 1.0)
    return bytes(cramjam.snappy.compress_raw(write.SerializeToString()))


def _series(write: object, labels: dict[str, str], stamp: int, value: float) -> None:
    series = write.timeseries.add()  # type: ignore[attr-defined]
    for name in sorted(labels):
        series.labels.add(name=name, value=labels[name])
    series.samples.add(timestamp=stamp, value=value)
