"""Offset and time indexes: Kafka's entry layout, lookups, sealing and crash leftovers."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.storage.index import OffsetIndex, TimeIndex


def test_offset_index_file_layout_is_kafkas(tmp_path: Path) -> None:
    """Entries are big-endian (relative offset int32, position int32); seal trims the file."""
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    index.open_for_append(1024)
    assert os.path.getsize(index.path) == 1024  # preallocated while active
    index.append(105, 4096)
    index.append(110, 8192)
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
    """A preallocated index abandoned without seal reopens with exactly its written entries."""
    index = OffsetIndex(tmp_path / "0.index", 0, 800)
    index.open_for_append(800)
    for i in range(1, 8):
        index.append(i * 10, i * 100)
    # simulate a crash: the mapping's writes are in the file, nothing was trimmed
    copy = tmp_path / "copy.index"
    copy.write_bytes(index.path.read_bytes())
    assert os.path.getsize(copy) == 800
    reopened = OffsetIndex(copy, 0, 800)
    assert reopened.entries == 7
    assert reopened.last_entry == (70, 700)
    reopened.open_for_append(800)  # appending continues after the valid prefix
    reopened.append(80, 800)
    assert reopened.entries == 8
    reopened.close()
    index.close()


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
