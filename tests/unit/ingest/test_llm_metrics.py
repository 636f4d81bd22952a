"""Per-request metrics sent as samples become parts of `requests` rows."""

import pyarrow as pa
import pytest

from warehouse.errors import ConfigError
from warehouse.ingest.llm_metrics import PARTS_SCHEMA, load_mapping, request_parts
from warehouse.ingest.proto import V1
from warehouse.ingest.remote_write import decode_v1

MAPPING = load_mapping()


def write(*samples: tuple[str, dict, float, int]):
    request = V1.WriteRequest()
    for name, labels, value, ts in samples:
        series = request.timeseries.add()
        for key, val in sorted({"__name__": name, **labels}.items()):
            series.labels.add(name=key, value=val)
        series.samples.add(value=value, timestamp=ts)
    return decode_v1(request.SerializeToString())


LABELS = {
    "request_id": "r1",
    "tenant": "acme",
    "model": "llama",
    "region": "hz",
    "gpu": "h100",
    "job": "gateway",
}


def parts_of(*samples, tenant=None) -> list[dict]:
    decoded = write(*samples)
    table = request_parts(decoded.series, decoded.samples, MAPPING, tenant)
    assert table.schema == PARTS_SCHEMA
    return sorted(table.to_pylist(), key=lambda row: row["first_ts"])


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


def test_each_sample_is_a_part_with_only_its_measure():
    parts = parts_of(
        ("llm_request_e2e_seconds", LABELS, 1.5, 2_000),
        ("llm_request_output_tokens", LABELS, 120, 3_000),
        ("vllm:request_prompt_tokens_sum", LABELS, 900, 4_000),
    )
    assert [(p["e2e_ms"], p["output_tokens"], p["prompt_tokens"]) for p in parts] == [
        (1500.0, None, None),
        (None, 120, None),
        (None, None, 900),
    ]


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


def test_the_start_time_metric_sets_the_request_time():
    (part,) = parts_of(("llm_request_start_time_seconds", LABELS, 1_700_000_000.123, 5_000))
    assert part["start_ts"].timestamp() == pytest.approx(1_700_000_000.123)


def test_unmapped_metrics_and_series_without_request_id_are_not_parts():
    without_id = {k: v for k, v in LABELS.items() if k != "request_id"}
    assert (
        parts_of(
            ("http_requests_total", LABELS, 1, 1_000),
            ("llm_request_ttft_seconds", without_id, 0.2, 1_000),
        )
        == []
    )


def test_the_tenant_header_overrides_the_label():
    (part,) = parts_of(("llm_request_ttft_seconds", LABELS, 0.25, 1_000), tenant="team-b")
    assert part["tenant"] == "team-b"


def test_a_mapping_to_an_unknown_column_is_refused(tmp_path):
    path = tmp_path / "mapping.toml"
    path.write_text('[metrics]\nmy_latency = { column = "latency_ms" }\n')
    with pytest.raises(ConfigError, match="latency_ms"):
        load_mapping(path)


def test_empty_writes_give_empty_parts():
    decoded = write()
    assert request_parts(decoded.series, decoded.samples, MAPPING).num_rows == 0
    assert isinstance(PARTS_SCHEMA.empty_table(), pa.Table)
