"""OTLP metric points become the Remote-Write 2.0 series Prometheus would name them as.

Each test translates a small export with :func:`metrics_to_write` and reads the result
back with the receiver's own 2.0 decoder, so what is checked is what the tables get.
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2 as otlp

from warehouse.ingest.otlp.delta import DeltaStreams, Overlap
from warehouse.ingest.otlp.metric_names import label_name, le_value, metric_name
from warehouse.ingest.otlp.metrics import MAX_BUCKETS, MetricsWrite, metrics_to_write
from warehouse.ingest.remote_write import decode_v2

T0 = 1_764_849_600_000_000_000  # 2025-12-04T12:00:00Z, in ns
SECOND = 1_000_000_000
DELTA = otlp.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = otlp.AGGREGATION_TEMPORALITY_CUMULATIVE
RESOURCE = {"service.name": "gateway", "service.instance.id": "gw-1", "cloud.region": "eu"}


def attributes(pairs: dict) -> list[KeyValue]:
    out = []
    for key, v in pairs.items():
        if isinstance(v, bool):
            out.append(KeyValue(key=key, value=AnyValue(bool_value=v)))
        elif isinstance(v, int):
            out.append(KeyValue(key=key, value=AnyValue(int_value=v)))
        else:
            out.append(KeyValue(key=key, value=AnyValue(string_value=v)))
    return out


def export(*metrics: otlp.Metric, resource: dict | None = None) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add()
    resource_metrics.resource.attributes.extend(attributes(resource or RESOURCE))
    scope_metrics = resource_metrics.scope_metrics.add()
    scope_metrics.scope.name, scope_metrics.scope.version = "llm.gateway", "1.2"
    scope_metrics.metrics.extend(metrics)
    return request


def number(value: float, at: int = T0, start: int = T0 - 10 * SECOND, **labels):
    return otlp.NumberDataPoint(
        attributes=attributes(labels),
        start_time_unix_nano=start,
        time_unix_nano=at,
        as_double=float(value),
    )


def written(request: ExportMetricsServiceRequest, deltas: DeltaStreams | None = None):
    """The decoded write: {(name, labels): [values]}, histograms, the result."""
    deltas = deltas if deltas is not None else DeltaStreams()
    batch = deltas.batch()
    result = metrics_to_write(request, batch)
    deltas.commit(batch)  # as the receiver does once the export is committed
    decoded = decode_v2(result.body)
    names = decoded.series.to_pylist()
    by_id = {row["id"]: (row["metric_name"], dict(row["labels"])) for row in names}
    samples: dict = {}
    for row in decoded.samples.to_pylist():
        name, labels = by_id[row["id"]]
        samples.setdefault((name, tuple(sorted(labels.items()))), []).append(row["value"])
    return samples, decoded, result


def delta_native(
    start: int, end: int, scale: int, counts: list[int], offset: int = 0, unit: str = ""
) -> otlp.Metric:
    """``e2e``: a delta exponential histogram of one point, positive buckets from ``offset``."""
    point = otlp.ExponentialHistogramDataPoint(
        start_time_unix_nano=start,
        time_unix_nano=end,
        count=sum(counts),
        scale=scale,
        positive=otlp.ExponentialHistogramDataPoint.Buckets(offset=offset, bucket_counts=counts),
    )
    return otlp.Metric(
        name="e2e",
        unit=unit,
        exponential_histogram=otlp.ExponentialHistogram(
            data_points=[point], aggregation_temporality=DELTA
        ),
    )


def values_of(samples: dict, name: str, **labels) -> list[float]:
    found = [
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    ]
    assert len(found) == 1, (name, labels, sorted(k[0] for k in samples))
    return found[0]


class TestNames:
    @pytest.mark.parametrize(
        ("name", "unit", "gauge", "counter", "expected"),
        [
            (
                "gen_ai.server.time_to_first_token",
                "s",
                False,
                False,
                "gen_ai_server_time_to_first_token_seconds",
            ),
            (
                "gen_ai.client.token.usage",
                "{token}",
                False,
                True,
                "gen_ai_client_token_usage_total",
            ),
            ("system.memory.utilization", "1", True, False, "system_memory_utilization_ratio"),
            ("requests", "1", False, True, "requests_total"),
            ("process.cpu.time", "s", False, True, "process_cpu_time_seconds_total"),
            ("network.io", "By", False, True, "network_io_bytes_total"),
            ("car.speed", "m/s", True, False, "car_speed_meters_per_second"),
            ("duration_seconds", "s", False, False, "duration_seconds"),
            ("jobs_total", "", False, True, "jobs_total"),
            ("http..server//duration", "ms", False, False, "http_server_duration_milliseconds"),
            ("9lives", "", True, False, "_9lives"),
            ("cpu.time_total", "s", False, True, "cpu_time_seconds_total"),
            ("wait", "µs", True, False, "wait_microseconds"),
        ],
    )
    def test_metric_names_follow_the_compatibility_rules(
        self, name, unit, gauge, counter, expected
    ):
        assert metric_name(name, unit, gauge=gauge, counter=counter) == expected

    def test_label_names_replace_what_prometheus_does_not_take(self):
        assert label_name("http.route") == "http_route"
        assert label_name("gen_ai..request-model") == "gen_ai_request_model"
        assert label_name("1st") == "key_1st"

    def test_bucket_bounds_are_written_as_plain_shortest_decimals(self):
        assert [le_value(b) for b in (0.005, 1.0, 2.5, 1e-5, 0.0, math.inf)] == [
            "0.005",
            "1",
            "2.5",
            "0.00001",
            "0",
            "+Inf",
        ]


class TestKinds:
    def test_a_gauge_keeps_its_value_labels_job_instance_and_scope(self):
        metric = otlp.Metric(
            name="gpu.utilization", unit="1", gauge=otlp.Gauge(data_points=[number(0.75, gpu="0")])
        )
        samples, decoded, result = written(export(metric))
        labels = {
            "gpu": "0",
            "job": "gateway",
            "instance": "gw-1",
            "otel_scope_name": "llm.gateway",
            "otel_scope_version": "1.2",
        }
        assert values_of(samples, "gpu_utilization_ratio", **labels) == [0.75]
        assert result.points == 1 and result.rejected == 0
        meta = {r["metric_family_name"]: r for r in decoded.metadata.to_pylist()}
        assert meta["gpu_utilization_ratio"]["type"] == "gauge"
        assert meta["gpu_utilization_ratio"]["unit"] == "ratio"

    def test_other_resource_attributes_are_one_target_info_series(self):
        metric = otlp.Metric(name="up", gauge=otlp.Gauge(data_points=[number(1)]))
        samples, _, _ = written(export(metric))
        ((labels, values),) = [(dict(k[1]), v) for k, v in samples.items() if k[0] == "target_info"]
        assert labels == {"job": "gateway", "instance": "gw-1", "cloud_region": "eu"}
        assert values == [1.0]

    def test_a_namespace_goes_before_the_service_name_in_job(self):
        metric = otlp.Metric(name="up", gauge=otlp.Gauge(data_points=[number(1)]))
        resource = {"service.name": "api", "service.namespace": "llm"}
        samples, _, _ = written(export(metric, resource=resource))
        assert values_of(samples, "up", job="llm/api") == [1.0]

    def test_a_monotonic_cumulative_sum_is_a_counter_with_its_start_time(self):
        points = [number(5, at=T0), number(9, at=T0 + SECOND)]
        metric = otlp.Metric(
            name="gen_ai.client.token.usage",
            unit="{token}",
            sum=otlp.Sum(data_points=points, aggregation_temporality=CUMULATIVE, is_monotonic=True),
        )
        samples, decoded, _ = written(export(metric))
        assert values_of(samples, "gen_ai_client_token_usage_total") == [5.0, 9.0]
        starts = decoded.starts.column("start_timestamp").to_pylist()
        assert [s.timestamp() for s in starts] == [(T0 - 10 * SECOND) / 1e9]

    def test_a_non_monotonic_sum_is_a_gauge(self):
        metric = otlp.Metric(
            name="queue.size",
            unit="{request}",
            sum=otlp.Sum(
                data_points=[number(3)], aggregation_temporality=CUMULATIVE, is_monotonic=False
            ),
        )
        samples, decoded, _ = written(export(metric))
        assert values_of(samples, "queue_size") == [3.0]
        assert decoded.metadata.to_pylist()[0]["type"] == "gauge"

    def test_a_histogram_is_cumulative_buckets_a_count_and_a_sum(self):
        point = otlp.HistogramDataPoint(
            start_time_unix_nano=T0 - SECOND,
            time_unix_nano=T0,
            count=10,
            sum=4.5,
            explicit_bounds=[0.1, 0.5, 1.0],
            bucket_counts=[2, 5, 2, 1],
            attributes=attributes({"gen_ai.request.model": "m1"}),
            exemplars=[
                otlp.Exemplar(
                    time_unix_nano=T0, as_double=0.3, trace_id=b"\x01" * 16, span_id=b"\x02" * 8
                )
            ],
        )
        metric = otlp.Metric(
            name="gen_ai.server.time_to_first_token",
            unit="s",
            histogram=otlp.Histogram(data_points=[point], aggregation_temporality=CUMULATIVE),
        )
        samples, decoded, _ = written(export(metric))
        family = "gen_ai_server_time_to_first_token_seconds"
        buckets = {
            le: values_of(samples, f"{family}_bucket", le=le)[0]
            for le in ("0.1", "0.5", "1", "+Inf")
        }
        assert buckets == {"0.1": 2, "0.5": 7, "1": 9, "+Inf": 10}
        assert values_of(samples, f"{family}_count") == [10]
        assert values_of(samples, f"{family}_sum") == [4.5]
        (exemplar,) = decoded.exemplars.to_pylist()
        by_id = {r["id"]: dict(r["labels"]) for r in decoded.series.to_pylist()}
        assert by_id[exemplar["id"]]["le"] == "0.5"  # the bucket the value falls in
        assert dict(exemplar["labels"])["trace_id"] == "01" * 16

    def test_an_exponential_histogram_is_a_native_histogram(self):
        point = otlp.ExponentialHistogramDataPoint(
            time_unix_nano=T0,
            start_time_unix_nano=T0 - SECOND,
            count=7,
            sum=10.0,
            scale=3,
            zero_count=1,
            positive=otlp.ExponentialHistogramDataPoint.Buckets(
                offset=-2, bucket_counts=[1, 0, 0, 3]
            ),
            negative=otlp.ExponentialHistogramDataPoint.Buckets(offset=4, bucket_counts=[2]),
        )
        metric = otlp.Metric(
            name="gen_ai.client.operation.duration",
            unit="s",
            exponential_histogram=otlp.ExponentialHistogram(
                data_points=[point], aggregation_temporality=CUMULATIVE
            ),
        )
        _, decoded, _ = written(export(metric))
        (native,) = decoded.histograms.to_pylist()
        assert native["schema"] == 3 and native["count"] == 7 and native["sum"] == 10.0
        assert native["zero_count"] == 1 and native["zero_threshold"] == 1e-128
        # Prometheus indexes a bucket by its upper bound: OTLP's index + 1.
        assert native["positive_span_offsets"] == [-1, 2]
        assert native["positive_span_lengths"] == [1, 1]
        assert native["positive_counts"] == [1, 3]
        assert (native["negative_span_offsets"], native["negative_counts"]) == ([5], [2])

    def test_scales_above_eight_are_merged_down_and_below_minus_four_refused(self):
        fine = otlp.ExponentialHistogramDataPoint(
            time_unix_nano=T0,
            count=4,
            scale=10,
            positive=otlp.ExponentialHistogramDataPoint.Buckets(
                offset=0, bucket_counts=[1, 1, 1, 1]
            ),
        )
        coarse = otlp.ExponentialHistogramDataPoint(time_unix_nano=T0 + SECOND, count=1, scale=-5)
        metric = otlp.Metric(
            name="latency",
            unit="s",
            exponential_histogram=otlp.ExponentialHistogram(
                data_points=[fine, coarse], aggregation_temporality=CUMULATIVE
            ),
        )
        _, decoded, result = written(export(metric))
        (native,) = decoded.histograms.to_pylist()
        assert native["schema"] == 8
        assert native["positive_counts"] == [4]  # four buckets of scale 10 are one of scale 8
        assert result.rejected == 1 and "scale -5" in result.reasons[0]

    def test_a_summary_is_quantile_series_a_count_and_a_sum(self):
        point = otlp.SummaryDataPoint(
            time_unix_nano=T0,
            count=100,
            sum=42.0,
            quantile_values=[
                otlp.SummaryDataPoint.ValueAtQuantile(quantile=q, value=v)
                for q, v in ((0.5, 0.2), (0.99, 1.5))
            ],
        )
        metric = otlp.Metric(
            name="rpc.duration", unit="s", summary=otlp.Summary(data_points=[point])
        )
        samples, _, _ = written(export(metric))
        assert values_of(samples, "rpc_duration_seconds", quantile="0.99") == [1.5]
        assert values_of(samples, "rpc_duration_seconds", quantile="0.5") == [0.2]
        assert values_of(samples, "rpc_duration_seconds_count") == [100]
        assert values_of(samples, "rpc_duration_seconds_sum") == [42.0]

    def test_a_point_that_recorded_no_value_is_a_staleness_marker(self):
        point = number(3)
        point.flags = otlp.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
        metric = otlp.Metric(name="queue", gauge=otlp.Gauge(data_points=[point]))
        samples, _, _ = written(export(metric))
        (value,) = values_of(samples, "queue")
        assert struct.pack("<d", value) == struct.pack("<Q", 0x7FF0000000000002)

    def test_attribute_keys_that_collide_are_joined_in_key_order(self):
        point = number(1, **{"a.b": "x", "a_b": "y"})
        metric = otlp.Metric(name="g", gauge=otlp.Gauge(data_points=[point]))
        samples, _, _ = written(export(metric))
        assert values_of(samples, "g", a_b="x;y") == [1.0]

    def test_points_without_a_time_or_a_name_are_refused_and_counted(self):
        no_time = number(1, at=0)
        metrics = [
            otlp.Metric(name="g", gauge=otlp.Gauge(data_points=[no_time, number(2)])),
            otlp.Metric(name="", gauge=otlp.Gauge(data_points=[number(3)])),
        ]
        samples, _, result = written(export(*metrics))
        assert values_of(samples, "g") == [2.0]
        assert (result.points, result.rejected) == (1, 2)


class TestDeltas:
    def delta_sum(self, *points) -> otlp.Metric:
        return otlp.Metric(
            name="tokens",
            sum=otlp.Sum(
                data_points=list(points), aggregation_temporality=DELTA, is_monotonic=True
            ),
        )

    def test_delta_points_are_summed_into_a_counter(self):
        deltas = DeltaStreams()
        first = self.delta_sum(number(5, start=T0, at=T0 + SECOND))
        second = self.delta_sum(number(3, start=T0 + SECOND, at=T0 + 2 * SECOND))
        assert values_of(written(export(first), deltas)[0], "tokens_total") == [5]
        assert values_of(written(export(second), deltas)[0], "tokens_total") == [8]

    def test_a_retried_delta_export_gives_the_same_totals_again(self):
        deltas = DeltaStreams()
        for _ in range(3):
            again = self.delta_sum(number(5, start=T0, at=T0 + SECOND))
            assert values_of(written(export(again), deltas)[0], "tokens_total") == [5]

    def test_a_gap_starts_a_new_stream_and_an_overlap_is_refused(self):
        deltas = DeltaStreams()
        written(export(self.delta_sum(number(5, start=T0, at=T0 + SECOND))), deltas)
        gap = self.delta_sum(number(2, start=T0 + 5 * SECOND, at=T0 + 6 * SECOND))
        samples, _, _ = written(export(gap), deltas)
        assert values_of(samples, "tokens_total") == [2]  # a reset, from the gap's start
        overlap = self.delta_sum(number(1, start=T0 + 5 * SECOND + 1, at=T0 + 7 * SECOND))
        _, _, result = written(export(overlap), deltas)
        assert result.rejected == 1 and "overlaps" in result.reasons[0]

    def test_delta_histograms_sum_their_buckets(self):
        deltas = DeltaStreams()

        def point(start, counts):
            return otlp.HistogramDataPoint(
                start_time_unix_nano=start,
                time_unix_nano=start + SECOND,
                count=sum(counts),
                sum=float(sum(counts)),
                explicit_bounds=[1.0],
                bucket_counts=counts,
            )

        for start, counts in ((T0, [1, 2]), (T0 + SECOND, [4, 0])):
            metric = otlp.Metric(
                name="ttft",
                unit="s",
                histogram=otlp.Histogram(
                    data_points=[point(start, counts)], aggregation_temporality=DELTA
                ),
            )
            samples, _, _ = written(export(metric), deltas)
        assert values_of(samples, "ttft_seconds_bucket", le="1") == [5]
        assert values_of(samples, "ttft_seconds_bucket", le="+Inf") == [7]
        assert values_of(samples, "ttft_seconds_count") == [7]

    def test_delta_exponential_histograms_sum_their_buckets(self):
        deltas = DeltaStreams()
        for start, counts in ((T0, [1, 2]), (T0 + SECOND, [0, 5])):
            metric = delta_native(start, start + SECOND, 2, counts, unit="s")
            _, decoded, _ = written(export(metric), deltas)
        (native,) = decoded.histograms.to_pylist()
        assert native["count"] == 8 and native["positive_counts"] == [1, 7]

    def test_a_delta_of_another_scale_is_summed_at_the_coarser_scale(self):
        deltas = DeltaStreams()
        for start, scale, counts in ((T0, 3, [1, 1]), (T0 + SECOND, 2, [4])):
            metric = delta_native(start, start + SECOND, scale, counts, unit="s")
            _, decoded, _ = written(export(metric), deltas)
        (native,) = decoded.histograms.to_pylist()
        # Scale 3's buckets 0 and 1 are scale 2's bucket 0.
        assert (native["schema"], native["count"], native["positive_counts"]) == (2, 6, [6])

    def test_streams_are_bounded_and_the_oldest_go_first(self):
        deltas = DeltaStreams(max_streams=2)
        for key in "abc":
            batch = deltas.batch()
            batch.add(key, T0, T0 + 1, None, {"value": 1})
            deltas.commit(batch)
        assert len(deltas) == 2
        batch = deltas.batch()
        summed = batch.add("a", T0 + 1, T0 + 2, None, {"value": 1})  # "a" went: a new stream
        assert (summed.start, summed.totals) == (T0 + 1, {"value": 1})
        with pytest.raises(Overlap):
            batch.add("c", T0, T0 + 5, None, {"value": 1})

    def test_streams_are_bounded_by_the_values_they_hold(self):
        deltas = DeltaStreams(max_values=10)
        for key in "ab":
            batch = deltas.batch()
            batch.add(key, T0, T0 + 1, None, {i: 1 for i in range(6)})
            deltas.commit(batch)
        assert len(deltas) == 1  # 12 values held is over 10: the older stream went

    def test_a_refused_export_moves_no_stream(self):
        deltas = DeltaStreams()
        first = export(self.delta_sum(number(5, start=T0, at=T0 + SECOND)))
        batch = deltas.batch()
        metrics_to_write(first, batch)  # never committed: the store refused it
        assert values_of(written(first, deltas)[0], "tokens_total") == [5]

    def test_a_retried_export_of_several_points_of_a_stream_gives_each_its_totals(self):
        deltas = DeltaStreams()
        both = export(
            self.delta_sum(
                number(5, start=T0, at=T0 + SECOND),
                number(3, start=T0 + SECOND, at=T0 + 2 * SECOND),
            )
        )
        for _ in range(2):
            samples, _, result = written(both, deltas)
            assert values_of(samples, "tokens_total") == [5, 8]
            assert result.rejected == 0


class TestRefusals:
    """A point that cannot be taken is refused whole; the rest of the export is taken."""

    def native(self, **fields) -> otlp.Metric:
        fields.setdefault("time_unix_nano", T0)
        return otlp.Metric(
            name="lat",
            unit="s",
            exponential_histogram=otlp.ExponentialHistogram(
                data_points=[otlp.ExponentialHistogramDataPoint(**fields)],
                aggregation_temporality=CUMULATIVE,
            ),
        )

    def taken_and_refused(self, *metrics: otlp.Metric) -> tuple[dict, MetricsWrite]:
        fine = otlp.Metric(name="up", gauge=otlp.Gauge(data_points=[number(1)]))
        samples, _, result = written(export(fine, *metrics))
        assert values_of(samples, "up") == [1.0]
        return samples, result

    def test_bucket_counts_too_large_for_a_native_histogram(self):
        buckets = otlp.ExponentialHistogramDataPoint.Buckets(offset=0, bucket_counts=[2**64 - 1])
        _, result = self.taken_and_refused(self.native(count=2**64 - 1, positive=buckets))
        assert result.rejected == 1 and "too large" in result.reasons[0]

    def test_more_buckets_than_the_limit(self):
        buckets = otlp.ExponentialHistogramDataPoint.Buckets(
            offset=0, bucket_counts=[1] * (MAX_BUCKETS + 1)
        )
        _, result = self.taken_and_refused(self.native(count=1, positive=buckets))
        assert result.rejected == 1 and "buckets" in result.reasons[0]

    def test_a_zero_threshold_that_is_not_a_positive_number(self):
        _, result = self.taken_and_refused(self.native(count=1, zero_threshold=math.nan))
        assert result.rejected == 1 and "zero threshold" in result.reasons[0]

    def test_an_infinite_explicit_bound(self):
        point = otlp.HistogramDataPoint(
            time_unix_nano=T0, count=6, explicit_bounds=[1.0, math.inf], bucket_counts=[1, 2, 3]
        )
        metric = otlp.Metric(
            name="h",
            histogram=otlp.Histogram(data_points=[point], aggregation_temporality=CUMULATIVE),
        )
        _, result = self.taken_and_refused(metric)
        assert result.rejected == 1 and "bounds" in result.reasons[0]

    def test_a_series_another_metric_of_the_export_writes(self):
        counter = otlp.Metric(
            name="foo",
            sum=otlp.Sum(
                data_points=[number(1)], aggregation_temporality=CUMULATIVE, is_monotonic=True
            ),
        )
        gauge = otlp.Metric(name="foo_total", gauge=otlp.Gauge(data_points=[number(2)]))
        samples, result = self.taken_and_refused(counter, gauge)
        assert values_of(samples, "foo_total") == [1.0]
        assert result.rejected == 1 and "another metric" in result.reasons[0]

    def test_a_delta_histogram_and_a_delta_native_one_of_one_name_keep_apart(self):
        deltas = DeltaStreams()
        explicit = otlp.Metric(
            name="lat",
            unit="s",
            histogram=otlp.Histogram(
                data_points=[
                    otlp.HistogramDataPoint(
                        start_time_unix_nano=T0,
                        time_unix_nano=T0 + SECOND,
                        count=1,
                        explicit_bounds=[1.0, 2.0],
                        bucket_counts=[1, 0, 0],
                    )
                ],
                aggregation_temporality=DELTA,
            ),
        )
        written(export(explicit), deltas)
        native = self.native(
            start_time_unix_nano=T0 + SECOND, time_unix_nano=T0 + 2 * SECOND, count=1, scale=2
        )
        native.exponential_histogram.aggregation_temporality = DELTA
        _, decoded, result = written(export(native), deltas)
        assert result.rejected == 0 and decoded.histograms.num_rows == 1

    def test_points_older_than_the_retention(self):
        old = otlp.Metric(name="old", gauge=otlp.Gauge(data_points=[number(1, at=T0 - SECOND)]))
        result = metrics_to_write(export(old), DeltaStreams().batch(), not_before_ns=T0)
        assert (result.body, result.rejected) == (b"", 1)
        assert "retention" in result.reasons[0]


class TestRescaledDeltas:
    def test_after_a_finer_point_the_stream_stays_coarse_and_says_so(self):
        deltas = DeltaStreams()
        for start, scale, offset in ((T0, 2, 4), (T0 + SECOND, 5, 32)):
            metric = delta_native(start, start + SECOND, scale, [1], offset)
            _, decoded, _ = written(export(metric), deltas)
        (native,) = decoded.histograms.to_pylist()
        # Scale 5's bucket 32 is scale 2's bucket 4 (32 >> 3): both in one bucket, at 2.
        assert native["schema"] == 2
        assert (native["positive_span_offsets"], native["positive_counts"]) == ([5], [2])

    def test_an_overlapping_point_of_another_scale_leaves_the_stream_as_it_was(self):
        deltas = DeltaStreams()

        def send(start, end, scale):
            return written(export(delta_native(start, end, scale, [1], offset=8)), deltas)

        send(T0, T0 + SECOND, 5)
        _, _, refused = send(T0 + 1, T0 + 3 * SECOND, 2)
        assert refused.rejected == 1
        _, decoded, _ = send(T0 + SECOND, T0 + 2 * SECOND, 5)
        (native,) = decoded.histograms.to_pylist()
        assert (native["schema"], native["count"]) == (5, 2)


names = st.sampled_from(["lat", "lat_total", "lat.seconds", "up", "9x", "", "tokens"])
times = st.sampled_from([0, T0, T0 + SECOND, T0 + 2 * SECOND])
counts = st.integers(0, 2**64 - 1) | st.integers(0, 5)
labels = st.dictionaries(
    st.sampled_from(["le", "quantile", "a.b", "a_b", "job"]), st.text(max_size=3), max_size=2
)


@st.composite
def metrics(draw) -> otlp.Metric:
    kind = draw(st.sampled_from(["gauge", "sum", "histogram", "exponential_histogram", "summary"]))
    metric = otlp.Metric(name=draw(names), unit=draw(st.sampled_from(["", "s", "1", "{x}"])))
    temporality = draw(st.sampled_from([0, DELTA, CUMULATIVE]))
    for _ in range(draw(st.integers(1, 3))):
        common = {
            "attributes": attributes(draw(labels)),
            "time_unix_nano": draw(times),
            "start_time_unix_nano": draw(times),
            "flags": draw(st.sampled_from([0, 1])),
        }
        if kind in ("gauge", "sum"):
            point = otlp.NumberDataPoint(as_double=draw(st.floats()), **common)
            getattr(metric, kind).data_points.append(point)
        elif kind == "histogram":
            bounds = draw(st.lists(st.floats(), max_size=3))
            buckets = draw(st.lists(counts, max_size=4))
            point = otlp.HistogramDataPoint(
                count=draw(counts), sum=draw(st.floats()), explicit_bounds=bounds,
                bucket_counts=buckets, **common,
            )  # fmt: skip
            metric.histogram.data_points.append(point)
        elif kind == "exponential_histogram":
            side = otlp.ExponentialHistogramDataPoint.Buckets
            point = otlp.ExponentialHistogramDataPoint(
                count=draw(counts), scale=draw(st.integers(-6, 20)), zero_count=draw(counts),
                zero_threshold=draw(st.sampled_from([0.0, 1e-3, math.nan, -1.0])),
                positive=side(offset=draw(st.integers(-2**20, 2**20)),
                              bucket_counts=draw(st.lists(counts, max_size=4))),
                negative=side(offset=draw(st.integers(-5, 5)),
                              bucket_counts=draw(st.lists(counts, max_size=3))),
                **common,
            )  # fmt: skip
            metric.exponential_histogram.data_points.append(point)
        else:
            quantiles = [
                otlp.SummaryDataPoint.ValueAtQuantile(quantile=q, value=draw(st.floats()))
                for q in draw(st.lists(st.floats(0, 1), max_size=2))
            ]
            point = otlp.SummaryDataPoint(
                count=draw(counts), sum=draw(st.floats()), quantile_values=quantiles, **common
            )
            metric.summary.data_points.append(point)
    if kind in ("sum", "histogram", "exponential_histogram"):
        getattr(metric, kind).aggregation_temporality = temporality
    if kind == "sum":
        metric.sum.is_monotonic = draw(st.booleans())
    return metric


@settings(max_examples=300, deadline=None)
@given(st.lists(metrics(), min_size=1, max_size=4))
def test_every_point_is_written_whole_or_counted_as_refused(exported):
    """Whatever an export holds, its points are taken or refused one by one, and what is
    taken is a write the remote-write decoder accepts whole (no 400 for the export)."""
    request = export(*exported)
    deltas = DeltaStreams()
    for _ in range(2):  # the second time, as a retry, against the streams the first left
        batch = deltas.batch()
        result = metrics_to_write(request, batch)
        total = sum(len(getattr(m, m.WhichOneof("data")).data_points) for m in exported)
        assert result.points + result.rejected == total
        if result.body:
            decode_v2(result.body)
        deltas.commit(batch)
