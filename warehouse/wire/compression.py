"""Bodies inflated under one bound: gzip, zstd and snappy alike.

A small body can inflate to gigabytes (a "bomb"). Every decompressor here stops, with a
413, once its output would pass ``limit`` bytes: gzip and zstd inflate at most
``limit + 1`` bytes; snappy's block format states its length up front, and a body that
states more than ``limit`` is refused before anything is inflated.
"""

from __future__ import annotations

import importlib
import sys
import zlib
from collections.abc import Callable
from typing import Any

import cramjam

from warehouse.errors import IngestError, PayloadTooLarge

# Python 3.14's standard library has the module backports.zstd carries before it.
_zstd = importlib.import_module(
    "compression.zstd" if sys.version_info >= (3, 14) else "backports.zstd"
)
ZstdDecompressor, ZstdError = _zstd.ZstdDecompressor, _zstd.ZstdError

__all__ = ["DECOMPRESSORS", "gunzip", "unsnappy", "unzstd"]


def gunzip(body: bytes, limit: int) -> bytes:
    """A gzip body inflated, every member of it (RFC 1952)."""
    return _members(body, limit, lambda: zlib.decompressobj(wbits=31), zlib.error, "gzip")


def unzstd(body: bytes, limit: int) -> bytes:
    """A zstd body inflated, every frame of it (RFC 8878)."""
    return _members(body, limit, ZstdDecompressor, ZstdError, "zstd")


def _members(
    body: bytes, limit: int, start: Callable[[], Any], error: type[Exception], name: str
) -> bytes:
    """Each member (gzip) or frame (zstd) of ``body`` inflated in turn by a decompressor
    from ``start``, never more than ``limit + 1`` bytes in all."""
    pieces, size, rest = [], 0, body
    while rest:
        inflate = start()
        try:
            piece = inflate.decompress(rest, limit + 1 - size)
        except error as exc:
            raise IngestError(f"body is not valid {name}: {exc}") from None
        size += len(piece)
        if size > limit:
            raise _too_large(limit)
        if not inflate.eof:
            raise IngestError(f"body is not valid {name}: it is cut short")
        pieces.append(piece)
        rest = inflate.unused_data
    return b"".join(pieces)


def unsnappy(body: bytes, limit: int) -> bytes:
    """A snappy body (block format, as remote write and remote read send) inflated."""
    stated = _snappy_length(body)
    if stated > limit:
        raise _too_large(limit)
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam raises its own error type for corrupt input
        raise IngestError(f"body is not valid snappy (block format): {exc}") from None


def _snappy_length(body: bytes) -> int:
    """The uncompressed length a snappy block states: a little-endian base-128 varint."""
    length = 0
    for k, byte in enumerate(body[:5]):
        length |= (byte & 0x7F) << (7 * k)
        if not byte & 0x80:
            return length
    raise IngestError("body is not valid snappy (block format): no length")


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"body inflates past the {limit:,}-byte limit")


DECOMPRESSORS: dict[str, Callable[[bytes, int], bytes]] = {
    "identity": lambda body, limit: body,
    "gzip": gunzip,
    "zstd": unzstd,
}
"""Content-Encoding -> inflate(body, limit), for the bodies of events and OTLP."""
