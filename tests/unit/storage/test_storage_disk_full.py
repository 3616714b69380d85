"""A full disk (ENOSPC) under a log: the failed append or roll changes nothing, the next
one after space returns continues cleanly, and a restart finds exactly what was appended."""

from __future__ import annotations

import errno
import logging
import os
import random
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.storage import leader_epoch
from pykraft.storage.checkpoint import write_atomically, write_checkpoint
from pykraft.storage.log import Log
from pykraft.storage.log_manager import LogManager
from pykraft.storage.storage_errors import StorageErrorLog

from .storage_helpers import all_batches, make_batch, open_log, small_config


class FullDisk:
    """os.pwrite (and os.open of new files, with `creates`) on a disk that fills: after
    `writes_left` more calls succeed, a call writes 3 bytes (a short write, as a filesystem
    that runs out mid-write gives) and every later one fails with ENOSPC until `free()`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, writes_left: int = 0,
                 creates: bool = False) -> None:
        self.real_pwrite, self.real_open = os.pwrite, os.open
        self.writes_left = writes_left
        self.full = True
        self.short_write_done = False
        self.creates = creates
        monkeypatch.setattr(os, "pwrite", self.pwrite)
        monkeypatch.setattr(os, "open", self.open)

    def free(self) -> None:
        self.full = False

    def _enospc(self) -> OSError:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def pwrite(self, fd: int, data: bytes | memoryview, position: int) -> int:
        if not self.full:
            return self.real_pwrite(fd, data, position)
        if self.writes_left > 0:
            self.writes_left -= 1
            return self.real_pwrite(fd, data, position)
        if not self.short_write_done and len(data) > 3:
            self.short_write_done = True
            return self.real_pwrite(fd, memoryview(data)[:3], position)
        raise self._enospc()

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o777,
             **kwargs: int) -> int:
        if self.full and self.creates and flags & os.O_CREAT and not os.path.exists(path):
            raise self._enospc()
        return self.real_open(path, flags, mode, **kwargs)


def _append(log: Log, count: int = 3, value_size: int = 40) -> int:
    """A batch whose timestamps are new maxima, so it gets a time index entry too."""
    batch = make_batch(count, timestamp=1_000 + log.log_end_offset, value_size=value_size)
    return log.append_as_leader(batch, leader_epoch=0, now_ms=1_000).last_offset


def _reopened(log: Log) -> Log:
    """The log as an unclean restart finds it (re-validated from offset 0)."""
    log.close()
    return open_log(log.dir, log.config, recovery_point=0)


@pytest.mark.parametrize("writes_left", [0, 1, 2], ids=["data", "offset-index", "time-index"])
def test_a_failed_append_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes_left: int,
) -> None:
    """Whether the batch's own bytes, its offset index entry or its time index entry hit
    the full disk: the append raises OSError, the log end, size and index are unchanged,
    no byte of it is served, and after space returns the next append takes its offsets."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=100_000,
                                                  index_interval_bytes=1))
    for _ in range(3):
        _append(log)
    end, size, stored = log.log_end_offset, log.size_bytes, all_batches(log)
    file_size = os.path.getsize(log.segments[-1].log_path)
    disk = FullDisk(monkeypatch, writes_left=writes_left)
    with pytest.raises(OSError) as raised:
        _append(log)
    assert raised.value.errno == errno.ENOSPC
    assert (log.log_end_offset, log.size_bytes) == (end, size)
    assert os.path.getsize(log.segments[-1].log_path) == file_size  # no partial batch
    assert all_batches(log) == stored
    assert log.read(end, 1 << 20).records == b""
    log.check_invariants()
    disk.free()
    assert _append(log) == end + 2  # the offsets the failed append would have had
    log.check_invariants()
    expected = all_batches(log)
    reopened = _reopened(log)
    assert all_batches(reopened) == expected and reopened.log_end_offset == end + 3
    reopened.check_invariants()
    reopened.close()


