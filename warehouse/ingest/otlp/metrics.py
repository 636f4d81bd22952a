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
"""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp

from warehouse.ingest import proto
from warehouse.ingest.otlp.delta import DeltaStreams, Overlap
from warehouse.ingest.otlp.metric_names import label_name, le_value, metric_name, prometheus_unit

__all__ = ["MetricsWrite", "metrics_to_write"]

_DELTA = otlp.AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
_CUMULATIVE = otlp.AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
_NO_RECORDED_VALUE = otlp.DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
_STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
"""Prometheus's staleness marker: a point that recorded no value."""
_MIN_SCALE, _MAX_SCALE = -4, 8
"""The native histogram schemas Prometheus takes."""
_DEFAULT_ZERO_THRESHOLD = 1e-128
_RESOURCE_LABELS = ("service.name", "service.namespace", "service.instance.id")

_Meta = proto.V2.Metadata
_COUNTER, _GAUGE = _Meta.METRIC_TYPE_COUNTER, _Meta.METRIC_TYPE_GAUGE
_HISTOGRAM, _SUMMARY = _Meta.METRIC_TYPE_HISTOGRAM, _Meta.METRIC_TYPE_SUMMARY
_UNKNOWN = _Meta.METRIC_TYPE_UNSPECIFIED


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
        if len(self.reasons) < 3:
            self.reasons.append(reason)


