"""The receiver's write-ahead log: writes on the receiver's disk before they reach the store.

A write is appended as one *frame* (its tables, as Arrow IPC streams) and the file is
synced before the write is acknowledged (``sync=False``: written, not synced);
:mod:`warehouse.ingest.wal_inserter` then inserts many frames at a time. Frames are
numbered (``seq``) and kept in segment files named by their first frame's number.
``checkpoint.json`` says which frames are in the store (``applied``) and which batch of
frames an insert was under way for (``batch``): after a crash that batch is inserted
again with the same frames, so its deduplication tokens are the same and the store drops
what it had already taken.

A frame on disk::

    b"LWAL" | payload length u32 | seq u64 | crc32 of the payload u32
           | crc32 of the header so far u32 | payload
    payload = entries u16, then per entry:
        table name length u16 | name | token length u16 | token | IPC length u32 | IPC stream

A frame cut short at the end of the last segment (a crash while appending) was never
acknowledged: opening the log cuts it off. A damaged frame anywhere else, or a header
that fails its own checksum, is refused with :class:`~warehouse.errors.ConfigError`
rather than skipped. A failed append is cut off again before the error is raised, and a
failed sync stops the log (the kernel may have dropped the pages it could not write).
A lock file (naming its holder's pid) keeps a second process out of the directory.

Frames hold decoded rows, series ids included, so ``checkpoint.json`` also says which
series ids its frames hold (``series_ids``: 2 since migration 0023, when ids began with
their target's hash; a checkpoint without it is older). A log whose frames not yet in
the store hold older ids is refused (:func:`old_series_id_writes`): inserted now they
would be series no ``series`` row names. ``llmwh serve`` checks before it migrates, so
the llmwh that wrote them can still insert them.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from warehouse.errors import ConfigError, StoreUnavailable

__all__ = [
    "SERIES_IDS",
    "Entry",
    "Frame",
    "WriteAheadLog",
    "check_old_series_ids",
    "check_unlocked",
    "old_series_id_writes",
    "usable_directory",
]

_MAGIC = b"LWAL"
_HEADER = struct.Struct("<4sIQII")
_HEAD = struct.Struct("<4sIQI")  # what the header's own checksum covers
_SUFFIX = ".wal"
_CHECKPOINT = "checkpoint.json"
_LOCK = "lock"
SERIES_IDS = 2
"""The series ids frames hold (``series_ids`` in the checkpoint): 2, a target's hash in
their second half (migration 0023); 1, absent from checkpoints before it, MD5 of the key."""


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
    """What ``checkpoint.json`` says: how far the store has the log."""

    applied: int
    """Every frame up to this one is in the store."""
    batch: tuple[int, int] | None
    """Frames an insert was started for and may not have ended."""


def usable_directory(directory: str | Path) -> Path:
    """``directory`` for a write-ahead log, made if missing; a clear error if it cannot be."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is not a directory" if path.exists() else exc.strerror or exc
        raise ConfigError(f"write-ahead log {path} (wal_dir): {what}") from None
    return path


class WriteAheadLog:
    """Frames in segment files under ``directory``; one writer process at a time."""

    def __init__(self, directory: str | Path, segment_bytes: int = 64 << 20, sync: bool = True):
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.sync = sync
        """Sync each frame before :meth:`append` returns; False: written, not synced
        (it outlives the process, not the machine)."""
        self.id = ""
        """Names this log in deduplication tokens (kept in the checkpoint)."""
        self.checkpoint = Checkpoint(0, None)
        self._lock = threading.Lock()
        self._file: int | None = None
        self._segment_size = 0
        self._segments: list[tuple[int, Path]] = []  # (first seq, path), in order
        self._next_seq = 1
        self._lock_file: int | None = None
        self._failed: str | None = None
        self._series_ids = SERIES_IDS

    def open(self) -> list[Frame]:
        """Open the log for appending; returns the frames not yet in the store, in order."""
        usable_directory(self.directory)
        self._lock_directory()
        self._read_checkpoint()
        frames: list[Frame] = []
        paths = sorted(self.directory.glob(f"*{_SUFFIX}"))
        for path in paths:
            if not path.stem.isdigit():
                raise ConfigError(f"{path} is not a write-ahead log segment: move it away")
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
        if self._series_ids != SERIES_IDS:
            if frames:
                self.close()
                raise ConfigError(_old_ids_message(self.directory, len(frames)))
            self._write_checkpoint(self.checkpoint)  # nothing of it left: ours now
        if self._segments:
            path = self._segments[-1][1]
            self._file = os.open(path, os.O_WRONLY | os.O_APPEND)
            self._segment_size = path.stat().st_size
        return frames

    def append(self, entries: list[Entry]) -> Frame:
        """Write a frame and sync it to disk (unless not :attr:`sync`); the write may be
        acknowledged on return."""
        payload = _encode(entries)
        with self._lock:
            if self._failed is not None:
                raise StoreUnavailable(f"the write-ahead log is stopped: {self._failed}")
            seq = self._next_seq
            data = _frame(seq, payload)
            fd = self._file
            if fd is None or self._segment_size >= self.segment_bytes:
                fd = self._roll(seq)
            try:
                _write_all(fd, data)
            except OSError as exc:  # disk full, say: take the partial frame back off
                try:
                    os.ftruncate(fd, self._segment_size)
                except OSError as again:
                    self._failed = f"{self._path()}: {again}"
                raise StoreUnavailable(f"could not append to the write-ahead log: {exc}") from None
            try:
                if self.sync:
                    os.fdatasync(fd)
            except OSError as exc:
                self._failed = f"{self._path()}: sync failed: {exc}"
                raise StoreUnavailable(f"the write-ahead log is stopped: {self._failed}") from None
            self._segment_size += len(data)
            self._next_seq = seq + 1
        return Frame(seq, tuple(entries), len(data))

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
        """Close the segment being appended to, and let another process open the log."""
        with self._lock:
            if self._file is not None:
                os.close(self._file)
                self._file = None
            if self._lock_file is not None:
                os.close(self._lock_file)
                self._lock_file = None

    def _path(self) -> Path:
        return self._segments[-1][1] if self._segments else self.directory

    def _lock_directory(self) -> None:
        fd = _take_lock(self.directory)
        os.ftruncate(fd, 0)  # the holder's pid, for the message a second process gets
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_file = fd

    def _roll(self, seq: int) -> int:
        """Close the segment being written and start one at ``seq``; its descriptor."""
        if self._file is not None:
            os.close(self._file)
        path = self.directory / f"{seq:020d}{_SUFFIX}"
        self._file = fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _sync_directory(self.directory)
        self._segments.append((seq, path))
        self._segment_size = 0
        return fd

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
            self._series_ids = int(saved.get("series_ids", 1))
            self.checkpoint = Checkpoint(int(saved["applied"]), tuple(batch) if batch else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"write-ahead log checkpoint {path} is unreadable: {exc}") from None

    def _write_checkpoint(self, checkpoint: Checkpoint) -> None:
        path = self.directory / _CHECKPOINT
        temporary = path.with_suffix(".tmp")
        text = json.dumps(
            {
                "id": self.id,
                "applied": checkpoint.applied,
                "batch": checkpoint.batch,
                "series_ids": SERIES_IDS,
            }
        )
        with temporary.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        temporary.replace(path)
        _sync_directory(self.directory)
        self.checkpoint = checkpoint
        self._series_ids = SERIES_IDS


