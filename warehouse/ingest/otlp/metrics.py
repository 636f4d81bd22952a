"""OTLP metrics in, a Prometheus Remote-Write 2.0 request out.

:func:`metrics_to_write` turns an ``ExportMetricsServiceRequest`` into the
``io.prometheus.write.v2.Request`` that a Prometheus sender would have written for the
same points, as the OpenTelemetry specification's Prometheus compatibility rules say
(docs/otlp.md, "Metrics"). The receiver then takes that request down the remote-write
path, with its checks, limits, tenants and tables: an OTLP point and a scraped sample
of the same series are one series.

* Gauges are gauges; sums are counters (``_total``) when monotonic, gauges when not.
* Histograms become ``_bucket{le}``, ``_sum`` and ``_count`` series; exponential
  histograms become native histograms (scales above 8 merged down to 8).
* Summaries become ``{quantile}``, ``_sum`` and ``_count`` series.
* Delta points are summed into cumulative ones (:mod:`.delta`).
* Start times become the samples' and histograms' start timestamps.
* The resource's ``service.namespace``/``service.name`` is ``job`` and
  ``service.instance.id`` is ``instance``; its other attributes go on one
  ``target_info`` series. The scope's name and version are ``otel_scope_name`` and
  ``otel_scope_version``.
* Exemplars on histograms and monotonic sums are kept, with ``trace_id`` and ``span_id``.

Each data point is written whole or refused whole (counted, with a reason, for OTLP's
partial success): its series are planned first, then checked, then written.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp

from warehouse.ingest.otlp import native_histograms
from warehouse.ingest.otlp.delta import DeltaBatch, Overlap, Reshape, Summed, Totals
from warehouse.ingest.otlp.metric_names import label_name, le_value, metric_name, prometheus_unit
from warehouse.wire import prometheus as proto

__all__ = ["MAX_BUCKETS", "MetricsWrite", "attribute_text", "metrics_to_write"]

_DELTA = otlp.AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
_CUMULATIVE = otlp.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
_NO_RECORDED_VALUE = otlp.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus's staleness marker: a point that recorded no value."""
_MIN_SCALE, _MAX_SCALE = -4, 8
"""The native histogram schemas Prometheus takes."""
_DEFAULT_ZERO_THRESHOLD = 1e-128
MAX_BUCKETS = 4096
"""Most buckets (or explicit bounds) one histogram point may have on a side; the SDKs
default to 160 exponential buckets. Above it the point is refused: every bucket costs
memory here and a series or a column entry in the store."""
_INT64, _UINT64 = 2**63, 2**64
_RESOURCE_LABELS = ("service.name", "service.namespace", "service.instance.id")
_TARGET_LABELS = ("job", "instance")

_Meta = proto.V2.Metadata
_COUNTER, _GAUGE = _Meta.METRIC_TYPE_COUNTER, _Meta.METRIC_TYPE_GAUGE
_HISTOGRAM, _SUMMARY = _Meta.METRIC_TYPE_HISTOGRAM, _Meta.METRIC_TYPE_SUMMARY
_UNKNOWN = _Meta.METRIC_TYPE_UNSPECIFIED


_Summer = Callable[..., Summed]
"""Sums a delta point into its stream: ``(kind, shape, values, reshape=None)``."""
_Plan = Callable[[Any, dict[str, str], str, "_Summer | None"], list["_Write"]]
"""The series a point (an OTLP data point) becomes: ``(point, labels, name, summed)``."""
_Point = (
    otlp.NumberDataPoint
    | otlp.HistogramDataPoint
    | otlp.ExponentialHistogramDataPoint
    | otlp.SummaryDataPoint
)
"""A data point of any of the five metric types (gauges and sums share one)."""


@dataclass
class MetricsWrite:
    """An export's points as one Remote-Write 2.0 request, and the points left out."""

    body: bytes
    """A serialized ``io.prometheus.write.v2.Request``; empty when nothing was taken."""
    points: int = 0
    """The data points taken."""
    rejected: int = 0
    """Data points that could not be taken (see ``reasons``)."""
    reasons: list[str] = field(default_factory=list)

    def note(self, count: int, reason: str) -> None:
        self.rejected += count
        if count and len(self.reasons) < 3:
            self.reasons.append(reason)


