"""Offset and time indexes: Kafka's entry layout, lookups, sealing and crash leftovers."""

from __future__ import annotations

import errno
import mmap
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.storage.index import OffsetIndex, TimeIndex


def test_offset_index_file_layout_is_kafkas(tmp_path: Path) -> None:
    """Entries are big-endian (relative offset int32, position int32); the file holds
    exactly its entries, also while active (nothing is preallocated: see the module doc)."""
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    index.open_for_append(1024)
    index.append(105, 4096)
    assert os.path.getsize(index.path) == 8
    index.append(110, 8192)
    assert os.path.getsize(index.path) == 16
    index.close()
    data = index.path.read_bytes()
    assert data == struct.pack(">iiii", 5, 4096, 10, 8192)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60),
    probes=st.lists(st.integers(0, 4000), max_size=20),
)
def test_offset_lookup_matches_brute_force(
    gaps: list[tuple[int, int]], probes: list[int]
) -> None:
    """lookup(o) is the last entry with offset <= o (or (base, 0)), before and after reopen."""
    with tempfile.TemporaryDirectory() as directory:
        base = 1000
        index = OffsetIndex(Path(directory) / "x.index", base, 8 * 100)
        index.open_for_append(8 * 100)
        entries, offset, position = [], base, 0
        for offset_gap, position_gap in gaps:
            offset, position = offset + offset_gap, position + position_gap
            index.append(offset, position)
            entries.append((offset, position))

        def expected(target: int) -> tuple[int, int]:
            candidates = [entry for entry in entries if entry[0] <= target]
            return candidates[-1] if candidates else (base, 0)

        for probe in probes:
            assert index.lookup(base + probe) == expected(base + probe)
        index.close()
        reopened = OffsetIndex(index.path, base, 8 * 100)
        assert reopened.entries == len(entries)
        for probe in probes:
            assert reopened.lookup(base + probe) == expected(base + probe)
        reopened.close()


def test_crash_leaves_zero_tail_that_is_not_taken_for_entries(tmp_path: Path) -> None:
    """A preallocated index abandoned without seal (by Kafka, or an older pykraft) reopens
    with exactly its written entries, and appending to it drops the zero tail."""
    index = OffsetIndex(tmp_path / "0.index", 0, 800)
    index.open_for_append(800)
    for i in range(1, 8):
        index.append(i * 10, i * 100)
    # the file as a crash leaves a preallocated one: the entries, then zeros to its size
    copy = tmp_path / "copy.index"
    copy.write_bytes(index.path.read_bytes().ljust(800, b"\0"))
    reopened = OffsetIndex(copy, 0, 800)
    assert reopened.entries == 7
    assert reopened.last_entry == (70, 700)
    reopened.open_for_append(800)  # appending continues after the valid prefix
    assert os.path.getsize(copy) == 56
    reopened.append(80, 800)
    assert reopened.entries == 8
    reopened.close()
    index.close()
    assert OffsetIndex(copy, 0, 800).lookup(85) == (80, 800)


def test_an_empty_segments_index_keeps_its_empty_file_and_drops_one_with_entries(
        tmp_path: Path) -> None:
    """Opened for append with no data (an idle replica at each restart), an index keeps the
    empty file its last close left, and does not make it again at its close; a file that
    still holds entries indexes nothing now and goes; the first entry empties the file."""
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1024)
    index.open_for_append(1024, empty=True)
    assert not path.exists()  # made by the first entry, or at close
    index.close()
    made = os.stat(path)
    assert made.st_size == 0
    index = OffsetIndex(path, 0, 1024)
    index.open_for_append(1024, empty=True)
    index.close()
    assert os.stat(path).st_ino == made.st_ino and os.stat(path).st_mtime_ns == made.st_mtime_ns
    path.write_bytes(struct.pack(">ii", 5, 4096))  # entries a crash left behind
    index = OffsetIndex(path, 0, 1024)
    index.open_for_append(1024, empty=True)
    assert not path.exists() and index.entries == 0
    index.close()
    assert os.path.getsize(path) == 0
    index = OffsetIndex(path, 0, 1024)
    index.open_for_append(1024, empty=True)
    index.append(3, 100)
    index.close()
    assert path.read_bytes() == struct.pack(">ii", 3, 100)


def test_truncate_removes_entries_at_or_above_offset(tmp_path: Path) -> None:
    """truncate_to(o) drops entries for o and later, in both index kinds."""
    offsets = OffsetIndex(tmp_path / "0.index", 0, 800)
    times = TimeIndex(tmp_path / "0.timeindex", 0, 1200)
    offsets.open_for_append(800)
    times.open_for_append(1200)
    for i in range(1, 6):
        offsets.append(i * 10, i * 100)
        times.maybe_append(1000 + i, i * 10)
    offsets.truncate_to(30)
    times.truncate_to(30)
    assert offsets.entries == 2 and offsets.last_entry == (20, 200)
    assert times.entries == 2 and times.last_entry == (1002, 20)
    offsets.close()
    times.close()


