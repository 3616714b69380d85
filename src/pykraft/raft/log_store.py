"""Where the metadata log lives: the `LogStore` seam, in memory and on disk.

The Raft core reads its log only through `RaftLogView` (log start and end offsets, last
epoch, committed batches to deliver, snapshots to serve); the shell writes through
`LogStore`. Two implementations:

- `MemoryLogStore`: a list of batches plus a durable prefix, for unit tests and the
  simulator. `crash()` drops what was never flushed, as a power loss would.
- `DiskLogStore`: `__cluster_metadata-0` in the metadata log dir, kept by `storage.log.Log`
  in Kafka's layout. Opening it recovers the whole log (Kafka does the same for the metadata
  log), so a torn tail from a crash is cut at the first incomplete or corrupt batch, and then
  flushes, so that everything the core is shown as the log is durable.

Snapshots (KIP-630, see snapshot.py for their content). A store holds frozen snapshots, each
`<end offset>-<epoch>.checkpoint`, and unfinished ones being written (`create_snapshot` returns
its writer; `freeze` checks it, makes it durable and publishes it; in a DiskLogStore that is
a `.checkpoint.part` file fsynced and renamed). The log may start above offset 0:

    delete_before(S)     the log start moves up to S's end offset and older snapshots go:
                         the state below the log start lives only in snapshot S
    install_snapshot(S)  a follower took S from its leader: the whole log is replaced by S
                         (truncated fully, restarted empty at S's end offset)

so that, whenever the log start is above 0, the earliest snapshot ends exactly there and
`last_epoch` of an empty log is that snapshot's epoch (Kafka's lastFetchedEpoch).

Opening a DiskLogStore after a crash: leftover `.part` files are removed, a `.checkpoint`
that does not check (torn, corrupt) is ignored, the log is recovered, then the snapshots and
the log are made to agree. If the latest snapshot is not part of the log (it ends past the
log end, or the log's entry below its end has another epoch), a crash interrupted an
install: it is finished. Otherwise the log start is the end of the earliest snapshot that
the log continues, at or above the first segment (`delete_before` removes older snapshots
before any segment, so that is where it left the log start, a crash in between included);
a log whose first segment starts above 0 with no such snapshot cannot be opened.

Invariants checked on both sides of this seam: batches arrive whole with correct CRCs,
offsets are contiguous and start at the end offset, leader epochs never decrease, and a
snapshot's end offset falls on a batch boundary of the log.
"""

from __future__ import annotations

import bisect
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO, Final, Protocol

from pykraft.errors import (
    CorruptRecord,
    KafkaStorageError,
    OffsetOutOfRange,
    PositionOutOfRange,
    SnapshotNotFound,
    invariant,
)
from pykraft.raft.messages import SnapshotId
from pykraft.raft.snapshot import (
    PARTIAL_SUFFIX,
    SNAPSHOT_SUFFIX,
    SnapshotParser,
    check_snapshot,
    parse_snapshot_file_name,
    snapshot_file_name,
)
from pykraft.records.batch import BatchHeader, iter_headers, read_header
from pykraft.storage.checkpoint import fsync_directory
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig

__all__ = [
    "METADATA_TOPIC",
    "METADATA_PARTITION",
    "RaftLogView",
    "LogStore",
    "SnapshotWriter",
    "MemoryLogStore",
    "DiskLogStore",
    "check_appended",
]

log = logging.getLogger("pykraft.raft")

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
NO_EPOCH: Final = 0  # Kafka's last fetched epoch of an empty log
METADATA_BATCH_BYTES_MAX: Final = 8 * 1024 * 1024 + 1024  # a full raft batch and its framing
SNAPSHOT_READ_BYTES: Final = 1 << 20  # block size when checking a snapshot file


class RaftLogView(Protocol):
    """What the core reads of its log. Everything it shows is durable."""

    @property
    def log_start_offset(self) -> int:
        """The first offset in the log: 0, or the end offset of the earliest snapshot."""
        ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int:
        """Leader epoch of the last batch; of the snapshot at the log start when the log is
        empty above it; 0 when there is neither."""
        ...

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None: ...

    @property
    def latest_snapshot_id(self) -> SnapshotId | None: ...

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `start_offset`, at least one even when it is
        larger than `max_bytes`; b"" at the end of the log; OffsetOutOfRange past it or
        below the log start."""
        ...

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        """Bytes in the frozen snapshot `snapshot_id`; None when there is no such snapshot."""
        ...

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` of the snapshot from byte `position`, not aligned to batches.
        SnapshotNotFound, or PositionOutOfRange when `position` is not inside it."""
        ...