def test_a_failed_roll_keeps_the_old_segment_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A roll whose new segment file cannot be created adds no segment and leaves the old
    one active and writable; the roll happens at the next append once space returns."""
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=600, index_interval_bytes=64))
    while log.segment_count == 1:
        _append(log)
    while log.segments[-1].size + 200 < 600:
        _append(log)  # the active segment is nearly full: the next append rolls
    segments, end, stored = log.segment_base_offsets, log.log_end_offset, all_batches(log)
    disk = FullDisk(monkeypatch, writes_left=1_000, creates=True)
    with pytest.raises(OSError):
        _append(log)
    assert log.segment_base_offsets == segments and log.log_end_offset == end
    assert not (log.dir / f"{end:020d}.log").exists()
    assert log.segments[-1].offset_index.writable and log.segments[-1].time_index.writable
    assert all_batches(log) == stored
    disk.free()
    _append(log)
    assert log.segment_base_offsets == (*segments, end)
    log.check_invariants()
    expected = all_batches(log)
    reopened = _reopened(log)
    assert all_batches(reopened) == expected
    reopened.close()


def test_a_failed_roll_of_the_time_index_final_entry_undoes_the_roll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old segment's last time index entry (written as it becomes inactive) failing
    leaves no new segment behind and the old one still active."""
    # no index entry while appending (a sparse index): the final one is then written
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=100_000,
                                                  index_interval_bytes=100_000))
    _append(log)
    _append(log)
    before = log.segment_base_offsets
    disk = FullDisk(monkeypatch)
    with pytest.raises(OSError):
        log.roll(now_ms=2_000)
    assert log.segment_base_offsets == before
    assert not (log.dir / f"{log.log_end_offset:020d}.log").exists()
    assert log.segments[-1].time_index.writable
    disk.free()
    log.roll(now_ms=2_000)
    assert log.segment_count == 2
    log.check_invariants()
    log.close()


@pytest.mark.parametrize("write", [
    lambda path: write_atomically(path, b"new contents"),
    lambda path: write_checkpoint(path, [("t", 0, 42)]),
], ids=["write_atomically", "write_checkpoint"])
def test_a_failed_checkpoint_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Callable[[Path], None],
) -> None:
    """A checkpoint written on a full disk fails with OSError; the old file is intact and
    the temporary file is gone, and the write succeeds once space returns."""
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(b"old contents")

    def full_fsync(fd: int) -> None:  # the data reached the temporary file, not the disk
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", full_fsync)
        with pytest.raises(OSError):
            write(path)
    assert path.read_bytes() == b"old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    write(path)
    assert path.read_bytes() != b"old contents"


