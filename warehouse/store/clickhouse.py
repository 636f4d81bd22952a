"""ClickHouse stores: a server over HTTP, or the engine in-process through chdb.

Both speak the same dialect through the same client library (clickhouse-connect);
they differ only in transport and in whether other processes can reach the data.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Literal

import clickhouse_connect
import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver import exceptions as ch_errors

from warehouse.errors import ConfigError, QueryError, StoreError, StoreUnavailable
from warehouse.model import check_tenant
from warehouse.store import tenancy
from warehouse.store.base import (
    Capabilities,
    Parameters,
    Settings,
    quote_identifier,
    quote_string,
)
from warehouse.store.url import StoreURL

__all__ = ["ClickHouseStore", "open_chdb", "open_http"]

SERVER = Capabilities(
    dialect="clickhouse",
    materialized_views=True,
    aggregate_states=True,
    concurrent_writers=True,
    query_settings=True,
    ttl=True,
    insert_deduplication=True,
    scheduled_views=True,
    collapsing_engines=True,
    concurrent_reads=True,
    row_policies=True,
    array_join=True,
)
IN_PROCESS = Capabilities(
    dialect="clickhouse",
    materialized_views=True,
    aggregate_states=True,
    concurrent_writers=False,
    query_settings=True,
    ttl=True,
    insert_deduplication=True,
    scheduled_views=True,
    collapsing_engines=True,
    array_join=True,
)

_CODE = re.compile(
    r"Code: (\d+)\. DB::Exception: (.*?)(?: \(([A-Z_]+)\))?(?: \(version [^)]*\))?"
    r"(?: \(for url [^)]*\))?\s*$",
    re.S,
)


class ClickHouseStore:
    """A :class:`~warehouse.store.base.Store` on a clickhouse-connect client."""

    def __init__(self, client: Any, url: StoreURL, capabilities: Capabilities):
        self._client = client
        self._source = url
        self._tenant_stores: dict[str, ClickHouseStore] = {}
        self._tenants_lock = threading.Lock()
        self.url = url.redacted()
        self.database = url.database
        self.cluster, self.shard_urls = _cluster_options(url)
        """With ``cluster=NAME``: the cluster the warehouse's Distributed tables span,
        and (``shards=host:port,...``) each shard's store URL (credentials and all),
        for migrations."""
        # A Distributed table's shards read as the user remote_servers names, where the
        # reader's policies do not apply: a predicate pushed to a shard would see every
        # tenant's rows. No row policies on a cluster until the shards hold them too.
        self.capabilities = (
            replace(capabilities, row_policies=False) if self.cluster else capabilities
        )
        # Unqualified names resolve in the warehouse's database once it exists; until
        # something (this process or another) creates it, the session stays on
        # `default` and looks again before each call.
        self._database_found = False
        self._low_cardinality: dict[str, frozenset[str]] = {}
        self._find_database()

    def command(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> None:
        client, settings = self._route(settings)
        with _translated_errors():
            client.command(sql, parameters=parameters, settings=settings)

    def query_arrow(
        self, sql: str, parameters: Parameters | None = None, settings: Settings | None = None
    ) -> pa.Table:
        client, settings = self._route(settings)
        with _translated_errors():
            return client.query_arrow(
                sql, parameters=parameters, settings=settings, use_strings=True
            )

    def insert_arrow(
        self,
        table: str,
        data: pa.Table,
        settings: Settings | None = None,
        dedup_token: str | None = None,
    ) -> None:
        settings = self._insert_settings(settings, dedup_token)
        client, settings = self._route(settings)
        data = self._as_dictionaries(table, data)
        compression = getattr(client, "write_compression", None)
        name = f"{quote_identifier(self.database)}.{quote_identifier(table)}"
        with _translated_errors():
            block = _arrow_file(data, compression if compression in ("zstd", "lz4") else None)
            client.raw_insert(name, data.schema.names, block, settings, "Arrow")

    def _as_dictionaries(self, table: str, data: pa.Table) -> pa.Table:
        """``data`` with each string column that ``table`` keeps as LowCardinality sent
        as an Arrow dictionary.

        The server then turns each distinct value into an entry of the column's
        dictionary once, rather than hashing it row by row: parsing an insert into
        `requests`, with its fifteen such columns, took 0.33-0.37 s per 1M rows
        instead of 0.76-0.84 (docs/benchmarks.md, "Label columns as dictionaries").
        ``dictionary_encode`` gives every chunk of a column one dictionary, as the Arrow
        file format that carries the insert needs.
        """
        names = self._low_cardinality_columns(table)
        for i, field in enumerate(data.schema):
            if field.name in names and pa.types.is_string(field.type):
                encoded = pc.dictionary_encode(data.column(i))
                data = data.set_column(i, field.with_type(encoded.type), encoded)
        return data

    def _low_cardinality_columns(self, table: str) -> frozenset[str]:
        """The columns of ``table`` typed ``LowCardinality(String)``, looked up once the
        table exists."""
        names = self._low_cardinality.get(table)
        if names is None:
            found = self.query_arrow(
                "SELECT name, type FROM system.columns "
                "WHERE database = {db:String} AND table = {table:String}",
                {"db": self.database, "table": table},
            ).to_pylist()
            names = frozenset(c["name"] for c in found if c["type"] == "LowCardinality(String)")
            if found:
                self._low_cardinality[table] = names
        return names

    def _insert_settings(
        self, settings: Settings | None, dedup_token: str | None
    ) -> dict[str, Any]:
        """The settings every insert runs with, beside the caller's ``settings``."""
        if dedup_token is not None:
            # Tables carry non_replicated_deduplication_window (see the migrations).
            settings = {
                **(settings or {}),
                "insert_deduplication_token": dedup_token,
                "deduplicate_blocks_in_dependent_materialized_views": 1,
            }
        if self.cluster:
            # Acknowledged means committed on the shard that owns each row: the insert
            # returns once every shard has its part (else it fails, naming the shard).
            settings = {**(settings or {}), "distributed_foreground_insert": 1}
        # The rollups filled from one table are independent views: fill them side by
        # side rather than one after the other (see migrations/clickhouse/0012).
        # No insert merges the rows of its block that share a key: every reader already
        # merges rows of one key across parts, and merges collapse them later. On
        # `requests` the rollup views write one row per key, so there is nothing to
        # merge, yet it took 1.1 s of the 2.9 s the sinks spent on 800k requests; on a
        # remote write's new series it cost more than the insert (docs/benchmarks.md).
        return {"parallel_view_processing": 1, "optimize_on_insert": 0, **(settings or {})}

    def as_tenant(self, tenant: str) -> ClickHouseStore:
        if self.cluster:
            raise QueryError(
                f"reading SQL as a tenant on cluster {self.cluster} is refused: its shards "
                "do not apply the tenant's row policies yet (docs/security.md)"
            )
        if not self.capabilities.row_policies:
            raise QueryError(
                "ClickHouse in-process (chdb) has no users, so no row policies: read as a "
                "tenant through a ClickHouse server (`llmwh clickhouse start`)"
            )
        # Kept for the next query: opening a client (and looking at the policies) cost
        # a tenant's query about 18 ms, the query itself 4-6.
        with self._tenants_lock:
            scoped = self._tenant_stores.get(tenant)
        if scoped is not None:
            return scoped
        tenancy.require_row_policies(self)
        opened = open_http(self._source, tenant)
        with self._tenants_lock:
            scoped = self._tenant_stores.get(tenant)  # another thread's, opened meanwhile
            if scoped is None:
                if len(self._tenant_stores) >= _TENANT_STORES:
                    self._tenant_stores.pop(next(iter(self._tenant_stores))).close()
                scoped = self._tenant_stores[tenant] = opened
        if scoped is not opened:
            opened.close()
        return scoped

    def close(self) -> None:
        with self._tenants_lock:
            for scoped in self._tenant_stores.values():
                scoped.close()
            self._tenant_stores.clear()
        self._client.close()

    def _route(self, settings: Settings | None) -> tuple[Any, dict[str, Any] | None]:
        """The client to run a call on, and the settings to send with it."""
        self._find_database()
        return self._client, dict(settings) if settings else None

    def _find_database(self) -> None:
        if self._database_found:
            return
        with _translated_errors():
            found = self._client.command(
                "SELECT count() FROM system.databases WHERE name = {name:String}",
                parameters={"name": self.database},
            )
        if found:
            self._client.database = self.database
            self._database_found = True


