"""Incidents injected into synthetic traffic, each one a thing SREs page about.

- ``zone-ttft`` (a zone): time to first token grows, as with a sick node pool or a
  bad network path; severity is the TTFT factor (4).
- ``kv-collapse`` (a model): the prefix cache stops hitting, prefill is redone and
  queues; severity is the share of cache hits kept (0.02).
- ``tenant-errors`` (a tenant): a burst of server errors and timeouts; severity is the
  failure rate (0.35).
- ``bad-arm`` (an experiment arm): the arm is slower and fails more; severity is its
  TTFT factor (1.6).

An incident runs over a window of the generated span: ``at`` and ``for`` are a share of
the span (``60%``) or a duration (``2h``); in Python, ``at`` may also be a datetime. On
the command line: ``--incident zone-ttft``, or with settings
``--incident zone-ttft:zone=sh-b,at=60%,for=30m,severity=5``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from warehouse.errors import ConfigError
from warehouse.query.timerange import parse_duration

__all__ = ["KINDS", "Incident", "parse_incident"]

Columns = dict[str, np.ndarray]


@dataclass(frozen=True)
class Kind:
    dimension: str
    default_value: str
    default_severity: float
    apply: Callable[[Columns, np.ndarray, np.random.Generator, float], None]
    summary: str
    severity_is_share: bool = False


@dataclass(frozen=True)
class Incident:
    """``kind`` hits requests whose ``dimension`` is ``value`` within its window."""

    kind: str
    value: str | None = None
    at: float | timedelta | datetime = 0.6
    length: float | timedelta = 0.25
    severity: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"unknown incident {self.kind!r}: expected one of {', '.join(KINDS)}")

    @property
    def dimension(self) -> str:
        return KINDS[self.kind].dimension

    @property
    def target(self) -> str:
        return self.value if self.value is not None else KINDS[self.kind].default_value

    def window(self, start_ms: int, span_ms: int) -> tuple[int, int]:
        """The incident's ``[first, end)`` in epoch ms, for a span starting at ``start_ms``."""
        if isinstance(self.at, datetime):
            first = int(self.at.timestamp() * 1000)
        else:
            first = start_ms + _offset(self.at, span_ms)
        return first, first + _offset(self.length, span_ms)

    def describe(self, start_ms: int, span_ms: int) -> str:
        """One line for people: what, where and when (ISO 8601, UTC)."""
        first, end = (
            datetime.fromtimestamp(t / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")
            for t in self.window(start_ms, span_ms)
        )
        summary = KINDS[self.kind].summary
        return f"{self.kind}: {summary} for {self.dimension}={self.target}, {first} to {end}"

    def inject(
        self, columns: Columns, rng: np.random.Generator, start_ms: int, span_ms: int
    ) -> None:
        """Change ``columns`` (one block of draft requests) in place."""
        first, end = self.window(start_ms, span_ms)
        ts = columns["ts"]
        hit = (ts >= first) & (ts < end) & (columns[self.dimension] == self.target)
        hit &= ~columns["is_probe"]
        if hit.any():
            kind = KINDS[self.kind]
            severity = self.severity if self.severity is not None else kind.default_severity
            kind.apply(columns, hit, rng, severity)


def _offset(value: float | timedelta, span_ms: int) -> int:
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value * span_ms)


