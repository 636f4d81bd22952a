"""Settings, defined once as data: from flags, then ``LLMWH_*`` variables, then a TOML file.

The TOML file is ``$LLMWH_CONFIG`` or ``./llmwh.toml`` when present, with the same
names as below at its top level (``requests_ttl_days = 30``).
"""

from __future__ import annotations

import ast
import inspect
import os
import tomllib
from dataclasses import MISSING, dataclass, fields
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

from warehouse.errors import ConfigError
from warehouse.model import check_tenant

__all__ = ["Config", "load_config", "parse_listen", "setting_help"]


@dataclass(frozen=True)
class Config:
    """Resolved settings; each field's docstring is its help text."""

    store: str | None = None
    """Store URL (http://host:8123/db, chdb:///path, duckdb:///file.duckdb); unset: the
    embedded server (or local cluster) running on data_dir."""
    data_dir: str = "./llmwh-data"
    """Local data directory: the embedded ClickHouse's data and server.json, and the
    receiver's write-ahead log (wal/), kept there whichever store it writes to."""
    requests_ttl_days: int = 90
    """Days raw per-request rows are kept (ClickHouse TTL)."""
    samples_ttl_days: int = 30
    """Days Prometheus samples are kept (ClickHouse TTL)."""
    rollup_1m_ttl_days: int = 30
    """Days per-minute rollup rows are kept (ClickHouse TTL)."""
    rollup_1h_ttl_days: int = 400
    """Days per-hour rollup rows are kept (ClickHouse TTL)."""
    listen: str = "127.0.0.1:9201"
    """Address the receiver listens on (HOST:PORT)."""
    max_body_bytes: int = 32 << 20
    """Largest request body the receiver takes (compressed); above it, HTTP 413."""
    buffer_bytes: int = 256 << 20
    """Byte bound of the ingest buffer (waiting and in-flight rows); above it, HTTP 429."""
    flush_linger_ms: int = 10
    """How long a flush waits for more writes to share it."""
    flush_concurrency: int = 2
    """How many flushes may run at once (ClickHouse runs one insert on about one core);
    with the write-ahead log, one."""
    workers: int = 1
    """Receiver processes `serve` runs on the one listen port (SO_REUSEPORT), each with a
    write-ahead log of its own (wal_dir, then wal_dir/1, wal_dir/2 ...), all writing to
    the one ClickHouse; buffer_bytes, tenant_buffer_bytes and wal_max_bytes are shared
    out evenly among them (0: one per core)."""
    wal: bool = True
    """Keep the receiver's write-ahead log (in wal_dir): a write is acknowledged once it is
    synced to that disk, and reaches the store in larger inserts every wal_flush_ms (fewer
    parts, more writes/s; queryable up to that much later). false (serve --no-wal):
    acknowledged once committed in the store."""
    wal_dir: str | None = None
    """Directory of the receiver's write-ahead log (serve --wal DIR; unset: wal/ in
    data_dir)."""
    wal_sync: bool = True
    """Sync the write-ahead log (fdatasync) before each answer. false: a write is
    acknowledged once written to the log file, which outlives a kill of the receiver or
    of ClickHouse but not a crash of the machine, as Prometheus and VictoriaMetrics
    acknowledge remote writes (docs/remote-write.md)."""
    wal_flush_ms: int = 500
    """How often the write-ahead log's writes are inserted into the store."""
    wal_max_bytes: int = 1 << 30
    """Bytes of acknowledged writes the write-ahead log may hold before they reach the
    store; past it, HTTP 429 (the store is down or slower than the senders)."""
    series_cache_size: int = 1_000_000
    """Series a receiver remembers having written, so that a flush skips their rows."""
    series_refresh_seconds: int = 3600
    """A remembered series' row is written again once its samples pass the written
    max_time by this much: how far `series.max_time` may trail (0: exact). An hour is
    many scrapes, so a long-lived series costs a row rarely (docs/remote-write.md)."""
    max_series_per_write: int = 100_000
    """Most series one remote write may hold (0: no limit); over it, HTTP 400."""
    max_labels_per_series: int = 30
    """Most labels a series may carry, __name__ included (0: no limit); over it, HTTP 400."""
    max_label_name_bytes: int = 1024
    """Longest label name, in UTF-8 bytes (0: no limit); over it, HTTP 400."""
    max_label_value_bytes: int = 2048
    """Longest label value or metric name, in UTF-8 bytes (0: no limit); over it, HTTP 400."""
    max_new_series_per_minute: int = 0
    """Most series new to a receiver that one tenant may add per minute (0: no limit);
    over it, HTTP 429 with Retry-After. Per-request metrics are a new series each."""
    auth_token: str | None = None
    """Bearer token the receiver's writes and /metrics and the exporter's /metrics require
    (/healthz and /readyz stay open; unset: no auth)."""
    basic_auth: str | None = None
    """USER:PASSWORD (HTTP basic auth) required where auth_token is (unset: no auth)."""
    tenant_buffer_bytes: int = 64 << 20
    """In multi-tenant mode, most bytes one tenant's writes may hold in the receiver at
    once, their bodies as received and the rows decoded from them until committed (0: no
    bound but buffer_bytes); past it that tenant gets 429 with Retry-After, and the
    others write on."""
    body_timeout_seconds: int = 30
    """A request body must arrive whole within this long; else HTTP 408."""
    max_future_seconds: int = 600
    """How far ahead of the receiver's clock a write's timestamps may be; later ones are
    refused (400, or OTLP partial_success), as are ones older than the retention."""
    credentials_file: str | None = None
    """TOML file of the receiver's credentials: each token (stored as its SHA-256) with
    the tenants and rights (write, read, admin) it holds; `llmwh token new` makes one."""
    remote_read_max_samples: int = 10_000_000
    """Most samples one query of a remote read may return; over it, HTTP 400 naming the
    limit (Prometheus's own remote-read handler refuses over 5e7)."""
    remote_read_max_series: int = 500_000
    """Most series one query of a remote read may return; over it, HTTP 400."""
    seal_after_seconds: int = 10
    """A request sent as metric parts is sealed into `requests` once no part of it has
    come for this long (two of Prometheus's 5 s batch_send_deadline)."""
    seal_every_seconds: int = 5
    """How often sealing runs (ClickHouse: the refresh period of its view)."""
    seal_window_seconds: int = 60
    """The parts of one request must arrive within this long of each other; a later one
    is not merged into its request."""
    metric_mapping: str | None = None
    """TOML file mapping per-request metric names to `requests` columns (default built in)."""
    span_mapping: str | None = None
    """TOML file mapping OpenTelemetry span attributes to `requests` columns (default
    built in)."""
    otlp_grpc_listen: str | None = None
    """Address (HOST:PORT) of the receiver's OTLP/gRPC server, e.g. 0.0.0.0:4317 (unset:
    OTLP over HTTP only)."""
    otlp_strict_spans: bool = False
    """Report OTLP spans that are not LLM requests to their sender as rejected (OTLP's
    partial success) instead of skipping them quietly (counted in the receiver's
    metrics either way)."""
    request_samples_as_series: bool = False
    """Also store each per-request metric sample as a Prometheus series and sample (three
    rows a sample instead of a share of one row a request)."""
    tenant: str | None = None
    """Read only this tenant's data: the Python API, the CLI and the exporter are scoped
    to it, and `sql` runs under ClickHouse's row policies for it (unset: all tenants)."""
    tenant_header: str | None = None
    """Request header whose value fills `tenant` (multi-tenant mode), e.g. X-Scope-OrgID."""
    slos: str | None = None
    """SLOs `llmwh export` serves and `llmwh slo apply` compiles when --slo is not given:
    shipped names or TOML paths, comma-separated (unset: every shipped SLO); when set,
    `migrate up` and `serve` build their rollups."""

    def wal_directory(self) -> Path | None:
        """Where the receiver keeps its write-ahead log: ``wal_dir``, else ``wal`` in
        ``data_dir``; None with ``wal`` false."""
        if not self.wal:
            return None
        return Path(self.wal_dir) if self.wal_dir else Path(self.data_dir) / "wal"

    def receiver_processes(self) -> int:
        """How many receiver processes ``workers`` asks for (0: one per core)."""
        return self.workers or os.cpu_count() or 1

    def ttl_variables(self) -> dict[str, int]:
        """The TTL settings by name, as migration templates use them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name.endswith("_ttl_days")}

    def template_variables(self) -> dict[str, int]:
        """The settings migration templates use: TTLs and the sealing periods."""
        return {
            **self.ttl_variables(),
            "seal_after_seconds": self.seal_after_seconds,
            "seal_every_seconds": self.seal_every_seconds,
            "seal_window_seconds": self.seal_window_seconds,
        }


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """The document of a TOML file of settings-like data (the metric and span mappings);
    :class:`ConfigError` naming ``what`` and the file when it cannot be read or parsed."""
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{what} {path}: {exc}") from None


def load_config(config_file: str | Path | None = None, **overrides: Any) -> Config:
    """Resolve settings: ``overrides`` (flags; None means unset) > env > TOML file > defaults."""
    values: dict[str, Any] = {}
    named = config_file or os.environ.get("LLMWH_CONFIG")
    path = Path(named or "llmwh.toml")
    if path.exists():
        try:
            values.update(tomllib.loads(path.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    elif named:
        raise ConfigError(f"config file {path} does not exist")
    for field in fields(Config):
        env = os.environ.get(f"LLMWH_{field.name.upper()}")
        if env is not None:
            values[field.name] = env
    values.update({key: value for key, value in overrides.items() if value is not None})
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    if values.get("tenant") == "":
        # Elsewhere empty means "not set"; here that would read every tenant.
        raise ConfigError("setting tenant is empty: name a tenant, or unset it to read all")
    # An empty value (`LLMWH_STORE=`) means "not set": the default applies.
    return Config(
        **{
            # Field types are strings here (postponed annotations); str() tells mypy.
            name: _coerce(name, str(known[name].type), value)
            for name, value in values.items()
            if value != ""
        }
    )


_MAY_BE_ZERO = frozenset(
    {
        "series_refresh_seconds",
        "max_series_per_write",
        "max_labels_per_series",
        "max_label_name_bytes",
        "max_label_value_bytes",
        "max_new_series_per_minute",
        "tenant_buffer_bytes",
        "workers",
    }
)


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _coerce(name: str, kind: str, value: Any) -> Any:
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ConfigError(f"setting {name} must be true or false, got {value!r}")
    if kind == "int":
        # TOML booleans and floats are refused rather than truncated: `true` would
        # become a one-day TTL.
        if isinstance(value, bool | float):
            raise ConfigError(f"setting {name} must be a whole number, got {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"setting {name} must be a whole number, got {value!r}") from None
        if number < 0 or (number == 0 and name not in _MAY_BE_ZERO):
            raise ConfigError(f"setting {name} must be positive, got {number}")
        return number
    if not isinstance(value, str):
        raise ConfigError(f"setting {name} must be a string, got {value!r}")
    if name == "tenant":
        return check_tenant(value)
    return value


def parse_listen(value: str, option: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as (host, port); ``option`` names it in errors."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option} must be HOST:PORT with a port from 1 to 65535, got {value!r}")
    return host.strip("[]"), int(port)


def setting_help(name: str) -> str:
    """A setting's help text, for ``--help``: its docstring on one line and its default."""
    field = next(f for f in fields(Config) if f.name == name)
    default = "unset" if field.default in (None, MISSING) else field.default
    return f"{_docstrings()[name]} [default: {default}]"


@cache
def _docstrings() -> dict[str, str]:
    """Each field's docstring (the string after it in the class body), lines joined."""
    config_class = ast.parse(inspect.getsource(Config)).body[0]
    assert isinstance(config_class, ast.ClassDef)
    body = config_class.body
    found = {}
    for field, doc in pairwise(body):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(doc, ast.Expr)
            and isinstance(doc.value, ast.Constant)
            and isinstance(doc.value.value, str)
        ):
            found[field.target.id] = " ".join(doc.value.value.split())
    return found
