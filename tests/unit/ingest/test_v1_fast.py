"""The C decoder of remote write 1.0 gives the Python decoder's rows, or leaves the body to it.

Every case decodes the same bytes both ways: through ``_v1_fast.columns`` (what the
receiver uses for the common write) and through the Python decoder alone. Where the
C decoder takes a body, the tables must be equal column for column, bit for bit;
where it refuses one, the Python decoder must be what handles it (an error, or a
write with histograms, exemplars or metadata). Random bodies from hypothesis cover
label order, empty and duplicate names, Unicode, zero and negative fields, unknown
fields and truncation.
"""

from __future__ import annotations

import importlib
import os
import shlex
import shutil
import struct
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from payloads import v1

from warehouse.errors import IngestError
from warehouse.ingest.remote_write import _decode_v1_python, decode_v1
from warehouse.ingest.remote_write_tables import from_columns, with_tenant
from warehouse.wire.prometheus import V1

try:
    from warehouse.ingest import _v1_fast
except ImportError:  # pragma: no cover - see test_the_extensions_are_built_wherever_they_can_be
    _v1_fast = None

needs_extension = pytest.mark.skipif(
    _v1_fast is None, reason="the C decoder was not built (no C compiler at install time)"
)
MIN = -(2**63)
T0 = 1_700_000_000_000


def fast(*bodies: bytes, min_timestamp: int = MIN):
    columns, refused, _ = _v1_fast.columns(list(bodies), min_timestamp)
    return from_columns(columns), refused


def assert_same(a, b) -> None:
    """Two decoded writes hold the same rows, floats compared bit for bit."""
    for name in ("series", "samples"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.schema == right.schema, name
        for column in left.column_names:
            x, y = left.column(column).combine_chunks(), right.column(column).combine_chunks()
            if pa.types.is_floating(x.type):
                assert np.asarray(x).view(np.uint64).tolist() == (
                    np.asarray(y).view(np.uint64).tolist()
                ), (name, column)
            else:
                assert x.equals(y), (name, column)
    assert a.samples_written == b.samples_written


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def python_or_error(body: bytes):
    try:
        return _decode_v1_python(body)
    except IngestError as exc:
        return exc


EXTENSIONS = ("_v1_fast", "_series_cache")


def why_extensions_cannot_be_built(where: Path) -> str | None:
    """Why ``pip install`` could not build the C extensions here, or None when it could:
    the interpreter's C compiler compiles against Python's headers (as hatch_build.py
    compiles them)."""
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if shutil.which(cc[0]) is None:
        return f"there is no C compiler ({cc[0]}) here"
    probe = where / "probe.c"
    probe.write_text("#include <Python.h>\nint main(void) { return Py_IsInitialized(); }\n")
    include = sysconfig.get_paths()["include"]
    done = subprocess.run(
        [*cc, f"-I{include}", "-fsyntax-only", str(probe)], capture_output=True, text=True
    )
    if done.returncode != 0:
        return f"{cc[0]} cannot compile against Python's headers ({include}): {done.stderr}"
    return None


def test_the_extensions_are_built_wherever_they_can_be(tmp_path):
    """Where a C compiler and Python's headers are at hand, and always in CI, the
    install built the C decoder and series cache: the receiver must not fall back to
    Python there."""
    missing = []
    for name in EXTENSIONS:
        try:
            importlib.import_module(f"warehouse.ingest.{name}")
        except ImportError:
            missing.append(name)
    why_not = why_extensions_cannot_be_built(tmp_path)
    if os.environ.get("LLMWH_REQUIRE_SYSTEM_DEPS") == "1":
        assert why_not is None, f"CI must build the C extensions, but {why_not}"
    elif missing and why_not:
        pytest.skip(f"{why_not}: the C extensions cannot be built; the receiver decodes in Python")
    assert missing == [], (
        f"{', '.join(missing)} not built, though this machine can build them: "
        "reinstall (pip install -e '.[dev]') and read the build's warning"
    )


@needs_extension
class TestTakenBodies:
    def test_a_scrape_gives_the_python_rows(self):
        body = v1(
            ([("__name__", "up"), ("instance", "a:9100"), ("job", "node")], [(T0, 1.0)]),
            ([("__name__", "rss"), ("pod", "p-ü")], [(T0, 2.5), (T0 + 15_000, 3.5)]),
        )
        decoded, refused = fast(body)
        assert refused == []
        assert_same(decoded, _decode_v1_python(body))
        assert decoded.samples.num_rows == 3

    def test_unsorted_labels_and_empty_values_are_handled_in_c(self):
        body = v1(([("zone", "b"), ("gone", ""), ("__name__", "m"), ("az", "1")], [(T0, 1.0)]))
        decoded, refused = fast(body)
        assert refused == []
        assert_same(decoded, _decode_v1_python(body))
        assert decoded.series.column("labels").to_pylist() == [[("az", "1"), ("zone", "b")]]

    def test_special_floats_and_zero_fields_keep_every_bit(self):
        stale = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]
        values = [stale, float("nan"), float("inf"), -float("inf"), -0.0, 0.0]
        body = v1(([("__name__", "m")], [(0, v) for v in values] + [(-5, 1.0)]))
        decoded, refused = fast(body)
        assert refused == []
        assert_same(decoded, _decode_v1_python(body))

    def test_a_series_repeated_byte_for_byte_is_one_series_of_the_call(self):
        scrape = [(("__name__", "up"), ("job", "api")), (("__name__", "rss"), ("pod", "p"))]
        bodies = [v1(*((list(s), [(T0 + k, float(k))]) for s in scrape)) for k in range(4)]
        (n, *_), refused, _ = _v1_fast.columns(bodies, MIN)
        assert refused == [] and n == 2
        decoded, _ = fast(*bodies)
        assert_same(decoded, _decode_v1_python(b"".join(bodies)))
        assert decoded.samples.num_rows == 8

    def test_a_refused_body_takes_its_series_with_it(self):
        a = ([("__name__", "a")], [(T0, 1.0)])
        b = ([("__name__", "b")], [(T0, 2.0)])
        bad = ([("job", "no name")], [(T0, 3.0)])
        bodies = [v1(a), v1(b, bad), v1(b, a)]
        decoded, refused = fast(*bodies)
        assert refused == [1]
        assert_same(decoded, _decode_v1_python(bodies[0] + bodies[2]))

    def test_several_bodies_become_one_set_of_columns(self):
        bodies = [v1(([("__name__", "a"), ("i", str(k))], [(T0 + k, float(k))])) for k in range(5)]
        decoded, refused = fast(*bodies)
        assert refused == []
        assert_same(decoded, _decode_v1_python(b"".join(bodies)))


