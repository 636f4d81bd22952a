"""Which deduplicated `series` the `series_samples` view should join: three candidates,
timed over remote-written samples as ClickHouse holds them before merging.

    python benchmarks/series_samples.py [--series 100000] [--samples 100] [--runs 5]

A migrated database on ClickHouse in-process (chdb, the embedded server's engine) gets
``--series`` series (ten metrics, five tenants, four labels each) written twice, in two
inserts, and ``--samples`` samples of each at 15 s, a tenth of them written twice (a
retried write), with merges stopped: every series row is there twice, as after a
``series_refresh_seconds`` rewrite that no merge has collapsed yet. Each candidate view
is then asked four questions (the median wall time of ``--runs``, after a warm-up; the
candidates take turns, so that other load on the machine falls on each alike):

* ``count``: every sample (the whole join);
* ``metric``: the newest value of each series of one metric;
* ``label``: the samples of one label value over the last 5 minutes;
* ``tenant``: one tenant's samples (what its row policy leaves to the view).

Candidates, each joining `samples FINAL`: ``group_by`` (the series grouped by
``(metric_name, id)``, the labels by ``any``), ``final`` (``series FINAL``), and, for
the samples side, ``samples_group_by`` (samples grouped by ``(id, timestamp)`` instead of
FINAL, with the series grouped). Every candidate must count each sample once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from warehouse.store import open_store
from warehouse.store.migrations import Migrator

SERIES_GROUPED = (
    "SELECT id, metric_name, any(labels) AS series_labels FROM {db}.series GROUP BY metric_name, id"
)
SERIES_FINAL = "SELECT id, metric_name, labels AS series_labels FROM {db}.series FINAL"
SAMPLES_FINAL = "SELECT id, timestamp, value FROM {db}.samples FINAL"
SAMPLES_GROUPED = (
    "SELECT id, timestamp, any(value) AS value FROM {db}.samples GROUP BY id, timestamp"
)
CANDIDATES = {  # name: series side / samples side
    "grouped/final": (SAMPLES_FINAL, SERIES_GROUPED),
    "final/final": (SAMPLES_FINAL, SERIES_FINAL),
    "grouped/grouped": (SAMPLES_GROUPED, SERIES_GROUPED),
    "final/grouped": (SAMPLES_GROUPED, SERIES_FINAL),
}
QUESTIONS = {
    "count": "SELECT count() FROM {view}",
    "metric": (
        "SELECT id, argMax(value, timestamp) FROM {view} WHERE metric_name = 'metric_3' GROUP BY id"
    ),
    "label": (
        "SELECT * FROM {view} WHERE labels['pod'] = 'pod-7' "
        "AND timestamp >= (SELECT max(timestamp) FROM {db}.samples) - INTERVAL 5 MINUTE"
    ),
    "tenant": "SELECT sum(value) FROM {view} WHERE tenant = 't2'",
}


def view_sql(db: str, name: str, samples: str, series: str) -> str:
    return (
        f"CREATE VIEW {db}.{name} AS SELECT sa.id AS id, "
        "se.series_labels['__tenant__'] AS tenant, se.metric_name AS metric_name, "
        "mapFilter((k, v) -> k != '__tenant__', se.series_labels) AS labels, "
        "sa.timestamp AS timestamp, sa.value AS value "
        f"FROM ({samples.format(db=db)}) AS sa "
        f"INNER JOIN ({series.format(db=db)}) AS se ON se.id = sa.id"
    )


def _view(candidate: str) -> str:
    return "v_" + candidate.replace("/", "_")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llmwh-series-samples-") as tmp:
        store = open_store(f"chdb://{tmp}?database=bench")
        Migrator(store).up()
        db = store.database
        for table in ("series", "samples"):
            store.command(f"SYSTEM STOP MERGES {db}.{table}")
        started = time.perf_counter()
        series = (
            "{id}, 'metric_' || toString(modulo(n, 10)), "
            "map('__tenant__', 't' || toString(modulo(n, 5)), "
            "'pod', 'pod-' || toString(modulo(n, 1000)), "
            "'job', 'job-' || toString(modulo(n, 7)), 'instance', toString(n)), "
            "now64(3) - INTERVAL 1 HOUR, now64(3)"
        )
        ident = "reinterpretAsUUID(MD5(toString(n)))"
        for _ in range(2):  # the same series twice, unmerged
            store.command(
                f"INSERT INTO {db}.series SELECT {series.format(id=ident)} FROM "
                f"(SELECT number AS n FROM numbers({args.series}))"
            )
        rows = args.series * args.samples
        store.command(
            f"INSERT INTO {db}.samples SELECT reinterpretAsUUID(MD5(toString(n))), "
            "toDateTime64(now() - INTERVAL 1 HOUR, 3, 'UTC') + toIntervalSecond(15 * k), "
            f"k + n / 1e6 FROM (SELECT number % {args.series} AS n, "
            f"intDiv(number, {args.series}) AS k FROM numbers({rows}))"
        )
        store.command(  # a retried write: a tenth of the samples again
            f"INSERT INTO {db}.samples SELECT * FROM {db}.samples "
            "WHERE modulo(cityHash64(id), 10) = 0"
        )
        print(f"loaded {args.series:,} series x2 and {rows:,} samples "
              f"(+10% again) in {time.perf_counter() - started:.1f} s")  # fmt: skip
        for name, (samples, series_side) in CANDIDATES.items():
            store.command(view_sql(db, _view(name), samples, series_side))
            counted = store.query_arrow(f"SELECT count() AS n FROM {db}.{_view(name)}")
            assert counted["n"][0].as_py() == rows, (name, counted["n"][0].as_py())
        print(f"{'question':8} " + " ".join(f"{n:>17}" for n in CANDIDATES))
        for question, sql in QUESTIONS.items():
            texts = {n: sql.format(view=f"{db}.{_view(n)}", db=db) for n in CANDIDATES}
            for text in texts.values():
                store.query_arrow(text)  # warm-up
            runs: dict[str, list[float]] = {name: [] for name in CANDIDATES}
            for _ in range(args.runs):  # candidates in turn: other load falls on each alike
                for name, text in texts.items():
                    began = time.perf_counter()
                    store.query_arrow(text)
                    runs[name].append(time.perf_counter() - began)
            medians = [statistics.median(times) * 1000 for times in runs.values()]
            print(f"{question:8} " + " ".join(f"{t:15.0f}ms" for t in medians))
        store.close()


if __name__ == "__main__":
    main()
