"""The series id (migration 0023): the series' own hash, then its target's, computed
alike in C (``_v1_fast``), in Python (one series, and the decoder's columns) and in SQL
(``SERIES_ID_SQL``, in-process ClickHouse)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from payloads import v1
from stores import fresh_store

from warehouse.ingest.remote_write import _decode_v1_python, decode_v1
from warehouse.ingest.remote_write_tables import (
    SERIES_ID_SQL,
    TARGET_LABELS,
    from_columns,
    series_id,
    series_key,
    target_key,
    with_tenant,
)
from warehouse.store import Store

try:
    from warehouse.ingest import _v1_fast
except ImportError:  # pragma: no cover - built without a C compiler
    _v1_fast = None  # type: ignore[assignment]

needs_extension = pytest.mark.skipif(_v1_fast is None, reason="C extension not built")


@pytest.fixture(scope="module")
def chdb(chdb_path: Path) -> Iterator[Store]:
    with fresh_store(f"chdb://{chdb_path}?database=series_id") as store:
        yield store


def test_the_id_is_the_series_hash_then_the_target_hash():
    labels = {"job": "api", "instance": "a:1", "zone": "é:1"}
    key = series_key("up", labels)
    assert key == b"2:up8:instance3:a:13:job3:api4:zone4:\xc3\xa9:1"
    assert target_key(labels) == b"8:instance3:a:13:job3:api"
    own, target = hashlib.md5(key).digest(), hashlib.md5(target_key(labels)).digest()
    assert series_id("up", labels) == str(uuid.UUID(bytes=own[7::-1] + target[7::-1]))
    # Its first half is the id before 0023's (the whole MD5 of the key) first half.
    assert series_id("up", labels)[:18] == str(uuid.UUID(bytes=own[7::-1] + own[15:7:-1]))[:18]


def test_a_targets_series_share_the_half_clickhouse_sorts_by():
    target = {"job": "node", "instance": "host-1:9100"}
    ids = [series_id(m, {**target, "cpu": c}) for m in ("a", "b") for c in ("0", "1")]
    assert len({i[19:] for i in ids}) == 1  # the second half: the target's
    assert len({i[:18] for i in ids}) == 4
    other = series_id("a", {"job": "node", "instance": "host-2:9100", "cpu": "0"})
    assert other[19:] != ids[0][19:]


def test_the_target_is_job_instance_and_tenant_else_a_fixed_one():
    assert tuple(sorted(TARGET_LABELS, key=str.encode)) == TARGET_LABELS
    assert target_key({"zone": "a", "model": "m"}) == b""
    no_target = {series_id(m, {"zone": z})[19:] for m in ("x", "y") for z in ("a", "b")}
    assert no_target == {str(uuid.UUID(bytes=bytes(8) + hashlib.md5(b"").digest()[7::-1]))[19:]}
    # The tenant is in both halves: another tenant's series is another series, whatever
    # its labels, and another target.
    one = series_id("up", {"job": "api", "__tenant__": "acme"})
    two = series_id("up", {"job": "api", "__tenant__": "other"})
    assert one[:18] != two[:18] and one[19:] != two[19:]
    assert target_key({"job": "j", "__tenant__": "t", "instance": "i"}) == (
        b"10:__tenant__1:t8:instance1:i3:job1:j"
    )


names = st.sampled_from(
    ["job", "instance", "__tenant__", "jobs", "instance_", "a", "zone", "ü", "Job", "_"]
)
values = st.one_of(st.sampled_from(["x", "api", "ü€𝄞", "3:x", "0:"]), st.text(min_size=1))
label_sets = st.lists(
    st.tuples(
        st.sampled_from(["up", "x", "vllm:num_requests_running", "é"]),
        st.dictionaries(names, values, max_size=6),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label_sets)
def test_python_the_decoder_and_sql_compute_the_same_ids(chdb, sets):
    expected = [series_id(metric, labels) for metric, labels in sets]
    # The decoders: each series once, in order of first appearance.
    body = v1(*[([("__name__", m), *labels.items()], [(0, 1.0)]) for m, labels in sets])
    first = list(dict.fromkeys(expected))
    decoded = [str(i) for i in _decode_v1_python(body).series.column("id").to_pylist()]
    assert decoded == first
    if _v1_fast is not None:
        fast = [str(i) for i in decode_v1(body).series.column("id").to_pylist()]
        assert fast == first
    rows = ", ".join(
        f"({_literal(metric)}, map({', '.join(_literal(s) for kv in labels.items() for s in kv)}))"
        for metric, labels in sets
    )
    computed = chdb.query_arrow(
        f"SELECT toString({SERIES_ID_SQL}) AS id FROM (SELECT t.1 AS metric_name, "
        f"CAST(t.2, 'Map(String, String)') AS labels, t.3 AS n "
        f"FROM (SELECT arrayJoin(arrayMap((r, k) -> (r.1, r.2, k), [{rows}], "
        f"range({len(sets)}))) AS t)) ORDER BY n"
    )
    assert computed.column("id").to_pylist() == expected


@needs_extension
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(label_sets, st.sampled_from(["acme", "t-1", "ü"]))
def test_a_tenants_ids_in_c_are_pythons(sets, tenant):
    body = v1(*[([("__name__", m), *labels.items()], [(0, 1.0)]) for m, labels in sets])
    tagged = with_tenant(_decode_v1_python(body), tenant)
    columns, refused, _ = _v1_fast.columns([body], -(2**63), (0, 0, 0, 0), None, 2**63 - 1,
                                           tenant.encode())  # fmt: skip
    assert not refused
    assert from_columns(columns).series.column("id").to_pylist() == (
        tagged.series.column("id").to_pylist()
    )
    for metric, labels in sets:
        assert series_id(metric, {**labels, "__tenant__": tenant}) in {
            str(i) for i in tagged.series.column("id").to_pylist()
        }


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
