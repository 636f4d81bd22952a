"""Tenants held apart by ClickHouse itself: the row policies a tenant's SQL runs under.

A tenant's SQL runs as the ClickHouse user :data:`READER`, and every table that holds
tenant data carries a row policy for that user: ``requests`` shows it only the rows whose
``tenant`` is the one named by the :data:`TENANT_HEADER` HTTP header of the query, the
series tables only the series labelled with that tenant. ClickHouse applies a row policy
while it reads the table, before PREWHERE and WHERE, so no expression of the query (a
failing cast, ``throwIf``) ever sees another tenant's row. The header is set by the
warehouse for each query; the query's text cannot change it, and the reader's settings
profile pins what could (``readonly``, ``allow_get_client_http_header``, the query cache)
with ``const`` constraints. See docs/security.md.

The embedded server has no writable access storage (chdb-core serves users from its
configuration file only), so the reader, its grants and its row policies are written into
the server's ``config.xml`` for the databases named when it starts:
:func:`users_config_xml`. The SLO rollups already built then (:func:`readable_rollups`)
are covered too; one built later is left to the warehouse's own connection until the
server restarts. A query as a tenant on a database whose tables carry no such policy is
refused (:func:`require_row_policies`), never run unguarded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple
from xml.sax.saxutils import escape

from warehouse.errors import QueryError
from warehouse.store.base import Store

__all__ = [
    "READER",
    "SERIES_TENANT_LABEL",
    "TENANT_COLUMN_TABLES",
    "TENANT_HEADER",
    "TENANT_TABLES",
    "TENANT_VIEWS",
    "RollupTables",
    "readable_rollups",
    "reader_for",
    "require_row_policies",
    "row_filters",
    "users_config_xml",
]

READER = "llmwh_tenant"
"""The ClickHouse user a tenant's SQL runs as."""
TENANT_HEADER = "X-Llmwh-Tenant"
"""The HTTP header that names, to ClickHouse, the tenant a query reads as."""
SERIES_TENANT_LABEL = "__tenant__"
"""The label that holds a Prometheus series' tenant in multi-tenant mode."""

_CURRENT = f"getClientHTTPHeader('{TENANT_HEADER}')"
_SERIES_OF_TENANT = (
    f"id IN (SELECT id FROM {{db}}.series WHERE labels['{SERIES_TENANT_LABEL}'] = {_CURRENT})"
)
_TENANT_ROWS = f"tenant = {_CURRENT}"

TENANT_COLUMN_TABLES = (
    "requests",
    "request_parts",
    "requests_1m",
    "requests_1h",
    "requests_sla_1h",
)
"""The tenant tables with a ``tenant`` column."""
TENANT_TABLES: dict[str, str] = {
    **dict.fromkeys(TENANT_COLUMN_TABLES, _TENANT_ROWS),
    "series": f"labels['{SERIES_TENANT_LABEL}'] = {_CURRENT}",
    "samples": _SERIES_OF_TENANT,
    "histogram_samples": _SERIES_OF_TENANT,
    "exemplars": _SERIES_OF_TENANT,
    "sample_starts": _SERIES_OF_TENANT,
}
"""Every table a tenant may read, with the row filter (ClickHouse SQL, ``{db}`` for the
database) that holds it to the tenant the query names. A query naming the empty tenant
sees nothing: :func:`row_filters` adds that condition."""
TENANT_VIEWS = ("series_samples",)
"""The views a tenant may read. Each reads tables of :data:`TENANT_TABLES` only and is
``SQL SECURITY INVOKER``, so ClickHouse reads those tables as the tenant, under their
row policies (a ``DEFINER`` view would read them as its definer, every tenant's rows);
a view carries no policy of its own. Each has a ``tenant`` column."""


class RollupTables(NamedTuple):
    """The SLO rollups of a database a tenant may read (:func:`readable_rollups`)."""

    tables: tuple[str, ...] = ()
    """Each table with a ``tenant`` column: read under the same filter as `requests`."""
    views: tuple[str, ...] = ()
    """Their views, which the reader may see exist (not read): a rollup is complete once
    its view exists."""


_ROLLUP = re.compile(r"slo_[a-z0-9_]+")
_TENANT_COLUMN = re.compile(r"^\s*`?tenant`?\s", re.M)


def readable_rollups(definitions: Mapping[str, str]) -> RollupTables:
    """Of a database's tables (name -> its CREATE or ATTACH statement), the SLO rollup
    tables a tenant may read: those with a ``tenant`` column. A rollup's totals sum every
    tenant's requests together, so they have none and no tenant ever reads them."""
    tables = tuple(
        sorted(
            name
            for name, statement in definitions.items()
            if _ROLLUP.fullmatch(name)
            and not name.endswith("_mv")
            and _TENANT_COLUMN.search(statement)
        )
    )
    views = tuple(f"{t}_mv" for t in tables if f"{t}_mv" in definitions)
    return RollupTables(tables, views)