def open_http(url: StoreURL, tenant: str | None = None) -> ClickHouseStore:
    """Connect to a ClickHouse server over HTTP(S).

    With ``tenant``, connect as the tenant reader instead, every query naming ``tenant``
    to ClickHouse's row policies (:mod:`warehouse.store.tenancy`); such a store only reads.
    """
    options = _client_options(url)
    headers = {}
    if tenant is not None:
        url = replace(url, username=tenancy.READER, password="")
        headers[tenancy.TENANT_HEADER] = check_tenant(tenant)
    settings = {"date_time_input_format": "best_effort"}
    if not options["compress"]:
        # Nor are the buffers of an Arrow answer compressed: on loopback, lz4 there cost
        # an SLA report's period read (1.8 MB of histograms) 5-6 ms of its 28.
        settings["output_format_arrow_compression_method"] = "none"
    with _translated_errors():
        client = clickhouse_connect.get_client(
            host=url.host,
            port=url.port,
            username=url.username or "default",
            password=url.password,
            secure=url.secure,
            database="default",
            # No HTTP session: the receiver calls the store from several threads at once,
            # and ClickHouse refuses concurrent queries in one session.
            autogenerate_session_id=False,
            settings=settings,
            headers=headers,
            **options,
        )
    return ClickHouseStore(client, url, SERVER)


