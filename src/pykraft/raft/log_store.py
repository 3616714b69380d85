"""Where the metadata log lives: the `LogStore` seam, in memory and on disk.

The Raft core reads its log only through `RaftLogView` (end offset, last epoch, committed
batches to deliver); the shell writes through `LogStore`. Two implementations:

- `MemoryLogStore`: a list of batches plus a durable prefix, for unit tests and the
  simulator. `crash()` drops what was never flushed, as a power loss would.
- `DiskLogStore`: `__cluster_metadata-0` in the metadata log dir, kept by `storage.log.Log`
  in Kafka's layout. Opening it recovers the whole log (Kafka does the same for the metadata
  log), so a torn tail from a crash is cut at the first incomplete or corrupt batch, and then
  flushes, so that everything the core is shown as the log is durable.

Invariants checked on both sides of this seam: batches arrive whole with correct CRCs,
offsets are contiguous and start at the end offset, and leader epochs never decrease.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Protocol

from pykraft.errors import OffsetOutOfRange, invariant
from pykraft.records.batch import BatchHeader, iter_headers, read_header
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig

__all__ = [
    "METADATA_TOPIC",
    "METADATA_PARTITION",
    "RaftLogView",
    "LogStore",
    "MemoryLogStore",
    "DiskLogStore",
    "check_appended",
]

METADATA_TOPIC: Final = "__cluster_metadata"
METADATA_PARTITION: Final = 0
NO_EPOCH: Final = 0  # Kafka's last fetched epoch of an empty log
METADATA_BATCH_BYTES_MAX: Final = 8 * 1024 * 1024 + 1024  # a full raft batch and its framing


class RaftLogView(Protocol):
    """What the core reads of its log. Everything it shows is durable."""

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_epoch(self) -> int:
        """Leader epoch of the last batch, 0 when the log is empty."""
        ...

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `start_offset`, at least one even when it is
        larger than `max_bytes`; b"" at the end of the log; OffsetOutOfRange past it."""
        ...


class LogStore(RaftLogView, Protocol):
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
        """Remove every batch at or above `offset`, which must be a batch boundary."""
        ...

    def close(self) -> None: ...


def check_appended(batches: bytes, *, log_end_offset: int, last_epoch: int) -> list[BatchHeader]:
    """The headers of `batches`, after checking they may follow a log ending as given."""
    headers = [header for _, header in iter_headers(batches, check=True)]
    consumed = sum(header.size for header in headers)
    invariant(consumed == len(batches), f"{len(batches) - consumed} trailing bytes in an append")
    next_offset, epoch = log_end_offset, last_epoch
    for header in headers:
        invariant(
            header.base_offset == next_offset,
            f"batch at offset {header.base_offset} appended at log end {next_offset}",
        )
        invariant(
            header.partition_leader_epoch >= epoch,
            f"epoch {header.partition_leader_epoch} appended after epoch {epoch}",
        )
        next_offset, epoch = header.next_offset, header.partition_leader_epoch
    return headers


class MemoryLogStore:
    """The log as a list of batches; `flushed_offset` marks what survives `crash()`."""

    def __init__(self) -> None:
        self._batches: list[bytes] = []
        self._base_offsets: list[int] = []
        self._log_end_offset = 0
        self._flushed_count = 0  # batches covered by the last flush
        self.flush_count = 0  # how many fsyncs the shell asked for: group commit is measured

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def last_epoch(self) -> int:
        if not self._batches:
            return NO_EPOCH
        return read_header(self._batches[-1]).partition_leader_epoch

    @property
    def flushed_offset(self) -> int:
        if self._flushed_count == 0:
            return 0
        return read_header(self._batches[self._flushed_count - 1]).next_offset

    @property
    def batches(self) -> tuple[bytes, ...]:
        return tuple(self._batches)

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset == self._log_end_offset:
            return b""
        if not 0 <= start_offset < self._log_end_offset:
            raise OffsetOutOfRange(f"offset {start_offset}, log ends at {self._log_end_offset}")
        index = bisect.bisect_right(self._base_offsets, start_offset) - 1
        chosen = [self._batches[index]]
        size = len(chosen[0])
        for batch in self._batches[index + 1 :]:
            if size + len(batch) > max_bytes:
                break
            chosen.append(batch)
            size += len(batch)
        return b"".join(chosen)

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
        invariant(0 <= offset <= self._log_end_offset, f"truncation to {offset} past the end")
        index = bisect.bisect_left(self._base_offsets, offset)
        invariant(
            index == len(self._base_offsets) or self._base_offsets[index] == offset,
            f"truncation to {offset} falls inside a batch",
        )
        del self._batches[index:], self._base_offsets[index:]
        self._flushed_count = min(self._flushed_count, index)
        self._log_end_offset = offset

    def crash(self) -> None:
        """Lose what was never flushed, as a power loss would."""
        del self._batches[self._flushed_count :], self._base_offsets[self._flushed_count :]
        self._log_end_offset = read_header(self._batches[-1]).next_offset if self._batches else 0

    def close(self) -> None:
        self.flush()


class DiskLogStore:
    """`__cluster_metadata-0` on disk, through `storage.log.Log`."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self._last_epoch = _last_batch_epoch(log)
        self._flushed_offset = log.recovery_point

    @classmethod
    def open(
        cls,
        directory: Path,
        *,
        now_ms: int,
        server_configs: Mapping[str, str] | None = None,
    ) -> DiskLogStore:
        """Open (creating if needed) and recover the log in `directory`, the
        `__cluster_metadata-0` partition directory, then make what it kept durable."""
        config = metadata_log_config(server_configs or {})
        # recovery_point=0: re-validate every batch, as Kafka does for the metadata log
        log = Log.open(directory, config, recovery_point=0, log_start_offset=0, now_ms=now_ms)
        try:
            log.flush()  # what recovery kept may sit only in the page cache after a crash
            return cls(log)
        except BaseException:
            log.close()
            raise

    @property
    def log(self) -> Log:
        return self._log

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    @property
    def last_epoch(self) -> int:
        return self._last_epoch

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        if start_offset == self._log.log_end_offset:
            return b""
        return self._log.read(start_offset, max_bytes, min_one_message=True).records

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
        invariant(offset <= self._log.log_end_offset, f"truncation to {offset} past the end")
        self._log.truncate_to(offset)
        self._flushed_offset = min(self._flushed_offset, offset)
        self._last_epoch = _last_batch_epoch(self._log)

    def close(self) -> None:
        self._log.flush()
        self._log.close()


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
    never trimmed by retention (snapshots will do that) and takes batches up to 8 MiB."""
    overrides = {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "max.message.bytes": str(METADATA_BATCH_BYTES_MAX),
        "segment.bytes": server_configs.get("metadata.log.segment.bytes", str(1 << 30)),
        "segment.ms": server_configs.get("metadata.log.segment.ms", str(7 * 24 * 3600 * 1000)),
    }
    return LogConfig.from_configs(overrides, {})
