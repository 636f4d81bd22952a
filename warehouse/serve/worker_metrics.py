"""``/metrics`` of N receiver processes: whichever worker a scrape reaches answers for all.

The kernel hands a scrape's connection to any one worker, so each worker's registry
alone would show a random sample of the receiver. Instead each worker publishes its
exposition to a file of a directory the parent made for the run, every
:data:`PUBLISH_SECONDS`; the worker a scrape reaches waits (at most
:data:`FRESH_SECONDS`) until every other worker's file was written after the scrape
came, then answers with every worker's series, each labelled ``worker="i"``. Labelled
rather than summed: a gauge such as ``llmwh_receiver_wal_pending_bytes`` sums, but a
histogram's buckets or a flush's rate per worker tell which process is behind, and
``sum without (worker)`` gives the total in PromQL.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

__all__ = ["FRESH_SECONDS", "PUBLISH_SECONDS", "WorkerMetrics"]

PUBLISH_SECONDS = 0.5
FRESH_SECONDS = 2.0
_POLL_SECONDS = 0.05


class WorkerMetrics:
    """Worker ``index``'s side of the shared ``/metrics`` of ``workers`` processes."""

    def __init__(self, directory: Path, index: int, workers: int, registry: CollectorRegistry):
        self.directory = directory
        self.index = index
        self.workers = workers
        self.registry = registry
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Publish this worker's metrics from a thread, every :data:`PUBLISH_SECONDS`."""
        self.publish()
        self._thread = threading.Thread(target=self._run, name="llmwh-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def publish(self) -> None:
        """Write this worker's exposition (replacing the last one whole)."""
        path = self.directory / f"{self.index}.prom"
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        temporary.write_bytes(generate_latest(self.registry))
        temporary.replace(path)

    def exposition(self) -> bytes:
        """Every worker's series, labelled by worker: this one's as of now, the others'
        as published after this call began (a worker with none by then is left out: it
        is not running)."""
        asked = time.time()
        texts = {self.index: generate_latest(self.registry).decode()}
        deadline = time.monotonic() + FRESH_SECONDS
        waiting = set(range(self.workers)) - {self.index}
        while waiting:
            for index in sorted(waiting):
                path = self.directory / f"{index}.prom"
                try:
                    if path.stat().st_mtime >= asked:
                        texts[index] = path.read_text()
                        waiting.discard(index)
                except FileNotFoundError:
                    pass
            if not waiting or time.monotonic() > deadline:
                break
            time.sleep(_POLL_SECONDS)
        return merged(texts).encode()

    def _run(self) -> None:
        while not self._stop.wait(PUBLISH_SECONDS):
            try:
                self.publish()
            except OSError:  # the directory went with the parent: nothing to publish to
                return


def merged(texts: dict[int, str]) -> str:
    """Expositions of several workers as one, each series labelled ``worker``."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for index, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(family.name, (family.type, family.documentation, []))
            for sample in family.samples:
                labels = {**sample.labels, "worker": str(index)}
                shown = ",".join(f'{k}="{_escaped(v)}"' for k, v in labels.items())
                lines.append(f"{sample.name}{{{shown}}} {floatToGoString(sample.value)}")
    out = []
    for name, (kind, documentation, lines) in families.items():
        out.append(f"# HELP {name} {_escaped_help(documentation)}")
        out.append(f"# TYPE {name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escaped_help(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n")
