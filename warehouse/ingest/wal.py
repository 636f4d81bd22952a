"""The receiver's write-ahead log: writes on the receiver's disk before they reach the store.

A write is appended as one *frame* (its tables, as Arrow IPC streams) and the file is
synced before the write is acknowledged; :mod:`warehouse.ingest.wal_inserter` then
inserts many frames at a time. Frames are numbered (``seq``) and kept in segment files
named by their first frame's number. ``checkpoint.json`` says which frames are in the
store (``applied``) and which batch of frames an insert was under way for (``batch``):
after a crash that batch is inserted again with the same frames, so its deduplication
tokens are the same and the store drops what it had already taken.

A frame on disk::

    b"LWAL" | payload length u32 | crc32 of seq and payload u32 | seq u64 | payload
    payload = entries u16, then per entry:
        table name length u16 | name | token length u16 | token | IPC length u32 | IPC stream

A frame cut short at the end of the last segment (a crash while appending) was never
acknowledged: opening the log cuts it off. A damaged frame anywhere else is refused
with :class:`~warehouse.errors.ConfigError` rather than skipped.
"""

from __future__ import annotations

import json
import os
import secrets
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from warehouse.errors import ConfigError

__all__ = ["Entry", "Frame", "WriteAheadLog"]

_MAGIC = b"LWAL"
_HEADER = struct.Struct("<4sIIQ")
_SUFFIX = ".wal"
_CHECKPOINT = "checkpoint.json"


@dataclass(frozen=True)
class Entry:
    """Rows for one store table; ``token`` makes a retried write of them a no-op."""

    table: str
    rows: pa.Table
    token: str | None = None


@dataclass(frozen=True)
class Frame:
    """One write, as appended."""

    seq: int
    entries: tuple[Entry, ...]
    nbytes: int
    """Bytes of the frame on disk."""


@dataclass(frozen=True)
class Checkpoint:
    applied: int
    """Every frame up to this one is in the store."""
    batch: tuple[int, int] | None
    """Frames an insert was started for and may not have ended."""