class SnapshotWriter(Protocol):
    """A snapshot being written; invisible to readers until `freeze`."""

    @property
    def snapshot_id(self) -> SnapshotId: ...

    @property
    def size_bytes(self) -> int:
        """Bytes appended so far: where the next `append` goes."""
        ...

    def append(self, data: bytes) -> None:
        """Add bytes; they need not end on a batch boundary (fetched chunks do not)."""
        ...

    def freeze(self) -> None:
        """Check the content (CorruptRecord), make it durable and publish it."""
        ...

    def abort(self) -> None:
        """Throw the unfinished snapshot away."""
        ...


class LogStore(RaftLogView, Protocol):
    @property
    def size_bytes(self) -> int:
        """The bytes of the log from its start to its end (snapshots not counted)."""
        ...

    @property
    def snapshot_ids(self) -> tuple[SnapshotId, ...]:
        """The frozen snapshots, oldest first."""
        ...

    @property
    def flushed_offset(self) -> int:
        """End offset of the durable prefix: what fsync has covered."""
        ...

    def append(self, batches: bytes) -> None:
        """Append whole batches whose offsets are already assigned, starting at the end."""
        ...

    def flush(self) -> int:
        """Make everything appended durable; return the new flushed end offset."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above `offset`, which must be a batch boundary at or
        above the log start."""
        ...

    def create_snapshot(self, snapshot_id: SnapshotId) -> SnapshotWriter:
        """Start writing snapshot `snapshot_id`, throwing away an unfinished one of the same
        id (a fetch that starts over); others may be written meanwhile."""
        ...

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Move the log start up to the frozen snapshot's end offset (durable, at a batch
        boundary), deleting the log below it and every older snapshot."""
        ...

    def install_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Replace the whole log by the frozen snapshot: the log is emptied and restarts at
        its end offset, older snapshots go. Durable when it returns."""
        ...

    def close(self) -> None: ...


def check_appended(batches: bytes, *, log_end_offset: int, last_epoch: int) -> list[BatchHeader]:
    """The headers of `batches`, after checking they may follow a log ending as given."""
    headers = [header for _, header in iter_headers(batches, check=True)]
    consumed = sum(header.size for header in headers)
    invariant(consumed == len(batches), "%d trailing bytes in an append",
              len(batches) - consumed)
    next_offset, epoch = log_end_offset, last_epoch
    for header in headers:
        invariant(header.base_offset == next_offset, "batch at offset %d appended at log end %d",
                  header.base_offset, next_offset)
        invariant(header.partition_leader_epoch >= epoch, "epoch %d appended after epoch %d",
                  header.partition_leader_epoch, epoch)
        next_offset, epoch = header.next_offset, header.partition_leader_epoch
    return headers