def metrics_to_write(
    request: ExportMetricsServiceRequest, deltas: DeltaStreams, tenant: str | None = None
) -> MetricsWrite:
    """The points of ``request`` as a Remote-Write 2.0 request (see the module's rules).

    ``deltas`` holds the running totals of delta streams; ``tenant`` keeps one tenant's
    streams apart from another's.
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
                taken = _Metric(metric, scope, out, deltas, tenant, result)
                latest = max(latest, taken.convert())
        info = {k: v for k, v in resource.items() if k not in _RESOURCE_LABELS}
        if info and latest:
            labels = {**target, **_labels_of(info.items())}
            labels["__name__"] = "target_info"
            series = out.series(labels, _GAUGE, "Target metadata", "")
            series.samples.add(value=1.0, timestamp=latest // 1_000_000)
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
    if plain is None:
        return ""
    return json.dumps(plain, separators=(",", ":")) if not isinstance(plain, int) else str(plain)


class _Request:
    """A Remote-Write 2.0 request being built: its symbols and one series per label set."""

    def __init__(self) -> None:
        self.request = proto.V2.Request()
        self.request.symbols.append("")
        self._symbols: dict[str, int] = {"": 0}
        self._series: dict[tuple, object] = {}

    def ref(self, text: str) -> int:
        ref = self._symbols.get(text)
        if ref is None:
            ref = self._symbols[text] = len(self._symbols)
            self.request.symbols.append(text)
        return ref

    def series(self, labels: dict[str, str], kind: int, help_text: str, unit: str):
        key = tuple(sorted(labels.items()))
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self.request.timeseries.add()
            for name, value in key:
                series.labels_refs.extend((self.ref(name), self.ref(value)))
            series.metadata.type = kind
            series.metadata.help_ref = self.ref(help_text)
            series.metadata.unit_ref = self.ref(unit)
        return series

    def exemplar(self, series, exemplar: otlp.Exemplar) -> None:
        labels = _labels_of(
            (kv.key, attribute_text(kv.value)) for kv in exemplar.filtered_attributes
        )
        if exemplar.trace_id:
            labels["trace_id"] = exemplar.trace_id.hex()
        if exemplar.span_id:
            labels["span_id"] = exemplar.span_id.hex()
        added = series.exemplars.add(
            value=_number(exemplar), timestamp=exemplar.time_unix_nano // 1_000_000
        )
        for name, value in sorted(labels.items()):
            added.labels_refs.extend((self.ref(name), self.ref(value)))


class _Metric:
    """One OTLP metric's points, written into a :class:`_Request`."""

    def __init__(
        self,
        metric: otlp.Metric,
        scope: dict[str, str],
        out: _Request,
        deltas: DeltaStreams,
        tenant: str | None,
        result: MetricsWrite,
    ) -> None:
        self.metric, self.scope, self.out = metric, scope, out
        self.deltas, self.tenant, self.result = deltas, tenant, result
        self.latest = 0

    def convert(self) -> int:
        """Write the metric's points; returns the latest point time (ns), 0 for none."""
        metric = self.metric
        kind = metric.WhichOneof("data")
        if not metric.name:
            self.result.note(_count_points(metric), "a metric with no name")
        elif kind == "gauge":
            unknown = _prometheus_type(metric) == "unknown"
            self._numbers(metric.gauge.data_points, _UNKNOWN if unknown else _GAUGE, None)
        elif kind == "sum":
            total = metric.sum.is_monotonic
            self._numbers(
                metric.sum.data_points,
                _COUNTER if total else _GAUGE,
                metric.sum.aggregation_temporality,
            )
        elif kind == "histogram":
            self._histograms(metric.histogram)
        elif kind == "exponential_histogram":
            self._native_histograms(metric.exponential_histogram)
        elif kind == "summary":
            self._summaries(metric.summary.data_points)
        else:
            self.result.note(0, f"metric {metric.name!r} has no data")
        return self.latest

    # -- kinds ----------------------------------------------------------------------------

    def _numbers(self, points, kind: int, temporality: int | None) -> None:
        name = self._name(kind)
        for point in points:
            labels = self._labels(point, name)
            if labels is None:
                continue
            value, start = _number(point), point.start_time_unix_nano
            if temporality == _DELTA:
                summed = self._summed(point, labels, None, {"value": value})
                if summed is None:
                    continue
                start, totals = summed
                value = totals["value"]
            elif temporality not in (None, _CUMULATIVE):
                self._refuse(point, "a sum with no aggregation temporality")
                continue
            if point.flags & _NO_RECORDED_VALUE:
                value = _STALE_NAN
            series = self._series(labels, kind)
            self._sample(series, value, point.time_unix_nano, start if kind == _COUNTER else 0)
            if kind == _COUNTER:
                for exemplar in point.exemplars:
                    self.out.exemplar(series, exemplar)
            self.result.points += 1

    def _histograms(self, histogram: otlp.Histogram) -> None:
        name = self._name(_HISTOGRAM)
        for point in histogram.data_points:
            labels = self._labels(point, name)
            if labels is None:
                continue
            counts = list(point.bucket_counts)
            bounds = list(point.explicit_bounds) if counts else []  # no buckets: only +Inf
            if counts and len(counts) != len(bounds) + 1:
                self._refuse(point, f"{len(counts)} bucket counts for {len(bounds)} bounds")
                continue
            if bounds != sorted(set(bounds)) or any(math.isnan(b) for b in bounds):
                self._refuse(point, "explicit bounds are not strictly increasing")
                continue
            count, total, start = point.count, point.sum, point.start_time_unix_nano
            if histogram.aggregation_temporality == _DELTA:
                values = {"count": count, "sum": total, **dict(enumerate(counts))}
                summed = self._summed(point, labels, tuple(bounds), values)
                if summed is None:
                    continue
                start, totals = summed
                count, total = totals["count"], totals["sum"]
                counts = [totals.get(i, 0) for i in range(len(counts))]
            elif histogram.aggregation_temporality != _CUMULATIVE:
                self._refuse(point, "a histogram with no aggregation temporality")
                continue
            stale = bool(point.flags & _NO_RECORDED_VALUE)
            at = point.time_unix_nano
            running = 0
            buckets = []
            for bound, bucket in zip([*bounds, math.inf], counts or [count], strict=False):
                running += bucket
                series = self._series(
                    {**labels, "__name__": f"{name}_bucket", "le": le_value(bound)}, _HISTOGRAM
                )
                self._sample(series, _STALE_NAN if stale else running, at, start)
                buckets.append((bound, series))
            self._sample(
                self._series({**labels, "__name__": f"{name}_count"}, _HISTOGRAM),
                _STALE_NAN if stale else count,
                at,
                start,
            )
            if point.HasField("sum") or total:
                self._sample(
                    self._series({**labels, "__name__": f"{name}_sum"}, _HISTOGRAM),
                    _STALE_NAN if stale else total,
                    at,
                    start,
                )
            for exemplar in point.exemplars:
                value = _number(exemplar)
                series = next(s for bound, s in buckets if value <= bound or bound == math.inf)
                self.out.exemplar(series, exemplar)
            self.result.points += 1

    def _native_histograms(self, histogram: otlp.ExponentialHistogram) -> None:
        name = self._name(_HISTOGRAM)
        for point in histogram.data_points:
            labels = self._labels(point, name)
            if labels is None:
                continue
            if point.scale < _MIN_SCALE:
                self._refuse(point, f"scale {point.scale} is below Prometheus's {_MIN_SCALE}")
                continue
            scale = min(point.scale, _MAX_SCALE)
            positive = _buckets(point.positive, point.scale - scale)
            negative = _buckets(point.negative, point.scale - scale)
            zero_threshold = point.zero_threshold or _DEFAULT_ZERO_THRESHOLD
            count, total, zero = point.count, point.sum, point.zero_count
            start = point.start_time_unix_nano
            if histogram.aggregation_temporality == _DELTA:
                values = {
                    "count": count,
                    "sum": total,
                    "zero": zero,
                    **{("p", i): c for i, c in positive.items()},
                    **{("n", i): c for i, c in negative.items()},
                }
                summed = self._summed(
                    point, labels, (scale, zero_threshold), values, _coarser_scale
                )
                if summed is None:
                    continue
                start, totals = summed
                count, total, zero = totals["count"], totals["sum"], totals["zero"]
                positive = {
                    k[1]: v for k, v in totals.items() if isinstance(k, tuple) and k[0] == "p"
                }
                negative = {
                    k[1]: v for k, v in totals.items() if isinstance(k, tuple) and k[0] == "n"
                }
            elif histogram.aggregation_temporality != _CUMULATIVE:
                self._refuse(point, "a histogram with no aggregation temporality")
                continue
            series = self._series(labels, _HISTOGRAM)
            native = series.histograms.add(
                schema=scale,
                zero_threshold=zero_threshold,
                zero_count_int=int(zero),
                sum=total,
                timestamp=point.time_unix_nano // 1_000_000,
                start_timestamp=start // 1_000_000,
            )
            if point.flags & _NO_RECORDED_VALUE:
                native.count_float = native.sum = _STALE_NAN
            else:
                native.count_int = int(count)
            _spans(positive, native.positive_spans, native.positive_deltas)
            _spans(negative, native.negative_spans, native.negative_deltas)
            for exemplar in point.exemplars:
                self.out.exemplar(series, exemplar)
            self.latest = max(self.latest, point.time_unix_nano)
            self.result.points += 1

    def _summaries(self, points) -> None:
        name = self._name(_SUMMARY)
        for point in points:
            labels = self._labels(point, name)
            if labels is None:
                continue
            stale = bool(point.flags & _NO_RECORDED_VALUE)
            at, start = point.time_unix_nano, point.start_time_unix_nano
            for quantile in point.quantile_values:
                series = self._series({**labels, "quantile": le_value(quantile.quantile)}, _SUMMARY)
                self._sample(series, _STALE_NAN if stale else quantile.value, at, 0)
            self._sample(
                self._series({**labels, "__name__": f"{name}_count"}, _SUMMARY),
                _STALE_NAN if stale else point.count,
                at,
                start,
            )
            self._sample(
                self._series({**labels, "__name__": f"{name}_sum"}, _SUMMARY),
                _STALE_NAN if stale else point.sum,
                at,
                start,
            )
            self.result.points += 1

    # -- helpers --------------------------------------------------------------------------

    def _name(self, kind: int) -> str:
        metric = self.metric
        return metric_name(
            metric.name, metric.unit, gauge=kind in (_GAUGE, _UNKNOWN), counter=kind == _COUNTER
        )

    def _labels(self, point, name: str) -> dict[str, str] | None:
        """The point's labels (its attributes, the scope's and the resource's), or None
        when it cannot be taken (no time)."""
        if not point.time_unix_nano:
            self._refuse(point, "a data point with no time")
            return None
        labels = _labels_of((kv.key, attribute_text(kv.value)) for kv in point.attributes)
        labels.update(self.scope)
        labels["__name__"] = name
        return labels

    def _series(self, labels: dict[str, str], kind: int):
        unit = prometheus_unit(self.metric.unit, kind in (_GAUGE, _UNKNOWN))
        return self.out.series(labels, kind, self.metric.description, unit)

    def _sample(self, series, value: float, at_ns: int, start_ns: int) -> None:
        series.samples.add(
            value=float(value), timestamp=at_ns // 1_000_000, start_timestamp=start_ns // 1_000_000
        )
        self.latest = max(self.latest, at_ns)

    def _summed(self, point, labels: dict[str, str], shape: Hashable, values: dict, reshape=None):
        """A delta point summed into its stream; None when it overlaps (refused)."""
        key = (self.tenant, tuple(sorted(labels.items())))
        try:
            return self.deltas.add(
                key, point.start_time_unix_nano, point.time_unix_nano, shape, values, reshape
            )
        except Overlap as exc:
            self._refuse(point, str(exc))
            return None

    def _refuse(self, point, reason: str) -> None:
        self.result.note(1, f"metric {self.metric.name!r}: {reason}")


