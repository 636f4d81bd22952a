"""The CPU of one remote-write flush with the write-ahead log, part by part.

    python benchmarks/flush_cpu.py [FLUSHES]

A flush as 4 senders of long-lived series make it (``benchmarks/remote_write.py``'s
``low`` workload: two bodies of 500 distinct series each, one scrape later every
flush), decoded, tabled and appended to a log in a temporary directory, each part
timed in CPU (medians after a warm-up). Run it with another code tree on
``PYTHONPATH`` to compare: before the decoder knew series already written (ba6d260),
the receiver's ``WrittenSeries.to_write`` filtered the decoded rows instead.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import cramjam

sys.path.insert(0, str(Path(__file__).parent))

import remote_write as bench

from warehouse.config import Config
from warehouse.ingest import remote_write
from warehouse.ingest.batcher import merge_tables
from warehouse.ingest.metric_mapping import load_mapping
from warehouse.ingest.request_pivot import c_spec, parts_table
from warehouse.ingest.series_cache import WrittenSeries
from warehouse.ingest.wal import Entry, WriteAheadLog

WARM_UP = 50


def main() -> None:
    flushes = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    lanes = bench._low_lanes(4, flushes)
    bodies = [[bytes(cramjam.snappy.decompress_raw(b)) for b in lane] for lane in lanes[:2]]
    config = Config()
    spec = c_spec(load_mapping(), None, config.request_samples_as_series)
    written = WrittenSeries(config.series_cache_size, config.series_refresh_seconds)
    known = getattr(written, "known", None)  # None: a tree from before it (ba6d260)
    wal = WriteAheadLog(tempfile.mkdtemp(prefix="llmwh-flush-cpu-"))
    wal.open()
    parts: dict[str, list[int]] = {
        k: [] for k in ("decode", "series rows", "tables merged", "log append", "total")
    }
    rows = 0
    for i in range(flushes):
        flush = [bodies[0][i], bodies[1][i]]
        t0 = time.process_time_ns()
        args = (flush, 0, (0, 0, 0, 0), spec, 2**63 - 1, None)
        if known is not None:
            decoded, pivot, _ = remote_write.decode_v1_batch(*args, known)
        else:
            decoded, pivot, _ = remote_write.decode_v1_batch(*args)
        t1 = time.process_time_ns()
        series = decoded.series if known is not None else written.to_write(decoded.series)
        t2 = time.process_time_ns()
        tables = merge_tables(
            [{"series": series, "samples": decoded.samples, "request_parts": parts_table(pivot)}]
        )
        t3 = time.process_time_ns()
        wal.append([Entry(name, table) for name, table in tables])
        t4 = time.process_time_ns()
        written.remember(decoded if known is not None else series)
        t5 = time.process_time_ns()
        rows += series.num_rows if i >= WARM_UP else 0
        for name, a, b in (
            ("decode", t0, t1),
            ("series rows", t1, t2),
            ("tables merged", t2, t3),
            ("log append", t3, t4),
            ("total", t0, t5),
        ):
            parts[name].append(b - a)
    wal.close()
    print(f"{flushes - WARM_UP} flushes of 2 x 500 long-lived series, CPU per flush (median):")
    for name, times in parts.items():
        print(f"  {name:14s} {statistics.median(times[WARM_UP:]) / 1e3:8.1f} us")
    print(f"  series rows written after the warm-up: {rows}")


if __name__ == "__main__":
    main()