def test_storage_errors_are_logged_once_per_interval_per_log_dir(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A full disk fails every write: one line per log dir per interval, counting the
    failures left out, and one line when the dir takes writes again."""
    now = [0]
    errors = StorageErrorLog(interval_ms=10_000, clock_ms=lambda: now[0])
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with caplog.at_level(logging.WARNING, logger="pykraft.storage.storage_errors"):
        assert errors.report(Path("/a"), "append to t-0", full)
        for _ in range(1_000):
            assert not errors.report(Path("/a"), "append to t-1", full)
        assert errors.report(Path("/b"), "append to u-0", full)  # another dir: its own line
        now[0] = 10_000
        assert errors.report(Path("/a"), "flush of t-0", full)
        errors.recovered(Path("/a"))
        errors.recovered(Path("/a"))  # not failing any more: nothing to say
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 4, lines
    assert "No space left on device" in lines[0] and "append to t-0" in lines[0]
    assert "1000 more failure(s)" in lines[2]
    assert "/a takes writes again" in lines[3]
    assert not errors.is_failing(Path("/a")) and errors.is_failing(Path("/b"))


def test_periodic_log_work_goes_on_past_a_failing_log_and_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flush, retention and checkpoint failures of one log (dir) are reported, not raised,
    and every other log still gets its turn; the next call tries again."""
    manager = LogManager([tmp_path / "data0", tmp_path / "data1"], {}, rng=random.Random(7))
    manager.load(now_ms=0)
    logs = [manager.get_or_create_log("t", index, topic_id=uuid.UUID(int=1),
                                      config=small_config(flush_ms=5_000), now_ms=0)
            for index in range(2)]
    for log in logs:
        _append(log)
    failing, healthy = logs

    def enospc(*_: object, **__: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    for name in ("flush_due", "delete_retention_segments"):  # on the failing log only
        real = getattr(Log, name)
        monkeypatch.setattr(Log, name, lambda log, *args, real=real, **kwargs: (
            enospc() if log is failing else real(log, *args, **kwargs)))
    assert healthy.recovery_point == 0
    assert manager.flush_due(now_ms=10_000) == 1
    assert healthy.recovery_point == healthy.log_end_offset
    manager.run_retention(now_ms=10_000)
    failing_dir = manager.log_dir_of("t", 0)
    assert failing_dir is not None and manager.storage_errors.is_failing(failing_dir)
    manager.checkpoint()
    checkpoint = failing_dir / "recovery-point-offset-checkpoint"
    before = checkpoint.read_bytes()
    _append(failing)
    failing.flush()  # its recovery point moves: the next checkpoint differs
    with monkeypatch.context() as patched:
        patched.setattr(os, "fsync", enospc)
        manager.checkpoint()  # reported for both dirs, raised for neither
    assert checkpoint.read_bytes() == before
    assert not list(failing_dir.glob("*.tmp"))
    manager.checkpoint()
    assert checkpoint.read_bytes() != before
    monkeypatch.undo()
    manager.close()


def test_a_shutdown_on_a_full_disk_closes_everything_and_marks_that_dir_unclean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """close() on a full disk does not raise (the node must stop), closes every log and
    unlocks every dir; the dir whose writes failed gets no clean-shutdown marker, so its
    logs are recovered at the next start, which finds every appended record."""
    manager = LogManager([tmp_path / "data0", tmp_path / "data1"], {}, rng=random.Random(7))
    manager.load(now_ms=0)
    logs = [manager.get_or_create_log("t", index, topic_id=uuid.UUID(int=1),
                                      config=small_config(index_interval_bytes=100_000),
                                      now_ms=0) for index in range(2)]
    for log in logs:
        _append(log)
        _append(log)
    expected = [all_batches(log) for log in logs]
    full_dir = manager.log_dir_of("t", 0)
    assert full_dir is not None
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, position: int) -> int:  # only data0's disk is full
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(full_dir)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, position)

    monkeypatch.setattr(os, "pwrite", pwrite)
    manager.close()  # the final time index entry of t-0 cannot be written
    monkeypatch.undo()
    manager_dirs = [tmp_path / "data0", tmp_path / "data1"]
    assert [(d / ".kafka_cleanshutdown").exists() for d in manager_dirs] == [
        d != full_dir for d in manager_dirs]
    reopened = LogManager(manager_dirs, {}, rng=random.Random(7))
    reopened.load(now_ms=0)  # the locks were released
    for index in range(2):
        found = reopened.get_log("t", index)
        assert found is not None and all_batches(found) == expected[index]
        found.check_invariants()
    reopened.close()