def _number(point) -> float:
    return point.as_int if point.WhichOneof("value") == "as_int" else point.as_double


def _buckets(buckets: otlp.ExponentialHistogramDataPoint.Buckets, shift: int) -> dict[int, int]:
    """Bucket counts by Prometheus's index (upper bound, so OTLP's index + 1), merged
    down by ``shift`` scales."""
    merged: dict[int, int] = {}
    for offset, count in enumerate(buckets.bucket_counts, start=buckets.offset):
        if count:
            index = (offset >> shift) + 1
            merged[index] = merged.get(index, 0) + count
    return merged


def _coarser_scale(totals: dict, shape: tuple, values: dict, other: tuple):
    """An exponential histogram stream's totals and a point of another scale, both at
    the coarser of the two scales (None when their zero thresholds differ)."""
    (scale, zero_threshold), (other_scale, other_threshold) = shape, other
    if zero_threshold != other_threshold:
        return None
    coarse = min(scale, other_scale)
    return (
        _downscaled(totals, scale - coarse),
        _downscaled(values, other_scale - coarse),
        (coarse, zero_threshold),
    )


def _downscaled(values: dict, shift: int) -> dict:
    """Accumulated native-histogram values with their buckets merged down ``shift`` scales."""
    if not shift:
        return dict(values)
    merged: dict = {}
    for key, count in values.items():
        if isinstance(key, tuple):  # (sign, Prometheus index): OTLP's index is one less
            key = (key[0], ((key[1] - 1) >> shift) + 1)
        merged[key] = merged.get(key, 0) + count
    return merged


def _spans(counts: dict[int, float], spans, deltas) -> None:
    """Native histogram spans and count deltas for buckets by index."""
    previous_index, previous_count = None, 0
    for index in sorted(counts):
        if previous_index is None or index != previous_index + 1:
            gap = index if previous_index is None else index - previous_index - 1
            spans.add(offset=gap, length=0)
        spans[-1].length += 1
        count = int(counts[index])
        deltas.append(count - previous_count)
        previous_index, previous_count = index, count


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


def _count_points(metric: otlp.Metric) -> int:
    kind = metric.WhichOneof("data")
    return len(getattr(metric, kind).data_points) if kind else 0


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
