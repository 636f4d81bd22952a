"""One pipeline for every format: columns of any accepted types -> a checked table.

Each column goes through its kind's rule; then the rules across columns: ``tpot_ms``,
when absent, is derived by :func:`derive_tpot_ms`, and ``cached_prompt_tokens <=
prompt_tokens`` when both are known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from warehouse.errors import IngestError
from warehouse.ingest.events.attrs import _attrs_column
from warehouse.ingest.events.columns import (
    _bool_column,
    _ColumnTypeError,
    _float_column,
    _string_column,
    _uint_column,
)
from warehouse.ingest.events.fields import _KINDS
from warehouse.ingest.events.timestamps import _ts_column
from warehouse.ingest.events.violations import _Check, _first_violation, _Violation
from warehouse.ingest.time_window import TimeWindow
from warehouse.model import REQUESTS_SCHEMA


def derive_tpot_ms(e2e_ms: Any, ttft_ms: Any, output_tokens: Any) -> pa.ChunkedArray | pa.Array:
    """Time per output token as docs/querying.md defines it, over whole columns.

    ``(e2e_ms - ttft_ms) / (output_tokens - 1)`` where ``output_tokens > 1``, NULL
    otherwise (undefined, not zero) and wherever an input is NULL. Computed in float64
    from the latencies as stored (Float32), so it equals what a query over the stored
    columns computes; returned as Float32.
    """
    e2e = pc.cast(pc.cast(e2e_ms, pa.float32(), safe=False), pa.float64())
    ttft = pc.cast(pc.cast(ttft_ms, pa.float32(), safe=False), pa.float64())
    tokens = pc.cast(output_tokens, pa.float64())
    tpot = pc.divide(pc.subtract(e2e, ttft), pc.subtract(tokens, 1.0))
    defined = pc.greater(tokens, 1.0)
    return pc.cast(pc.if_else(defined, tpot, pa.scalar(None, pa.float64())), pa.float32())


_COLUMN_RULES: dict[str, Callable[..., tuple[Any, list[_Check]]]] = {
    "string": _string_column,
    "uint": _uint_column,
    "latency": _float_column,
    "number": _float_column,
    "bool": _bool_column,
    "ts": _ts_column,
    "attrs": _attrs_column,
}


def _finish(
    table: pa.Table,
    where: Callable[[int], str],
    *,
    ts_text: Any = None,
    extra: _Violation | None = None,
    window: TimeWindow | None = None,
) -> pa.Table:
    """Columns of any accepted types -> a checked REQUESTS_SCHEMA table, or IngestError.

    Absent columns are taken as null in every record. Column-level type errors are raised
    as they are found; row-level ones are gathered and the first (by row, then by field
    order) is raised, so the message names the first bad record. With ``window``, a
    ``ts`` the store would not keep is one (:mod:`warehouse.ingest.time_window`).
    """
    n = table.num_rows
    columns: dict[str, Any] = {}
    checks: list[_Check] = []
    for field in REQUESTS_SCHEMA:
        name = field.name
        column = table.column(name) if name in table.column_names else pa.nulls(n)
        try:
            if name == "ts":
                values, found = _ts_column(name, column, n, ts_text)
            else:
                values, found = _COLUMN_RULES[_KINDS[name]](name, column, n)
        except _ColumnTypeError as exc:
            raise IngestError(f"column {name}: {exc}") from None
        columns[name] = values
        checks.extend(found)
        if name == "ts" and window is not None:
            ms = pc.cast(values, pa.int64())
            shown = (
                column if ts_text is None else pc.coalesce(pc.cast(column, pa.string()), ts_text)
            )
            checks.append(_Check(name, window.too_old(ms), window.old_reason, shown))
            checks.append(_Check(name, window.too_new(ms), window.new_reason, shown))

    given = columns["tpot_ms"]
    derived = derive_tpot_ms(columns["e2e_ms"], columns["ttft_ms"], columns["output_tokens"])
    negative = pc.fill_null(pc.and_(pc.is_null(given), pc.less(derived, 0)), False)
    checks.append(
        _Check(
            "e2e_ms",
            negative,
            "must be >= ttft_ms, or tpot_ms = (e2e_ms - ttft_ms) / (output_tokens - 1) "
            "would be negative",
            columns["e2e_ms"],
        )
    )
    columns["tpot_ms"] = pc.coalesce(given, derived)
    prompt, cached = columns["prompt_tokens"], columns["cached_prompt_tokens"]
    checks.append(
        _Check(
            "cached_prompt_tokens",
            pc.fill_null(pc.greater(cached, prompt), False),
            "must be <= prompt_tokens",
            cached,
        )
    )

    violation = _first_violation(checks, extra)
    if violation is not None:
        raise IngestError(violation.message(where(violation.row)))
    return pa.Table.from_arrays(
        [columns[field.name] for field in REQUESTS_SCHEMA], schema=REQUESTS_SCHEMA
    )