class MemoryLogStore:
    """The log as a list of batches; `flushed_offset` marks what survives `crash()`.
    Snapshots, the log start and installs are durable at once, as if fsynced."""

    def __init__(self) -> None:
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._flushed_count = 0  # batches covered by the last flush
        self._snapshots: dict[SnapshotId, bytes] = {}
        self._writers: dict[SnapshotId, _MemorySnapshotWriter] = {}  # unfinished
        self.flush_count = 0  # how many fsyncs the shell asked for: group commit is measured

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def last_epoch(self) -> int:
        if not self._batches:
            return _start_epoch(self._log_start_offset, self.earliest_snapshot_id)
        return read_header(self._batches[-1]).partition_leader_epoch

    @property
    def size_bytes(self) -> int:
        return sum(map(len, self._batches))

    @property
    def flushed_offset(self) -> int:
        if self._flushed_count == 0:
            return self._log_start_offset
        return read_header(self._batches[self._flushed_count - 1]).next_offset

    @property
    def batches(self) -> tuple[bytes, ...]:
        return tuple(self._batches)

    @property
    def snapshot_ids(self) -> tuple[SnapshotId, ...]:
        return tuple(sorted(self._snapshots))

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        return min(self._snapshots) if self._snapshots else None

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset == self._log_end_offset and start_offset >= self._log_start_offset:
            return b""
        if not self._log_start_offset <= start_offset < self._log_end_offset:
            raise OffsetOutOfRange(
                f"offset {start_offset}, log is [{self._log_start_offset}, "
                f"{self._log_end_offset})"
            )
        index = bisect.bisect_right(self._base_offsets, start_offset) - 1
        chosen = [self._batches[index]]
        size = len(chosen[0])
        for batch in self._batches[index + 1 :]:
            if size + len(batch) > max_bytes:
                break
            chosen.append(batch)
            size += len(batch)
        return b"".join(chosen)

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        data = self._snapshots.get(snapshot_id)
        if data is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id}")
        if not 0 <= position < len(data):
            raise PositionOutOfRange(f"position {position} in a snapshot of {len(data)} bytes")
        return data[position : position + max(1, max_bytes)]

    def append(self, batches: bytes) -> None:
        headers = check_appended(
            batches, log_end_offset=self._log_end_offset, last_epoch=self.last_epoch
        )
        position = 0
        for header in headers:
            self._batches.append(batches[position : position + header.size])
            self._base_offsets.append(header.base_offset)
            position += header.size
        if headers:
            self._log_end_offset = headers[-1].next_offset

    def flush(self) -> int:
        self._flushed_count = len(self._batches)
        self.flush_count += 1
        return self.flushed_offset

    def truncate_to(self, offset: int) -> None:
        invariant(
            self._log_start_offset <= offset <= self._log_end_offset,
            f"truncation to {offset} outside [{self._log_start_offset}, {self._log_end_offset}]",
        )
        index = self._boundary_index(offset)
        del self._batches[index:], self._base_offsets[index:]
        self._flushed_count = min(self._flushed_count, index)
        self._log_end_offset = offset

    def create_snapshot(self, snapshot_id: SnapshotId) -> SnapshotWriter:
        invariant(snapshot_id not in self._snapshots, f"snapshot {snapshot_id} exists")
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:
            previous.abort()
        writer = self._writers[snapshot_id] = _MemorySnapshotWriter(snapshot_id, self._publish)
        return writer

    def _publish(self, writer: _MemorySnapshotWriter, data: bytes) -> None:
        if self._writers.get(writer.snapshot_id) is writer:
            del self._writers[writer.snapshot_id]
        self._snapshots[writer.snapshot_id] = data

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        invariant(snapshot_id in self._snapshots, f"no snapshot {snapshot_id} to delete before")
        end = snapshot_id.end_offset
        invariant(end <= self.flushed_offset, f"snapshot {snapshot_id} past the durable log")
        for older in [other for other in self._snapshots if other < snapshot_id]:
            del self._snapshots[older]
        if end <= self._log_start_offset:
            return
        index = self._boundary_index(end)
        del self._batches[:index], self._base_offsets[:index]
        self._flushed_count -= index
        self._log_start_offset = end

    def install_snapshot(self, snapshot_id: SnapshotId) -> None:
        invariant(snapshot_id in self._snapshots, f"no snapshot {snapshot_id} to install")
        invariant(snapshot_id == self.latest_snapshot_id, f"{snapshot_id} is not the latest")
        for other in [other for other in self._snapshots if other != snapshot_id]:
            del self._snapshots[other]
        self._batches.clear()
        self._base_offsets.clear()
        self._flushed_count = 0
        self._log_start_offset = self._log_end_offset = snapshot_id.end_offset

    def crash(self) -> None:
        """Lose what was never flushed, and unfinished snapshots, as a power loss would."""
        del self._batches[self._flushed_count :], self._base_offsets[self._flushed_count :]
        self._log_end_offset = (
            read_header(self._batches[-1]).next_offset if self._batches else self._log_start_offset
        )
        for writer in self._writers.values():
            writer.abort()
        self._writers.clear()

    def close(self) -> None:
        self.flush()

    def _boundary_index(self, offset: int) -> int:
        index = bisect.bisect_left(self._base_offsets, offset)
        invariant(
            index == len(self._base_offsets) or self._base_offsets[index] == offset,
            f"offset {offset} falls inside a batch",
        )
        return index