def metrics_to_write(
    request: ExportMetricsServiceRequest,
    deltas: DeltaBatch,
    tenant: str | None = None,
    not_before_ns: int = 0,
) -> MetricsWrite:
    """The points of ``request`` as a Remote-Write 2.0 request (see the module's rules).

    ``deltas`` sums delta points into their streams (the caller commits it with the
    export); ``tenant`` keeps one tenant's streams apart from another's. Points older
    than ``not_before_ns`` (the samples retention) are refused.
    """
    out = _Request()
    result = MetricsWrite(b"")
    for resource_metrics in request.resource_metrics:
        resource = {kv.key: attribute_text(kv.value) for kv in resource_metrics.resource.attributes}
        target = _target_labels(resource)
        latest = 0
        for scope_metrics in resource_metrics.scope_metrics:
            scope = dict(target)
            if scope_metrics.scope.name:
                scope["otel_scope_name"] = scope_metrics.scope.name
            if scope_metrics.scope.version:
                scope["otel_scope_version"] = scope_metrics.scope.version
            for metric in scope_metrics.metrics:
                converted = _Metric(metric, scope, out, deltas, tenant, result, not_before_ns)
                latest = max(latest, converted.convert())
        info = _labels_of((k, v) for k, v in resource.items() if k not in _RESOURCE_LABELS)
        info = {k: v for k, v in info.items() if k not in _TARGET_LABELS}
        if info and latest:  # the target's labels win: target_info joins its series by them
            labels = {**info, **target, "__name__": "target_info"}
            out.write([_Write(labels, 1.0, latest)], ("target_info", _GAUGE), "Target metadata", "")
    if out.request.timeseries:
        result.body = out.request.SerializeToString()
    return result


def attribute_text(value: AnyValue) -> str:
    """An attribute's value as a label value: strings as they are, other types as the
    OpenTelemetry attribute specification writes them (arrays and maps as JSON)."""
    plain = _plain(value)
    if isinstance(plain, str):
        return plain
    if isinstance(plain, bool):
        return "true" if plain else "false"
    if isinstance(plain, float):
        return le_value(plain) if math.isfinite(plain) else repr(plain)
    if isinstance(plain, int):
        return str(plain)
    return "" if plain is None else json.dumps(plain, separators=(",", ":"))


class _Refused(Exception):
    """A data point that cannot be taken (the message says why)."""


@dataclass
class _Write:
    """One sample (``value``) or native histogram (``native``) of a planned point."""

    labels: dict[str, str]
    value: float | None
    at_ns: int
    start_ns: int = 0
    native: dict[str, Any] | None = None
    exemplars: list[otlp.Exemplar] = field(default_factory=list)


class _Request:
    """A Remote-Write 2.0 request being built: its symbols, one series per label set,
    and which metric each series belongs to."""

    def __init__(self) -> None:
        self.request = proto.V2.Request()
        self.request.symbols.append("")
        self._symbols: dict[str, int] = {"": 0}
        self._series: dict[tuple[tuple[str, str], ...], tuple[object, tuple[str, int]]] = {}

    def write(
        self, writes: list[_Write], owner: tuple[str, int], help_text: str, unit: str
    ) -> None:
        """Write a point's series; :class:`_Refused` (nothing written) when one of them
        belongs to another metric (the same name from metrics of other types)."""
        keys = [tuple(sorted(w.labels.items())) for w in writes]
        for key in keys:
            found = self._series.get(key)
            if found is not None and found[1] != owner:
                name = dict(key)["__name__"]
                raise _Refused(f"series {name!r} is written by another metric of this export")
        for key, w in zip(keys, writes, strict=True):
            series = self._get(key, owner, help_text, unit)
            if w.native is not None:
                series.histograms.add(**w.native)
            else:
                assert w.value is not None  # a write with no native histogram is a sample
                series.samples.add(
                    value=float(w.value),
                    timestamp=w.at_ns // 1_000_000,
                    start_timestamp=w.start_ns // 1_000_000,
                )
            for exemplar in w.exemplars:
                self._exemplar(series, exemplar, w.at_ns)

    def _get(
        self, key: tuple[tuple[str, str], ...], owner: tuple[str, int], help_text: str, unit: str
    ) -> Any:
        """The series of ``key`` (a ``TimeSeries`` message: no stubs), added if new."""
        found = self._series.get(key)
        if found is not None:
            return found[0]
        series = self.request.timeseries.add()
        for name, value in key:
            series.labels_refs.extend((self._ref(name), self._ref(value)))
        series.metadata.type = owner[1]
        series.metadata.help_ref = self._ref(help_text)
        series.metadata.unit_ref = self._ref(unit)
        self._series[key] = (series, owner)
        return series

    def _ref(self, text: str) -> int:
        ref = self._symbols.get(text)
        if ref is None:
            ref = self._symbols[text] = len(self._symbols)
            self.request.symbols.append(text)
        return ref

    def _exemplar(self, series: Any, exemplar: otlp.Exemplar, point_ns: int) -> None:
        labels = _labels_of(
            (kv.key, attribute_text(kv.value)) for kv in exemplar.filtered_attributes
        )
        if exemplar.trace_id:
            labels["trace_id"] = exemplar.trace_id.hex()
        if exemplar.span_id:
            labels["span_id"] = exemplar.span_id.hex()
        added = series.exemplars.add(
            value=_number(exemplar),
            # Remote write 2.0 needs a time; an exemplar without one is the point's.
            timestamp=(exemplar.time_unix_nano or point_ns) // 1_000_000,
        )
        for name, value in sorted(labels.items()):
            added.labels_refs.extend((self._ref(name), self._ref(value)))