def test_deleting_frees_space_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retention and log deletion write nothing, so they work on a full disk (they are how
    space comes back): retention that would delete every segment, whose roll then fails,
    still deletes all but the active one; deleting a log removes its directory."""
    manager = LogManager([tmp_path / "data"], {}, rng=random.Random(7))
    manager.load(now_ms=0)
    config = small_config(segment_bytes=600, index_interval_bytes=100_000, retention_ms=10)
    logs = [manager.get_or_create_log("t", index, topic_id=uuid.UUID(int=1), config=config,
                                      now_ms=0) for index in range(2)]
    for log in logs:
        while log.segment_count < 3:
            _append(log)
        log.update_high_watermark(log.log_end_offset)
    kept, deleted = logs
    FullDisk(monkeypatch, creates=True)
    assert manager.run_retention(now_ms=1_000_000) == 4  # two of each log's three
    assert kept.segment_count == 1 and kept.segments[0].time_index.writable
    assert [p.name for p in kept.dir.iterdir() if p.suffix == ".log"] == [
        kept.segments[0].log_path.name]
    assert manager.delete_log("t", 1)
    assert not deleted.dir.exists()
    assert not any(p.name.startswith("t-1") for p in (tmp_path / "data").iterdir())
    monkeypatch.undo()
    kept.check_invariants()
    manager.close()


def test_a_leader_epoch_checkpoint_that_cannot_be_written_is_written_at_the_next_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new epoch on a full disk: the append that begins it succeeds (memory is the truth),
    the log's flush fails rather than move the recovery point past an epoch the file lacks,
    and once space returns the flush writes the file."""
    log = open_log(tmp_path / "t-0", small_config())
    _append(log)
    log.flush()
    full = [True]
    real_write = write_checkpoint

    def write(path: Path, entries: object, *, sync: bool = True) -> None:
        if full[0]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(path, entries, sync=sync)  # type: ignore[arg-type]  # a test double

    monkeypatch.setattr(leader_epoch, "write_checkpoint", write)
    log.append_as_leader(make_batch(2, timestamp=2_000), leader_epoch=5, now_ms=2_000)
    assert log.leader_epoch_cache.entries[-1] == (5, 3)
    recovery_point = log.recovery_point
    with pytest.raises(OSError):
        log.flush()
    assert log.recovery_point == recovery_point
    full[0] = False
    log.flush()
    assert log.recovery_point == log.log_end_offset
    on_disk = leader_epoch.LeaderEpochCache.load(log.leader_epoch_cache.path).entries
    assert on_disk == log.leader_epoch_cache.entries
    log.close()


class FlakyDisk:
    """os.pwrite and the creation of files fail with ENOSPC at chosen calls: `fail_at` holds
    the numbers (counting from 0) of the calls that fail; a failing pwrite first writes part
    of its data, as a filesystem running out mid-write does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real_pwrite, self.real_open = os.pwrite, os.open
        self.calls = 0
        self.fail_at: set[int] = set()
        monkeypatch.setattr(os, "pwrite", self.pwrite)
        monkeypatch.setattr(os, "open", self.open)

    def _fails(self) -> bool:
        self.calls += 1
        return self.calls - 1 in self.fail_at

    def pwrite(self, fd: int, data: bytes | memoryview, position: int) -> int:
        if self._fails():
            self.real_pwrite(fd, memoryview(data)[: len(data) // 2], position)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real_pwrite(fd, data, position)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o777,
             **kwargs: int) -> int:
        if flags & os.O_CREAT and not os.path.exists(path) and self._fails():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real_open(path, flags, mode, **kwargs)


@settings(max_examples=40, deadline=None)
@given(appends=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 300),
                                  st.sets(st.integers(0, 5), max_size=2)),
                        min_size=1, max_size=30))
def test_appends_and_rolls_failing_anywhere_keep_exactly_the_acknowledged_batches(
    appends: list[tuple[int, int, set[int]]],
) -> None:
    """Whatever write of an append (its batch, an index entry, the roll's new files or the
    old segment's last time entry) fails: the log holds exactly the appends that returned,
    in order, before and after an unclean restart, and its invariants hold throughout."""
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        log = open_log(Path(directory) / "t-0",
                       small_config(segment_bytes=4_000, index_interval_bytes=100))
        disk = FlakyDisk(patch)
        acknowledged: list[bytes] = []
        for count, value_size, failing_calls in appends:
            disk.fail_at = {disk.calls + call for call in failing_calls}
            batch = make_batch(count, timestamp=1_000 + log.log_end_offset,
                               value_size=value_size)
            try:
                log.append_as_leader(batch, leader_epoch=0, now_ms=1_000)
            except OSError:
                pass
            else:
                acknowledged.append(all_batches(log)[-1])
            assert all_batches(log) == acknowledged
            log.check_invariants()
        disk.fail_at = set()
        log.close()
        reopened = open_log(log.dir, log.config, recovery_point=0)
        assert all_batches(reopened) == acknowledged
        reopened.check_invariants()
        reopened.close()