def old_series_id_writes(directory: str | Path) -> int:
    """How many writes the log in ``directory`` holds, not yet in the store, with series
    ids from before migration 0023 (read only: the log need not be free)."""
    directory = Path(directory)
    try:
        saved = json.loads((directory / _CHECKPOINT).read_text())
        if int(saved.get("series_ids", 1)) == SERIES_IDS:
            return 0
        applied = int(saved["applied"])
    except FileNotFoundError:
        return 0  # a log never opened holds nothing
    except (ValueError, KeyError, TypeError, AttributeError):
        return 0  # opening it says what is wrong
    paths = sorted(p for p in directory.glob(f"*{_SUFFIX}") if p.stem.isdigit())
    return sum(
        sum(1 for f in _read_segment(path, k == len(paths) - 1)[0] if f.seq > applied)
        for k, path in enumerate(paths)
    )


def _old_ids_message(directory: Path, writes: int) -> str:
    return (
        f"write-ahead log {directory} holds {writes} write(s) acknowledged by an llmwh from "
        "before migration 0023, with series ids this one no longer writes (ids now begin "
        "with their target's hash); inserted now they would name no series. Start the llmwh "
        "that wrote them until its log is empty (llmwh_receiver_wal_pending_bytes 0), then "
        f"this one; or move {directory} away to start without them (they are then lost)"
    )


def check_old_series_ids(directory: str | Path) -> None:
    """:class:`ConfigError` when the log in ``directory`` holds writes with old series ids."""
    writes = old_series_id_writes(directory)
    if writes:
        raise ConfigError(_old_ids_message(Path(directory), writes))


def check_unlocked(directory: str | Path) -> None:
    """:class:`ConfigError` when another process holds the log in ``directory`` now."""
    path = Path(directory)
    if (path / _LOCK).exists():
        os.close(_take_lock(path))  # closing the descriptor lets the lock go again


def _take_lock(directory: Path) -> int:
    """A descriptor of the log's lock file holding its lock; :class:`ConfigError` naming
    the holder's pid when another process holds it."""
    path = directory / _LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        holder = path.read_text().strip() if path.exists() else ""
        who = f"process {holder}" if holder.isdigit() else "another process"
        raise ConfigError(
            f"{who} keeps its write-ahead log in {directory} (wal_dir): give each "
            "receiver a directory of its own (--wal DIR, or another --data DIR), or turn "
            "the log off (--no-wal)"
        ) from None
    return fd


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
    frames: list[Frame] = []
    at = 0
    while at < len(data):
        problem, at_tail = None, True  # at_tail: nothing sound can follow the problem
        if len(data) - at < _HEADER.size:
            problem = "a frame header cut short"
        else:
            magic, length, seq, crc, head_crc = _HEADER.unpack_from(data, at)
            end = at + _HEADER.size + length
            payload = data[at + _HEADER.size : end]
            if magic != _MAGIC or zlib.crc32(data[at : at + _HEAD.size]) != head_crc:
                problem, at_tail = "a damaged frame header", False
            elif end > len(data):
                problem = "a frame cut short"
            elif zlib.crc32(payload) != crc:
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
        try:
            entries = _decode(payload)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:  # ArrowInvalid too
            raise ConfigError(
                f"write-ahead log segment {path}: the frame at byte {at} does not decode: {exc}"
            ) from None
        frames.append(Frame(seq, entries, end - at))
        at = end
    return frames, at


def _frame(seq: int, payload: bytes) -> bytes:
    head = _HEAD.pack(_MAGIC, len(payload), seq, zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