@needs_extension
class TestRefusedBodies:
    @pytest.mark.parametrize(
        "body",
        [
            pytest.param(v1(([("job", "x")], [(T0, 1.0)])), id="no __name__"),
            pytest.param(v1(([("__name__", "m"), ("", "v")], [(T0, 1.0)])), id="empty name"),
            pytest.param(
                v1(([("__name__", "m"), ("a", "1"), ("a", "2")], [(T0, 1.0)])), id="dup name"
            ),
            pytest.param(v1(([("__name__", "m")], [(T0, 1.0)]))[:-3], id="truncated"),
            pytest.param(b"\x0a\x07\x0a\x05\x0a\x01\xff\x12\x00", id="invalid UTF-8"),
        ],
    )
    def test_a_body_the_decoder_refuses_is_left_to_it(self, body):
        decoded, refused = fast(body)
        assert refused == [0]
        assert decoded.samples.num_rows == 0 and decoded.series.num_rows == 0
        with pytest.raises(IngestError):
            _decode_v1_python(body)

    @pytest.mark.parametrize(
        "tag",
        [
            pytest.param(((1 << 32) | 1) << 3 | 2, id="tag above 32 bits"),
            pytest.param(0 << 3 | 2, id="field number 0"),
        ],
    )
    def test_a_tag_the_protobuf_runtime_refuses_is_refused(self, tag):
        inner = v1(([("__name__", "up")], [(T0, 1.0)]))[2:]  # the TimeSeries' own bytes
        body = varint(tag) + varint(len(inner)) + inner
        _, refused = fast(body)
        assert refused == [0]
        with pytest.raises(IngestError):
            _decode_v1_python(body)

    def test_a_tag_varint_longer_than_five_bytes_is_refused(self):
        inner = v1(([("__name__", "up")], [(T0, 1.0)]))[2:]
        padded_tag = b"\x8a\x80\x80\x80\x80\x00"  # field 1, wire type 2, in six bytes
        body = padded_tag + varint(len(inner)) + inner
        _, refused = fast(body)
        assert refused == [0]
        with pytest.raises(IngestError):
            _decode_v1_python(body)

    def test_metadata_exemplars_and_histograms_go_to_python(self):
        request = V1.WriteRequest()
        ts = request.timeseries.add()
        ts.labels.add(name="__name__", value="m")
        ts.exemplars.add(value=1.0, timestamp=T0)
        with_exemplar = request.SerializeToString()
        request = V1.WriteRequest()
        request.metadata.add(metric_family_name="m", type=V1.MetricMetadata.COUNTER)
        with_metadata = request.SerializeToString()
        _, refused = fast(v1(([("__name__", "ok")], [(T0, 1.0)])), with_exemplar, with_metadata)
        assert refused == [1, 2]
        assert decode_v1(with_exemplar).exemplars.num_rows == 1

    def test_a_refused_body_leaves_nothing_among_the_others(self):
        good = [v1(([("__name__", "g"), ("i", str(k))], [(T0, 1.0)])) for k in range(3)]
        bad = v1(([("__name__", "b"), ("x", "1"), ("x", "2")], [(T0, 9.0)]))
        decoded, refused = fast(good[0], bad, good[1], good[2])
        assert refused == [1]
        assert_same(decoded, _decode_v1_python(b"".join(good)))

    def test_a_sample_older_than_the_retention_sends_its_body_to_python(self):
        old = v1(([("__name__", "m")], [(T0 - 1, 1.0), (T0 + 1, 2.0)]))
        recent = v1(([("__name__", "m")], [(T0 + 2, 3.0)]))
        decoded, refused = fast(old, recent, min_timestamp=T0)
        assert refused == [0]
        assert decoded.samples.num_rows == 1


