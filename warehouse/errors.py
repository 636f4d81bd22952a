"""One error tree for the whole warehouse.

Every error the package raises on purpose derives from :class:`WarehouseError`.
Errors that can reach an HTTP client carry the status code they map to, so the
receiver never has to guess.
"""

from __future__ import annotations

__all__ = [
    "BufferFull",
    "ChdbMissing",
    "ChecksumMismatch",
    "ConfigError",
    "DataDirLocked",
    "EmbeddedServerError",
    "Forbidden",
    "IngestError",
    "InvalidArgument",
    "LimitExceeded",
    "MigrationError",
    "NotBuilt",
    "NotRunning",
    "Overlap",
    "PayloadTooLarge",
    "PortInUse",
    "QueryError",
    "RequestTimeout",
    "SealingBehind",
    "SendError",
    "SeriesLimitExceeded",
    "ServerAlreadyRunning",
    "StoreError",
    "StoreUnavailable",
    "TooManyNewSeries",
    "UnsupportedMediaType",
    "Untranslatable",
    "WarehouseError",
    "WireError",
    "WorkerFailed",
]


class WarehouseError(Exception):
    """Base of every error raised by the warehouse."""

    http_status: int = 500


class ConfigError(WarehouseError):
    """A setting, flag or store URL is invalid."""

    http_status = 400


class StoreError(WarehouseError):
    """The database refused or failed a statement.

    ``database_message`` holds the database's own text, ``code`` its error code
    when the backend reports one (ClickHouse's numeric codes).
    """

    def __init__(self, message: str, *, database_message: str = "", code: int | None = None):
        super().__init__(message)
        self.database_message = database_message or message
        self.code = code


class StoreUnavailable(StoreError):
    """The store cannot be reached (connection refused, server down)."""

    http_status = 503


class MigrationError(StoreError):
    """A migration could not be planned or applied."""


class ChecksumMismatch(MigrationError):
    """An applied migration file was edited afterwards."""


class InvalidArgument(WarehouseError, ValueError):
    """An argument of a public function or command is out of its domain (a ValueError
    too, for callers that catch those)."""

    http_status = 400


class QueryError(WarehouseError):
    """A query could not be built from what the user asked."""

    http_status = 400


class SeriesLimitExceeded(QueryError):
    """A selection holds more samples or series than a read may return."""


class Untranslatable(QueryError):
    """SQL that the local merge cannot compute in process (the question then runs
    wholly in the store)."""


class IngestError(WarehouseError):
    """A write was refused: the body or its data is invalid (HTTP 400).

    The message names the problem (the line, row, series or field) so a sender can
    fix it; nothing of a refused write is stored.
    """

    http_status = 400


class LimitExceeded(IngestError):
    """A write is over one of the receiver's limits (HTTP 400)."""


class Overlap(IngestError):
    """An OTLP delta point that starts inside what its stream has already summed."""


class WireError(WarehouseError):
    """Bytes that are not the protobuf message they are read as (HTTP 400)."""

    http_status = 400


class Forbidden(IngestError):
    """The credential is good but holds no right to this (HTTP 403): another tenant, or
    a read with a write-only credential."""

    http_status = 403


class RequestTimeout(IngestError):
    """The body did not arrive in time (HTTP 408)."""

    http_status = 408


class UnsupportedMediaType(IngestError):
    """The Content-Type or Content-Encoding is not one the endpoint takes (HTTP 415)."""

    http_status = 415


class PayloadTooLarge(IngestError):
    """The body is above the configured limit (HTTP 413)."""

    http_status = 413


class BufferFull(IngestError):
    """The receiver cannot take the write now; retry after ``retry_after`` seconds (HTTP
    429): the ingest buffer is at its byte bound."""

    http_status = 429

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class TooManyNewSeries(BufferFull):
    """A tenant's new series this minute would pass its limit (HTTP 429)."""


class SealingBehind(BufferFull):
    """Sealing trails the per-request metrics already written (HTTP 429)."""


class NotRunning(WarehouseError):
    """A write reached a part of the receiver that is stopping or was never started
    (HTTP 503: another receiver, or this one restarted, can take it)."""

    http_status = 503


class NotBuilt(WarehouseError):
    """An optional C extension of the package is not built on this machine."""


class EmbeddedServerError(WarehouseError):
    """The embedded ClickHouse server could not be started, found or stopped."""


class ChdbMissing(EmbeddedServerError):
    """chdb-core, which carries the embedded ClickHouse, is not installed."""


class PortInUse(EmbeddedServerError):
    """A port the embedded server should listen on is taken."""


class DataDirLocked(EmbeddedServerError):
    """Another ClickHouse process holds the data directory."""


class ServerAlreadyRunning(EmbeddedServerError):
    """An embedded server already serves this data directory."""


class SendError(WarehouseError):
    """A receiver refused a write the synthetic sender made, or stayed unreachable
    through every retry."""


class WorkerFailed(WarehouseError):
    """A backend's worker process of ``llmwh compare`` failed; the message carries its
    traceback."""
