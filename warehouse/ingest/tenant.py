"""Which tenant a write or a read belongs to: one rule for HTTP headers and gRPC metadata.

In multi-tenant mode (the ``tenant_header`` setting), every request names exactly one
tenant in that header: absent, empty, repeated or malformed, it is refused (400 on HTTP,
INVALID_ARGUMENT on gRPC), on writes and reads alike. No label or body field ever
chooses a tenant. See docs/security.md.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from warehouse.auth import Grant
from warehouse.errors import ConfigError, Forbidden, IngestError
from warehouse.ingest.remote_write_tables import DecodedWrite, with_tenant
from warehouse.model import check_tenant

__all__ = ["TenantPolicy", "named_tenant", "require_tenant"]


class TenantPolicy:
    """Whose a request is, and how its rows are made that tenant's: the one place that
    says it for every transport and every kind of write. ``header``: the
    ``tenant_header`` setting (None: single-tenant mode, every row as it comes)."""

    def __init__(self, header: str | None):
        self.header = header

    @property
    def multi_tenant(self) -> bool:
        return self.header is not None

    def of_request(self, values: Iterable[str], grant: Grant) -> str | None:
        """The tenant a request names in the header (``values``: every value it came
        with), which its credential must hold; None in single-tenant mode."""
        if self.header is None:
            return None
        tenant = named_tenant(values, self.header)
        require_tenant(grant, tenant)
        return tenant

    def share(self, first_value: str | None) -> str:
        """Whose share of the write buffer a request's bytes count against before its
        tenant is checked: the header's first value, or everyone's ("")."""
        return (first_value or "") if self.header is not None else ""

    def rows(self, table: pa.Table, tenant: str | None) -> pa.Table:
        """Request rows made ``tenant``'s (their ``tenant`` column); as they are when None."""
        if tenant is None:
            return table
        column = pa.repeat(pa.scalar(tenant, pa.string()), table.num_rows)
        index = table.schema.get_field_index("tenant")
        return table.set_column(index, table.schema.field("tenant"), column)

    def series(self, decoded: DecodedWrite, tenant: str | None) -> DecodedWrite:
        """In multi-tenant mode, the write's series made the tenant's (``__tenant__`` set,
        a sender's own replaced, their ids hashed again)."""
        if self.header is None or not tenant:
            return decoded
        return with_tenant(decoded, tenant)

    def series_label(self, tenant: str) -> str | None:
        """The ``__tenant__`` the C decoder gives a flush group's series (None: none)."""
        return tenant if self.header is not None else None


def named_tenant(values: Iterable[str], name: str) -> str:
    """The one tenant ``values`` (every value of the header ``name``) names."""
    given = list(values)
    if not given:
        raise IngestError(f"missing tenant header {name}")
    if len(given) > 1:
        raise IngestError(f"tenant header {name} given {len(given)} times: name one tenant")
    try:
        return check_tenant(given[0])
    except ConfigError as exc:
        raise IngestError(f"tenant header {name}: {exc}") from None


def require_tenant(grant: Grant, tenant: str) -> None:
    """Refuse (403) a tenant the request's credential does not hold."""
    if not grant.covers(tenant):
        raise Forbidden(f"credential {grant.name!r} may not use tenant {tenant!r}")