class WriteAheadLog:
    """Frames in segment files under ``directory``; one writer process at a time."""

    def __init__(self, directory: str | Path, segment_bytes: int = 64 << 20):
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.id = ""
        """Names this log in deduplication tokens (kept in the checkpoint)."""
        self.checkpoint = Checkpoint(0, None)
        self._lock = threading.Lock()
        self._file: int | None = None
        self._segment_size = 0
        self._segments: list[tuple[int, Path]] = []  # (first seq, path), in order
        self._next_seq = 1

    def open(self) -> list[Frame]:
        """Open the log for appending; returns the frames not yet in the store, in order."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._read_checkpoint()
        frames: list[Frame] = []
        paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
        for index, path in enumerate(paths):
            last = index == len(paths) - 1
            found, good_bytes = _read_segment(path, last)
            if last and good_bytes < path.stat().st_size:
                with path.open("r+b") as f:  # a frame cut short: never acknowledged
                    f.truncate(good_bytes)
                    os.fsync(f.fileno())
            first = int(path.stem)
            self._segments.append((first, path))
            frames.extend(f for f in found if f.seq > self.checkpoint.applied)
            if found:
                self._next_seq = max(self._next_seq, found[-1].seq + 1)
            else:
                self._next_seq = max(self._next_seq, first)
        self._next_seq = max(self._next_seq, self.checkpoint.applied + 1)
        if self._segments:
            first, path = self._segments[-1]
            self._file = os.open(path, os.O_WRONLY | os.O_APPEND)
            self._segment_size = path.stat().st_size
        return frames

    def append(self, entries: list[Entry]) -> Frame:
        """Write a frame and sync it to disk; the write may be acknowledged on return."""
        payload = _encode(entries)
        with self._lock:
            seq = self._next_seq
            head = _HEADER.pack(_MAGIC, len(payload), _crc(seq, payload), seq)
            if self._file is None or self._segment_size >= self.segment_bytes:
                self._roll(seq)
            os.write(self._file, head + payload)
            os.fdatasync(self._file)
            self._segment_size += len(head) + len(payload)
            self._next_seq = seq + 1
        return Frame(seq, tuple(entries), len(head) + len(payload))

    def begin(self, first: int, last: int) -> None:
        """Record that frames ``first``..``last`` are being inserted, as one batch."""
        self._write_checkpoint(Checkpoint(self.checkpoint.applied, (first, last)))

    def applied(self, last: int) -> None:
        """Record that every frame up to ``last`` is in the store; drop whole segments."""
        self._write_checkpoint(Checkpoint(last, None))
        with self._lock:
            # A segment is done when the next one starts at or before last + 1; the
            # segment being appended to stays.
            while len(self._segments) > 1 and self._segments[1][0] <= last + 1:
                _, path = self._segments.pop(0)
                path.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                os.close(self._file)
                self._file = None

    def _roll(self, seq: int) -> None:
        if self._file is not None:
            os.close(self._file)
        path = self.directory / f"{seq:020d}{_SUFFIX}"
        self._file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _sync_directory(self.directory)
        self._segments.append((seq, path))
        self._segment_size = 0

    def _read_checkpoint(self) -> None:
        path = self.directory / _CHECKPOINT
        if not path.exists():
            self.id = secrets.token_hex(8)
            self._write_checkpoint(Checkpoint(0, None))
            return
        try:
            saved = json.loads(path.read_text())
            batch = saved["batch"]
            self.id = str(saved["id"])
            self.checkpoint = Checkpoint(int(saved["applied"]), tuple(batch) if batch else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"write-ahead log checkpoint {path} is unreadable: {exc}") from None

    def _write_checkpoint(self, checkpoint: Checkpoint) -> None:
        path = self.directory / _CHECKPOINT
        temporary = path.with_suffix(".tmp")
        text = json.dumps({"id": self.id, "applied": checkpoint.applied, "batch": checkpoint.batch})
        with temporary.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        temporary.replace(path)
        _sync_directory(self.directory)
        self.checkpoint = checkpoint


def _encode(entries: list[Entry]) -> bytes:
    parts = [struct.pack("<H", len(entries))]
    for entry in entries:
        name, token = entry.table.encode(), (entry.token or "").encode()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, entry.rows.schema) as writer:
            writer.write_table(entry.rows)
        ipc = sink.getvalue()
        parts += [
            struct.pack("<H", len(name)),
            name,
            struct.pack("<H", len(token)),
            token,
            struct.pack("<I", ipc.size),
            ipc.to_pybytes(),
        ]
    return b"".join(parts)


def _decode(payload: bytes) -> tuple[Entry, ...]:
    view = memoryview(payload)
    (count,), at = struct.unpack_from("<H", view), 2
    entries = []
    for _ in range(count):
        (n,) = struct.unpack_from("<H", view, at)
        name = bytes(view[at + 2 : at + 2 + n]).decode()
        at += 2 + n
        (n,) = struct.unpack_from("<H", view, at)
        token = bytes(view[at + 2 : at + 2 + n]).decode() or None
        at += 2 + n
        (n,) = struct.unpack_from("<I", view, at)
        rows = pa.ipc.open_stream(pa.py_buffer(view[at + 4 : at + 4 + n])).read_all()
        at += 4 + n
        entries.append(Entry(name, rows, token))
    return tuple(entries)


def _read_segment(path: Path, last: bool) -> tuple[list[Frame], int]:
    """The frames of a segment, and how many of its bytes hold whole, sound frames."""
    data = path.read_bytes()
    frames, at = [], 0
    while at < len(data):
        problem, at_tail = None, True  # at_tail: nothing sound can follow the problem
        if len(data) - at < _HEADER.size:
            problem = "a frame header cut short"
        else:
            magic, length, crc, seq = _HEADER.unpack_from(data, at)
            end = at + _HEADER.size + length
            payload = data[at + _HEADER.size : end]
            if magic != _MAGIC:
                problem, at_tail = "no frame marker", False
            elif end > len(data):
                problem = "a frame cut short"
            elif _crc(seq, payload) != crc:
                problem, at_tail = "a checksum mismatch", end == len(data)
        if problem is not None:
            # Only the frame being appended when the process died can be torn: the last
            # one of the last segment, or zeros the file system left after it.
            if last and (at_tail or not data[at:].strip(b"\0")):
                return frames, at
            raise ConfigError(
                f"write-ahead log segment {path} is damaged at byte {at} ({problem}); "
                "move it away to start without it (its writes are then lost)"
            )
        frames.append(Frame(seq, _decode(payload), end - at))
        at = end
    return frames, at


def _crc(seq: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<Q", seq)))


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
