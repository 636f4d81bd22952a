"""The SRE workbook's multiwindow burn-rate alerts over an SLO's burn rates: which fires,
and the windows an evaluation needs so that each alert can be read from its row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from warehouse.model import REQUESTS_SCHEMA
from warehouse.query.sla import (
    WORKBOOK_ALERTS,
    alert_rates,
    evaluate,
    firing,
    with_alert_windows,
)
from warehouse.query.slo import parse_slo
from warehouse.query.timerange import TimeRange
from warehouse.store import open_store
from warehouse.store.migrations import Migrator

SLO_TEXT = """
name = "chat"
target = 0.99
burn_windows = ["60m", "1d"]
[thresholds]
ttft_ms = 300
"""


def severity(**rates: float | None) -> str:
    alert = firing(rates)
    return "none" if alert is None else alert.severity


def test_the_workbook_pairs_and_what_each_fires():
    assert [(a.severity, a.rate, a.long, a.short) for a in WORKBOOK_ALERTS] == [
        ("page", 14.4, "1h", "5m"),
        ("page", 6.0, "6h", "30m"),
        ("ticket", 1.0, "3d", "6h"),
    ]
    assert severity() == "none"
    # Both windows of a pair must burn past its rate; the short one alone is a blip.
    assert severity(**{"1h": 20.0, "5m": 20.0}) == "page"
    assert severity(**{"1h": 2.0, "5m": 40.0}) == "none"
    assert severity(**{"1h": 20.0, "5m": 14.4}) == "none"  # past the rate, not at it
    assert severity(**{"6h": 7.0, "30m": 7.0, "3d": 2.0}) == "page"
    assert severity(**{"3d": 1.5, "6h": 1.2, "1h": 1.2, "5m": 30.0}) == "ticket"
    assert severity(**{"3d": 1.5, "6h": None}) == "none"  # no request in 6h: no evidence


def test_an_slo_gets_the_alert_windows_it_lacks_once_each():
    slo = parse_slo(SLO_TEXT)
    windows = dict(with_alert_windows(slo).burn_windows)
    # 60m is the workbook's 1h already: not asked twice.
    assert list(windows) == ["5m", "30m", "60m", "6h", "1d", "3d"]
    short = parse_slo(SLO_TEXT.replace('burn_windows = ["60m", "1d"]', 'period = "2d"'))
    assert "3d" not in dict(with_alert_windows(short).burn_windows)  # longer than its period


def test_the_alerts_read_the_burn_rates_evaluate_computes(tmp_path):
    """An hour of bad requests (all over the threshold) after a good day: over 5m and
    1h the budget burns at 100x, which pages; over 3d much slower."""
    store = open_store(f"duckdb:///{tmp_path / 'burn.duckdb'}")
    Migrator(store).up()
    until = datetime(2026, 12, 4, 12, tzinfo=UTC)
    times = [until - timedelta(minutes=m) for m in range(1, 1441)]
    ttft = [900.0 if until - t <= timedelta(hours=1) else 100.0 for t in times]
    ids = [f"r{k}" for k in range(len(times))]
    columns = {"ts": times, "request_id": ids, "status": ["ok"] * len(times), "ttft_ms": ttft}
    store.insert_arrow("requests", _requests(columns))
    slo = with_alert_windows(parse_slo(SLO_TEXT))
    row = evaluate(store, slo, TimeRange(until - timedelta(days=30), until)).row(0, named=True)
    rates = alert_rates(row, slo)
    assert rates["5m"] == pytest.approx(100.0) and rates["1h"] == pytest.approx(100.0)
    assert rates["3d"] == pytest.approx(100 * 60 / 1440)  # the day's data, an hour bad
    alert = firing(rates)
    assert alert is not None and (alert.severity, alert.long) == ("page", "1h")
    store.close()


def _requests(columns: dict[str, list[object]]) -> pa.Table:
    """A ``requests`` table of ``columns``; every other column null where it may be,
    else empty (text, attrs), 200 or false."""
    n = len(next(iter(columns.values())))
    defaults = {pa.string(): "", pa.uint16(): 200, pa.bool_(): False}
    arrays = []
    for field in REQUESTS_SCHEMA:
        if field.name in columns:
            arrays.append(pa.array(columns[field.name], field.type))
        elif field.nullable:
            arrays.append(pa.nulls(n, field.type))
        elif pa.types.is_map(field.type):
            arrays.append(pa.array([[]] * n, field.type))
        else:
            arrays.append(pa.array([defaults[field.type]] * n, field.type))
    return pa.Table.from_arrays(arrays, schema=REQUESTS_SCHEMA)
