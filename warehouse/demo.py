"""``llmwh serve --demo``: synthetic traffic with an incident, flowing into the receiver.

The demo first backfills the last hours (so that SLA reports and time series have
history), then keeps sending live traffic, a slice every couple of seconds, through the
receiver's events endpoint, exactly as a gateway would. One zone's time to first token
degrades from ``incident_ago`` before the start, and stays degraded: `root-cause` and
`drill --by zone` find it.

A restarted demo backfills only the gap since the newest request already stored.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from warehouse.auth import credentials
from warehouse.config import Config
from warehouse.store.base import Store
from warehouse.synthetic import INCIDENT_KINDS, Incident, request_batches
from warehouse.synthetic.arrivals import rate_factor
from warehouse.synthetic.send import Sender

__all__ = ["DemoTraffic", "demo_traffic"]


@dataclass
class DemoTraffic:
    """Sends demo traffic to the receiver at ``url`` (its base URL) until stopped."""

    url: str
    store: Store
    rate: float = 20.0
    """Mean user requests per second (the daily cycle moves it by half either way)."""
    history: timedelta = timedelta(hours=6)
    incident_ago: timedelta = timedelta(minutes=40)
    incident: str = "zone-ttft"
    seed: int = 0
    slice_seconds: float = 2.0
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every write: the receiver's credentials when it has some."""
    say: Callable[[str], None] = print
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _base_seed: int = field(default=0, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="llmwh-demo", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            self._wait_ready()
            began = datetime.now(UTC).replace(microsecond=0)
            incident = self.incident_from(began)
            what = INCIDENT_KINDS[self.incident].summary
            self.say(
                f"demo: incident {self.incident}: {what} for {incident.dimension}="
                f"{incident.target} from {began - self.incident_ago:%H:%M} UTC on"
            )
            sender = Sender(self.url, via="events", headers=self.headers)
            self._base_seed = self.seed_from(began)
            self._backfill(sender, began)
            self._live(sender, incident, began)
        except Exception as exc:  # the demo must never take the receiver down with it
            if not self._stop.is_set():
                self.say(f"demo: stopped sending: {exc}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        host_port = self.url.split("://", 1)[1].split("/", 1)[0]
        while not self._stop.is_set() and time.monotonic() < deadline:
            connection = http.client.HTTPConnection(host_port, timeout=2)
            try:
                connection.request("GET", "/readyz")
                if connection.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                connection.close()
            time.sleep(0.2)

    def incident_from(self, began: datetime) -> Incident:
        """The incident of a demo started at ``began``: from ``incident_ago`` before, on."""
        return Incident(self.incident, at=began - self.incident_ago, length=timedelta(days=3650))

    def seed_from(self, began: datetime) -> int:
        """The seed of a demo started at ``began``: a restarted demo never repeats a
        request id."""
        return self.seed * 1_000_003 + int(began.timestamp())

    def backfill(
        self, began: datetime, since: datetime | None = None
    ) -> tuple[int, Iterator[pa.Table]]:
        """What a demo started at ``began`` backfills from ``since`` (default: ``history``
        before): how many requests, and the requests, a block at a time."""
        since = began - self.history if since is None else since
        span = began - since
        n = self.requests_in(since, span)
        return n, request_batches(
            n, self.seed_from(began), since, span, [self.incident_from(began)]
        )

    def _backfill(self, sender: Sender, began: datetime) -> None:
        since = began - self.history
        newest = self.store.query_arrow("SELECT max(ts) AS newest FROM requests").column(0)[0]
        newest = newest.as_py() if newest.is_valid else None
        if newest is not None and newest.replace(tzinfo=UTC) > since:
            since = newest.replace(tzinfo=UTC) + timedelta(milliseconds=1)
        span = began - since
        if span.total_seconds() < 1:
            return
        n, batches = self.backfill(began, since)
        self.say(f"demo: backfilling {n:,} requests from {since:%H:%M} to {began:%H:%M} UTC")
        sender.send(batches)
        self.say(f"demo: backfilled; now sending about {self.rate:g} requests/s live")

    def _live(self, sender: Sender, incident: Incident, began: datetime) -> None:
        step = timedelta(seconds=self.slice_seconds)
        start = began
        for k in range(1, 2**62):
            due = start + step
            wait = (due - datetime.now(UTC)).total_seconds()
            if self._stop.wait(max(wait, 0)):
                return
            n = self.requests_in(start, step)
            seed = self._base_seed + 7_919 * k  # a stream of its own per slice
            sender.send(request_batches(n, seed, start, step, [incident]))
            start = due

    def requests_in(self, start: datetime, span: timedelta) -> int:
        """The expected requests of ``[start, start + span)`` at the daily cycle's rate."""
        first = start.timestamp() * 1000
        points = np.linspace(first, first + span.total_seconds() * 1000, 64)
        factor = float(rate_factor(points, 0.5).mean())
        return max(1, round(self.rate * factor * span.total_seconds()))


@contextmanager
def demo_traffic(
    store: Store,
    config: Config,
    host: str,
    port: int,
    rate: float,
    say: Callable[[str], None] = print,
) -> Iterator[DemoTraffic]:
    """Demo traffic into the receiver listening on ``host:port`` (with ``config``'s
    credentials) while the block runs; a wildcard ``host`` is reached on loopback."""
    loopback = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    traffic = DemoTraffic(
        f"http://{loopback}:{port}",
        store,
        rate=rate,
        headers=credentials(config.auth_token, config.basic_auth),
        say=say,
    )
    traffic.start()
    try:
        yield traffic
    finally:
        traffic.stop()