class _Metric:
    """One OTLP metric's points, planned and written into a :class:`_Request`."""

    def __init__(
        self,
        metric: otlp.Metric,
        scope: dict[str, str],
        out: _Request,
        deltas: DeltaBatch,
        tenant: str | None,
        result: MetricsWrite,
        not_before_ns: int,
    ) -> None:
        self.metric, self.scope, self.out = metric, scope, out
        self.deltas, self.tenant, self.result = deltas, tenant, result
        self.not_before_ns = not_before_ns
        self.latest = 0

    def convert(self) -> int:
        """Write the metric's points; returns the latest point time (ns), 0 for none."""
        metric = self.metric
        kind = metric.WhichOneof("data")
        if kind is None:
            return 0  # no points: nothing to take or refuse
        data = getattr(metric, kind)
        monotonic_sum = partial(_sum, monotonic=metric.sum.is_monotonic)
        plans: dict[str, tuple[_Plan, int]] = {
            "gauge": (_gauge, _UNKNOWN if _prometheus_type(metric) == "unknown" else _GAUGE),
            "sum": (monotonic_sum, _COUNTER if metric.sum.is_monotonic else _GAUGE),
            "histogram": (_histogram, _HISTOGRAM),
            "exponential_histogram": (_native, _HISTOGRAM),
            "summary": (_summary, _SUMMARY),
        }
        plan, metric_type = plans[kind]
        name = metric_name(
            metric.name,
            metric.unit,
            gauge=metric_type in (_GAUGE, _UNKNOWN),
            counter=metric_type == _COUNTER,
        )
        unit = prometheus_unit(metric.unit, metric_type in (_GAUGE, _UNKNOWN))
        temporality = getattr(data, "aggregation_temporality", _CUMULATIVE)
        owner = (name, metric_type)
        for point in data.data_points:
            try:
                if not metric.name:
                    raise _Refused("a metric with no name")
                if temporality not in (_DELTA, _CUMULATIVE):
                    raise _Refused("no aggregation temporality")
                if not point.time_unix_nano:
                    raise _Refused("a data point with no time")
                if point.time_unix_nano < self.not_before_ns:
                    raise _Refused("a data point older than the samples retention")
                labels = self._labels(point, name)
                summed = partial(self._summed, point, labels) if temporality == _DELTA else None
                writes = plan(point, labels, name, summed)
                self.out.write(writes, owner, metric.description, unit)
            except _Refused as exc:
                self.result.note(1, f"metric {metric.name!r}: {exc}")
                continue
            self.result.points += 1
            self.latest = max(self.latest, point.time_unix_nano)
        return self.latest

    # -- helpers --------------------------------------------------------------------------

    def _labels(self, point: _Point, name: str) -> dict[str, str]:
        """The point's labels: its attributes, the scope's and the resource's, the name."""
        labels = _labels_of((kv.key, attribute_text(kv.value)) for kv in point.attributes)
        labels.update(self.scope)
        labels["__name__"] = name
        return labels

    def _summed(
        self,
        point: _Point,
        labels: dict[str, str],
        kind: str,
        shape: Hashable,
        values: Totals,
        reshape: Reshape | None = None,
    ) -> Summed:
        """A delta point summed into its stream (one per tenant, kind and series)."""
        key = (self.tenant, kind, tuple(sorted(labels.items())))
        try:
            return self.deltas.add(
                key, point.start_time_unix_nano, point.time_unix_nano, shape, values, reshape
            )
        except Overlap as exc:
            raise _Refused(str(exc)) from None


