"""The write-ahead log on disk: what was appended comes back after a restart, in order,
until it is marked applied; a torn last frame is cut off, damage elsewhere refused."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from warehouse.config import Config
from warehouse.errors import ConfigError, StoreUnavailable
from warehouse.ingest.wal import (
    SERIES_IDS,
    Entry,
    WriteAheadLog,
    check_old_series_ids,
    check_unlocked,
    old_series_id_writes,
)
from warehouse.serve.preflight import preflight

SAMPLES = pa.table({"series_id": pa.array([1, 2, 3], pa.uint64()), "value": [0.5, 1.5, -0.0]})
SERIES = pa.table({"series_id": pa.array([1], pa.uint64()), "name": ["up"]})


def opened(path, **options) -> tuple[WriteAheadLog, list]:
    log = WriteAheadLog(path, **options)
    return log, log.open()


def write(log: WriteAheadLog, n: int) -> list[int]:
    return [log.append([Entry("samples", SAMPLES), Entry("series", SERIES, "tok")]).seq
            for _ in range(n)]  # fmt: skip


def test_frames_come_back_after_a_restart_with_their_rows_and_tokens(tmp_path):
    log, recovered = opened(tmp_path)
    assert recovered == []
    assert write(log, 3) == [1, 2, 3]
    log.close()
    again, frames = opened(tmp_path)
    assert [f.seq for f in frames] == [1, 2, 3]
    assert frames[0].entries[0].rows.equals(SAMPLES)
    assert (frames[0].entries[1].table, frames[0].entries[1].token) == ("series", "tok")
    assert again.id == log.id
    assert write(again, 1) == [4]


def test_applied_frames_do_not_come_back_and_their_segments_go(tmp_path):
    log, _ = opened(tmp_path, segment_bytes=1)  # a segment per frame
    write(log, 4)
    log.begin(1, 3)
    log.applied(3)
    log.close()
    assert len(list(tmp_path.glob("*.wal"))) == 1
    again, frames = opened(tmp_path)
    assert [f.seq for f in frames] == [4]
    assert again.checkpoint.applied == 3 and again.checkpoint.batch is None


def test_a_batch_under_way_is_remembered_across_a_restart(tmp_path):
    log, _ = opened(tmp_path)
    write(log, 5)
    log.begin(1, 4)
    log.close()
    again, frames = opened(tmp_path)
    assert again.checkpoint.batch == (1, 4)
    assert [f.seq for f in frames] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    "tail", [b"LWA", b"LWAL\x40\x00\x00\x00", b"\0" * 4096], ids=["header", "payload", "zeros"]
)
def test_a_frame_torn_by_a_crash_is_cut_off(tmp_path, tail):
    log, _ = opened(tmp_path)
    write(log, 2)
    log.close()
    segment = sorted(tmp_path.glob("*.wal"))[-1]
    size = segment.stat().st_size
    segment.write_bytes(segment.read_bytes() + tail)
    again, frames = opened(tmp_path)
    assert [f.seq for f in frames] == [1, 2]
    assert segment.stat().st_size == size
    assert write(again, 1) == [3]
    again.close()
    assert [f.seq for f in opened(tmp_path)[1]] == [1, 2, 3]


def test_damage_before_the_last_frame_is_refused_not_skipped(tmp_path):
    log, _ = opened(tmp_path)
    write(log, 3)
    log.close()
    segment = sorted(tmp_path.glob("*.wal"))[-1]
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # inside the first frame
    segment.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"damaged at byte 0 \(a checksum mismatch\)"):
        opened(tmp_path)


def test_an_unreadable_checkpoint_is_refused(tmp_path):
    opened(tmp_path)[0].close()
    (tmp_path / "checkpoint.json").write_text("{")
    with pytest.raises(ConfigError, match="checkpoint"):
        opened(tmp_path)


def test_a_damaged_length_before_the_end_is_refused_not_taken_for_a_torn_tail(tmp_path):
    log, _ = opened(tmp_path)
    write(log, 3)
    log.close()
    segment = sorted(tmp_path.glob("*.wal"))[-1]
    data = bytearray(segment.read_bytes())
    data[6] ^= 0x40  # the first frame's length now points past the end of the file
    segment.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"damaged at byte 0 \(a damaged frame header\)"):
        opened(tmp_path)


def test_a_second_process_cannot_open_the_same_log_and_is_told_whose_it_is(tmp_path):
    opened(tmp_path)
    with pytest.raises(ConfigError, match=rf"process {os.getpid()} keeps its write-ahead log"):
        opened(tmp_path)


def test_a_failed_append_leaves_the_log_as_it_was(tmp_path, monkeypatch):
    log, _ = opened(tmp_path)
    write(log, 1)
    real_write = __import__("os").write

    def short_then_full_disk(fd, data):
        if len(data) > 100:
            real_write(fd, bytes(data[:100]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("warehouse.ingest.wal.os.write", short_then_full_disk)
    with pytest.raises(StoreUnavailable, match="No space left"):
        write(log, 1)
    monkeypatch.undo()
    assert write(log, 1) == [2]
    log.close()
    assert [f.seq for f in opened(tmp_path)[1]] == [1, 2]


def log_from_before_0023(path, writes: int, applied: int = 0) -> None:
    """A log in ``path`` as an llmwh from before migration 0023 left it: ``writes``
    writes, the first ``applied`` of them in the store, and a checkpoint without
    series_ids."""
    log, _ = opened(path)
    write(log, writes)
    if applied:
        log.applied(applied)
    log.close()
    checkpoint = path / "checkpoint.json"
    saved = json.loads(checkpoint.read_text())
    assert saved.pop("series_ids") == SERIES_IDS == 2
    checkpoint.write_text(json.dumps(saved))


def test_writes_with_series_ids_from_before_0023_are_refused_naming_what_to_do(tmp_path):
    log_from_before_0023(tmp_path, writes=3, applied=1)
    assert old_series_id_writes(tmp_path) == 2
    with pytest.raises(ConfigError, match=r"holds 2 write.*before migration 0023"):
        opened(tmp_path)
    with pytest.raises(ConfigError, match=r"move .* away"):
        check_old_series_ids(tmp_path)
    # Refused, the log is left as it was, and free for the llmwh that wrote it.
    assert old_series_id_writes(tmp_path) == 2
    check_unlocked(tmp_path)


def test_a_log_from_before_0023_with_nothing_left_to_insert_is_taken_over(tmp_path):
    log_from_before_0023(tmp_path, writes=2, applied=2)
    assert old_series_id_writes(tmp_path) == 0
    again, frames = opened(tmp_path)
    assert frames == []
    assert json.loads((tmp_path / "checkpoint.json").read_text())["series_ids"] == SERIES_IDS
    assert write(again, 1) == [3]


def test_serve_refuses_such_a_log_before_it_migrates_anything(tmp_path):
    (tmp_path / "wal" / "1").mkdir(parents=True)
    log, _ = opened(tmp_path / "wal")
    write(log, 1)
    log.close()
    log_from_before_0023(tmp_path / "wal" / "1", writes=1)  # a worker's log
    with pytest.raises(ConfigError, match=r"wal/1 holds 1 write"):
        preflight(Config(data_dir=str(tmp_path)))


def test_each_append_is_synced_before_it_returns(tmp_path, monkeypatch):
    synced: list[int] = []
    real_sync = os.fdatasync
    monkeypatch.setattr(
        "warehouse.ingest.wal.os.fdatasync", lambda fd: synced.append(fd) or real_sync(fd)
    )
    log, _ = opened(tmp_path)
    write(log, 3)
    assert len(synced) == 3


def test_without_sync_appends_are_written_not_synced_and_still_come_back(tmp_path, monkeypatch):
    def no_sync(fd):
        raise AssertionError("wal_sync = false must not sync each append")

    monkeypatch.setattr("warehouse.ingest.wal.os.fdatasync", no_sync)
    log, _ = opened(tmp_path, sync=False)
    assert write(log, 3) == [1, 2, 3]
    log.close()  # the process goes away: what it wrote is in the file
    monkeypatch.undo()
    assert [f.seq for f in opened(tmp_path)[1]] == [1, 2, 3]