def row_filters(database: str, rollups: RollupTables | None = None) -> dict[str, str]:
    """The row filter of each tenant table of ``database``, and of its ``rollups``."""
    extra = rollups.tables if rollups else ()
    conditions = {**TENANT_TABLES, **dict.fromkeys(extra, _TENANT_ROWS)}
    return {
        table: f"({condition.format(db=_quoted(database))}) AND {_CURRENT} != ''"
        for table, condition in conditions.items()
    }


def users_config_xml(databases: Mapping[str, RollupTables]) -> str:
    """The ``<users>``, ``<profiles>`` and ``<quotas>`` of the embedded server's config.

    ``default`` keeps every right (the warehouse's own connection; loopback only), and
    :data:`READER` may read the tenant tables of each database of ``databases`` and the
    SLO rollups named with it, each under its row filter, and the :data:`TENANT_VIEWS`
    over them.
    """
    filtered = {db: row_filters(db, rollups) for db, rollups in databases.items()}
    grants = "".join(
        f"<query>{escape(f'GRANT SELECT ON {_quoted(db)}.{_quoted(table)}')}</query>"
        for db, filters in filtered.items()
        for table in (*filters, *TENANT_VIEWS)
    ) + "".join(
        f"<query>{escape(f'GRANT SHOW TABLES ON {_quoted(db)}.{_quoted(view)}')}</query>"
        for db, rollups in databases.items()
        for view in rollups.views
    )
    policies = "".join(
        f'<database name="{escape(db)}">'
        + "".join(
            f'<table name="{escape(table)}"><filter>{escape(condition)}</filter></table>'
            for table, condition in filters.items()
        )
        + "</database>"
        for db, filters in filtered.items()
    )
    loopback = "<networks><ip>127.0.0.1</ip><ip>::1</ip></networks>"
    pinned = "".join(
        f"<{name}><const/></{name}>"
        for name in (
            "readonly",
            "allow_get_client_http_header",
            "use_query_cache",
            "query_cache_share_between_users",
            "allow_introspection_functions",
        )
    )
    return (
        '  <user_directories replace="replace"><users_xml><path>config.xml</path>'
        "</users_xml></user_directories>\n"
        "  <users>\n"
        f"    <default><password></password>{loopback}<profile>default</profile>"
        "<quota>default</quota><access_management>1</access_management>"
        "<named_collection_control>1</named_collection_control></default>\n"
        f"    <{READER}><password></password>{loopback}<profile>{READER}</profile>"
        f"<quota>default</quota><grants>{grants}</grants>"
        f"<databases>{policies}</databases></{READER}>\n"
        "  </users>\n"
        "  <profiles><default/>"
        f"<{READER}><readonly>2</readonly><allow_get_client_http_header>1"
        "</allow_get_client_http_header><use_query_cache>0</use_query_cache>"
        "<query_cache_share_between_users>0</query_cache_share_between_users>"
        "<allow_introspection_functions>0</allow_introspection_functions>"
        f"<constraints>{pinned}</constraints></{READER}></profiles>\n"
        "  <quotas><default/></quotas>\n"
    )


def reader_for(store: Store, tenant: str | None) -> Store:
    """The store the warehouse's own reads for ``tenant`` run on: on a ClickHouse server,
    one that reads as the tenant under the row policies (refused, saying why, where the
    database has none); ``store`` itself without a tenant, or where the store has no row
    policies (DuckDB, chdb in-process, a cluster), where the tenant filter that those
    reads carry anyway scopes them alone (docs/security.md, "Builder reads")."""
    if tenant is None or not store.capabilities.row_policies:
        return store
    return store.as_tenant(tenant)


def require_row_policies(store: Store) -> None:
    """Refuse, naming why, to read as a tenant where ClickHouse does not hold the tenant
    apart: every tenant table of the store's database must carry :data:`READER`'s row
    policy."""
    rows = store.query_arrow(
        "SELECT table FROM system.row_policies "
        "WHERE database = {db:String} AND has(apply_to_list, {reader:String})",
        {"db": store.database, "reader": READER},
    )
    covered = set(rows.column("table").to_pylist()) if rows.num_rows else set()
    missing = sorted(set(TENANT_TABLES) - covered)
    if missing:
        raise QueryError(
            f"reading as a tenant needs ClickHouse row policies, and database "
            f"{store.database!r} has none for {', '.join(missing)}: on the embedded server, "
            f"restart it with `llmwh clickhouse start --database {store.database}`; on "
            "another server, see docs/security.md"
        )


def _quoted(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"