class _MemorySnapshotWriter:
    def __init__(
        self,
        snapshot_id: SnapshotId,
        publish: Callable[[_MemorySnapshotWriter, bytes], None],
    ) -> None:
        self._snapshot_id = snapshot_id
        self._publish = publish
        self._data = bytearray()
        self._done = False

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot_id

    @property
    def size_bytes(self) -> int:
        return len(self._data)

    def append(self, data: bytes) -> None:
        invariant(not self._done, f"append to snapshot {self._snapshot_id} after it ended")
        self._data += data

    def freeze(self) -> None:
        invariant(not self._done, f"snapshot {self._snapshot_id} frozen twice")
        data = bytes(self._data)
        check_snapshot(data)
        self._done = True
        self._publish(self, data)

    def abort(self) -> None:
        self._done = True
        self._data.clear()


class DiskLogStore:
    """`__cluster_metadata-0` on disk, through `storage.log.Log`, with its snapshots."""

    def __init__(self, log: Log, snapshots: Mapping[SnapshotId, int] | None = None) -> None:
        self._log = log
        self._snapshots = dict(snapshots or {})  # frozen snapshot -> size in bytes
        self._writers: dict[SnapshotId, _DiskSnapshotWriter] = {}  # unfinished
        self._flushed_offset = log.recovery_point
        self._last_epoch = self._epoch_at_end()

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        now_ms: int,
        server_configs: Mapping[str, str] | None = None,
    ) -> DiskLogStore:
        """Open (creating if needed) and recover the log in `directory`, the
        `__cluster_metadata-0` partition directory, with its snapshots, then make what it
        kept durable."""
        config = metadata_log_config(server_configs or {})
        directory.mkdir(parents=True, exist_ok=True)
        snapshots = _recover_snapshots(directory)
        # recovery_point=0: re-validate every batch, as Kafka does for the metadata log
        log = Log.open(directory, config, recovery_point=0, log_start_offset=0, now_ms=now_ms)
        try:
            _reconcile(directory, log, snapshots, now_ms)
            log.flush()  # what recovery kept may sit only in the page cache after a crash
            return cls(log, snapshots)
        except BaseException:
            log.close()
            raise

    @property
    def log(self) -> Log:
        return self._log

    @property
    def directory(self) -> Path:
        return self._log.dir

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def last_epoch(self) -> int:
        return self._last_epoch

    @property
    def size_bytes(self) -> int:
        return self._log.size_bytes

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def snapshot_ids(self) -> tuple[SnapshotId, ...]:
        return tuple(sorted(self._snapshots))

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        return min(self._snapshots) if self._snapshots else None

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset == self._log.log_end_offset and start_offset >= self.log_start_offset:
            return b""
        return self._log.read(start_offset, max_bytes, min_one_message=True).records

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        return self._snapshots.get(snapshot_id)

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        size = self._snapshots.get(snapshot_id)
        if size is None:
            raise SnapshotNotFound(f"no snapshot {snapshot_id}")
        if not 0 <= position < size:
            raise PositionOutOfRange(f"position {position} in a snapshot of {size} bytes")
        with open(self.directory / snapshot_file_name(snapshot_id), "rb") as stream:
            stream.seek(position)
            return stream.read(min(max(1, max_bytes), size - position))

    def append(self, batches: bytes) -> None:
        headers = check_appended(
            batches, log_end_offset=self._log.log_end_offset, last_epoch=self._last_epoch
        )
        if not headers:
            return
        self._log.append_as_follower(batches)
        invariant(
            self._log.log_end_offset == headers[-1].next_offset,
            f"log end {self._log.log_end_offset} after appending up to {headers[-1].last_offset}",
        )
        self._last_epoch = headers[-1].partition_leader_epoch

    def flush(self) -> int:
        self._log.flush()
        self._flushed_offset = self._log.log_end_offset
        return self._flushed_offset

    def truncate_to(self, offset: int) -> None:
        invariant(
            self.log_start_offset <= offset <= self._log.log_end_offset,
            f"truncation to {offset} outside [{self.log_start_offset}, "
            f"{self._log.log_end_offset}]",
        )
        self._log.truncate_to(offset)
        self._flushed_offset = min(self._flushed_offset, offset)
        self._last_epoch = self._epoch_at_end()

    def create_snapshot(self, snapshot_id: SnapshotId) -> SnapshotWriter:
        invariant(snapshot_id not in self._snapshots, f"snapshot {snapshot_id} exists")
        previous = self._writers.pop(snapshot_id, None)
        if previous is not None:
            previous.abort()
        writer = _DiskSnapshotWriter(self.directory, snapshot_id, self._publish)
        self._writers[snapshot_id] = writer
        return writer

    def _publish(self, writer: _DiskSnapshotWriter, size: int) -> None:
        if self._writers.get(writer.snapshot_id) is writer:
            del self._writers[writer.snapshot_id]
        self._snapshots[writer.snapshot_id] = size

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        invariant(snapshot_id in self._snapshots, f"no snapshot {snapshot_id} to delete before")
        end = snapshot_id.end_offset
        invariant(end <= self._flushed_offset, f"snapshot {snapshot_id} past the durable log")
        # older snapshots first: a crash between the steps leaves the earliest snapshot at
        # or above the first segment, which `open` takes as the log start
        self._remove_snapshots([other for other in self._snapshots if other < snapshot_id])
        if end <= self._log.log_start_offset:
            return
        invariant(
            end == self._log.log_end_offset
            or read_header(self._log.read(end, 1).records).base_offset == end,
            f"snapshot {snapshot_id} ends inside a batch",
        )
        self._log.update_high_watermark(end)
        self._log.delete_records(end, _wall_clock_ms())
        self._log.flush()

    def install_snapshot(self, snapshot_id: SnapshotId) -> None:
        invariant(snapshot_id in self._snapshots, f"no snapshot {snapshot_id} to install")
        invariant(snapshot_id == self.latest_snapshot_id, f"{snapshot_id} is not the latest")
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset, now_ms=_wall_clock_ms())
        self._log.flush()
        self._remove_snapshots([other for other in self._snapshots if other != snapshot_id])
        self._flushed_offset = snapshot_id.end_offset
        self._last_epoch = snapshot_id.epoch

    def close(self) -> None:
        for writer in self._writers.values():
            writer.abort()
        self._writers.clear()
        self._log.flush()
        self._log.close()

    def _remove_snapshots(self, doomed: list[SnapshotId]) -> None:
        for snapshot_id in doomed:
            del self._snapshots[snapshot_id]
            (self.directory / snapshot_file_name(snapshot_id)).unlink(missing_ok=True)
        if doomed:
            fsync_directory(self.directory)

    def _epoch_at_end(self) -> int:
        if self._log.log_end_offset == self._log.log_start_offset:
            return _start_epoch(self._log.log_start_offset, self.earliest_snapshot_id)
        return _last_batch_epoch(self._log)