# -- one plan per kind: the series a point becomes ----------------------------------------
# ``summed`` sums a delta point into its stream (None for a cumulative one).


def _gauge(
    point: otlp.NumberDataPoint, labels: dict[str, str], name: str, summed: _Summer | None
) -> list[_Write]:
    return [_Write(labels, _stale_or(point, _number(point)), point.time_unix_nano)]


def _sum(
    point: otlp.NumberDataPoint,
    labels: dict[str, str],
    name: str,
    summed: _Summer | None,
    *,
    monotonic: bool,
) -> list[_Write]:
    value, start = _number(point), point.start_time_unix_nano
    if summed:
        stream = summed("sum", None, {"value": value})
        value, start = stream.totals["value"], stream.start
    if not monotonic:
        return [_Write(labels, _stale_or(point, value), point.time_unix_nano)]
    return [
        _Write(
            labels,
            _stale_or(point, value),
            point.time_unix_nano,
            start,
            exemplars=list(point.exemplars),
        )
    ]


def _histogram(
    point: otlp.HistogramDataPoint, labels: dict[str, str], name: str, summed: _Summer | None
) -> list[_Write]:
    counts = list(point.bucket_counts)
    bounds = list(point.explicit_bounds) if counts else []  # no buckets: only +Inf
    if len(bounds) > MAX_BUCKETS:
        raise _Refused(f"{len(bounds)} bucket bounds, more than {MAX_BUCKETS}")
    if counts and len(counts) != len(bounds) + 1:
        raise _Refused(f"{len(counts)} bucket counts for {len(bounds)} bounds")
    if not all(math.isfinite(b) for b in bounds) or bounds != sorted(set(bounds)):
        raise _Refused("explicit bounds are not finite and strictly increasing")
    count: float  # an integer, or a delta stream's total
    count, total, start = point.count, point.sum, point.start_time_unix_nano
    if summed:
        values: Totals = {"count": count, "sum": total, **dict(enumerate(counts))}
        stream = summed("histogram", tuple(bounds), values)
        count, total, start = stream.totals["count"], stream.totals["sum"], stream.start
        counts = [stream.totals.get(i, 0) for i in range(len(counts))]
    labels = {k: v for k, v in labels.items() if k != "le"}  # the buckets' own label
    at = point.time_unix_nano
    writes, running = [], 0
    for bound, bucket in zip(bounds, counts, strict=False):
        running += bucket
        bucket_labels = {**labels, "__name__": f"{name}_bucket", "le": le_value(bound)}
        writes.append(_Write(bucket_labels, _stale_or(point, running), at, start))
    # +Inf is the count, as every bucket's upper bound is.
    infinite = {**labels, "__name__": f"{name}_bucket", "le": "+Inf"}
    writes.append(_Write(infinite, _stale_or(point, count), at, start))
    for exemplar in point.exemplars:  # on the bucket the value falls in
        value = _number(exemplar)
        index = next((i for i, b in enumerate(bounds) if value <= b), len(bounds))
        writes[index].exemplars.append(exemplar)
    writes.append(
        _Write({**labels, "__name__": f"{name}_count"}, _stale_or(point, count), at, start)
    )
    if point.HasField("sum") or total:
        writes.append(
            _Write({**labels, "__name__": f"{name}_sum"}, _stale_or(point, total), at, start)
        )
    return writes


