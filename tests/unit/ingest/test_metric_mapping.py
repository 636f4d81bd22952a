"""Per-request metrics sent as samples become one `request_parts` row per request.

Each behaviour is checked on the Python reference (``split_requests``); the C decoder
must give the same rows, which ``test_request_pivot.py`` checks on random writes.
"""

import pytest
from payloads import v1

from warehouse.errors import ConfigError
from warehouse.ingest.metric_mapping import PARTS_SCHEMA, load_mapping
from warehouse.ingest.remote_write import decode_v1
from warehouse.ingest.request_pivot import parts_table, split_requests

MAPPING = load_mapping()

LABELS = {
    "request_id": "r1",
    "tenant": "acme",
    "model": "llama",
    "region": "hz",
    "gpu": "h100",
    "job": "gateway",
}


def write(*samples: tuple[str, dict, float, int]) -> bytes:
    return v1(
        *(
            (sorted({"__name__": name, **labels}.items()), [(ts, value)])
            for name, labels, value, ts in samples
        )
    )


def split(*samples, tenant=None, keep_series=False):
    return split_requests(decode_v1(write(*samples)), MAPPING, tenant, keep_series)


def parts_of(*samples, tenant=None) -> list[dict]:
    _, pivot = split(*samples, tenant=tenant)
    table = parts_table(pivot)
    assert table.schema == PARTS_SCHEMA
    return table.to_pylist()


def test_seconds_become_milliseconds_and_labels_become_dimensions():
    (part,) = parts_of(("llm_request_ttft_seconds", LABELS, 0.25, 1_000))
    assert part["ttft_ms"] == 250.0
    assert (part["tenant"], part["request_id"], part["model"], part["region"]) == (
        "acme",
        "r1",
        "llama",
        "hz",
    )
    assert part["e2e_ms"] is None and part["prompt_tokens"] is None
    assert dict(part["attrs"]) == {"gpu": "h100", "job": "gateway"}
    assert part["status_rank"] == 0


def test_the_parts_of_one_request_in_one_write_are_one_row():
    (part,) = parts_of(
        ("llm_request_e2e_seconds", LABELS, 1.5, 2_000),
        ("llm_request_output_tokens", LABELS, 120, 3_000),
        ("vllm:request_prompt_tokens_sum", LABELS, 900, 4_000),
    )
    assert (part["e2e_ms"], part["output_tokens"], part["prompt_tokens"]) == (1500.0, 120, 900)
    assert part["first_ts"].timestamp() == 2.0  # the earliest part's time


def test_requests_are_rows_in_the_order_they_first_appear():
    other = {**LABELS, "request_id": "r0"}
    parts = parts_of(
        ("llm_request_ttft_seconds", LABELS, 0.1, 1_000),
        ("llm_request_ttft_seconds", other, 0.2, 1_000),
        ("llm_request_e2e_seconds", LABELS, 0.9, 1_000),
    )
    assert [(p["request_id"], p["ttft_ms"], p["e2e_ms"]) for p in parts] == [
        ("r1", 100.0, 900.0),
        ("r0", 200.0, None),
    ]


def test_a_repeated_measure_takes_the_last_value_and_dimensions_the_last_label():
    (part,) = parts_of(
        ("llm_request_ttft_seconds", {**LABELS, "zone": "a", "job": "b"}, 0.1, 1_000),
        ("llm_request_ttft_seconds", {**LABELS, "zone": "c", "job": "a"}, 0.3, 2_000),
    )
    assert part["ttft_ms"] == pytest.approx(300.0)
    assert part["zone"] == "c"  # a dimension: the last part's, as the store's anyLast
    assert dict(part["attrs"])["job"] == "b"  # attrs: the greatest, as maxMap


def test_errors_and_rejections_by_error_class():
    error, rejected = parts_of(
        ("llm_request_error", {**LABELS, "error_class": "timeout"}, 1, 1_000),
        (
            "llm_request_error",
            {**LABELS, "request_id": "r2", "error_class": "rate_limited"},
            1,
            2_000,
        ),
    )
    assert (error["status_rank"], error["error_class"]) == (1, "timeout")
    assert (rejected["status_rank"], rejected["error_class"]) == (2, "rate_limited")
    assert "error_class" not in dict(error["attrs"])


def test_an_error_flag_of_zero_is_no_failure():
    (part,) = parts_of(("llm_request_error", {**LABELS, "error_class": "timeout"}, 0, 1_000))
    assert (part["status_rank"], part["error_class"]) == (0, None)


def test_the_start_time_metric_sets_the_request_time():
    (part,) = parts_of(("llm_request_start_time_seconds", LABELS, 1_700_000_000.123, 5_000))
    assert part["start_ts"].timestamp() == pytest.approx(1_700_000_000.123)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -1.0, 2.0**40],
    ids=["NaN (staleness)", "infinite", "negative", "above UInt32"],
)
def test_a_value_that_measures_nothing_is_dropped_and_counted(value):
    rest, pivot = split(
        ("llm_request_output_tokens", LABELS, value, 1_000),
        ("llm_request_ttft_seconds", LABELS, 0.2, 1_000),
    )
    (part,) = parts_table(pivot).to_pylist()
    assert (part["output_tokens"], part["ttft_ms"]) == (None, 200.0)
    assert (pivot.taken, pivot.dropped) == (1, 1)
    assert rest.samples_written == 1


def test_per_request_samples_are_no_series_unless_kept():
    samples = (
        ("llm_request_ttft_seconds", LABELS, 0.25, 1_000),
        ("up", {"job": "gateway"}, 1.0, 1_000),
    )
    rest, _ = split(*samples)
    assert rest.series.column("metric_name").to_pylist() == ["up"]
    assert rest.samples.num_rows == 1 and rest.samples_written == 2
    kept, pivot = split(*samples, keep_series=True)
    assert sorted(kept.series.column("metric_name").to_pylist()) == [
        "llm_request_ttft_seconds",
        "up",
    ]
    assert kept.samples.num_rows == 2 and pivot.taken == 1


def test_unmapped_metrics_and_series_without_request_id_stay_series():
    without_id = {k: v for k, v in LABELS.items() if k != "request_id"}
    rest, pivot = split(
        ("http_requests_total", LABELS, 1, 1_000),
        ("llm_request_ttft_seconds", without_id, 0.2, 1_000),
    )
    assert parts_table(pivot).num_rows == 0
    assert rest.series.num_rows == 2 and rest.samples.num_rows == 2


def test_the_tenant_header_overrides_the_label():
    (part,) = parts_of(("llm_request_ttft_seconds", LABELS, 0.25, 1_000), tenant="team-b")
    assert part["tenant"] == "team-b"


def test_requests_of_two_tenants_with_one_id_are_two_rows():
    parts = parts_of(
        ("llm_request_ttft_seconds", LABELS, 0.25, 1_000),
        ("llm_request_ttft_seconds", {**LABELS, "tenant": "other"}, 0.5, 1_000),
    )
    assert [(p["tenant"], p["ttft_ms"]) for p in parts] == [("acme", 250.0), ("other", 500.0)]


def test_a_mapping_to_an_unknown_column_is_refused(tmp_path):
    path = tmp_path / "mapping.toml"
    path.write_text('[metrics]\nmy_latency = { column = "latency_ms" }\n')
    with pytest.raises(ConfigError, match="latency_ms"):
        load_mapping(path)


def test_empty_writes_give_empty_parts():
    rest, pivot = split()
    assert parts_table(pivot).num_rows == 0 and rest.samples.num_rows == 0
