"""Store URLs: one parser, one place that decides which backend a URL selects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from warehouse.errors import ConfigError

__all__ = ["DEFAULT_DATABASE", "StoreURL", "parse_store_url"]

DEFAULT_DATABASE = "llmwh"

_HTTP_SCHEMES = {"http": False, "https": True, "clickhouse": False, "clickhouses": True}


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL.

    ``backend`` is ``clickhouse`` (a server over HTTP), ``chdb`` (ClickHouse
    in-process) or ``duckdb``.
    """

    backend: str
    database: str = DEFAULT_DATABASE
    host: str = ""
    port: int = 0
    secure: bool = False
    username: str = ""
    password: str = ""
    path: str = ""
    options: tuple[tuple[str, str], ...] = ()

    def redacted(self) -> str:
        """The URL as it may be printed and used again: everything but the password."""
        options = dict(self.options)
        if self.backend == "clickhouse":
            scheme = "https" if self.secure else "http"
            user = f"{self.username}@" if self.username else ""
            base = f"{scheme}://{user}{self.host}:{self.port}/{self.database}"
        else:
            base = f"{self.backend}://{self.path}"
            if self.database != DEFAULT_DATABASE:
                options["database"] = self.database
        return f"{base}?{urlencode(options)}" if options else base


def parse_store_url(url: str) -> StoreURL:
    """Parse ``http(s)://``, ``clickhouse://``, ``chdb://`` or ``duckdb://`` URLs."""
    if not url or "://" not in url:
        raise ConfigError(
            f"invalid store URL {url!r}: expected http://host:port/db, chdb:///path "
            "or duckdb:///path.duckdb"
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise ConfigError(f"invalid store URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    options = tuple(parse_qsl(parts.query))
    if scheme in _HTTP_SCHEMES:
        if not parts.hostname:
            raise ConfigError(f"invalid store URL {url!r}: no host")
        secure = _HTTP_SCHEMES[scheme]
        try:
            port = parts.port or (8443 if secure else 8123)
        except ValueError as exc:
            raise ConfigError(f"invalid store URL {url!r}: {exc}") from None
        database = parts.path.strip("/") or DEFAULT_DATABASE
        _check_database_name(database, url)
        return StoreURL(
            backend="clickhouse",
            database=database,
            host=parts.hostname,
            port=port,
            secure=secure,
            username=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            options=options,
        )
    if scheme in ("chdb", "duckdb"):
        # chdb:///abs/path, chdb://rel/path and duckdb:///x.duckdb all name a file path;
        # an empty path means in memory.
        path = unquote(parts.netloc + parts.path)
        allowed = {"database", "read_only"} if scheme == "duckdb" else {"database"}
        unknown = sorted({key for key, _ in options} - allowed)
        if unknown:
            raise ConfigError(f"unknown store URL option(s) {', '.join(unknown)} in {url!r}")
        database = dict(options).get("database", DEFAULT_DATABASE)
        _check_database_name(database, url)
        if path and path != ":memory:":
            path = str(Path(path).expanduser())
        return StoreURL(backend=scheme, database=database, path=path, options=options)
    raise ConfigError(
        f"unsupported store URL scheme {parts.scheme!r} in {url!r}: "
        "use http, https, clickhouse, chdb or duckdb"
    )


def _check_database_name(name: str, url: str) -> None:
    if not name.replace("_", "").isalnum() or name[0].isdigit():
        raise ConfigError(
            f"invalid database name {name!r} in store URL {url!r}: "
            "letters, digits and underscores only"
        )