def parse_incident(spec: str) -> Incident:
    """``KIND[:key=value,...]`` with keys the kind's dimension, ``at``, ``for``, ``severity``."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise ConfigError(
            f"unknown incident {kind!r} in {spec!r}: expected one of {', '.join(KINDS)}"
        )
    fields: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise ConfigError(f"bad incident setting {item!r} in {spec!r}: expected KEY=VALUE")
        if key == KINDS[kind].dimension:
            fields["value"] = value
        elif key in ("at", "for"):
            fields["at" if key == "at" else "length"] = _when(value, spec)
        elif key == "severity":
            fields["severity"] = _severity(KINDS[kind], value, spec)
        else:
            keys = ", ".join((KINDS[kind].dimension, "at", "for", "severity"))
            raise ConfigError(f"unknown incident setting {key!r} in {spec!r}: expected {keys}")
    return Incident(kind, **fields)  # type: ignore[arg-type]


def _severity(kind: Kind, value: str, spec: str) -> float:
    """A severity: a positive factor, or for kinds whose severity is a share, 0 to 1."""
    try:
        severity = float(value)
    except ValueError:
        severity = math.nan
    most = 1.0 if kind.severity_is_share else math.inf
    if not (0 < severity <= most) or math.isinf(severity):
        expected = "a share above 0, at most 1" if kind.severity_is_share else "a factor above 0"
        raise ConfigError(f"bad severity {value!r} in {spec!r}: expected {expected}")
    return severity


def _when(value: str, spec: str) -> float | timedelta:
    if value.endswith("%"):
        try:
            share = float(value[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 <= share <= 1:
            raise ConfigError(f"bad share {value!r} in {spec!r}: expected 0% to 100%")
        return share
    try:
        return parse_duration(value)
    except Exception:
        raise ConfigError(
            f"bad time {value!r} in {spec!r}: expected a share (60%) or a duration (2h)"
        ) from None


# -- what each kind does to the requests it hits --------------------------------------------


def _slower(c: Columns, hit: np.ndarray, extra_ttft: np.ndarray) -> None:
    c["ttft_ms"][hit] += extra_ttft
    c["queue_ms"][hit] += extra_ttft * 0.5


def _fail(
    c: Columns, failing: np.ndarray, rng: np.random.Generator, classes: tuple[str, ...]
) -> None:
    k = int(failing.sum())
    c["status"][failing] = "error"
    c["error_class"][failing] = rng.choice(classes, k)
    c["http_status"][failing] = rng.choice([500, 503, 504], k)
    c["finish_reason"][failing] = ""
    c["no_latency"][failing] |= rng.random(k) < 0.6


def _zone_ttft(c: Columns, hit: np.ndarray, rng: np.random.Generator, factor: float) -> None:
    _slower(c, hit, c["ttft_ms"][hit] * (factor - 1) * rng.lognormal(0, 0.2, int(hit.sum())))


def _kv_collapse(c: Columns, hit: np.ndarray, rng: np.random.Generator, kept: float) -> None:
    cached = c["cached_prompt_tokens"][hit]
    lost = cached - (cached * kept).astype(cached.dtype)
    c["cached_prompt_tokens"][hit] = cached - lost
    # The lost prefix is prefilled again, and the extra prefill queues everyone behind it.
    _slower(
        c,
        hit,
        c["prefill_ms_per_1k"][hit] * lost / 1000.0 * 4.0 + rng.exponential(60.0, int(hit.sum())),
    )


def _tenant_errors(c: Columns, hit: np.ndarray, rng: np.random.Generator, rate: float) -> None:
    failing = hit & (c["status"] == "ok") & (rng.random(hit.size) < rate)
    _fail(c, failing, rng, ("server_error", "timeout", "server_error"))


def _bad_arm(c: Columns, hit: np.ndarray, rng: np.random.Generator, factor: float) -> None:
    _slower(c, hit, c["ttft_ms"][hit] * (factor - 1))
    c["tpot_ms"][hit] *= 1 + (factor - 1) / 2
    failing = hit & (c["status"] == "ok") & (rng.random(hit.size) < 0.04 * factor)
    _fail(c, failing, rng, ("format_error", "server_error", "logit_anomaly"))


KINDS = {
    "zone-ttft": Kind("zone", "sh-b", 4.0, _zone_ttft, "TTFT degrades"),
    "kv-collapse": Kind(
        "model", "llama-3-70b", 0.02, _kv_collapse, "KV-cache hit ratio collapses", True
    ),
    "tenant-errors": Kind("tenant", "globex", 0.35, _tenant_errors, "error burst", True),
    "bad-arm": Kind("ab_group", "treatment", 1.6, _bad_arm, "bad experiment arm"),
}
