"""Which tenant a write or a read belongs to: one rule for HTTP headers and gRPC metadata.

In multi-tenant mode (the ``tenant_header`` setting), every request names exactly one
tenant in that header: absent, empty, repeated or malformed, it is refused (400 on HTTP,
INVALID_ARGUMENT on gRPC), on writes and reads alike. No label or body field ever
chooses a tenant. See docs/security.md.
"""

from __future__ import annotations

from collections.abc import Iterable

from warehouse.auth import Grant
from warehouse.errors import ConfigError, Forbidden, IngestError
from warehouse.model import check_tenant

__all__ = ["named_tenant", "require_tenant"]


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