_chdb_lock = threading.Lock()
_chdb_path: str | None = None


def open_chdb(url: StoreURL) -> ClickHouseStore:
    """Open ClickHouse in this process on the data directory ``url.path``.

    The engine allows one data directory per process, and any number of sessions on
    it: each store gets a session of its own, so stores on different databases never
    see each other's ``USE`` or ``SET``.
    """
    global _chdb_path
    path = url.path or ":memory:"
    with _chdb_lock:
        if _chdb_path not in (None, path):
            raise ConfigError(
                f"ClickHouse in-process already runs on {_chdb_path!r} in this process; one "
                f"data directory per process, so {path!r} cannot be opened too"
            )
        client = _chdb_client(path)
        _chdb_path = path
    return InProcessStore(client, url, IN_PROCESS, path)


def _chdb_client(path: str, settings: dict[str, Any] | None = None) -> Any:
    # In process an Arrow answer is handed over in memory: compressing its buffers is pure
    # cost (a 1M-row read took 168 ms with the engine's lz4_frame, 130 without). It is set
    # first: the settings are applied in order, and after `readonly` none can be.
    settings = {"output_format_arrow_compression_method": "none", **(settings or {})}
    with _translated_errors():
        return clickhouse_connect.get_client(
            interface="chdb", path=None if path == ":memory:" else path, settings=settings
        )


