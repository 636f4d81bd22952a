"""Per-request events: NDJSON, Arrow IPC and Parquet in, validated `requests` rows out.

Pure functions, bytes in and Arrow out: every decoder returns a table with exactly
:data:`warehouse.model.REQUESTS_SCHEMA`, ready for ``store.insert_arrow("requests", t)``,
or raises :class:`~warehouse.errors.IngestError` naming the first bad record and field
(``line 3, field ttft_ms: must be a finite number >= 0, got -4``). Nothing partial: one
bad record refuses the whole body.

A record holds the ``requests`` columns by name (units are in the names):

- ``ts`` (required): epoch milliseconds as an integer, or an RFC 3339 timestamp with an
  offset (``2024-05-01T12:00:00.123Z``, ``...+02:00``); stored as UTC milliseconds
  (finer fractions are truncated). 1970 to 2106, ClickHouse's DateTime range.
- ``request_id`` (required, not empty), ``status`` (required, one of ``STATUSES``).
- dimensions: strings, absent or null -> ``''``; ``error_class`` is ``''`` or one of
  ``ERROR_CLASSES``; ``http_status`` 0-65535, default 0; ``is_probe`` default false.
- measures: absent or null -> NULL. Latencies are finite numbers >= 0, token counts
  integers in UInt32 range, ``cached_prompt_tokens <= prompt_tokens`` when both are
  known, quality scores finite numbers.
- ``attrs``: an object of string values (further labels); a null value is no label.
  Keys are stored sorted, whatever order they came in.
- ``tpot_ms``, when absent, is derived by :func:`derive_tpot_ms`.

Unknown field names are refused (a typo such as ``ttft_sec`` must not vanish), with the
nearest known name suggested.

The modules, one job each: :mod:`.fields` (the fields as data), :mod:`.violations` (the
first bad row and field, and its message), :mod:`.columns`, :mod:`.timestamps` and
:mod:`.attrs` (per-column types, ranges, defaults and checks), :mod:`.pipeline` (every
format's columns -> a checked table, with tpot derivation), :mod:`.ndjson` and
:mod:`.ndjson_lines` (NDJSON: the fast path and the per-line fallback), :mod:`.arrow`
(Arrow streams and tables), :mod:`.files` (:func:`read_file`) and :mod:`.encode`
(:func:`encode_ndjson`).
"""

from __future__ import annotations

from warehouse.ingest.events.arrow import decode_arrow_stream, decode_arrow_table
from warehouse.ingest.events.encode import encode_ndjson
from warehouse.ingest.events.fields import REQUIRED
from warehouse.ingest.events.files import FILE_SUFFIXES, read_batches, read_file
from warehouse.ingest.events.ndjson import decode_ndjson
from warehouse.ingest.events.ndjson_lines import _decode_lines as _decode_lines  # tests use it
from warehouse.ingest.events.pipeline import derive_tpot_ms

__all__ = [
    "FILE_SUFFIXES",
    "REQUIRED",
    "decode_arrow_stream",
    "decode_arrow_table",
    "decode_ndjson",
    "derive_tpot_ms",
    "encode_ndjson",
    "read_batches",
    "read_file",
]