def _native(
    point: otlp.ExponentialHistogramDataPoint,
    labels: dict[str, str],
    name: str,
    summed: _Summer | None,
) -> list[_Write]:
    if point.scale < _MIN_SCALE:
        raise _Refused(f"scale {point.scale} is below Prometheus's {_MIN_SCALE}")
    widest = max(len(point.positive.bucket_counts), len(point.negative.bucket_counts))
    if widest > MAX_BUCKETS:
        raise _Refused(f"{widest} buckets on a side, more than {MAX_BUCKETS}")
    threshold = point.zero_threshold or _DEFAULT_ZERO_THRESHOLD
    if not (math.isfinite(threshold) and threshold > 0):
        raise _Refused(f"zero threshold {point.zero_threshold!r}")
    scale = min(point.scale, _MAX_SCALE)
    shift = point.scale - scale
    positive = native_histograms.from_otlp(
        point.positive.offset, point.positive.bucket_counts, shift
    )
    negative = native_histograms.from_otlp(
        point.negative.offset, point.negative.bucket_counts, shift
    )
    count: float  # integers, or a delta stream's totals
    zero: float
    count, total, zero = point.count, point.sum, point.zero_count
    start = point.start_time_unix_nano
    if summed:
        values: Totals = {
            "count": count,
            "sum": total,
            "zero": zero,
            **{("p", i): c for i, c in positive.items()},
            **{("n", i): c for i, c in negative.items()},
        }
        stream = summed("native", (scale, threshold), values, native_histograms.coarser_scale)
        totals = stream.totals
        scale, threshold = cast("tuple[int, float]", stream.shape)  # as given, or coarser
        count, total, zero, start = totals["count"], totals["sum"], totals["zero"], stream.start
        # Bucket totals: sums of the points' integer counts.
        counts = cast("dict[Hashable, int]", totals)
        positive = {k[1]: v for k, v in counts.items() if isinstance(k, tuple) and k[0] == "p"}
        negative = {k[1]: v for k, v in counts.items() if isinstance(k, tuple) and k[0] == "n"}
    native: dict[str, Any] = {
        "schema": scale,
        "zero_threshold": threshold,
        "zero_count_int": zero,
        "sum": total,
        "timestamp": point.time_unix_nano // 1_000_000,
        "start_timestamp": start // 1_000_000,
    }
    if point.flags & _NO_RECORDED_VALUE:
        native["count_float"] = native["sum"] = _STALE_NAN
    else:
        native["count_int"] = count
    for sign, buckets in (("positive", positive), ("negative", negative)):
        spans, deltas = native_histograms.spans_and_deltas(buckets)
        native[f"{sign}_spans"] = [{"offset": o, "length": n} for o, n in spans]
        native[f"{sign}_deltas"] = deltas
    if not (
        count < _UINT64
        and zero < _UINT64
        and all(-_INT64 <= d < _INT64 for d in native["positive_deltas"])
        and all(-_INT64 <= d < _INT64 for d in native["negative_deltas"])
    ):
        raise _Refused("a bucket count too large for a native histogram")
    write = _Write(labels, None, point.time_unix_nano, native=native)
    write.exemplars.extend(point.exemplars)
    return [write]


def _summary(
    point: otlp.SummaryDataPoint, labels: dict[str, str], name: str, summed: _Summer | None
) -> list[_Write]:
    labels = {k: v for k, v in labels.items() if k != "quantile"}  # the series' own label
    at, start = point.time_unix_nano, point.start_time_unix_nano
    writes = [
        _Write({**labels, "quantile": le_value(q.quantile)}, _stale_or(point, q.value), at)
        for q in point.quantile_values
    ]
    writes.append(
        _Write({**labels, "__name__": f"{name}_count"}, _stale_or(point, point.count), at, start)
    )
    writes.append(
        _Write({**labels, "__name__": f"{name}_sum"}, _stale_or(point, point.sum), at, start)
    )
    return writes


def _number(point: otlp.NumberDataPoint | otlp.Exemplar) -> float:
    return point.as_int if point.WhichOneof("value") == "as_int" else point.as_double


def _stale_or(point: _Point, value: float) -> float:
    """``value``, or the staleness marker for a point that recorded none."""
    return _STALE_NAN if point.flags & _NO_RECORDED_VALUE else value


def _labels_of(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Attributes as labels: names sanitized; values of keys that sanitize to one name
    joined with ``;`` in the order of the original keys."""
    joined: dict[str, list[tuple[str, str]]] = {}
    for key, value in pairs:
        joined.setdefault(label_name(key), []).append((key, value))
    return {name: ";".join(value for _, value in sorted(found)) for name, found in joined.items()}


def _target_labels(resource: dict[str, str]) -> dict[str, str]:
    """``job`` and ``instance`` of a resource."""
    name, namespace = resource.get("service.name", ""), resource.get("service.namespace", "")
    job = f"{namespace}/{name}" if namespace and name else name or namespace
    labels = {"job": job, "instance": resource.get("service.instance.id", "")}
    return {k: v for k, v in labels.items() if v}


def _prometheus_type(metric: otlp.Metric) -> str:
    for kv in metric.metadata:
        if kv.key == "prometheus.type":
            return attribute_text(kv.value)
    return ""


def _plain(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)
