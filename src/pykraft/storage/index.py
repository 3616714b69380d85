"""Sparse segment indexes in Kafka's file formats, memory-mapped.

- `OffsetIndex` (`.index`): 8-byte entries `relative offset int32 | position int32`, big
  endian. An entry (O, P) says: the batch starting at byte P of the segment's log holds
  offsets up to O. Entries strictly increase in both fields.
- `TimeIndex` (`.timeindex`): 12-byte entries `timestamp int64 | relative offset int32`. An
  entry (T, O) says: T is the largest timestamp among offsets <= O, and O is the last offset
  of the first batch that reached it. Timestamps strictly increase.

Offsets are stored relative to the segment's base offset, which is why a segment rolls before
an offset would not fit in an int32.

Like Kafka, the index of the active segment is preallocated to `segment.index.bytes` (a sparse
file: no disk is used until written) and written through a shared mapping, so adding an entry
is a memory store, not a system call. `seal()` (on roll and close) trims the file to its
entries and keeps a read-only mapping. Inactive indexes are mapped lazily on first lookup.

A file left preallocated by a crash ends in zero entries. No real entry is all zero after the
first slot (offset entries have relative offset > 0 because a segment's first batch never
gets one; time entries have strictly increasing timestamps), so the valid prefix is found by
binary search for the first all-zero entry. Lookups are binary searches over the mapping with
`struct.unpack_from`: no Python object per entry.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar, Final

from pykraft.errors import invariant

__all__ = ["OffsetIndex", "TimeIndex", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX"]

INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
_RELATIVE_MAX: Final = (1 << 31) - 1


class _MappedIndex:
    """A fixed-size-entry file, mapped; subclasses give the entry layout and search key."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        self._entries = -1  # unknown until the file is opened
        self._writable = False

    # -- opening and closing ----------------------------------------------------------------

    def open_for_append(self, max_index_bytes: int, *, empty: bool = False) -> None:
        """Map the file writable, preallocated to `max_index_bytes` (rounded to entries).

        With `empty` (the segment holds no data, so no entry can be valid) nothing is opened
        yet: the file is created, emptied and mapped on the first entry. A broker hosting
        many partitions that see no traffic then holds no descriptor or mapping for them
        (each mapping counts against vm.max_map_count, 65,530 by default).
        """
        self._unmap()
        if empty:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self.path.unlink(missing_ok=True)  # whatever it held indexes no data
            self._entries = 0
            self._max_entries = max(1, max_index_bytes // self.ENTRY.size)
            self._writable = True
            return
        fd = self._open_fd()
        entries = self.entries
        self._max_entries = max(entries, max(1, max_index_bytes // self.ENTRY.size))
        os.ftruncate(fd, self._max_entries * self.ENTRY.size)
        self._map = mmap.mmap(fd, self._max_entries * self.ENTRY.size, access=mmap.ACCESS_WRITE)
        self._writable = True

    def _map_for_first_entry(self) -> mmap.mmap:
        """The deferred part of `open_for_append(empty=True)`: stale content is dropped."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._fd = fd
        os.ftruncate(fd, self._max_entries * self.ENTRY.size)
        self._map = mmap.mmap(fd, self._max_entries * self.ENTRY.size, access=mmap.ACCESS_WRITE)
        return self._map

    def seal(self) -> None:
        """Trim the file to its entries and remap read-only (segment no longer active)."""
        if self._fd is None:
            if self._writable:  # opened for append, never written: leave an empty file
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
                self._writable = False
            return
        if self._writable:
            entries = self.entries
            self._unmap()
            assert self._fd is not None
            os.ftruncate(self._fd, entries * self.ENTRY.size)
            self._writable = False
            self._max_entries = max(1, entries)

    def close(self) -> None:
        if self._fd is None:  # never opened, or opened for append and never written
            self._writable = False
            return
        self.seal()
        self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def flush(self) -> None:
        if self._map is not None and self._writable:
            self._map.flush()
        if self._fd is not None:
            os.fsync(self._fd)

    def delete(self) -> None:
        self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            self._entries = self._valid_entries(size)
        return self._fd

    def _ensure_mapped(self) -> mmap.mmap | None:
        """The mapping for reads; None while the index has no entries."""
        if self._map is None:
            fd = self._open_fd()
            length = os.fstat(fd).st_size // self.ENTRY.size * self.ENTRY.size
            if length == 0:
                return None
            self._map = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        return self._map

    def _unmap(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

    def _valid_entries(self, size: int) -> int:
        """Entries before the first all-zero one (a crash may leave a preallocated tail)."""
        count = size // self.ENTRY.size
        if count == 0:
            return 0
        with mmap.mmap(self._fd_or_fail(), count * self.ENTRY.size, access=mmap.ACCESS_READ) as m:
            zero = bytes(self.ENTRY.size)
            size = self.ENTRY.size
            if m[0:size] == zero and (count == 1 or m[size : 2 * size] == zero):
                return 0  # (a lone real time entry (0, 0) is dropped too: harmless)
            low, high = 1, count
            while low < high:
                middle = (low + high) // 2
                start = middle * self.ENTRY.size
                if m[start : start + self.ENTRY.size] == zero:
                    high = middle
                else:
                    low = middle + 1
            return low

    def _fd_or_fail(self) -> int:
        invariant(self._fd is not None, f"{self.path} is not open")
        assert self._fd is not None
        return self._fd

    # -- entries ------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        if self._entries < 0:
            self._open_fd()
        return self._entries

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self._max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.ENTRY.size

    def _entry(self, slot: int) -> tuple[int, int]:
        mapped = self._ensure_mapped()
        assert mapped is not None
        first, second = self.ENTRY.unpack_from(mapped, slot * self.ENTRY.size)
        return first, second

    def _write(self, first: int, second: int) -> None:
        invariant(self._writable, f"{self.path} is not writable")
        invariant(self.entries < self._max_entries, f"{self.path} is full")
        mapped = self._map if self._map is not None else self._map_for_first_entry()
        self.ENTRY.pack_into(mapped, self._entries * self.ENTRY.size, first, second)
        self._entries += 1

    def _search(self, key: int, key_at: int) -> int:
        """Slot of the last entry whose search key is <= `key`, or -1 if none is."""
        low, high = 0, self.entries - 1
        found = -1
        while low <= high:
            middle = (low + high) // 2
            if self._entry(middle)[key_at] <= key:
                found, low = middle, middle + 1
            else:
                high = middle - 1
        return found

    def _truncate_entries(self, count: int) -> None:
        """Keep the first `count` entries; zero the rest so a crash cannot revive them."""
        current = self.entries
        if count >= current:
            return
        if self._writable and self._map is not None:
            start, end = count * self.ENTRY.size, current * self.ENTRY.size
            self._map[start:end] = bytes(end - start)
        else:
            self._unmap()
            os.ftruncate(self._fd_or_fail(), count * self.ENTRY.size)
        self._entries = count

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        invariant(0 <= relative <= _RELATIVE_MAX, f"offset {offset} out of {self.path}'s range")
        return relative


class OffsetIndex(_MappedIndex):
    ENTRY: ClassVar[struct.Struct] = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        if self.entries > 0:
            last_offset, last_position = self.last_entry
            invariant(
                offset > last_offset and position > last_position,
                f"index entry ({offset}, {position}) after ({last_offset}, {last_position})",
            )
        self._write(self._relative(offset), position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`; (base, 0) if none."""
        slot = self._search(offset - self.base_offset, 0)
        if slot < 0:
            return self.base_offset, 0
        relative, position = self._entry(slot)
        return self.base_offset + relative, position

    @property
    def last_entry(self) -> tuple[int, int]:
        if self.entries == 0:
            return self.base_offset, 0
        relative, position = self._entry(self.entries - 1)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for `offset` or later."""
        self._truncate_entries(self._search(offset - self.base_offset - 1, 0) + 1)


class TimeIndex(_MappedIndex):
    ENTRY: ClassVar[struct.Struct] = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        # one slot stays free for the entry written when the segment becomes inactive
        return self.entries >= self._max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> None:
        """Add (timestamp, offset) if `timestamp` is a new maximum."""
        last_timestamp, last_offset = self.last_entry
        if timestamp <= last_timestamp:
            return
        invariant(
            self.entries == 0 or offset >= last_offset,
            f"time index offset {offset} before {last_offset} in {self.path}",
        )
        if not final and self.is_full:
            return
        if self.entries >= self._max_entries:
            return  # full even for the final entry: the last one stays as it is
        self._write(timestamp, self._relative(offset))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= `timestamp`."""
        slot = self._search(timestamp, 0)
        if slot < 0:
            return -1, self.base_offset
        found, relative = self._entry(slot)
        return found, self.base_offset + relative

    @property
    def last_entry(self) -> tuple[int, int]:
        """(-1, base offset) when empty: no timestamp is known."""
        if self.entries == 0:
            return -1, self.base_offset
        timestamp, relative = self._entry(self.entries - 1)
        return timestamp, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is `offset` or later."""
        keep = 0
        low, high = 0, self.entries - 1
        while low <= high:  # entries' offsets are non-decreasing
            middle = (low + high) // 2
            if self.base_offset + self._entry(middle)[1] < offset:
                keep, low = middle + 1, middle + 1
            else:
                high = middle - 1
        self._truncate_entries(keep)