class _DiskSnapshotWriter:
    """`<id>.checkpoint.part`, written then fsynced, checked and renamed by `freeze`."""

    def __init__(
        self,
        directory: Path,
        snapshot_id: SnapshotId,
        publish: Callable[[_DiskSnapshotWriter, int], None],
    ) -> None:
        self._snapshot_id = snapshot_id
        self._path = directory / snapshot_file_name(snapshot_id)
        self._part = self._path.with_name(self._path.name[: -len(SNAPSHOT_SUFFIX)] + PARTIAL_SUFFIX)
        self._publish = publish
        self._stream: BinaryIO | None = open(self._part, "wb")  # noqa: SIM115 (kept open)
        self._size_bytes = 0

    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot_id

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def append(self, data: bytes) -> None:
        stream = self._stream
        invariant(stream is not None, f"append to snapshot {self._snapshot_id} after it ended")
        assert stream is not None
        stream.write(data)
        self._size_bytes += len(data)

    def freeze(self) -> None:
        stream = self._stream
        invariant(stream is not None, f"snapshot {self._snapshot_id} frozen twice")
        assert stream is not None
        stream.flush()
        os.fsync(stream.fileno())
        stream.close()
        self._stream = None
        try:
            _check_snapshot_file(self._part)
        except CorruptRecord:
            self._part.unlink(missing_ok=True)
            raise
        os.replace(self._part, self._path)
        fsync_directory(self._path.parent)
        self._publish(self, self._size_bytes)

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
            self._part.unlink(missing_ok=True)


def _wall_clock_ms() -> int:
    """Segment file times only (the shell's side of the seam may read the clock)."""
    return time.time_ns() // 1_000_000


def _start_epoch(log_start_offset: int, earliest: SnapshotId | None) -> int:
    """The epoch of the entry just below the log start: the earliest snapshot's."""
    if log_start_offset == 0:
        return NO_EPOCH
    invariant(
        earliest is not None and earliest.end_offset == log_start_offset,
        f"log start {log_start_offset} without a snapshot ending there (earliest {earliest})",
    )
    assert earliest is not None
    return earliest.epoch