class InProcessStore(ClickHouseStore):
    """ClickHouse in-process (chdb).

    chdb applies per-call settings with SET and restores them afterwards, but once
    ``readonly`` is set nothing can be restored, so it would outlive the call. Calls
    that ask for ``readonly`` therefore run on a session of their own that is
    read-only for good.
    """

    def __init__(self, client: Any, url: StoreURL, capabilities: Capabilities, path: str):
        super().__init__(client, url, capabilities)
        self._path = path
        self._readonly_clients: dict[str, Any] = {}
        self._engine: Any = None
        self._engine_lock = threading.Lock()
        self._closed = False
        # The engine compares data paths literally: spell it as clickhouse-connect does.
        if path.startswith((":memory:", "file:")):
            self._engine_path = path
        else:
            self._engine_path = os.path.realpath(path)

    def insert_arrow(
        self,
        table: str,
        data: pa.Table,
        settings: Settings | None = None,
        dedup_token: str | None = None,
    ) -> None:
        """Insert; plain request rows go through the engine's own Arrow reader, ``Python()``.

        clickhouse-connect's chdb client serialises each batch and has the engine read it
        back from a temporary file; ``Python()`` reads the Arrow buffers where they lie,
        at about 1.3x the rate for less CPU (docs/benchmarks.md, "Loading in-process").
        But it reads them on parallel streams, so the rows of one insert land in an order,
        and in blocks, that differ from run to run. That is harmless for ``requests``,
        which keeps every row, and wrong elsewhere: tables where the last of a key's rows
        wins, and deduplication tokens, whose blocks must be the same when a write is
        retried. Those keep the client's path, which keeps the Arrow order.
        """
        if table != "requests" or dedup_token is not None:
            super().insert_arrow(table, data, settings, dedup_token)
            return
        if data.num_rows == 0:
            return
        self._find_database()
        columns = ", ".join(quote_identifier(name) for name in data.column_names)
        sql = (
            f"INSERT INTO {quote_identifier(self.database)}.{quote_identifier(table)} ({columns}) "
            f"SETTINGS {_settings_clause(self._insert_settings(settings, None))} "
            f"SELECT {columns} FROM Python(arrow_rows)"
        )
        # Python(arrow_rows) finds the table by name in this frame. One insert at a time
        # on this connection: the engine keeps the name's binding per connection.
        arrow_rows = data  # noqa: F841
        with self._engine_lock, _translated_errors():
            if self._closed:
                raise StoreError("this store is closed")
            if self._engine is None:
                import chdb  # the engine itself; clickhouse-connect imports it the same way

                self._engine = chdb.connect(self._engine_path)
            self._engine.query(sql)

    def close(self) -> None:
        for client in self._readonly_clients.values():
            client.close()
        with self._engine_lock:
            self._closed = True
            if self._engine is not None:
                self._engine.close()
                self._engine = None
        super().close()

    def _route(self, settings: Settings | None) -> tuple[Any, dict[str, Any] | None]:
        client, remaining = super()._route(settings)
        level = str((remaining or {}).pop("readonly", "0"))
        if level == "0":
            return client, remaining or None
        readonly = self._readonly_clients.get(level)
        if readonly is None:
            readonly = self._readonly_clients[level] = _chdb_client(self._path, {"readonly": level})
        readonly.database = client.database
        return readonly, remaining or None


def _arrow_file(table: pa.Table, compression: str | None) -> pa.Buffer:
    """``table`` as one Arrow file (the format an insert carries), written once.

    clickhouse-connect's ``insert_arrow`` writes into a stream that grows as it goes,
    each growth moving what it holds into fresh memory. Measured first and then written
    into a buffer of its size, the log's inserts took the receiver's inserting thread
    0.06-0.1 cores instead of 0.16-0.17 with 32 senders on 2 cores (docs/benchmarks.md,
    "Inserts written once"). Compressed buffers' size is only known once written: they
    still go through a growing stream.
    """
    options = pa.ipc.IpcWriteOptions(compression=compression)

    def write(sink: pa.NativeFile) -> None:
        with pa.ipc.new_file(sink, table.schema, options=options) as writer:
            writer.write_table(table)

    if compression is not None:
        stream = pa.BufferOutputStream()
        write(stream)
        return stream.getvalue()
    size = pa.MockOutputStream()
    write(size)
    buffer = pa.allocate_buffer(size.size())
    write(pa.FixedSizeBufferWriter(buffer))
    return buffer