# --- random bodies ------------------------------------------------------------------------

names = st.sampled_from(
    ["__name__", "job", "instance", "a", "b", "zone", "ü", "", "__tenant__", "A"]
)
values = st.one_of(st.sampled_from(["", "x", "api", "ü€𝄞"]), st.text(max_size=12))
labels = st.one_of(
    st.lists(st.tuples(names, values), max_size=6),
    # a few label sets again and again: series repeated within and across bodies
    st.sampled_from(
        [
            [("__name__", "up"), ("job", "api")],
            [("job", "api"), ("__name__", "up")],
            [("__name__", "up"), ("job", "api"), ("empty", "")],
            [("__name__", "rss")],
        ]
    ),
)
samples = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=True, allow_infinity=True, width=64),
    ),
    max_size=4,
)
bodies = st.lists(st.tuples(labels, samples), min_size=0, max_size=5).map(lambda s: v1(*s))


@needs_extension
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies, min_size=1, max_size=4), st.data())
def test_random_bodies_decode_as_python_decodes_them(raw, data):
    # Damage some bodies: cut them short or append an unknown field.
    damaged = []
    for body in raw:
        action = data.draw(st.sampled_from(["keep", "keep", "cut", "unknown field"]))
        if action == "cut" and body:
            body = body[: data.draw(st.integers(0, len(body) - 1))]
        elif action == "unknown field":
            body += b"\x28\x07"  # field 5, varint 7: unknown to WriteRequest
        damaged.append(body)
    decoded, refused = fast(*damaged)
    taken = [b for i, b in enumerate(damaged) if i not in refused]
    for i in refused:
        outcome = python_or_error(damaged[i])
        # Refusing a body the Python decoder takes is allowed (it is only slower), but
        # for these bodies (no metadata, exemplars or histograms) it never happens.
        assert isinstance(outcome, IngestError), damaged[i]
    for body in taken:
        assert not isinstance(python_or_error(body), IngestError)
    expected = _decode_v1_python(b"".join(taken)) if taken else None
    if expected is not None:
        assert_same(decoded, expected)
    else:
        assert decoded.samples.num_rows == 0


@needs_extension
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies, min_size=1, max_size=4), st.sampled_from(["acme", "t-1", "ü"]))
# A sender's `__tenant__` replaced, two series become one: it is written once.
@example(
    [v1(([("__name__", "x")], [(0, 0.0)]), ([("__name__", "x"), ("__tenant__", "x")], [(0, 0.0)]))],
    "acme",
)
def test_a_tenants_bodies_decode_as_python_decodes_and_tags_them(raw, tenant):
    # In multi-tenant mode the C decoder sets each series' `__tenant__` (a sender's
    # replaced) and hashes it into the id, as with_tenant does after the Python decoder.
    columns, refused, _ = _v1_fast.columns(raw, MIN, (0, 0, 0, 0), None, 2**63 - 1,
                                           tenant.encode())  # fmt: skip
    taken = [b for i, b in enumerate(raw) if i not in refused]
    if taken:
        expected = with_tenant(_decode_v1_python(b"".join(taken)), tenant)
        assert_same(from_columns(columns), expected)
