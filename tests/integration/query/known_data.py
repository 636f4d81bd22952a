"""Requests with known distributions, and the oracle that answers from them with numpy.

The data is built here, column by column, so every expected figure follows from
the definitions of docs/querying.md applied to these arrays, independently of any database.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
from days import at

from warehouse.model import LABEL_COLUMNS, REQUESTS_SCHEMA

START = at(9)
SPAN = timedelta(hours=2)
SINCE = START.isoformat()
UNTIL = (START + SPAN).isoformat()


def known_requests(n: int = 20_000, seed: int = 7) -> pa.Table:
    """Two models in two regions with log-normal TTFT, per-token decode times and a
    fixed mix of outcomes; 2% health-check probes; some one-token answers (no TPOT)."""
    rng = np.random.default_rng(seed)
    start_ms = int(START.timestamp() * 1000)
    ts = np.sort(start_ms + rng.integers(0, int(SPAN.total_seconds() * 1000), n))
    model = rng.choice(["alpha", "beta"], n, p=[0.6, 0.4])
    region = rng.choice(["hz", "sh"], n, p=[0.7, 0.3])
    ttft = rng.lognormal(np.where(model == "alpha", np.log(120), np.log(220)), 0.5).astype(
        np.float32
    )
    output = rng.geometric(1 / 80, n).astype(np.uint32)
    output[rng.random(n) < 0.05] = 1
    per_token = rng.gamma(4.0, 6.0, n)
    e2e = (ttft + np.maximum(output.astype(np.float64) - 1, 0) * per_token).astype(np.float32)
    decoding = output > 1
    tpot = np.where(decoding, (e2e.astype(np.float64) - ttft) / np.maximum(output - 1.0, 1), np.nan)
    status = rng.choice(["ok", "error", "rejected"], n, p=[0.95, 0.03, 0.02])
    prompt = rng.integers(20, 4000, n).astype(np.uint32)
    cached = (prompt * rng.uniform(0, 0.9, n)).astype(np.uint32)
    probe = rng.random(n) < 0.02
    columns = {
        "ts": pa.array(ts, pa.timestamp("ms", tz="UTC")),
        "request_id": pa.array([f"req-{i:06d}" for i in range(n)]),
        **{name: pa.array(np.full(n, "", dtype=object)) for name in LABEL_COLUMNS},
        "status": pa.array(status),
        "error_class": pa.array(np.where(status == "error", "timeout", "")),
        "http_status": pa.array(np.where(status == "ok", 200, 503).astype(np.uint16)),
        "finish_reason": pa.array(np.full(n, "stop", dtype=object)),
        "is_probe": pa.array(probe),
        "queue_ms": pa.array(rng.exponential(5, n).astype(np.float32)),
        "ttft_ms": pa.array(ttft),
        "e2e_ms": pa.array(e2e),
        "tpot_ms": pa.array(tpot.astype(np.float32), mask=~decoding),
        "itl_p99_ms": pa.array(np.full(n, np.nan, np.float32), mask=np.ones(n, bool)),
        "prompt_tokens": pa.array(prompt),
        "output_tokens": pa.array(output),
        "cached_prompt_tokens": pa.array(cached),
        "max_context_tokens": pa.array(np.full(n, 8192, np.uint32)),
        "consistency_score": pa.array(np.full(n, np.nan, np.float32), mask=np.ones(n, bool)),
        "hallucination": pa.array(np.full(n, np.nan, np.float32), mask=np.ones(n, bool)),
        "attrs": pa.array(
            [[("gpu", "h100" if m == "alpha" else "a100")] for m in model],
            pa.map_(pa.string(), pa.string()),
        ),
    }
    columns["model"] = pa.array(model)
    columns["region"] = pa.array(region)
    columns["tenant"] = pa.array(np.full(n, "acme", dtype=object))
    return pa.table(columns).select(REQUESTS_SCHEMA.names).cast(REQUESTS_SCHEMA)


class Oracle:
    """Expected figures per (model, region), from the arrays with numpy."""

    def __init__(self, table: pa.Table):
        self.columns = {
            name: table.column(name).to_numpy(zero_copy_only=False)
            for name in table.column_names
            if name != "attrs"
        }
        self.valid = ~self.columns["is_probe"]

    def group(self, **where: str) -> dict[str, np.ndarray]:
        keep = self.valid.copy()
        for name, value in where.items():
            keep &= self.columns[name] == value
        return {name: column[keep] for name, column in self.columns.items()}

    @staticmethod
    def floats(values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        return values[~np.isnan(values)]

    def percentile(self, column: str, q: float, **where: str) -> float:
        return float(np.percentile(self.floats(self.group(**where)[column]), q))

    def attainment(self, thresholds: dict[str, float], **where: str) -> tuple[float, int]:
        g = self.group(**where)
        good = g["status"] == "ok"
        for column, limit in thresholds.items():
            values = np.asarray(g[column], dtype=np.float64)
            meets = values <= limit
            if column == "tpot_ms":  # vLLM: no TPOT (one output token) meets a TPOT SLO
                meets |= np.isnan(values)
            good &= meets
        return good.mean(), int(good.sum())


def with_columns(table: pa.Table, **columns: object) -> pa.Table:
    """``table`` with some columns replaced (numpy arrays or Arrow arrays), same schema."""
    arrays = {name: table.column(name) for name in table.column_names}
    for name, values in columns.items():
        arrays[name] = pa.array(values, type=REQUESTS_SCHEMA.field(name).type)
    return pa.table(arrays).cast(REQUESTS_SCHEMA)
