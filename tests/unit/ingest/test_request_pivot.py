"""The C decoder pivots per-request samples into the rows the Python reference gives.

The receiver decodes a flush of 1.0 bodies in C (``_v1_fast.columns`` with a requests
spec) and pivots the parts of each request as it goes; remote write 2.0 and every body
the C decoder leaves out go through ``request_pivot.split_requests``. Random flushes
mix a request's parts across bodies and with plain series, repeat them (conflicting
values), retry whole bodies, damage some, carry values that measure nothing, and keep
or drop the per-request series: the request parts, the series and the samples must
agree row for row, floats bit for bit.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from payloads import v1, v2

from warehouse.errors import IngestError
from warehouse.ingest import remote_write
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.remote_write import _decode_v1_python, decode_v2
from warehouse.ingest.request_pivot import c_spec, parts_table, split_requests

pytestmark = pytest.mark.skipif(
    not remote_write.FAST_V1, reason="the C decoder was not built (no C compiler at install time)"
)

MAPPING = load_mapping()
MIN = -(2**63)
T0 = 1_700_000_000_000


def c_pivot(bodies, tenant=None, keep_series=False, min_timestamp=MIN):
    spec = c_spec(MAPPING, tenant, keep_series)
    return remote_write.decode_v1_batch(bodies, min_timestamp, (0, 0, 0, 0), spec)


def python_pivot(body: bytes, tenant=None, keep_series=False):
    return split_requests(_decode_v1_python(body), MAPPING, tenant, keep_series)


def table_bits(table: pa.Table) -> dict:
    """A table's columns as lists, floats as their bits."""
    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_floating(column.type):
            values = np.asarray(column.fill_null(0)).view(f"u{column.type.bit_width // 8}")
            out[name] = (values.tolist(), column.is_null().to_pylist())
        elif isinstance(column, pa.ExtensionArray):
            out[name] = column.storage.to_pylist()
        else:
            out[name] = column.to_pylist()
    return out


def assert_same_pivot(c, python) -> None:
    (c_write, c_pivot_, _), (py_write, py_pivot) = c, python
    assert table_bits(parts_table(c_pivot_).drop_columns(["received"])) == table_bits(
        parts_table(py_pivot).drop_columns(["received"])
    )
    assert (c_pivot_.taken, c_pivot_.dropped) == (py_pivot.taken, py_pivot.dropped)
    for name in ("series", "samples"):
        assert table_bits(getattr(c_write, name)) == table_bits(getattr(py_write, name)), name
    assert c_write.samples_written == py_write.samples_written


LABELS = [("model", "llama"), ("region", "hz"), ("tenant", "acme"), ("gpu", "h100")]


def part(name: str, request_id: str, value: float, ts: int = T0, extra=()) -> tuple:
    labels = sorted({"__name__": name, "request_id": request_id, **dict(LABELS), **dict(extra)})
    pairs = {"__name__": name, "request_id": request_id, **dict(LABELS), **dict(extra)}
    return ([(k, pairs[k]) for k in labels], [(ts, value)])


class TestChosenFlushes:
    def test_parts_spread_over_bodies_of_one_flush_are_one_row(self):
        bodies = [
            v1(part("llm_request_ttft_seconds", "r1", 0.2)),
            v1(
                part("llm_request_e2e_seconds", "r1", 1.5),
                part("llm_request_ttft_seconds", "r2", 1),
            ),
            v1(part("llm_request_output_tokens", "r1", 80)),
        ]
        c = c_pivot(bodies)
        assert c[2] == []
        assert_same_pivot(c, python_pivot(b"".join(bodies)))
        rows = parts_table(c[1]).to_pylist()
        assert [(r["request_id"], r["ttft_ms"], r["e2e_ms"], r["output_tokens"]) for r in rows] == [
            ("r1", 200.0, 1500.0, 80),
            ("r2", 1000.0, None, None),
        ]
        assert c[0].series.num_rows == 0 and c[0].samples_written == 4

    def test_a_retried_body_changes_no_value(self):
        body = v1(part("llm_request_ttft_seconds", "r1", 0.2), part("llm_request_error", "r1", 1))
        c = c_pivot([body, body])
        assert_same_pivot(c, python_pivot(body + body))
        once = parts_table(c_pivot([body])[1]).drop_columns(["received"])
        assert parts_table(c[1]).drop_columns(["received"]).equals(once)

    def test_parts_interleaved_with_plain_series_leave_those_series_as_they_were(self):
        plain = ([("__name__", "up"), ("job", "api")], [(T0, 1.0)])
        body = v1(plain, part("llm_request_ttft_seconds", "r1", 0.2), plain)
        c = c_pivot([body])
        assert_same_pivot(c, python_pivot(body))
        assert c[0].series.column("metric_name").to_pylist() == ["up"]
        assert c[0].samples.num_rows == 2

    def test_a_body_left_out_takes_its_parts_with_it(self):
        good = v1(part("llm_request_ttft_seconds", "r1", 0.2))
        bad = v1(part("llm_request_e2e_seconds", "r1", 9.0), ([("job", "no name")], [(T0, 1)]))
        c = c_pivot([good, bad])
        assert c[2] == [1]
        assert_same_pivot(c, python_pivot(good))

    def test_a_part_outside_the_window_leaves_its_body_to_python(self):
        # Python keeps what the store keeps, and says why it refused the rest.
        old = v1(part("llm_request_ttft_seconds", "r1", 0.2, ts=T0 - 10))
        assert c_pivot([old], min_timestamp=T0)[2] == [0]
        assert c_pivot([old], keep_series=True, min_timestamp=T0)[2] == [0]
        spec = c_spec(MAPPING, None, False)
        ahead = remote_write.decode_v1_batch([old], MIN, (0, 0, 0, 0), spec, T0 - 11)
        assert ahead[2] == [0]
        assert remote_write.decode_v1_batch([old], MIN, (0, 0, 0, 0), spec, T0 - 10)[2] == []

    @pytest.mark.parametrize("keep_series", [False, True])
    @pytest.mark.parametrize("tenant", [None, "team-b"])
    def test_tenant_and_kept_series_agree(self, tenant, keep_series):
        body = v1(
            part("llm_request_ttft_seconds", "r1", 0.2),
            part("llm_request_error", "r1", 1, extra=[("error_class", "overloaded")]),
            part("llm_request_ttft_seconds", "r1", float("nan")),
        )
        assert_same_pivot(
            c_pivot([body], tenant, keep_series), python_pivot(body, tenant, keep_series)
        )


