"""Freshness: from a receiver's 2xx to the first query that counts the data.

    python benchmarks/freshness.py [--repeat 5] [--seal-after 10] [--seal-every 5]
        [--no-wal] [--json]

Starts ``llmwh serve`` on the embedded ClickHouse and, ``--repeat`` times for each kind
of write, sends one write of fresh data, notes when the 2xx came, and asks until the
data is counted (every 50 ms):

* ``events``: one per-request event (``POST /api/v1/requests``), counted by a drill-down
  (``Warehouse.drill(measures=["count"])``, what ``llmwh drill`` runs);
* ``plain samples``: one remote-write sample of an ordinary series, counted in
  ``samples`` (``Warehouse.sql``, what ``llmwh sql`` runs);
* ``per-request remote write``: one request as five per-request metric samples, counted
  by a drill-down once it is sealed.

Prints the seconds from 2xx to counted: median and range per kind. Events and plain
samples are written before they are acknowledged, so they count at once; a request sent
as samples counts once it is sealed: ``seal_after_seconds`` after its last part, at the
next sealing run (every ``seal_every_seconds``). ``llmwh serve`` as shipped acknowledges
a write once it is in the receiver's write-ahead log, and it counts once the log is
inserted (every ``wal_flush_ms``); ``--no-wal`` (``llmwh serve --no-wal``) acknowledges
once it is in the store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import cramjam
from remote_write import Receiver

from warehouse.api import connect
from warehouse.ingest.events import encode_ndjson
from warehouse.store.embedded import server_status
from warehouse.synthetic import synthetic_requests
from warehouse.wire.prometheus import V1

POLL_S = 0.05
PER_REQUEST = (
    ("llm_request_ttft_seconds", 0.2),
    ("llm_request_tpot_seconds", 0.03),
    ("llm_request_e2e_seconds", 3.1),
    ("llm_request_prompt_tokens", 900),
    ("llm_request_output_tokens", 100),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seal-after", type=int, default=None)
    parser.add_argument("--seal-every", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--no-wal", action="store_true", help="llmwh serve --no-wal")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.seal_after is not None:
        os.environ["LLMWH_SEAL_AFTER_SECONDS"] = str(args.seal_after)
    if args.seal_every is not None:
        os.environ["LLMWH_SEAL_EVERY_SECONDS"] = str(args.seal_every)
    with tempfile.TemporaryDirectory(prefix="llmwh-freshness-") as tmp:
        receiver = Receiver("llmwh-no-wal" if args.no_wal else "llmwh", Path(tmp))
        receiver.start()
        try:
            wh = connect(server_status(receiver.root / "data").store_url())
            base = f"http://127.0.0.1:{receiver.port}"
            kinds = {
                "events": lambda tag, timeout: _event(base, wh, tag, timeout),
                "plain samples": lambda tag, timeout: _plain_sample(base, wh, tag, timeout),
                "per-request remote write": lambda tag, timeout: _request_as_samples(
                    base, wh, tag, timeout
                ),
            }
            result = {}
            for kind, measure in kinds.items():
                seconds = [
                    measure(f"fresh-{uuid.uuid4().hex[:8]}", args.timeout)
                    for _ in range(args.repeat)
                ]
                result[kind] = {
                    "median_s": round(statistics.median(seconds), 3),
                    "min_s": round(min(seconds), 3),
                    "max_s": round(max(seconds), 3),
                }
        finally:
            receiver.stop()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("seconds from the 2xx to the first query that counts the data")
    for kind, figures in result.items():
        print(
            f"  {kind:26s} median {figures['median_s']:7.3f}   "
            f"range {figures['min_s']:.3f}-{figures['max_s']:.3f}"
        )


def _post(url: str, body: bytes, content_type: str, **headers: str) -> None:
    request = urllib.request.Request(url, body, {"Content-Type": content_type, **headers})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert 200 <= response.status < 300, response.status


def _until_counted(count, expected: int, timeout: float) -> float:
    acknowledged = time.monotonic()
    while count() < expected:
        if time.monotonic() - acknowledged > timeout:
            raise RuntimeError(f"not counted after {timeout:g}s")
        time.sleep(POLL_S)
    return time.monotonic() - acknowledged


def _drilled(wh, tenant: str):
    return lambda: int(wh.drill(measures=["count"], filters={"tenant": tenant})["count"].sum())


def _event(base: str, wh, tenant: str, timeout: float) -> float:
    rows = synthetic_requests(1, seed=int(time.time()))
    rows = rows.set_column(rows.schema.get_field_index("tenant"), "tenant", [[tenant]]).set_column(
        rows.schema.get_field_index("is_probe"), "is_probe", [[False]]
    )
    _post(f"{base}/api/v1/requests", encode_ndjson(rows), "application/x-ndjson")
    return _until_counted(_drilled(wh, tenant), 1, timeout)


def _remote_write(base: str, series: list[tuple[dict[str, str], float]]) -> None:
    write = V1.WriteRequest()
    now = int(time.time() * 1000)
    for labels, value in series:
        ts = write.timeseries.add()
        for name, label in sorted(labels.items()):
            ts.labels.add(name=name, value=label)
        ts.samples.add(value=value, timestamp=now)
    body = bytes(cramjam.snappy.compress_raw(write.SerializeToString()))
    _post(f"{base}/api/v1/write", body, "application/x-protobuf", **{"Content-Encoding": "snappy"})


def _plain_sample(base: str, wh, tag: str, timeout: float) -> float:
    _remote_write(base, [({"__name__": "freshness_probe", "run": tag}, 1.0)])
    sql = (
        "SELECT count() AS n FROM samples "
        "WHERE id IN (SELECT id FROM series WHERE labels['run'] = {tag:String})"
    )
    return _until_counted(lambda: int(wh.sql(sql, {"tag": tag})["n"][0]), 1, timeout)


def _request_as_samples(base: str, wh, tenant: str, timeout: float) -> float:
    labels = {"request_id": uuid.uuid4().hex, "tenant": tenant, "model": "m", "service": "chat"}
    _remote_write(base, [({"__name__": name, **labels}, value) for name, value in PER_REQUEST])
    return _until_counted(_drilled(wh, tenant), 1, timeout)


if __name__ == "__main__":
    main()
