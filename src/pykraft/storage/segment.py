"""One log segment: `<base offset>.log` plus its `.index` and `.timeindex`.

The `.log` file is RecordBatch v2 batches back to back, exactly as they arrived (offsets and
leader epoch stamped). `size` is the number of valid bytes; the file never holds more after
recovery. Batches are found through the sparse offset index plus a short forward scan of
batch headers; no record is ever decoded here.

Indexing rule (Kafka's, shared by append and recovery so both build the same index): before
writing a batch at byte P, if more than `index.interval.bytes` were written since the last
index entry, add offset entry (batch last offset, P) and time entry (largest timestamp so
far, last offset of the first batch that reached it). The first batch of a segment therefore
never gets an entry, which is what lets a crashed index's zero tail be told from entries.

Reads use `os.pread` on a descriptor opened on first use and kept; writes use `os.pwrite`
at `size`, one call per append whatever the number of batches.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from pykraft.errors import CorruptRecord, invariant
from pykraft.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    read_header,
)
from pykraft.storage.index import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    OffsetIndex,
    TimeIndex,
    pread_exact,
    pwrite_all,
)
from pykraft.storage.log_config import LogConfig

__all__ = [
    "LOG_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "LogSegment",
    "segment_base_name",
]

LOG_SUFFIX: Final = ".log"
TXN_INDEX_SUFFIX: Final = ".txnindex"
RELATIVE_OFFSET_MAX: Final = (1 << 31) - 1
_SCAN_CHUNK_BYTES: Final = 64 * 1024
_RECOVERY_CHUNK_BYTES: Final = 8 * 1024 * 1024
# baseOffset, batchLength, (leader epoch, magic, crc, attributes skipped), lastOffsetDelta
_PREFIX: Final = struct.Struct(">qi11xi")
_INT32: Final = struct.Struct(">i")


def segment_base_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class LogSegment:
    """A segment's files and the facts about it the log needs (size, offsets, timestamps)."""

    # slots: a broker holds a segment per partition replica, almost all idle
    __slots__ = ("base_offset", "_dir", "_suffix", "offset_index", "time_index",
                 "index_interval_bytes", "created_ms", "size", "_fd", "_max",
                 "_first_batch_timestamp", "_bytes_since_index_entry", "_dirty", "_torn_tail",
                 "indexes_were_missing")

    def __init__(
        self, directory: Path, base_offset: int, config: LogConfig, created_ms: int,
        *, suffix: str = "",
    ) -> None:
        self.base_offset = base_offset
        # the files' paths are made when needed from the directory, a str shared with the
        # indexes (a Path's own: the same object for each segment of a log), and the suffix:
        # three path strings held per idle replica were 400 B of it (tracemalloc)
        self._dir = os.fspath(directory)
        self._suffix = suffix
        self.offset_index = OffsetIndex(
            "", base_offset, config.segment_index_bytes, directory=self._dir, suffix=suffix)
        self.time_index = TimeIndex(
            "", base_offset, config.segment_index_bytes, directory=self._dir, suffix=suffix)
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = created_ms
        try:
            self.size = os.stat(self._log_path).st_size
        except FileNotFoundError:
            self.size = 0
        self._fd: int | None = None
        self._max: tuple[int, int] | None = None  # (timestamp, offset) once known
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self._dirty = False
        self._torn_tail = False  # bytes of a failed append may lie past `size`
        self.indexes_were_missing = False

    # -- creation, loading, files ---------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int,
        *, fresh: bool = False,
    ) -> LogSegment:
        """A new empty active segment; stale files with its name are removed first, unless
        the directory is `fresh` (made just now, so empty)."""
        name = segment_base_name(base_offset)
        if not fresh:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                try:
                    os.unlink(os.path.join(directory, f"{name}{suffix}"))
                except FileNotFoundError:
                    pass
        segment = cls(directory, base_offset, config, now_ms)
        # the file exists from now on (Kafka's layout); its descriptor is opened on first use
        os.close(os.open(segment._log_path, os.O_RDWR | os.O_CREAT, 0o644))
        segment.open_for_append(config, listed=frozenset())  # no index file is left
        return segment

    @classmethod
    def load(
        cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int,
        *, suffix: str = "", listed: frozenset[str] | None = None,
    ) -> LogSegment:
        """An existing segment; indexes are opened lazily (and rebuilt if missing).
        `listed`: the directory's file names, when the caller has just listed it."""
        segment = cls(directory, base_offset, config, now_ms, suffix=suffix)
        segment.indexes_were_missing = segment.size > 0 and not (  # none for no data
            segment.offset_index.exists(listed) and segment.time_index.exists(listed)
        )
        return segment

    @property
    def _log_path(self) -> str:
        return os.path.join(
            self._dir, f"{segment_base_name(self.base_offset)}{LOG_SUFFIX}{self._suffix}")

    @property
    def log_path(self) -> Path:
        return Path(self._log_path)

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._log_path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def open_for_append(self, config: LogConfig, *, listed: frozenset[str] | None = None
                        ) -> None:
        """Ready the indexes for appends; an empty segment's are opened by its first entry.
        `listed`: the directory's file names, when the caller has just listed it."""
        self.index_interval_bytes = config.index_interval_bytes
        empty = self.size == 0
        self.offset_index.open_for_append(config.segment_index_bytes, empty=empty,
                                          listed=listed)
        self.time_index.open_for_append(config.segment_index_bytes, empty=empty, listed=listed)
        self._reset_bytes_since_index_entry()

    def _reset_bytes_since_index_entry(self) -> None:
        """Bytes after the last index entry, so appends after a reopen index as before."""
        entries = self.offset_index.entries
        last_position = self.offset_index.last_entry[1] if entries else 0
        self._bytes_since_index_entry = max(0, self.size - last_position)

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index and trim both indexes."""
        if self.time_index.writable:
            timestamp, offset = self.max_timestamp_and_offset
            self.time_index.maybe_append(timestamp, offset, final=True)
        self.offset_index.seal()
        self.time_index.seal()

    def flush(self) -> None:
        if self._dirty and self._fd is not None:
            os.fsync(self._fd)
            self._dirty = False
        self.offset_index.flush()
        self.time_index.flush()

    def close(self, *, final_entry: bool = True) -> None:
        """Close every file, even when a write on the way fails (a full disk); the first
        failure is raised after, and the next start's recovery settles the files.
        `final_entry=False` (the segment is being deleted) writes nothing: deleting must
        work on a full disk, as it is how space comes back."""
        # an empty segment's indexes stay without files, as a new one's are (LogSegment.load
        # expects none): creating two files per idle log made up most of the time a broker of
        # 200,000 logs took to close them
        seal = final_entry and self.size > 0
        try:
            if seal:
                self.on_become_inactive()
        finally:
            try:
                self.offset_index.close(seal=seal)
            finally:
                try:
                    self.time_index.close(seal=seal)
                finally:
                    self._close_log_file()

    def _close_log_file(self) -> None:
        if self._fd is None:
            return
        try:
            if self._torn_tail:
                os.ftruncate(self._fd, self.size)
                self._torn_tail = False
        finally:
            os.close(self._fd)
            self._fd = None

    @property
    def txn_index_path(self) -> Path:
        """`<base>.txnindex` (storage.txn_index), beside the log file, suffix included."""
        return self.log_path.with_name(self.log_path.name.replace(LOG_SUFFIX, TXN_INDEX_SUFFIX))

    def paths(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path,
                self.txn_index_path]

    def rename_with_suffix(self, suffix: str) -> list[Path]:
        """Close and rename every file to `<name><suffix>`; return the new paths."""
        self.close(final_entry=False)
        renamed = []
        for path in self.paths():
            if path.exists():
                target = path.with_name(path.name + suffix)
                os.replace(path, target)
                renamed.append(target)
        return renamed

    def delete(self) -> None:
        self.close(final_entry=False)
        for path in self.paths():
            path.unlink(missing_ok=True)

    # -- facts -------------------------------------------------------------------------------

    @property
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """Largest batch max timestamp and the last offset of the first batch holding it."""
        if self._max is None:
            self._max = self.time_index.last_entry
        return self._max

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_and_offset[0]

    def largest_timestamp(self) -> int:
        """The max timestamp, or the file's modification time when no timestamp is known."""
        timestamp = self.max_timestamp
        if timestamp >= 0:
            return timestamp
        return self.log_path.stat().st_mtime_ns // 1_000_000

    def first_batch_timestamp(self) -> int | None:
        if self._first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self._first_batch_timestamp = read_header(
                pread_exact(self.fd, HEADER_SIZE, 0)
            ).max_timestamp
        return self._first_batch_timestamp

    def should_roll(
        self, config: LogConfig, jitter_ms: int, *, incoming_bytes: int,
        incoming_max_timestamp: int, incoming_last_offset: int, now_ms: int,
    ) -> bool:
        """Whether an append of `incoming_bytes` must go to a new segment (Kafka's rules)."""
        if self.size == 0:
            return False  # an empty segment takes anything; it is never rolled away
        first_timestamp = self.first_batch_timestamp()
        if first_timestamp is not None and first_timestamp >= 0:
            waited_ms = incoming_max_timestamp - first_timestamp
        else:
            waited_ms = now_ms - self.created_ms
        return (
            self.size > config.segment_bytes - incoming_bytes
            or waited_ms > config.max_segment_ms - jitter_ms
            or self.offset_index.is_full
            or self.time_index.is_full
            or incoming_last_offset - self.base_offset > RELATIVE_OFFSET_MAX
        )

    # -- append ------------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, batches: Sequence[tuple[int, int, int]]
    ) -> None:
        """Write `data`, whose batches are (size, last offset, max timestamp), in one call.

        All or nothing: if a write fails (ENOSPC, EIO) the segment is as before (`size`,
        index entries, maxima) and the OSError propagates. Bytes a failed write left past
        `size` are never read (reads stop at `size`), are cut off here when the file can be
        cut, and are overwritten by the next append otherwise.
        """
        if self._torn_tail:
            os.ftruncate(self.fd, self.size)
            self._torn_tail = False
        start = self.size
        undo = (self._max, self._bytes_since_index_entry, self.offset_index.entries,
                self.time_index.entries)
        position = start
        try:
            pwrite_all(self.fd, data, position)
            self._dirty = True
            for size, last_offset, max_timestamp in batches:
                self._index_batch(position, size, last_offset, max_timestamp)
                position += size
        except OSError:
            self._undo_append(start, *undo)
            raise
        self.size = position

    def _undo_append(self, size: int, maxima: tuple[int, int] | None,
                     bytes_since_index_entry: int, offset_entries: int,
                     time_entries: int) -> None:
        self._max, self._bytes_since_index_entry = maxima, bytes_since_index_entry
        self.offset_index.forget_entries_from(offset_entries)
        self.time_index.forget_entries_from(time_entries)
        try:
            os.ftruncate(self.fd, size)  # a partial batch must not survive a restart
        except OSError:
            self._torn_tail = True  # cut before the next append, or at close

    def _index_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_timestamp_and_offset[0]:
            self._max = (max_timestamp, last_offset)
        if self._bytes_since_index_entry > self.index_interval_bytes:
            if not self.offset_index.is_full:
                self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(*self.max_timestamp_and_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    # -- scanning and reading ------------------------------------------------------------------

    def iter_headers(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `position` to `size`; stops at broken framing."""
        chunk, chunk_at = b"", position
        while position + HEADER_SIZE <= self.size:
            offset_in_chunk = position - chunk_at
            if offset_in_chunk + HEADER_SIZE > len(chunk):
                chunk_at = position
                want = min(_SCAN_CHUNK_BYTES, self.size - position)
                chunk, offset_in_chunk = pread_exact(self.fd, want, position), 0
            header = read_header(chunk, offset_in_chunk)
            too_short = header.batch_length < HEADER_SIZE - LOG_OVERHEAD
            if too_short or position + header.size > self.size:
                return
            yield position, header
            position += header.size

    def find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= `offset`, or None if there is none here."""
        _, start = self.offset_index.lookup(offset)
        for position, header in self.iter_headers(start):
            if header.last_offset >= offset:
                return position, header
        return None

    def read(
        self, position: int, first_size: int, max_bytes: int, *,
        max_offset: int | None, min_one_message: bool,
    ) -> tuple[bytes, int]:
        """Whole batches from `position` within `max_bytes`; returns (bytes, next offset).

        `first_size` is the size of the batch at `position` (the caller found it). Batches
        whose base offset is >= `max_offset` are left out. Next offset is -1 when empty.
        """
        budget = max(max_bytes, first_size) if min_one_message else max_bytes
        want = min(budget, self.size - position)
        if want < first_size:
            return b"", -1
        data = pread_exact(self.fd, want, position)
        end, next_offset, length = 0, -1, len(data)
        while end + _PREFIX.size <= length:
            base_offset, batch_length, last_offset_delta = _PREFIX.unpack_from(data, end)
            if end + LOG_OVERHEAD + batch_length > length:
                break
            if max_offset is not None and base_offset >= max_offset:
                break
            end += LOG_OVERHEAD + batch_length
            next_offset = base_offset + last_offset_delta + 1
        return (data if end == length else data[:end]), next_offset

    def read_batch(self, position: int, size: int) -> bytes:
        return pread_exact(self.fd, size, position)

    def read_next_offset(self) -> tuple[int, int]:
        """(next offset after the last batch, end of the last whole batch) by scanning the tail."""
        if self.size == 0:  # no batch: no index opened, no file read (an idle replica's)
            return self.base_offset, 0
        _, start = self.offset_index.last_entry if self.offset_index.entries else (0, 0)
        next_offset, end = self.base_offset, start
        for position, header in self.iter_headers(start):
            next_offset, end = header.next_offset, position + header.size
        return next_offset, end

    def iter_by_timestamp(self, timestamp: int) -> Iterator[tuple[int, BatchHeader]]:
        """Batches whose max timestamp is >= `timestamp`, in offset order.

        The scan starts at the time index's hint: every batch before it has only smaller
        timestamps.
        """
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, start = self.offset_index.lookup(indexed_offset)
        for position, header in self.iter_headers(start):
            if header.max_timestamp >= timestamp:
                yield position, header

    # -- recovery and truncation ---------------------------------------------------------------

    def recover(self) -> int:
        """Re-validate every batch, rebuild both indexes; truncate at the first bad batch.

        Returns the number of bytes cut off. The indexes must be open for append.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._max, self._first_batch_timestamp = (-1, self.base_offset), None
        self._bytes_since_index_entry = 0
        # with no descriptor open nothing wrote to the file since its size was read (at
        # load): an empty segment then needs no descriptor and no second stat
        file_size = os.fstat(self._fd).st_size if self._fd is not None else self.size
        position = 0
        for header in self._iter_valid_batches(file_size):
            self._index_batch(position, header.size, header.last_offset, header.max_timestamp)
            position += header.size
        truncated = file_size - position
        if truncated:
            os.ftruncate(self.fd, position)
            self._dirty = True
        self.size = position
        return truncated

    def _iter_valid_batches(self, file_size: int) -> Iterator[BatchHeader]:
        """Checked batches from the start: framing, CRC32C, offsets increasing and in range."""
        position, next_offset_min = 0, self.base_offset
        chunk, chunk_at = b"", 0
        while position + LOG_OVERHEAD <= file_size:
            if position + LOG_OVERHEAD > chunk_at + len(chunk):
                chunk_at = position
                chunk = pread_exact(
                    self.fd, min(_RECOVERY_CHUNK_BYTES, file_size - position), position
                )
            (batch_length,) = _INT32.unpack_from(chunk, position - chunk_at + 8)
            size = LOG_OVERHEAD + batch_length
            if batch_length < HEADER_SIZE - LOG_OVERHEAD or position + size > file_size:
                return  # a torn tail, or garbage where a header should be
            if position + size > chunk_at + len(chunk):
                chunk_at = position
                chunk = pread_exact(
                    self.fd, max(size, min(_RECOVERY_CHUNK_BYTES, file_size - position)), position
                )
            try:
                header = check_batch(chunk, position - chunk_at)
            except CorruptRecord:
                return
            if header.base_offset < next_offset_min or (
                header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX
            ):
                return
            yield header
            next_offset_min = header.next_offset
            position += size

    def truncate_to(self, offset: int) -> int:
        """Remove batches whose last offset is >= `offset`; return the bytes removed.

        A batch holding `offset` in its middle goes too: truncation is at batch boundaries.
        """
        found = self.find_batch(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        os.ftruncate(self.fd, position)
        self.size = position
        self._dirty = True
        self._first_batch_timestamp = None
        self._recompute_max_after_truncation()
        self._reset_bytes_since_index_entry()
        return removed

    def _recompute_max_after_truncation(self) -> None:
        timestamp, offset = self.time_index.last_entry
        _, start = self.offset_index.lookup(offset)
        best = (timestamp, offset)
        for _, header in self.iter_headers(start):
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.last_offset)
        self._max = best

    def check_invariants(self) -> None:
        """Used by tests: both indexes agree with the batches they point at."""
        for slot in range(self.offset_index.entries):
            offset, position = self.offset_index._entry(slot)
            header = read_header(pread_exact(self.fd, HEADER_SIZE, position))
            invariant(
                header.last_offset == self.base_offset + offset,
                f"index slot {slot} of {self.log_path} says {offset}, batch says "
                f"{header.last_offset - self.base_offset}",
            )
        previous = (-1, -1)
        for slot in range(self.time_index.entries):
            timestamp, relative = self.time_index._entry(slot)
            found = self.find_batch(self.base_offset + relative)
            invariant(found is not None, f"time index slot {slot} points past the data")
            assert found is not None
            header = found[1]
            invariant(
                timestamp > previous[0] and relative >= previous[1]
                and header.last_offset == self.base_offset + relative
                and header.max_timestamp == timestamp,
                f"time index slot {slot} of {self.log_path}: ({timestamp}, {relative}) vs "
                f"batch ({header.max_timestamp}, {header.last_offset - self.base_offset})",
            )
            previous = (timestamp, relative)