def test_a_value_past_what_its_column_holds_measures_nothing():
    """A start time one millisecond past DateTime64's last instant (2300-01-01) or an
    HTTP status past 65535 is dropped, and counted; the last values they hold are kept."""
    body = v1(
        part("llm_request_start_time_seconds", "kept", 10_413_791_999.0),
        part("llm_request_http_status", "kept", 65_535.0),
        part("llm_request_start_time_seconds", "too-late", 10_413_792_000.0),
        part("llm_request_http_status", "too-high", 65_536.0),
    )
    _, pivot = python_pivot(body)
    assert (pivot.taken, pivot.dropped) == (2, 2)
    (row,) = parts_table(pivot).to_pylist()
    assert row["request_id"] == "kept" and row["http_status"] == 65_535
    assert row["start_ts"].isoformat() == "2299-12-31T23:59:59+00:00"
    assert_same_pivot(c_pivot([body]), python_pivot(body))


# --- random flushes -----------------------------------------------------------------------

metric_names = st.sampled_from(
    [
        "llm_request_ttft_seconds",
        "llm_request_e2e_seconds",
        "llm_request_output_tokens",
        "llm_request_prompt_tokens",
        "llm_request_http_status",
        "llm_request_error",
        "llm_request_start_time_seconds",
        "vllm:time_to_first_token_seconds_sum",
        "up",
        "http_requests_total",
    ]
)
optional_labels = st.dictionaries(
    st.sampled_from(
        ["request_id", "tenant", "error_class", "model", "zone", "finish_reason", "gpu", "job"]
    ),
    st.sampled_from(["", "r1", "r2", "acme", "timeout", "rate_limited", "a", "b", "ü"]),
    max_size=6,
)
part_values = st.one_of(
    st.sampled_from([0.0, 1.0, 0.25, 80.0, 1_700_000_000.5, -0.0, -1.0, 2.0**40, 70_000.0]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
)
series = st.tuples(
    metric_names,
    optional_labels,
    st.lists(st.tuples(st.integers(T0 - 5, T0 + 5), part_values), max_size=3),
).map(lambda s: (sorted({"__name__": s[0], **s[1]}.items()), s[2]))
flushes = st.lists(st.lists(series, max_size=6).map(lambda s: v1(*s)), min_size=1, max_size=4)
writes = st.lists(series, max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    flushes,
    st.data(),
    st.sampled_from([None, "team-b"]),
    st.booleans(),
    st.sampled_from([MIN, T0]),
)
def test_random_flushes_pivot_as_the_python_reference_does(
    raw, data, tenant, keep_series, min_timestamp
):
    bodies = []
    for body in raw:
        action = data.draw(st.sampled_from(["keep", "keep", "retry", "cut"]))
        if action == "cut" and body:
            body = body[: data.draw(st.integers(0, len(body) - 1))]
        bodies.append(body)
        if action == "retry":
            bodies.append(body)
    c = c_pivot(bodies, tenant, keep_series, min_timestamp)
    taken = [b for i, b in enumerate(bodies) if i not in c[2]]
    for i in c[2]:  # left out: refused by Python too, or a time outside the window
        try:
            decoded = _decode_v1_python(bodies[i])
        except IngestError:
            continue
        stamps = decoded.samples.column("timestamp").cast(pa.int64()).to_pylist()
        assert min(stamps) < min_timestamp, bodies[i]
    assert_same_pivot(c, python_pivot(b"".join(taken), tenant, keep_series))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes, st.sampled_from([None, "team-b"]), st.booleans())
def test_a_2_0_write_pivots_as_the_same_1_0_write(series_list, tenant, keep_series):
    """Remote write 2.0 (symbols, the Python path) lands the rows of 1.0 (the C path)."""
    as_v1 = v1(*series_list)
    try:
        via_v2 = decode_v2(v2(*series_list))
    except IngestError:  # a series 2.0 refuses (no __name__ ...): 1.0 refuses it too
        assert c_pivot([as_v1])[2] == [0]
        return
    c = c_pivot([as_v1], tenant, keep_series)
    assert c[2] == []
    assert_same_pivot(c, split_requests(via_v2, MAPPING, tenant, keep_series))
