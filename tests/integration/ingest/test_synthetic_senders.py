"""Synthetic traffic sent to a real `llmwh serve`: events, remote write, and the demo."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow.compute as pc
import pytest
from polling import poll_until
from senders import free_port, settle, wait_for

from warehouse.demo import DemoTraffic
from warehouse.errors import SendError
from warehouse.store import open_store
from warehouse.synthetic import request_batches, synthetic_requests
from warehouse.synthetic.send import Sender

START = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


def scalar(url: str, sql: str):
    store = open_store(url)
    try:
        return store.query_arrow(sql).column(0)[0].as_py()
    finally:
        store.close()


def said(lines: list[str], words: str) -> bool:
    """Whether the demo said ``words`` in one of its lines so far."""
    return any(words in line for line in lines)


def test_events_land_every_request_once(receiver):
    base, store_url = receiver
    sender = Sender(base, via="events")
    table = synthetic_requests(12_000, seed=1, start=START)
    assert sender.send([table]) == 12_000
    sender.close()
    settle(base)  # acknowledged once in the receiver's log; in the store shortly after
    assert scalar(store_url, "SELECT count() FROM requests") == 12_000
    assert scalar(store_url, "SELECT uniqExact(request_id) FROM requests") == 12_000


def test_remote_write_lands_every_user_request_as_parts(receiver):
    base, store_url = receiver
    table = synthetic_requests(1_500, seed=2, start=START)
    users = table.num_rows - sum(table.column("is_probe").to_pylist())
    sender = Sender(f"{base}/api/v1/write")
    assert sender.via == "remote-write"
    sender.send([table])
    sender.close()
    settle(base)
    # Parts are sealed into `requests` after seal_after_seconds; they are all there now.
    assert scalar(store_url, "SELECT uniqExact(request_id) FROM request_parts") == users


def test_otlp_spans_land_every_user_request_with_the_mapped_columns(receiver):
    base, store_url = receiver
    table = synthetic_requests(3_000, seed=4, start=START)
    sender = Sender(base, via="otlp")
    sender.send([table])
    sender.close()
    settle(base)
    mapped = [
        "request_id", "tenant", "service", "model", "region", "zone", "node",
        "request_type", "status", "error_class", "http_status", "finish_reason",
        "prompt_tokens", "output_tokens", "cached_prompt_tokens", "ttft_ms", "e2e_ms",
        "queue_ms",
    ]  # fmt: skip
    store = open_store(store_url)
    try:
        landed = store.query_arrow(
            f"SELECT {', '.join(mapped)} FROM requests ORDER BY request_id"
        ).to_pylist()
    finally:
        store.close()
    users = table.filter(pc.invert(table.column("is_probe")))
    sent = users.select(mapped).sort_by("request_id").to_pylist()
    assert len(landed) == len(sent) == users.num_rows
    assert landed == sent


def test_a_refused_write_stops_the_sender_with_the_receivers_answer(receiver):
    base, _ = receiver
    sender = Sender(f"{base}/api/v1/nowhere", via="events")
    with pytest.raises(SendError, match=r"refused a write \(404\)"):
        sender.send([synthetic_requests(10, seed=3, start=START)])


def test_headers_carry_the_receivers_credentials(embedded_server, tmp_path):
    url = embedded_server.store_url(f"auth_{uuid.uuid4().hex[:10]}")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMWH_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "warehouse", "serve", "--store", url,
         "--listen", f"127.0.0.1:{port}"],
        cwd=tmp_path, env=env | {"LLMWH_AUTH_TOKEN": "s3cret"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(f"http://127.0.0.1:{port}/healthz")
        table = synthetic_requests(20, seed=5, start=START)
        with pytest.raises(SendError, match=r"\(401\)"):
            Sender(f"http://127.0.0.1:{port}").send([table])
        sender = Sender(f"http://127.0.0.1:{port}", headers={"Authorization": "Bearer s3cret"})
        assert sender.send([table]) == 20
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert scalar(url, "SELECT count() FROM requests") == 20
    store = open_store(url)
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()


def test_the_rate_paces_the_writes(receiver):
    base, _ = receiver
    sender = Sender(base, via="events", rate=100)  # writes of 50 requests, every half second
    began = time.monotonic()
    sender.send(request_batches(300, seed=4, start=START))
    assert 2.5 <= time.monotonic() - began < 10  # the last write is due 250/100 s in


def test_the_demo_backfills_its_history_with_the_incident_then_goes_live(receiver):
    base, store_url = receiver
    store = open_store(store_url)
    lines: list[str] = []
    demo = DemoTraffic(
        base, store, rate=30, history=timedelta(minutes=20), incident_ago=timedelta(minutes=10),
        slice_seconds=0.5, say=lines.append,
    )  # fmt: skip
    demo.start()
    try:
        poll_until(lambda: said(lines, "now sending"), "the demo to end its backfill", timeout=60)
        announced = next(line for line in lines if "backfilling" in line)
        promised = int(re.search(r"backfilling ([\d,]+) requests", announced)[1].replace(",", ""))
        # Live writes go on, so the log is seldom empty: wait for the backfill's rows.
        backfilled = poll_until(
            lambda: scalar(store_url, "SELECT count() FROM requests"),
            "the backfill in the store",
            until=lambda count: count >= promised,
            timeout=120,
        )
        poll_until(
            lambda: scalar(store_url, "SELECT count() FROM requests"),
            "live traffic after the backfill",
            until=lambda count: count > backfilled,
        )
    finally:
        demo.stop()
    assert any("incident zone-ttft" in line for line in lines), lines
    assert 30 * 1200 * 0.5 <= promised <= 30 * 1200 * 1.5  # 20 minutes at 30/s, daily cycle
    assert promised <= backfilled <= promised + 200  # plus the first live slices, if any
    slow = scalar(
        store_url,
        "SELECT quantileExactIf(0.5)(ttft_ms, zone = 'sh-b')"
        " / quantileExactIf(0.5)(ttft_ms, zone != 'sh-b')"
        " FROM requests WHERE ts > now() - INTERVAL 9 MINUTE AND NOT is_probe",
    )
    assert slow > 2.5

    # A restarted demo fills only the gap since its newest request.
    settle(base)
    before = scalar(store_url, "SELECT count() FROM requests")
    restarted = math.ceil(time.time())  # every request of the first demo is older
    again = DemoTraffic(base, store, rate=30, history=timedelta(minutes=20), say=lines.append)
    again.start()
    try:  # live: it sent a request stamped after it started (its backfill sends older ones)
        poll_until(
            lambda: scalar(
                store_url, f"SELECT count() FROM requests WHERE toUnixTimestamp(ts) >= {restarted}"
            ),
            "the restarted demo to go live",
        )
    finally:
        again.stop()
    store.close()
    assert scalar(store_url, "SELECT count() FROM requests") < before + 2_000
    # Seeds come from the start time: a restart repeats no request id.
    assert scalar(store_url, "SELECT count() = uniqExact(request_id) FROM requests") == 1


def test_serve_demo_runs_the_demo_in_the_receiver(embedded_server, tmp_path):
    url = embedded_server.store_url(f"demo_{uuid.uuid4().hex[:10]}")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "warehouse", "serve", "--demo", "--demo-rate", "2",
         "--store", url, "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        poll_until(lambda: said(lines, "now sending"), "the demo to end its backfill", timeout=90)
        settle(f"http://127.0.0.1:{port}")
        stored = scalar(url, "SELECT count() FROM requests")
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(timeout=10)
    output = "".join(lines)
    assert process.returncode == 0, output
    assert "llmwh root-cause --slo chat-assistant --since 1h" in output
    assert "demo: backfilled; now sending about 2 requests/s live" in output
    promised = int(re.search(r"backfilling ([\d,]+) requests", output)[1].replace(",", ""))
    assert 2 * 6 * 3600 * 0.5 <= promised <= 2 * 6 * 3600 * 1.5
    assert promised <= stored <= promised + 50
    store = open_store(url)
    store.command(f"DROP DATABASE IF EXISTS {store.database}")
    store.close()