def _settings_clause(settings: Settings) -> str:
    """``name = value, ...`` for a SETTINGS clause; names are checked, strings quoted."""
    rendered = []
    for name, value in settings.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ConfigError(f"not a ClickHouse setting name: {name!r}")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int | float):
            rendered.append(f"{name} = {value}")
        else:
            rendered.append(f"{name} = {quote_string(str(value))}")
    return ", ".join(rendered)


def _client_options(url: StoreURL) -> dict[str, Any]:
    known: dict[str, Callable[[str], Any]] = {
        "connect_timeout": partial(_seconds, "connect_timeout"),
        "send_receive_timeout": partial(_seconds, "send_receive_timeout"),
        "verify": _boolean,
        "compress": _compression,
    }
    # Compression pays over a network; on loopback it only costs CPU on both ends
    # (about a tenth of the receiver's rate on 2 cores).
    options: dict[str, Any] = {"compress": url.host not in _LOOPBACK}
    for key, value in url.options:
        if key in _STORE_OPTIONS:
            continue
        if key not in known:
            raise ConfigError(
                f"unknown store URL option {key!r}; known: {', '.join(sorted(known))}"
            )
        options[key] = known[key](value)
    return options


_TENANT_STORES = 64
"""Tenant stores a store keeps open (the oldest is closed past it)."""
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
_STORE_OPTIONS = {"cluster", "shards"}
"""Options of the store itself, not of the HTTP client."""


def _cluster_options(url: StoreURL) -> tuple[str | None, list[StoreURL]]:
    """``cluster=NAME`` and ``shards=host:port,...`` of a store URL, checked."""
    options = dict(url.options)
    cluster = options.get("cluster")
    shards = [s.strip() for s in options.get("shards", "").split(",") if s.strip()]
    if shards and not cluster:
        raise ConfigError("store URL option shards= needs cluster=NAME too")
    if cluster is not None and not re.fullmatch(r"[A-Za-z_]\w*", cluster):
        raise ConfigError(f"store URL option cluster={cluster!r}: not a cluster name")
    urls = []
    for shard in shards:
        host, _, port = shard.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"store URL option shards=: {shard!r} is not host:port")
        plain = [(k, v) for k, v in url.options if k not in _STORE_OPTIONS]
        urls.append(replace(url, host=host, port=int(port), options=tuple(plain)))
    return cluster, urls


def _compression(value: str) -> bool | str:
    """``compress=``: on, off, or a method clickhouse-connect knows (lz4, zstd, br, gzip)."""
    lowered = value.lower()
    if lowered in ("lz4", "zstd", "br", "gzip"):
        return lowered
    if lowered in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return _boolean(lowered)
    raise ConfigError(
        f"store URL option compress={value!r}: use true, false, lz4, zstd, br or gzip"
    )


def _seconds(name: str, value: str) -> int:
    """A timeout option: a whole number of seconds, at least 1."""
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ConfigError(
            f"store URL option {name}={value!r}: a whole number of seconds, 1 or more"
        )
    return int(value)


def _boolean(value: str) -> bool:
    return value.lower() in ("1", "true", "yes", "on")


class _translated_errors:
    """Turn clickhouse-connect exceptions into the warehouse's own, keeping the database's text."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> Literal[False]:
        if exc is None or not isinstance(exc, ch_errors.Error | RuntimeError):
            return False
        text = str(exc)
        if isinstance(exc, ch_errors.OperationalError) and "Code:" not in text:
            raise StoreUnavailable(f"ClickHouse is unreachable: {_first_line(text)}") from exc
        match = _CODE.search(text)
        if match:
            code, message, name = int(match.group(1)), match.group(2).strip(), match.group(3)
            label = f" ({name})" if name else ""
            raise StoreError(
                f"ClickHouse error {code}{label}: {message}", database_message=message, code=code
            ) from exc
        raise StoreError(f"ClickHouse error: {_first_line(text)}") from exc


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "no details"