def _check_snapshot_file(path: Path) -> int:
    """The size of a whole, well-formed snapshot file; CorruptRecord otherwise."""
    parser = SnapshotParser()
    with open(path, "rb") as stream:
        while block := stream.read(SNAPSHOT_READ_BYTES):
            parser.feed(block)
    return parser.finish().size_bytes


def _recover_snapshots(directory: Path) -> dict[SnapshotId, int]:
    """Remove unfinished snapshots; the frozen ones that check, with their sizes."""
    snapshots: dict[SnapshotId, int] = {}
    removed = False
    for path in sorted(directory.iterdir()):
        if path.name.endswith(PARTIAL_SUFFIX):
            path.unlink()
            removed = True
            continue
        snapshot_id = parse_snapshot_file_name(path.name)
        if snapshot_id is None:
            continue
        try:
            snapshots[snapshot_id] = _check_snapshot_file(path)
        except CorruptRecord as error:
            log.warning("ignoring snapshot %s: %s", path, error)
    if removed:
        fsync_directory(directory)
    return snapshots


def _reconcile(directory: Path, log: Log, snapshots: dict[SnapshotId, int], now_ms: int) -> None:
    """Make the recovered log and snapshots agree (see the module's docstring)."""

    def remove(doomed: list[SnapshotId]) -> None:
        for snapshot_id in doomed:
            del snapshots[snapshot_id]
            (directory / snapshot_file_name(snapshot_id)).unlink(missing_ok=True)
        if doomed:
            fsync_directory(directory)

    latest = max(snapshots) if snapshots else None
    if latest is not None and not _log_continues(log, latest):
        log.truncate_fully_and_start_at(latest.end_offset, now_ms=now_ms)
        remove([other for other in snapshots if other != latest])
        return
    first_base = log.log_start_offset
    candidates = sorted(
        snapshot_id
        for snapshot_id in snapshots
        if snapshot_id.end_offset >= first_base and _log_continues(log, snapshot_id)
    )
    if not candidates:
        if first_base > 0:
            raise KafkaStorageError(
                f"the metadata log in {directory} starts at {first_base} and no snapshot "
                "covers what lies below"
            )
        return
    start = candidates[0]
    remove([other for other in snapshots if other < start])
    if start.end_offset > log.log_start_offset:
        log.update_high_watermark(start.end_offset)
        log.delete_records(start.end_offset, now_ms)


def _log_continues(log: Log, snapshot_id: SnapshotId) -> bool:
    """Whether the log holds the entries right after the snapshot: its end offset is a
    batch boundary inside the log and the batch before it has the snapshot's epoch."""
    end = snapshot_id.end_offset
    if not log.log_start_offset <= end <= log.log_end_offset:
        return False
    if end == log.log_start_offset:
        return True  # the log starts at the snapshot: nothing below to compare
    try:
        header = read_header(log.read(end - 1, 1).records)
    except (OffsetOutOfRange, CorruptRecord):
        return False
    return header.last_offset == end - 1 and header.partition_leader_epoch == snapshot_id.epoch


def _last_batch_epoch(log: Log) -> int:
    """The leader epoch of the log's last batch, read from the batch itself: the epoch
    checkpoint is written after the data, so a crash can leave it one epoch behind."""
    for segment in reversed(log.segments):
        epoch = None
        for _, header in segment.iter_headers(0):
            epoch = header.partition_leader_epoch
        if epoch is not None:
            return epoch
    return NO_EPOCH


def metadata_log_config(server_configs: Mapping[str, str]) -> LogConfig:
    """The metadata log's LogConfig, from the server's `metadata.log.*` keys only: it is
    never trimmed by retention (only `delete_before` a snapshot moves its start) and takes
    batches up to 8 MiB."""
    overrides = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "max.message.bytes": str(METADATA_BATCH_BYTES_MAX),
        "segment.bytes": server_configs.get("metadata.log.segment.bytes", str(1 << 30)),
        "segment.ms": server_configs.get("metadata.log.segment.ms", str(7 * 24 * 3600 * 1000)),
        "file.delete.delay.ms": "0",  # segments below a snapshot go at once
    }
    return LogConfig.from_configs(overrides, {})