def test_time_index_only_records_new_maxima_and_keeps_a_slot_for_the_final_entry(
    tmp_path: Path,
) -> None:
    """maybe_append ignores non-increasing timestamps; lookup gives the last entry <= t."""
    times = TimeIndex(tmp_path / "0.timeindex", 0, 12 * 3)
    times.open_for_append(12 * 3)
    times.maybe_append(500, 3)
    times.maybe_append(400, 5)  # older: ignored
    times.maybe_append(500, 6)  # equal: ignored
    assert times.entries == 1
    times.maybe_append(700, 9)
    assert times.is_full  # 3 slots, one kept for the final entry
    times.maybe_append(800, 12)  # full: skipped unless final
    assert times.entries == 2
    times.maybe_append(900, 15, final=True)
    assert times.entries == 3
    assert times.lookup(450) == (-1, 0)
    assert times.lookup(650) == (500, 3)
    assert times.lookup(10_000) == (900, 15)
    times.close()
    assert os.path.getsize(times.path) == 36


class FullDisk:
    """os.pwrite on a disk that fills up: while `full`, the first call writes 3 bytes (a
    short write, as a filesystem running out mid-write gives), every later one ENOSPC."""

    def __init__(self) -> None:
        self.real = os.pwrite
        self.full = True
        self.short_write_done = False

    def pwrite(self, fd: int, data: bytes | memoryview, position: int) -> int:
        if not self.full:
            return self.real(fd, data, position)
        if not self.short_write_done and len(data) > 3:
            self.short_write_done = True
            return self.real(fd, memoryview(data)[:3], position)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_full_disk_fails_the_entry_write_and_the_next_write_continues_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An entry write that hits ENOSPC raises OSError (not SIGBUS), is not counted, and
    once space returns the next entry lands where the failed one would have."""
    index = OffsetIndex(tmp_path / "0.index", 0, 800)
    index.open_for_append(800)
    index.append(10, 100)
    disk = FullDisk()
    monkeypatch.setattr(os, "pwrite", disk.pwrite)
    with pytest.raises(OSError) as raised:
        index.append(20, 200)
    assert raised.value.errno == errno.ENOSPC
    assert index.entries == 1 and index.last_entry == (10, 100)
    assert index.lookup(25) == (10, 100)
    disk.full = False
    index.append(30, 300)
    assert index.entries == 2 and index.lookup(25) == (10, 100)
    index.close()
    assert index.path.read_bytes() == struct.pack(">iiii", 10, 100, 30, 300)


def test_an_undone_entry_is_forgotten_in_memory_and_in_the_file(tmp_path: Path) -> None:
    """forget_entries_from (a failed append's undo) drops later entries from both copies."""
    times = TimeIndex(tmp_path / "0.timeindex", 0, 1200)
    times.open_for_append(1200)
    times.maybe_append(1001, 10)
    times.maybe_append(1002, 20)
    times.forget_entries_from(1)
    assert times.entries == 1 and times.last_entry == (1001, 10)
    assert os.path.getsize(times.path) == 12
    times.maybe_append(1003, 30)
    times.close()
    assert times.path.read_bytes() == struct.pack(">qiqi", 1001, 10, 1003, 30)


def test_no_index_is_ever_mapped_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store into a mapped page the filesystem cannot back is a SIGBUS: every mapping an
    index makes, through appends, lookups, sealing, reopening and truncation, is read-only."""
    real_mmap = mmap.mmap
    accesses: list[int] = []

    def checked(fd: int, length: int, *args: object, **kwargs: object) -> mmap.mmap:
        accesses.append(int(kwargs.get("access", mmap.ACCESS_DEFAULT)))  # type: ignore[call-overload]
        return real_mmap(fd, length, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mmap, "mmap", checked)
    index = OffsetIndex(tmp_path / "0.index", 0, 800)
    index.open_for_append(800)
    for i in range(1, 6):
        index.append(i * 10, i * 100)
    assert index.lookup(35) == (30, 300)
    index.seal()
    assert index.lookup(35) == (30, 300)
    index.open_for_append(800)  # reopened as the active index (a follower's truncation)
    index.truncate_to(30)
    index.append(40, 400)
    index.close()
    reopened = OffsetIndex(index.path, 0, 800)
    assert reopened.lookup(1000) == (40, 400)
    reopened.close()
    assert accesses and all(access == mmap.ACCESS_READ for access in accesses)
