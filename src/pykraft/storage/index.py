"""Sparse segment indexes in Kafka's file formats.

- `OffsetIndex` (`.index`): 8-byte entries `relative offset int32 | position int32`, big
  endian. An entry (O, P) says: the batch starting at byte P of the segment's log holds
  offsets up to O. Entries strictly increase in both fields.
- `TimeIndex` (`.timeindex`): 12-byte entries `timestamp int64 | relative offset int32`. An
  entry (T, O) says: T is the largest timestamp among offsets <= O, and O is the last offset
  of the first batch that reached it. Timestamps strictly increase.

Offsets are stored relative to the segment's base offset, which is why a segment rolls before
an offset would not fit in an int32.

Writing (the active segment's index). Kafka preallocates the active index to
`segment.index.bytes` as a sparse file and stores entries through a shared memory mapping.
We do not: a store into a mapped page the filesystem cannot back (the disk is full, or
an I/O error) is not an error a program can handle but a SIGBUS that kills the process,
with nothing in its log. Preallocating real blocks (`posix_fallocate`) would make that
safe, but costs `segment.index.bytes` (10 MiB by default, twice: both indexes) of disk per
active segment, 20 GB on a broker leading 1,000 partitions. So each entry is written with
`os.pwrite` at the end of the file, whose size is always its entries, and the active
index keeps a copy of its entries in memory (a bytearray, as large as the file) for
lookups. A full disk or a failed write is then an `OSError` from the append that added
the entry, which the caller undoes and reports (KAFKA_STORAGE_ERROR); the entry is not
counted, so the next write goes to the same place. The cost is one system call per entry
(an entry per `index.interval.bytes`, 4 KiB, of appended data), beside the one that wrote
those bytes. `seal()` (on roll and close) drops the copy; inactive indexes are mapped
read-only, lazily on first lookup, and a read-only mapping of bytes the file holds is
never written through.

A file left preallocated by a crash of an older version (or by Kafka) ends in zero entries.
No real entry is all zero after the first slot (offset entries have relative offset > 0
because a segment's first batch never gets one; time entries have strictly increasing
timestamps), so the valid prefix is found by binary search for the first all-zero entry.
Lookups are binary searches with `struct.unpack_from`: no Python object per entry.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import ClassVar, Final

from pykraft.errors import invariant

__all__ = ["OffsetIndex", "TimeIndex", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "pread_exact",
           "pwrite_all"]

INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
_RELATIVE_MAX: Final = (1 << 31) - 1


# Whole reads and writes at a position, for the segments' batches and the indexes' entries:
# a short pwrite is continued until all is written (or it raises), a short pread until the
# size asked for or the end of the file.
def pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


# What an active index that has no entry yet holds: one shared empty bytes rather than an
# empty bytearray each (56 B, two per idle replica)
NO_ENTRIES: Final = b""


class _MappedIndex:
    """A fixed-size-entry file; subclasses give the entry layout and search key.

    Active (writable): entries are in `_buffer` and written to the file by `pwrite`.
    Inactive: read through a read-only mapping of the file.
    """

    ENTRY: ClassVar[struct.Struct]
    FILE_SUFFIX: ClassVar[str]  # of the file's usual name, after the base offset
    # slots: a broker holds two indexes per partition replica, almost all idle; the path is
    # not held whole (130 B a string, three per idle replica with the segment's) but as
    # the directory, which the log's segments share, and the file's name, None for the
    # usual one (made from the base offset when needed)
    __slots__ = ("_dir", "_file", "base_offset", "_max_entries", "_fd", "_map", "_buffer",
                 "_entries", "_writable", "_kept_empty")

    def __init__(self, path: str | Path, base_offset: int, max_index_bytes: int, *,
                 directory: str | None = None, suffix: str = "") -> None:
        """The index at `path`; or, given `directory` (a str the caller shares), at its
        usual name there with `suffix` after it (`path` is then not read)."""
        self.base_offset = base_offset
        if directory is None:
            directory, name = os.path.split(os.fspath(path))
            self._dir = directory
            self._file: str | None = None if name == self._usual_name() else name
        else:
            self._dir = directory
            self._file = self._usual_name() + suffix if suffix else None
        self._max_entries = max(1, max_index_bytes // self.ENTRY.size)
        self._fd: int | None = None
        self._map: mmap.mmap | None = None
        self._buffer: bytearray | bytes | None = None  # the entries, while writable
        self._entries = -1  # unknown until the file is opened
        self._writable = False
        self._kept_empty = False  # opened for append empty, its file found empty and kept

    def _usual_name(self) -> str:
        return f"{self.base_offset:020d}{self.FILE_SUFFIX}"

    @property
    def _path(self) -> str:
        return os.path.join(self._dir, self._file or self._usual_name())

    # -- opening and closing ----------------------------------------------------------------

    def exists(self, listed: frozenset[str] | None = None) -> bool:
        """Whether the file is there: in `listed` (its directory's file names, as the caller
        has just listed them) or, without one, on disk."""
        if listed is not None:
            return (self._file or self._usual_name()) in listed
        return os.path.exists(self._path)

    def open_for_append(self, max_index_bytes: int, *, empty: bool = False,
                        listed: frozenset[str] | None = None) -> None:
        """Make the index writable, holding at most `max_index_bytes` (rounded to entries).

        With `empty` (the segment holds no data, so no entry can be valid) nothing is opened
        yet: the file is created, emptied and written by the first entry. A broker hosting
        many partitions that see no traffic then holds no descriptor for them. `listed`:
        the directory's file names, when the caller has just listed it (an idle log's
        indexes have no file: no stat is needed to tell).
        """
        self._unmap()
        if empty:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            # whatever it held indexes no data; an empty file (its own, as the last close
            # left it) stays: a stat rather than an unlink now and a file made at close,
            # for each of an idle replica's two indexes at every restart
            self._kept_empty = ((listed is None or self.exists(listed))
                                and _empty_or_removed(self._path))
            self._entries = 0
            self._buffer = NO_ENTRIES  # a bytearray of its own at the first entry
        else:
            self._kept_empty = False
            fd = self._open_fd()
            length = self.entries * self.ENTRY.size
            self._buffer = bytearray(pread_exact(fd, length, 0))
            invariant(len(self._buffer) == length, f"{self._path} shrank while being opened")
            # a preallocated zero tail (a crash, or Kafka's file) goes; shrinking needs no space
            if os.fstat(fd).st_size != length:
                os.ftruncate(fd, length)
        self._max_entries = max(self._entries, max(1, max_index_bytes // self.ENTRY.size))
        self._writable = True

    def seal(self) -> None:
        """Trim the file to its entries and drop the in-memory copy (segment no longer
        active); lookups then map the file read-only."""
        if not self._writable:
            return
        if self._fd is None:  # opened for append, never written: leave an empty file
            if not self._kept_empty:
                os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        elif os.fstat(self._fd).st_size != self._entries * self.ENTRY.size:
            os.ftruncate(self._fd, self._entries * self.ENTRY.size)  # a torn entry's bytes
        self._buffer = None
        self._writable = False
        self._max_entries = max(1, self._entries)

    def close(self, *, seal: bool = True) -> None:
        """Seal and release the file; released even when sealing fails (a full disk:
        recovery settles the file at the next start), and the failure is raised.
        `seal=False` (the index is being deleted) writes and creates nothing."""
        try:
            if self._writable and seal:
                self.seal()
        finally:
            self._writable, self._buffer = False, None
            self._unmap()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def delete(self) -> None:
        self._unmap()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._buffer, self._writable, self._kept_empty = None, False, False
        _unlink(self._path)

    @property
    def path(self) -> Path:
        return Path(self._path)

    def rename(self, path: Path) -> None:
        os.replace(self._path, path)
        self._dir, name = os.path.split(os.fspath(path))
        self._file = None if name == self._usual_name() else name

    def _open_fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            self._entries = self._valid_entries(size)
        return self._fd

    def _ensure_mapped(self) -> mmap.mmap | None:
        """The read-only mapping of an inactive index; None while it has no entries."""
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
        invariant(self._fd is not None, f"{self._path} is not open")
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
        source = self._buffer if self._buffer is not None else self._ensure_mapped()
        assert source is not None
        first, second = self.ENTRY.unpack_from(source, slot * self.ENTRY.size)
        return first, second

    def _write(self, first: int, second: int) -> None:
        """Write one entry at the end of the file; an OSError (ENOSPC, EIO) leaves the
        entry uncounted, so the next write goes to the same place."""
        buffer, count = self._buffer, self._entries
        if buffer is None or count >= self._max_entries:  # messages built only on failure
            invariant(buffer is not None, f"{self._path} is not writable")
            invariant(False, f"{self._path} is full")
        if not isinstance(buffer, bytearray):  # NO_ENTRIES
            buffer = self._buffer = bytearray()
        entry = self.ENTRY.pack(first, second)
        fd = self._fd
        if fd is None:  # the deferred part of open_for_append(empty=True)
            fd = self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        position = count * self.ENTRY.size
        written = os.pwrite(fd, entry, position)
        if written != len(entry):  # a short write: the rest, or the error saying why not
            pwrite_all(fd, entry[written:], position + written)
        buffer += entry
        self._entries = count + 1

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
        """Keep the first `count` entries; the file is cut too, so a crash cannot revive
        the others (cutting a file needs no free space)."""
        current = self.entries
        if count >= current:
            return
        if isinstance(self._buffer, bytearray):  # else none in memory (or NO_ENTRIES)
            del self._buffer[count * self.ENTRY.size :]
        self._unmap()
        if self._fd is not None:
            os.ftruncate(self._fd, count * self.ENTRY.size)
        self._entries = count

    def forget_entries_from(self, count: int) -> None:
        """Undo `_write`s after a failed append: keep `count` entries in memory. The file
        is cut too when possible; if not, `seal` or the next write settles it."""
        if not isinstance(self._buffer, bytearray) or count >= self._entries:
            return
        del self._buffer[count * self.ENTRY.size :]
        self._entries = count
        if self._fd is not None:
            try:
                os.ftruncate(self._fd, count * self.ENTRY.size)
            except OSError:
                pass  # the entries past `count` are overwritten or trimmed later

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)

    def _relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if not 0 <= relative <= _RELATIVE_MAX:
            invariant(False, f"offset {offset} out of {self._path}'s range")
        return relative


class OffsetIndex(_MappedIndex):
    ENTRY: ClassVar[struct.Struct] = struct.Struct(">ii")
    FILE_SUFFIX: ClassVar[str] = INDEX_SUFFIX
    __slots__ = ()

    def append(self, offset: int, position: int) -> None:
        if self.entries > 0:
            last_offset, last_position = self.last_entry
            if not (offset > last_offset and position > last_position):
                invariant(False, f"index entry ({offset}, {position}) after "
                                 f"({last_offset}, {last_position})")
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
    FILE_SUFFIX: ClassVar[str] = TIME_INDEX_SUFFIX
    __slots__ = ()

    @property
    def is_full(self) -> bool:
        # one slot stays free for the entry written when the segment becomes inactive
        return self.entries >= self._max_entries - 1

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> None:
        """Add (timestamp, offset) if `timestamp` is a new maximum."""
        last_timestamp, last_offset = self.last_entry
        if timestamp <= last_timestamp:
            return
        if not (self.entries == 0 or offset >= last_offset):
            invariant(False, f"time index offset {offset} before {last_offset} in {self._path}")
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


def _empty_or_removed(path: str) -> bool:
    """Whether `path` is an empty file; one that is not is removed."""
    try:
        if os.stat(path).st_size == 0:
            return True
    except FileNotFoundError:
        return False
    _unlink(path)
    return False


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
