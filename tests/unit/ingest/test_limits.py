"""The receiver's per-write limits: each with its own error, and the C decoder defers to them."""

from __future__ import annotations

import pytest
from payloads import v1

from warehouse.errors import IngestError
from warehouse.ingest import remote_write
from warehouse.ingest.limits import LimitExceeded, WriteLimits
from warehouse.synthetic import synthetic_requests

LIMITS = WriteLimits(
    series_per_write=3, labels_per_series=4, label_name_bytes=8, label_value_bytes=10
)
NOW = 1_790_000_000_000


def series(name: str = "up", **labels: str):
    return [("__name__", name), *sorted(labels.items())], [(NOW, 1.0)]


WITHIN = v1(series(job="api"), series(job="db", pod="p1"), series("x", a="1", b="2"))
OVER = {
    "series": (
        v1(*(series(pod=f"p{i}") for i in range(4))),
        r"holds 4 series; the limit is 3 \(max_series_per_write\)",
    ),
    "labels": (
        v1(series(a="1", b="2", c="3", d="4")),
        r"series 'up' has 5 labels; the limit is 4 \(max_labels_per_series\)",
    ),
    "name": (v1(series(instance="x")), r"series 'up': label name 'instance' is 8 bytes"),
    "long name": (
        v1(series(instances="x")),
        r"label name 'instances' is 9 bytes; the limit is 8 \(max_label_name_bytes\)",
    ),
    "value": (
        v1(series(job="a" * 11)),
        r"the value of job is 11 bytes; the limit is 10 \(max_label_value_bytes\)",
    ),
    "metric name": (v1(series("m" * 11)), r"the value of __name__ is 11 bytes"),
}


def decode_with_limits(body: bytes, limits: WriteLimits = LIMITS):
    decoded = remote_write.decode_v1(body)
    limits.check_series(decoded.series)
    return decoded


def test_a_write_within_every_limit_passes_both_decoders():
    assert decode_with_limits(WITHIN).series.num_rows == 3
    _, _, left_out = remote_write.decode_v1_batch([WITHIN], 0, LIMITS.as_tuple())
    assert left_out == []


@pytest.mark.parametrize("case", [c for c in OVER if c != "name"])
def test_each_limit_has_its_own_error_naming_the_setting(case):
    body, message = OVER[case]
    with pytest.raises(LimitExceeded, match=message) as refused:
        decode_with_limits(body)
    assert isinstance(refused.value, IngestError) and refused.value.http_status == 400


def test_a_label_name_at_the_limit_is_taken():
    assert decode_with_limits(OVER["name"][0]).series.num_rows == 1


@pytest.mark.skipif(not remote_write.FAST_V1, reason="the C decoder is not built")
@pytest.mark.parametrize("case", [c for c in OVER if c != "name"])
def test_the_c_decoder_leaves_a_body_over_a_limit_to_python(case):
    body, _ = OVER[case]
    decoded, _, left_out = remote_write.decode_v1_batch(
        [WITHIN, body, WITHIN], 0, LIMITS.as_tuple()
    )
    assert left_out == [1]
    assert decoded.series.num_rows == 3  # the other two bodies, the same three series


def test_zero_turns_a_limit_off():
    unlimited = WriteLimits(0, 0, 0, 0)
    for body, _ in OVER.values():
        decode_with_limits(body, unlimited)
        assert remote_write.decode_v1_batch([body], 0, unlimited.as_tuple())[2] == []


def test_repeated_series_count_once_for_python_the_reference():
    """C counts series entries (a stricter bound), Python distinct series: Python decides."""
    body = v1(*(series(job="api") for _ in range(5)))
    assert decode_with_limits(body).series.num_rows == 1


class TestEvents:
    def test_attrs_and_label_columns_are_held_to_the_label_limits(self):
        table = synthetic_requests(50, seed=1)
        limits = WriteLimits(label_name_bytes=8, label_value_bytes=40)
        limits.check_requests(table)  # short names and values throughout
        long_id = table.set_column(
            table.schema.get_field_index("request_id"), "request_id", [["r" * 41] * 50]
        )
        with pytest.raises(LimitExceeded, match=r"field request_id: a label value of 41 bytes"):
            limits.check_requests(long_id)
        long_zone = table.set_column(
            table.schema.get_field_index("zone"), "zone", [["z" * 41] * 50]
        )
        with pytest.raises(LimitExceeded, match=r"row 1, field zone: a label value of 41 bytes"):
            limits.check_requests(long_zone)
        with pytest.raises(LimitExceeded, match=r"attrs has 2 labels; the limit is 1"):
            WriteLimits(labels_per_series=1).check_requests(table)
        with pytest.raises(LimitExceeded, match=r"field attrs: a label name of 8 bytes"):
            WriteLimits(label_name_bytes=7).check_requests(table)  # "priority"
