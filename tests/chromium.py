"""Headless Chromium driven over the DevTools protocol, as a person would look at a page:
at a window size, with every console message kept, and what the laid-out page
measures (its scroll width, each chart's size on screen) read from the page itself.

The protocol runs over a pipe (``--remote-debugging-pipe``: Chromium reads commands on
its fd 3 and writes answers and events on fd 4, each a JSON text ended by a NUL), so no
port is opened and no websocket client is needed.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Chromium", "Looked"]

MEASURE = """(() => {
  const root = document.documentElement;
  // The data's ink: a line, or a group's dot (red below the target, green above).
  const ink = 'path[style*="stroke: #1f4e79"], use[style*="fill: #c0392b"], '
    + 'use[style*="fill: #2e7d32"]';
  const box = (e) => { const r = e.getBoundingClientRect();
    return {width: r.width, height: r.height, label: e.getAttribute('aria-label') || '',
            inked: e.querySelector(ink) !== null}; };
  const text = (e) => e ? e.textContent.replace(/\\s+/g, ' ').trim() : null;
  const first = document.querySelector('table.slos tr:nth-child(2) td a');
  return {
    scrollWidth: root.scrollWidth,
    clientWidth: root.clientWidth,
    charts: [...document.querySelectorAll('figure svg, figure img')].map(box),
    sparklines: [...document.querySelectorAll('td.spark svg')].map(box),
    rows: [...document.querySelectorAll('table.slos tr td:first-child a')].map(text),
    alerts: [...document.querySelectorAll('table.slos .alert')].map(text),
    missed: [...document.querySelectorAll('table.slos td.what')].map(
      (e) => text(e.querySelector('b'))),
    someMissed: [...document.querySelectorAll('table.slos td.what')].map(
      (e) => text(e.querySelector('.some'))),
    firstHref: first ? first.getAttribute('href') : null,
    headlines: [...document.querySelectorAll('.headline')].map(text),
    verdicts: [...document.querySelectorAll('.headline b')].map(text),
    h1: text(document.querySelector('h1')),
  };
})()"""
"""What a look reads from the laid-out page."""


@dataclass
class Looked:
    """A page as Chromium laid it out at one window size."""

    url: str
    width: int
    height: int
    measured: dict[str, Any]
    """What :data:`MEASURE` read."""
    console: list[str]
    """Every console message and uncaught exception, a failed load among them."""
    screenshot: Path


@dataclass
class Chromium:
    """One headless Chromium; :meth:`look` opens a page in a new tab at a window size."""

    binary: str
    _process: subprocess.Popen[bytes] | None = None
    _to: int = -1
    _from: int = -1
    _buffer: bytes = b""
    _next: int = 0
    _events: list[dict[str, Any]] = field(default_factory=list)
    _profile: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="llmwh-chromium-")
        commands, their_commands = os.pipe()[::-1]  # we write, it reads on fd 3
        their_answers, answers = os.pipe()[::-1]  # it writes on fd 4, we read

        def pipes_as_3_and_4() -> None:  # above 9 first: either may be 3 or 4 now
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (their_commands, their_answers)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._process = subprocess.Popen(
            [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
             "--no-first-run", "--no-default-browser-check", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=pipes_as_3_and_4,
        )  # fmt: skip
        os.close(their_commands)
        os.close(their_answers)
        self._to, self._from = commands, answers
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            try:
                self.call("Browser.close", timeout=10)
            except (OSError, TimeoutError, RuntimeError):
                self._process.kill()
            self._process.wait(timeout=30)
        for fd in (self._to, self._from):
            if fd >= 0:
                os.close(fd)
        if self._profile is not None:
            self._profile.cleanup()

    def look(self, url: str, width: int, height: int, shot: Path) -> Looked:
        """Open ``url`` in a new tab of ``width`` x ``height`` CSS pixels, wait for its
        load event, measure it, keep a screenshot of the window, and close the tab."""
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        self._events = [e for e in self._events if e.get("sessionId") != session]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self.call("Page.navigate", {"url": url}, session=session)
        self._wait_event("Page.loadEventFired", session, timeout=90)
        measured = self.call(
            "Runtime.evaluate", {"expression": MEASURE, "returnByValue": True}, session=session
        )["result"]["value"]
        picture = self.call("Page.captureScreenshot", {"format": "png"}, session=session)
        shot.write_bytes(base64.b64decode(picture["data"]))
        console = [_said(e) for e in self._events if e.get("sessionId") == session]
        self.call("Target.closeTarget", {"targetId": target})
        return Looked(url, width, height, measured, [m for m in console if m], shot)

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 60,
    ) -> dict[str, Any]:
        """Send a command and wait for its answer; an error answer raises."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._receive(deadline, method)
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            if "method" in answer:
                self._events.append(answer)

    def _wait_event(self, name: str, session: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self._events[seen:]:
                if event.get("method") == name and event.get("sessionId") == session:
                    return
            seen = len(self._events)
            answer = self._receive(deadline, name)
            if "method" in answer:
                self._events.append(answer)

    def _receive(self, deadline: float, awaited: str) -> dict[str, Any]:
        """The next message from Chromium, or TimeoutError naming what was awaited."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer {awaited} in time")
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium closed its pipe while {awaited} was awaited")
            self._buffer += chunk
        text, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(text)
        return message


def _said(event: dict[str, Any]) -> str:
    """A console message or an uncaught exception as text ("" for other events)."""
    params = event.get("params", {})
    if event.get("method") == "Runtime.consoleAPICalled":
        words = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
        return f"console.{params.get('type')}: {' '.join(words)}"
    if event.get("method") == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        thrown = details.get("exception", {}).get("description") or details.get("text", "")
        return f"exception: {thrown}"
    if event.get("method") == "Log.entryAdded":
        entry = params.get("entry", {})
        return f"{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}".strip()
    return ""
