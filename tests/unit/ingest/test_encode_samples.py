"""Samples written with numpy for remote-read answers parse back, bit for bit, with the
protobuf runtime's own TimeSeries."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from warehouse.wire.prometheus import V1, delimited, encode_samples, varint


def parsed(values: np.ndarray, stamps: np.ndarray) -> list[tuple[int, int]]:
    encoded, starts = encode_samples(values, stamps)
    assert len(starts) == len(values) + 1 and starts[-1] == len(encoded)
    series = V1.TimeSeries.FromString(encoded)
    return [
        (struct.unpack("<Q", struct.pack("<d", s.value))[0], s.timestamp) for s in series.samples
    ]


def bits(values: np.ndarray) -> list[int]:
    return values.view(np.uint64).tolist()


STALE = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
SPECIAL = np.array([0.0, -0.0, 1.5, np.inf, -np.inf, np.nan, 5e-324, STALE])


def test_times_of_one_size_take_the_fixed_record_path_and_keep_every_bit():
    stamps = 1_767_000_000_000 + np.arange(len(SPECIAL), dtype=np.int64) * 15_000
    assert parsed(SPECIAL, stamps) == list(zip(bits(SPECIAL), stamps.tolist(), strict=True))


def test_times_of_mixed_sizes_zero_and_negative():
    stamps = np.array([0, 1, 127, 128, 2**40, -1, -(2**62), 2**63 - 1], dtype=np.int64)
    values = np.linspace(-3, 3, len(stamps))
    assert parsed(values, stamps) == list(zip(bits(values), stamps.tolist(), strict=True))


def test_each_sample_starts_where_its_offset_says():
    stamps = np.array([5, 300, 2**35], dtype=np.int64)
    encoded, starts = encode_samples(np.ones(3), stamps)
    for k in range(3):
        one = V1.TimeSeries.FromString(encoded[starts[k] : starts[k + 1]])
        assert [(s.value, s.timestamp) for s in one.samples] == [(1.0, int(stamps[k]))]


def test_no_samples():
    assert encode_samples(np.array([]), np.array([], dtype=np.int64))[0] == b""


@given(
    st.lists(st.tuples(st.floats(allow_nan=True), st.integers(-(2**63), 2**63 - 1)), max_size=40)
)
def test_any_samples_round_trip(pairs):
    values = np.array([v for v, _ in pairs], dtype=np.float64)
    stamps = np.array([t for _, t in pairs], dtype=np.int64)
    assert parsed(values, stamps) == list(zip(bits(values), stamps.tolist(), strict=True))


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02")],
)
def test_varints_and_length_delimited_fields(n, encoded):
    assert varint(n) == encoded
    wrapped = delimited(1, b"x" * n)
    assert wrapped[1 : 1 + len(encoded)] == encoded
    assert V1.Label.FromString(wrapped).name == "x" * n
