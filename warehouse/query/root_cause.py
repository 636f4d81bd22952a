"""Root cause: which values of which dimensions carry the bad requests of a period.

A request is bad when it is valid and not good: it failed, was rejected, or missed a
per-request threshold. For each dimension and each of its values over the period:

- ``traffic_share``: its share of valid requests; ``bad_share``: its share of bad ones;
- ``bad_rate``: bad requests per request of that value;
- ``lift``: ``bad_share / traffic_share`` (1 is "as bad as everyone else");
- ``excess_bad``: bad requests beyond what the value would have at the overall bad
  rate, and ``contribution``: that excess as a share of all bad requests.

Rows are ranked by ``excess_bad``, so a value that is both large and bad comes first,
and a small value that is very bad still shows through its lift. Values carrying less
than ``min_share`` of the traffic are left out as noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from warehouse.errors import QueryError
from warehouse.model import LABEL_COLUMNS
from warehouse.query.builder import FilterValue, Question, RollupSource, check_limit
from warehouse.query.registry import dimension
from warehouse.query.result import Result
from warehouse.query.run import ask
from warehouse.query.timerange import TimeRange
from warehouse.store.base import Store

__all__ = ["DEFAULT_DIMENSIONS", "root_cause"]

DEFAULT_DIMENSIONS = LABEL_COLUMNS
"""Who and where requests came from: every label column of `requests`."""


def root_cause(
    store: Store,
    time_range: TimeRange,
    thresholds: Mapping[str, float] | None = None,
    dimensions: Sequence[str] = DEFAULT_DIMENSIONS,
    filters: Mapping[str, FilterValue] | None = None,
    min_share: float = 0.01,
    limit: int | None = 20,
    exact: bool | None = None,
    sources: Sequence[RollupSource] = (),
) -> Result:
    """The dimension values ranked by the bad requests they carry beyond their share;
    ``sources`` (an SLO's rollup) answer the dimensions they keep."""
    check_limit(limit)
    if not 0 <= min_share < 1:
        raise QueryError(f"bad min_share {min_share!r}: expected a share between 0 and 1")
    filters = dict(filters or {})
    names = [dimension(d).name for d in dimensions]
    if not names:
        raise QueryError("root cause needs at least one dimension to search")
    frames = []
    elapsed = 0.0
    parts = {}
    for name, column in zip(names, dimensions, strict=True):
        answer = ask(
            store,
            Question(
                measures=["count", "good_count"],
                by=[column],
                filters=filters,
                range=time_range,
                thresholds=dict(thresholds or {}),
                exact=exact,
            ),
            sources,
        )
        elapsed += answer.elapsed_ms
        parts[name] = answer.plan
        frames.append(
            pl.DataFrame(answer).select(
                pl.lit(name).alias("dimension"),
                pl.col(name).cast(pl.Utf8).alias("value"),
                pl.col("count"),
                (pl.col("count") - pl.col("good_count").round().cast(pl.Int64)).alias("bad"),
            )
        )
    frame = pl.concat(frames)
    total = frame.group_by("dimension").agg(
        pl.col("count").sum().alias("_total"), pl.col("bad").sum().alias("_bad_total")
    )
    frame = (
        frame.join(total, on="dimension")
        .with_columns(
            (pl.col("bad") / pl.col("count")).alias("bad_rate"),
            (pl.col("count") / pl.col("_total")).alias("traffic_share"),
            (pl.col("bad") / pl.col("_bad_total")).alias("bad_share"),
        )
        .with_columns(
            (pl.col("bad_share") / pl.col("traffic_share")).alias("lift"),
            (pl.col("bad") - pl.col("count") * pl.col("_bad_total") / pl.col("_total")).alias(
                "excess_bad"
            ),
        )
        .with_columns((pl.col("excess_bad") / pl.col("_bad_total")).alias("contribution"))
        .filter(pl.col("traffic_share") >= min_share)
        .drop("_total", "_bad_total")
        .sort(["excess_bad", "dimension", "value"], descending=[True, False, False])
    )
    frame = frame.with_columns(pl.col(pl.Float64).fill_nan(None))
    if limit is not None:
        frame = frame.head(limit)
    return Result.of(frame, next(iter(parts.values())), elapsed, parts)
