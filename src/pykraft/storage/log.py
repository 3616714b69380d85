"""One partition's log: segments in Kafka's layout, with recovery, retention and truncation.

A partition directory `<topic>-<partition>/` holds segments (`<base offset>.log`, `.index`,
`.timeindex`), `leader-epoch-checkpoint` and `partition.metadata`. Offsets:

    log_start_offset <= high_watermark <= log_end_offset
    recovery_point <= log_end_offset   (everything below it has been fsynced)

Segments are ordered by base offset; the last one is the active segment, the only one written
and the only one whose indexes are writable. A segment's offsets lie in
[its base offset, next segment's base offset); gaps are allowed (compaction, follower
appends that skip offsets).

Opening (`Log.open`) removes leftovers of interrupted operations per Kafka's rules
(`.deleted` and `.cleaned` files are deleted, `.swap` files either complete their swap or are
deleted), then recovers: from the segment holding the recovery point onward (and from any
segment whose index files are missing), each batch is re-read and its CRC checked; the first
torn or corrupt batch and everything after it, in that segment and all later ones, is cut
off, and the recovered segments' indexes are rebuilt. After a clean shutdown nothing is
re-read unless the tail's framing is broken.

Appends validate every batch before writing anything, so an error leaves the log untouched.
The leader path checks every record of a producer's batch (records.validate: a compressed
batch is decompressed for that, under a bound, and still stored as it came), then stamps
offsets and epoch in place (neither is under the CRC). Time is an argument (`now_ms`); the
log reads no clock.

Deleted segments are renamed `*.deleted` at once and their files removed by
`delete_pending(now_ms)` once `file.delete.delay.ms` has passed, as Kafka does
asynchronously; a restart removes any that remain.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import uuid
import zlib
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, NoReturn

from pykraft.errors import (
    CorruptRecord,
    InconsistentTopicId,
    InvalidRecord,
    InvalidTimestamp,
    KafkaStorageError,
    MessageTooLarge,
    OffsetOutOfRange,
    RecordListTooLarge,
    invariant,
)
from pykraft.records.batch import (
    BatchHeader,
    read_header,
    set_log_append_time,
    set_max_timestamp,
    split_batches,
    stamp_batch,
)
from pykraft.records.record import (
    ControlRecordType,
    iter_records,
    marker_coordinator_epoch,
    marker_type,
)
from pykraft.records.validate import (
    DECOMPRESSED_BATCH_BYTES_MAX,
    RECORD_ERRORS_MAX,
    timestamp_errors,
    validate_batch,
)
from pykraft.storage import log_files
from pykraft.storage.checkpoint import (
    PARTITION_METADATA_FILE,
    fsync_directory,
    fsync_file,
    read_partition_metadata,
    write_partition_metadata,
)
from pykraft.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from pykraft.storage.log_config import LONG_MAX, LogConfig
from pykraft.storage.producer_state import (
    SNAPSHOT_SUFFIX,
    BatchMetadata,
    ProducerState,
    delete_snapshots,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from pykraft.storage.segment import LogSegment
from pykraft.storage.timestamp_search import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    first_record_at_or_after,
)
from pykraft.storage.txn_index import (
    TxnState,
    append_entries,
    read_entries,
    write_entries,
)

__all__ = ["AppendInfo", "Log", "LogWatch", "ReadInfo", "parse_topic_partition"]

log = logging.getLogger(__name__)

NO_TIMESTAMP: Final = -1
DELETED_SUFFIX: Final = log_files.DELETED_SUFFIX
# (segment, the segment after it or None) -> whether retention deletes it
_SegmentPredicate = Callable[[LogSegment, LogSegment | None], bool]


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int  # last offset of the first batch holding max_timestamp
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    valid_bytes: int
    batch_count: int


@dataclass(frozen=True, slots=True)
class ReadInfo:
    records: bytes  # whole batches, as stored
    first_offset: int  # base offset of the first batch returned; the fetch offset if none
    next_offset: int  # offset after the last batch returned; the fetch offset if none
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


def _batch_bytes(records: bytes | bytearray, position: int, size: int) -> bytes:
    return bytes(records[position:position + size])


def _coordinator_epoch(records: bytes | bytearray, position: int, header: BatchHeader) -> int:
    """A producer's marker batch's coordinator epoch; -1 for any other batch."""
    if not header.is_control or header.producer_id < 0:
        return -1
    return marker_coordinator_epoch(_batch_bytes(records, position, header.size))


def parse_topic_partition(name: str) -> tuple[str, int]:
    """`<topic>-<partition>` split at the last '-'; ValueError if it is not that shape."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


class LogWatch:
    """The logs periodic work must look at: those with a rolled segment awaiting its fsync
    and those with a finite flush.ms (the flush), and the compacted ones (the cleaner). A
    log attached to one (`Log.watch`) tells it of its rolls and config changes, so that
    work need not look at every log: looking at each of 230,000 idle logs every second took
    13% of a broker's time, and the cleaner's pass over 300,000 held the loop 2 s."""

    __slots__ = ("rolled", "timed", "compacted")

    def __init__(self) -> None:
        self.rolled: dict[Log, None] = {}  # insertion-ordered sets
        self.timed: dict[Log, None] = {}
        self.compacted: dict[Log, None] = {}

    def configured(self, log: Log) -> None:
        if log.config.flush_ms < LONG_MAX:
            self.timed[log] = None
        else:
            self.timed.pop(log, None)
        if log.config.compact:
            self.compacted[log] = None
        else:
            self.compacted.pop(log, None)

    def forget(self, log: Log) -> None:
        self.rolled.pop(log, None)
        self.timed.pop(log, None)
        self.compacted.pop(log, None)


class Log:
    """A partition's segmented log. Not thread-safe: one caller at a time."""

    # slots: a broker holds one per replica, and an instance dict is one more object for
    # the garbage collector to walk, and more bytes, for each of them
    __slots__ = (
        "_dir", "partition", "topic", "_config", "_segments", "_bases", "leader_epoch_cache",
        "_log_start_offset", "_log_end_offset", "_recovery_point", "_high_watermark",
        "_topic_id", "_last_flush_ms", "_roll_flush_offset", "watch", "_pending_deletes",
        "_directory_dirty", "_closed", "_txns", "_producers", "_txn_indexes_dirty",
        "_txn_indexes_from",
    )

    def __init__(
        self, directory: Path, config: LogConfig, segments: list[LogSegment],
        epoch_cache: LeaderEpochCache, *, log_start_offset: int, log_end_offset: int,
        recovery_point: int, now_ms: int, topic_id: uuid.UUID | None = None,
    ) -> None:
        # the directory as a str, its Path built when asked (`dir`), and the topic's name
        # shared by its partitions: a Path and a name of its own were a fifth of what an idle
        # replica cost a broker (tracemalloc, 300,000 partitions)
        self._dir = os.fspath(directory)
        topic, self.partition = parse_topic_partition(directory.name)
        self.topic = sys.intern(topic)
        self._config = config
        self._segments = segments
        # a tuple of ints, made anew when segments come and go: no object for the garbage
        # collector to walk (a list was one per replica)
        self._bases = tuple(segment.base_offset for segment in segments)
        self.leader_epoch_cache = epoch_cache
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._recovery_point = recovery_point
        self._high_watermark = log_start_offset
        self._topic_id = topic_id  # as partition.metadata says (None: no such file yet)
        self._last_flush_ms = now_ms
        self._roll_flush_offset: int | None = None
        self.watch: LogWatch | None = None  # its LogManager's, once attached there
        # (when, files) of deleted segments; the shared empty tuple on almost every log
        self._pending_deletes: tuple[tuple[int, list[Path]], ...] = ()
        self._directory_dirty = False
        self._closed = False
        self._txns: TxnState | None = None  # built on first use (read_committed)
        self._producers: ProducerState | None = None  # built on first use (idempotence)
        # `.txnindex` files to fsync at flush, as dict keys; None for none (almost every log)
        self._txn_indexes_dirty: dict[Path, None] | None = None
        # after an unclean stop: `.txnindex` files from this segment on are rewritten when
        # the transactions are next built (recovery may have cut markers, or lost entries)
        self._txn_indexes_from: int | None = None

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls, dir: Path, config: LogConfig, *, recovery_point: int,
        log_start_offset: int | None, now_ms: int, had_clean_shutdown: bool = False,
        listed: bool = False,
    ) -> Log:
        """Load (creating if needed) the log in `dir`, recovering what may be torn; `listed`:
        the caller found `dir` in its log dir (a broker loading its logs), so it is not made.

        A directory made here is empty: there is nothing to clean up, no stale segment file
        to remove and no checkpoint to read (a broker creating 100,000 logs skips some ten
        system calls on each)."""
        parse_topic_partition(dir.name)
        fresh = False
        if not listed:
            try:
                dir.mkdir(parents=True)
                fresh = True
            except FileExistsError:
                pass
        # which files are there, as listed once (a directory made here holds none)
        bases, names = (([], frozenset()) if fresh
                        else log_files.clean_leftovers(dir, config, now_ms))
        segments = [LogSegment.load(dir, base, config, now_ms, listed=names) for base in bases]
        created = not segments
        if created:
            start = log_start_offset if log_start_offset is not None else 0
            segments = [LogSegment.create(dir, start, config, now_ms, fresh=fresh)]
        recover_from = None if had_clean_shutdown or created else recovery_point
        segments = log_files.recover_segments(segments, recover_from, config, names)
        active = segments[-1]
        if not active.offset_index.writable:
            active.open_for_append(config, listed=names)
        log_end_offset, _ = active.read_next_offset()
        first_base = segments[0].base_offset
        start = max(first_base, log_start_offset if log_start_offset is not None else first_base)
        point = log_end_offset if had_clean_shutdown else min(recovery_point, log_end_offset)
        epoch_path = dir / LEADER_EPOCH_CHECKPOINT_FILE
        epochs_from = recover_from  # where the batches' epochs are assigned again
        shared = os.fspath(dir)  # the Path's own str, held once for the log's files
        try:
            epoch_cache = (LeaderEpochCache.load(epoch_path, directory=shared)
                           if LEADER_EPOCH_CHECKPOINT_FILE in names
                           else LeaderEpochCache(epoch_path, directory=shared, absent=True))
        except KafkaStorageError as error:
            if recover_from is None:
                raise
            # written without fsync (LeaderEpochCache.flush): after a crash it may be torn;
            # every batch's epoch is in the log, so it is rebuilt from all of them
            logging.getLogger(__name__).warning("%s; rebuilding it from the log", error)
            epoch_cache, epochs_from = LeaderEpochCache(epoch_path, directory=shared), 0
        log = cls(
            dir, config, segments, epoch_cache, log_start_offset=min(start, log_end_offset),
            log_end_offset=log_end_offset, recovery_point=max(point, 0), now_ms=now_ms,
            topic_id=(read_partition_metadata(dir) if PARTITION_METADATA_FILE in names
                      else None),
        )
        if start > log_end_offset:  # everything below the checkpointed start is gone
            log.truncate_fully_and_start_at(start, now_ms=now_ms)
        # Past the log end the file may hold an epoch that wrote nothing (a leadership that
        # ended so); after a crash, past where recovery starts, entries that a change since
        # dropped. Those are dropped here and the recovered batches assign theirs again, so
        # the file is only marked stale (written by the log's next flush or its close): a
        # file written per idle log was half of a broker's restart at 300,000 partitions.
        epoch_cache.truncate_from_end(
            log.log_end_offset if epochs_from is None else min(epochs_from, log.log_end_offset),
            write=False)
        epoch_cache.truncate_from_start(log.log_start_offset)
        if recover_from is not None:  # after a clean close none lies above the log end
            if any(name.endswith(SNAPSHOT_SUFFIX) for name in names):
                delete_snapshots(dir, above=log.log_end_offset)  # of batches recovery cut off
            log._txn_indexes_from = log._segments[log._segment_for(recover_from)].base_offset
        if epochs_from is not None:
            log._assign_recovered_epochs(epochs_from)
        return log

    def _assign_recovered_epochs(self, recover_from: int) -> None:
        """The epochs of the batches recovered from `recover_from`: the checkpoint is not
        fsynced at each change (LeaderEpochCache.flush), so it may lack the newest."""
        for segment in self._segments[self._segment_for(min(recover_from,
                                                            self._log_end_offset)):]:
            for _, header in segment.iter_headers(0):
                if header.last_offset >= recover_from:
                    self._assign_epoch(header.partition_leader_epoch, header.base_offset)

    # -- properties ---------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        """The log's directory, `<log dir>/<topic>-<partition>`."""
        return Path(self._dir)

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from now on (index sizes from the next segment)."""
        self._config = config
        self._active.index_interval_bytes = config.index_interval_bytes
        if self.watch is not None:
            self.watch.configured(self)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, kept within [log start, log end]; return the value set."""
        self._high_watermark = min(max(offset, self._log_start_offset), self._log_end_offset)
        return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark to `offset` (never lower it); return whether it moved."""
        if offset <= self._high_watermark:
            return False
        invariant(offset <= self._log_end_offset, f"high watermark {offset} above log end")
        self._high_watermark = offset
        return True

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def segment_base_offsets(self) -> tuple[int, ...]:
        return self._bases

    @property
    def first_segment_base_offset(self) -> int:
        return self._bases[0]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first (for tools and tests)."""
        return tuple(self._segments)

    @property
    def topic_id(self) -> uuid.UUID | None:
        return self._topic_id

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Record the topic id in `partition.metadata`; a different existing id is an error."""
        if self._topic_id == topic_id:
            return
        if self._topic_id is not None:
            raise InconsistentTopicId(
                f"log {self.dir.name} has topic id {self._topic_id}, not {topic_id}"
            )
        write_partition_metadata(self.dir, topic_id)
        self._topic_id = topic_id

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    def _segment_for(self, offset: int) -> int:
        """Index of the segment whose range holds `offset` (the first one if below all)."""
        return max(0, bisect_right(self._bases, offset) - 1)

    # -- append ------------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytearray, *, leader_epoch: int, now_ms: int,
        from_coordinator: bool = False,
        decompressed_bytes_max: int = DECOMPRESSED_BATCH_BYTES_MAX,
    ) -> AppendInfo:
        """Validate, assign offsets (in place) and append a producer's batches.
        `from_coordinator`: a coordinator's own write for a producer (no sequences to
        check, only its epoch). Every record is checked (records.validate); a compressed
        batch is decompressed for that under `decompressed_bytes_max`."""
        invariant(not self._closed, f"append to closed log {self.dir.name}")
        batches = split_batches(records)
        max_timestamps = self._validate_producer_batches(
            records, batches, now_ms, decompressed_bytes_max)
        if any(header.producer_id >= 0 for _, header in batches):
            duplicate = self.producer_state.check(
                (header for _, header in batches), sequences=not from_coordinator,
                coordinator_epochs=[_coordinator_epoch(records, position, header)
                                    for position, header in batches])
            if duplicate is not None:
                return self._duplicate_info(duplicate)
        log_append_time = self._config.is_log_append_time
        offset = first_offset = self._log_end_offset
        entries: list[tuple[int, int, int]] = []
        best = (NO_TIMESTAMP - 1, -1)
        for (position, header), max_timestamp in zip(batches, max_timestamps, strict=True):
            stamp_batch(records, position, offset, leader_epoch)
            if log_append_time:
                set_log_append_time(records, position, now_ms)
            elif max_timestamp != header.max_timestamp:  # as Kafka's setMaxTimestamp
                set_max_timestamp(records, position, max_timestamp)
            last = offset + header.last_offset_delta
            timestamp = now_ms if log_append_time else max_timestamp
            if timestamp > best[0]:
                best = (timestamp, last)
            entries.append((header.size, last, timestamp))
            offset = last + 1
        self._write(records, entries, first_offset, best[0], now_ms)
        self._note_txns(records, batches, first_offset)
        self._note_producers(records, batches)
        self._assign_epoch(leader_epoch, first_offset)
        self._maybe_flush_after_append(now_ms)
        return AppendInfo(
            first_offset=first_offset, last_offset=offset - 1, max_timestamp=best[0],
            offset_of_max_timestamp=best[1],
            log_append_time_ms=now_ms if log_append_time else NO_TIMESTAMP,
            log_start_offset=self._log_start_offset, valid_bytes=len(records),
            batch_count=len(batches),
        )

    def _validate_producer_batches(
        self, records: bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int,
        decompressed_bytes_max: int,
    ) -> list[int]:
        """Kafka's LogValidator over each batch; each batch's largest record timestamp."""
        config = self._config
        if len(records) > config.segment_bytes:
            raise RecordListTooLarge(
                f"{len(records)} bytes appended to {self.dir.name} exceed segment.bytes "
                f"{config.segment_bytes}"
            )
        max_timestamps = []
        for position, header in batches:
            if header.size > config.max_message_bytes:
                raise MessageTooLarge(
                    f"batch of {header.size} bytes exceeds max.message.bytes "
                    f"{config.max_message_bytes} of {self.dir.name}"
                )
            if header.records_count <= 0 or header.records_count != header.last_offset_delta + 1:
                raise InvalidRecord(
                    f"Inconsistent batch offset range [0, {header.last_offset_delta}] and count "
                    f"of records {header.records_count} in topic partition {self.dir.name}"
                )
            summary = validate_batch(records, position, header,
                                     decompressed_bytes_max=decompressed_bytes_max)
            create_time = not config.is_log_append_time
            if (
                config.compact and summary.keyless_count
                or create_time and (header.is_log_append_time or timestamp_errors(
                    summary, now_ms, config.message_timestamp_before_max_ms,
                    config.message_timestamp_after_max_ms))
            ):
                self._reject_records(records, position, header, now_ms)
            max_timestamps.append(summary.max_timestamp)
        return max_timestamps

    def _reject_records(self, records: bytearray, position: int, header: BatchHeader,
                        now_ms: int) -> NoReturn:
        """Name every record that breaks the topic's rules, as Kafka's processRecordErrors:
        INVALID_TIMESTAMP if any timestamp is out of bounds, else INVALID_RECORD. The slow
        path: it decodes the batch again, and runs only for a batch that is refused."""
        config = self._config
        partition = self.dir.name
        lowest = now_ms - config.message_timestamp_before_max_ms
        highest = now_ms + config.message_timestamp_after_max_ms
        errors: list[tuple[int, str | None]] = []
        bad_timestamps = False
        for index, record in enumerate(iter_records(records, position)):
            if config.compact and record.key is None:
                errors.append((index, "Compacted topic cannot accept message without key in "
                                      f"topic partition {partition}."))
            elif config.is_log_append_time:
                continue
            elif header.is_log_append_time:
                bad_timestamps = True
                errors.append((index, "Invalid timestamp type in message. Producer should not "
                                      "set timestamp type to LogAppendTime."))
            elif record.timestamp != NO_TIMESTAMP and not lowest <= record.timestamp <= highest:
                bad_timestamps = True
                errors.append((index, f"Timestamp {record.timestamp} of message with offset "
                                      f"{index} is out of range. The timestamp should be "
                                      f"within [{lowest}, {highest}]"))
        invariant(bool(errors), "a batch refused by its summary has an offending record")
        shown = errors[:RECORD_ERRORS_MAX]
        if bad_timestamps:
            raise InvalidTimestamp(
                "One or more records have been rejected due to invalid timestamp", shown)
        raise InvalidRecord(
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: "
            f"{[why for _, why in errors[:3]]}", shown)

    def append_as_follower(
        self, records: bytes | bytearray, *, now_ms: int | None = None
    ) -> AppendInfo:
        """Append batches that already carry their offsets (replication, raft).

        `now_ms`, when given, drives time-based rolling and flush.ms as for the leader.
        """
        invariant(not self._closed, f"append to closed log {self.dir.name}")
        batches = split_batches(records)
        first_offset = batches[0][1].base_offset
        if first_offset < self._log_end_offset:
            raise InvalidRecord(
                f"append at offset {first_offset} to {self.dir.name} below its log end "
                f"offset {self._log_end_offset}"
            )
        entries: list[tuple[int, int, int]] = []
        best, previous_last = (NO_TIMESTAMP - 1, -1), first_offset - 1
        for _, header in batches:
            if header.base_offset <= previous_last or header.last_offset < header.base_offset:
                raise InvalidRecord(
                    f"out of order offsets in append to {self.dir.name}: batch at "
                    f"{header.base_offset} after offset {previous_last}"
                )
            if header.max_timestamp > best[0]:
                best = (header.max_timestamp, header.last_offset)
            entries.append((header.size, header.last_offset, header.max_timestamp))
            previous_last = header.last_offset
        self._write(records, entries, first_offset, best[0], now_ms)
        self._note_txns(records, batches, first_offset)
        self._note_producers(records, batches)
        for _, header in batches:
            self._assign_epoch(header.partition_leader_epoch, header.base_offset)
        self._maybe_flush_after_append(now_ms)
        return AppendInfo(
            first_offset=first_offset, last_offset=previous_last, max_timestamp=best[0],
            offset_of_max_timestamp=best[1], log_append_time_ms=NO_TIMESTAMP,
            log_start_offset=self._log_start_offset, valid_bytes=len(records),
            batch_count=len(batches),
        )

    def _write(
        self, data: bytes | bytearray, entries: list[tuple[int, int, int]], first_offset: int,
        max_timestamp: int, now_ms: int | None,
    ) -> None:
        last_offset = entries[-1][1]
        self._maybe_roll(len(data), max_timestamp, first_offset, last_offset, now_ms)
        self._active.append(data, entries)
        self._log_end_offset = last_offset + 1

    def _maybe_roll(
        self, size: int, max_timestamp: int, first_offset: int, last_offset: int,
        now_ms: int | None,
    ) -> None:
        active = self._active
        if active.size == 0 and first_offset != active.base_offset:
            self._replace_empty_active(first_offset, now_ms)  # a follower skipping offsets
            return
        clock_ms = now_ms if now_ms is not None else active.created_ms
        if active.should_roll(
            self._config, self._jitter_ms(active.base_offset), incoming_bytes=size,
            incoming_max_timestamp=max_timestamp, incoming_last_offset=last_offset,
            now_ms=clock_ms,
        ):
            self._roll_at(first_offset, clock_ms)

    def _jitter_ms(self, base_offset: int) -> int:
        """Per-segment roll jitter, derived from the segment's name so replays agree."""
        config = self._config
        if config.segment_jitter_ms <= 0:
            return 0
        seed = zlib.crc32(f"{self.dir.name}/{base_offset}".encode())
        return seed % min(config.segment_jitter_ms, config.segment_ms)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch; see LeaderEpochCache."""
        return self.leader_epoch_cache.end_offset_for_epoch(epoch, self._log_end_offset)

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.leader_epoch_cache.assign(epoch, start_offset)

    def assign_epoch_start(self, epoch: int) -> None:
        """A new leader's epoch begins at the log end (KIP-101): recorded at once, before it
        writes anything, so a follower asking where an older epoch ended is told here."""
        self._assign_epoch(epoch, self._log_end_offset)

    @property
    def latest_epoch(self) -> int:
        """The epoch of the last batch (or of a leadership begun since); -1 if none."""
        latest = self.leader_epoch_cache.latest_epoch
        return -1 if latest is None else latest

    def _maybe_flush_after_append(self, now_ms: int | None) -> None:
        config = self._config
        if self._log_end_offset - self._recovery_point >= config.flush_messages:
            self.flush()
            if now_ms is not None:
                self._last_flush_ms = now_ms
        elif now_ms is not None and now_ms - self._last_flush_ms >= config.flush_ms:
            self.flush()
            self._last_flush_ms = now_ms

    # -- roll ----------------------------------------------------------------------------------

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new segment at the log end offset (a no-op if the active one is empty)."""
        if self._active.size == 0:
            return self._active
        return self._roll_at(self._log_end_offset, now_ms)

    def _roll_at(self, base_offset: int, now_ms: int) -> LogSegment:
        invariant(base_offset >= self._log_end_offset, f"roll at {base_offset} below log end")
        # all or nothing: a step that fails (a full disk) leaves the old segment active and
        # writable, and no new one, so the next append tries the roll again
        self._snapshot_producers()
        segment = LogSegment.create(self.dir, base_offset, self._config, now_ms)
        active = self._active
        try:
            active.on_become_inactive()
        except OSError:
            segment.delete()
            if not (active.offset_index.writable and active.time_index.writable):
                active.open_for_append(self._config)
            raise
        self._segments.append(segment)
        self._bases += (base_offset,)
        self._directory_dirty = True
        self._roll_flush_offset = base_offset  # flush the finished segment soon (flush_due)
        if self.watch is not None:
            self.watch.rolled[self] = None
        return segment

    def _replace_empty_active(self, base_offset: int, now_ms: int | None) -> None:
        old = self._active
        created_ms = now_ms if now_ms is not None else old.created_ms
        # created first: if that fails, the old one is still there and active
        segment = LogSegment.create(self.dir, base_offset, self._config, created_ms)
        self._segments.pop()
        self._bases = self._bases[:-1]
        old.delete()
        self._segments.append(segment)
        self._bases += (base_offset,)
        self._directory_dirty = True

    # -- read ------------------------------------------------------------------------------------

    def read(
        self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> ReadInfo:
        """Whole batches from the one holding `fetch_offset`, within `max_bytes`.

        At least one batch when `min_one_message`, even a larger one. Batches whose base
        offset is >= `max_offset` (the high watermark, for consumers) are not returned.
        Data comes from one segment per call, as in Kafka.
        """
        if fetch_offset < self._log_start_offset or fetch_offset > self._log_end_offset:
            raise OffsetOutOfRange(
                f"fetch offset {fetch_offset} of {self.dir.name} is outside "
                f"[{self._log_start_offset}, {self._log_end_offset}]"
            )
        if fetch_offset == self._log_end_offset:
            # nothing new: most partitions of a follower's or consumer's fetch; the scan of
            # the active segment's tail (a read from disk) cost 0.1 ms per partition
            return self._read_info(b"", fetch_offset, fetch_offset)
        for segment in self._segments[self._segment_for(fetch_offset) :]:
            found = segment.find_batch(fetch_offset)
            if found is None:
                continue  # the offset falls in a gap after this segment's last batch
            position, header = found
            if max_offset is not None and header.base_offset >= max_offset:
                break
            data, next_offset = segment.read(
                position, header.size, max_bytes, max_offset=max_offset,
                min_one_message=min_one_message,
            )
            if data:
                invariant(next_offset > header.base_offset, "offsets increase on read-back")
                return self._read_info(data, header.base_offset, next_offset)
            break
        return self._read_info(b"", fetch_offset, fetch_offset)

    def _read_info(self, data: bytes, first_offset: int, next_offset: int) -> ReadInfo:
        return ReadInfo(
            records=data, first_offset=first_offset, next_offset=next_offset,
            high_watermark=self._high_watermark, log_start_offset=self._log_start_offset,
            log_end_offset=self._log_end_offset,
        )

    def iter_batches(self, start_offset: int | None = None) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from `start_offset` (default: log start) to the end, for tools and tests."""
        offset = self._log_start_offset if start_offset is None else start_offset
        for segment in self._segments[self._segment_for(offset) :]:
            found = segment.find_batch(offset)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                yield header, segment.read_batch(position, header.size)

    # -- transactions (read_committed) -------------------------------------------------------

    @property
    def txns(self) -> TxnState:
        """The open and aborted transactions (storage.txn_index): one pass over the batch
        headers on first use, then kept up to date by appends."""
        if self._txns is None:
            state = TxnState()
            for segment in self._segments:
                for position, header in segment.iter_headers(0):
                    state.on_batch(header, partial(segment.read_batch, position, header.size))
            self._txns = state
            if self._txn_indexes_from is not None:
                self._rewrite_txn_indexes(state, self._txn_indexes_from)
                self._txn_indexes_from = None
        return self._txns

    def _rewrite_txn_indexes(self, state: TxnState, from_offset: int) -> None:
        """Each segment's `.txnindex` from `from_offset` on, as the log's markers say."""
        bases = (*self._bases, self._log_end_offset + 1)
        for index, segment in enumerate(self._segments):
            if segment.base_offset < from_offset:
                continue
            write_entries(segment.txn_index_path, [
                each for each in state.aborted_from(segment.base_offset)
                if each.last_offset < bases[index + 1]])
            self._txn_index_written(segment.txn_index_path)

    @property
    def last_stable_offset(self) -> int:
        """Below the first open transaction and the high watermark."""
        if self._txns is None and len(self._segments) == 1 and self._segments[0].size == 0:
            return self._high_watermark  # no batch: no transaction (and no TxnState made
            # for each idle log its followers' fetches look at)
        first = self.txns.first_unstable_offset()
        return self._high_watermark if first is None else min(first, self._high_watermark)

    def _note_txns(self, records: bytes | bytearray,
                   batches: list[tuple[int, BatchHeader]], first_offset: int) -> None:
        if self._txns is not None:  # else the first use scans these batches too
            for position, old in batches:
                if old.is_transactional:
                    header = read_header(records, position)  # with the offsets now assigned
                    self._txns.on_batch(header,
                                        partial(_batch_bytes, records, position, old.size))
        if any(header.is_control and header.producer_id >= 0
               and marker_type(_batch_bytes(records, position, header.size))
               is ControlRecordType.ABORT for position, header in batches):
            aborted = self.txns.aborted_from(first_offset)  # built now if it was not
            if aborted:
                path = self._active.txn_index_path  # the segment the markers went to
                try:
                    append_entries(path, aborted)
                except OSError as error:
                    # the markers are written (the log is the truth; the file is Kafka's
                    # layout): the file is rewritten from the log at the next flush
                    log.warning("cannot write %s (%s); rewritten later", path, error)
                    base = self._active.base_offset
                    self._txn_indexes_from = base if self._txn_indexes_from is None else min(
                        self._txn_indexes_from, base)
                    return
                self._txn_index_written(path)

    def _txn_index_written(self, path: Path) -> None:
        """`path` (a `.txnindex`) was written: fsynced at the next flush."""
        if self._txn_indexes_dirty is None:
            self._txn_indexes_dirty = {}
        self._txn_indexes_dirty[path] = None

    # -- idempotent producers (storage.producer_state) ----------------------------------------

    @property
    def producer_state(self) -> ProducerState:
        """The producers' epochs and last batches: on first use, the newest snapshot at or
        below the log end plus one pass over the batch headers after it; then kept up to
        date by appends."""
        if self._producers is None:
            self._producers = self._load_producer_state()
        return self._producers

    def _load_producer_state(self) -> ProducerState:
        state = ProducerState(end_offset=self._segments[0].base_offset)
        for offset in reversed(list_snapshots(self.dir)):
            if offset > self._log_end_offset:
                continue
            try:
                state = read_snapshot(self.dir, offset)
                break
            except (CorruptRecord, OSError) as error:
                log.warning("producer snapshot %d of %s is unreadable (%s); deleting it",
                            offset, self.dir.name, error)
                snapshot_path(self.dir, offset).unlink(missing_ok=True)
        start = state.end_offset
        for segment in self._segments[self._segment_for(start):]:
            found = segment.find_batch(start)
            if found is not None:
                for position, header in segment.iter_headers(found[0]):
                    if header.base_offset >= start:
                        state.apply(header, -1 if not header.is_control else
                                    _coordinator_epoch(segment.read_batch(position, header.size),
                                                       0, header))
        state.end_offset = self._log_end_offset
        return state

    def _note_producers(self, records: bytes | bytearray,
                        batches: list[tuple[int, BatchHeader]]) -> None:
        state = self._producers
        if state is None:
            return  # not built yet: the first use scans these batches too
        for position, old in batches:
            if old.producer_id >= 0:  # the header re-read: with the offsets assigned
                state.apply(read_header(records, position),
                            _coordinator_epoch(records, position, old))
        state.end_offset = self._log_end_offset

    def _duplicate_info(self, duplicate: BatchMetadata) -> AppendInfo:
        """A retried batch already in the log: answered with the first copy's offsets."""
        return AppendInfo(
            first_offset=duplicate.first_offset, last_offset=duplicate.last_offset,
            max_timestamp=duplicate.timestamp, offset_of_max_timestamp=duplicate.last_offset,
            log_append_time_ms=NO_TIMESTAMP, log_start_offset=self._log_start_offset,
            valid_bytes=0, batch_count=0)

    def _snapshot_producers(self) -> None:
        """Write the producer state in use as `<log end>.snapshot` (nothing if not built)."""
        state = self._producers
        if state is None or list_snapshots(self.dir)[-1:] == [self._log_end_offset]:
            return
        state.end_offset = self._log_end_offset
        write_snapshot(self.dir, state)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """producer.id.expiration.ms: forget idle producers without an open transaction."""
        return 0 if self._producers is None else self._producers.expire(now_ms, expiration_ms)

    # -- timestamps --------------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) for ListOffsets; None when no record qualifies.

        -2 earliest (and -4, earliest local): (log start, -1). -1 latest: (log end, -1).
        -3: the first record with the largest timestamp. Otherwise the first record (by
        offset) whose timestamp is >= `timestamp`.
        """
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self._log_start_offset, NO_TIMESTAMP
        if timestamp == LATEST_TIMESTAMP:
            return self._log_end_offset, NO_TIMESTAMP
        if timestamp == MAX_TIMESTAMP:
            return self._offset_of_max_timestamp()
        if timestamp < 0:
            return None
        start = self._log_start_offset
        for segment in self._segments[self._segment_for(start) :]:
            if segment.max_timestamp < timestamp:
                continue
            for position, header in segment.iter_by_timestamp(timestamp):
                if header.last_offset < start:
                    continue  # wholly below the log start (after DeleteRecords)
                batch = segment.read_batch(position, header.size)
                result = first_record_at_or_after(batch, timestamp, start)
                if result is not None:
                    return result
        return None

    offset_for_timestamp = fetch_offset_by_timestamp

    def _offset_of_max_timestamp(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return None
        for position, header in best.iter_by_timestamp(best.max_timestamp):
            batch = best.read_batch(position, header.size)
            return first_record_at_or_after(batch, best.max_timestamp, self._log_start_offset)
        return None

    # -- flush ---------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync everything below `offset` (default: the log end); it becomes the recovery point."""
        target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
        if target > self._recovery_point:
            first = self._segment_for(self._recovery_point)
            for segment in self._segments[first:]:
                if segment.base_offset >= target and segment is not self._segments[first]:
                    break
                segment.flush()
        if self._txn_indexes_from is not None and self._txns is not None:
            self._rewrite_txn_indexes(self._txns, self._txn_indexes_from)  # one failed
            self._txn_indexes_from = None
        if self._txn_indexes_dirty is not None:
            for path in self._txn_indexes_dirty:
                fsync_file(path)
            self._txn_indexes_dirty = None
        self.leader_epoch_cache.sync(self._log_end_offset)
        if self._directory_dirty:
            fsync_directory(self.dir)
            self._directory_dirty = False
        self._recovery_point = max(self._recovery_point, target)
        if self._roll_flush_offset is not None and self._roll_flush_offset <= target:
            self._roll_flush_offset = None

    @property
    def roll_flush_pending(self) -> bool:
        return self._roll_flush_offset is not None

    def flush_due(self, now_ms: int) -> bool:
        """Flush if flush.ms has passed or a rolled segment awaits its fsync; True if flushed."""
        if now_ms - self._last_flush_ms >= self._config.flush_ms:
            self.flush()
            self._last_flush_ms = now_ms
            return True
        if self._roll_flush_offset is not None:
            self.flush(self._roll_flush_offset)
            return True
        return False

    # -- truncation ----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove everything from `offset` on (a follower diverged); True if anything went."""
        invariant(offset >= 0, f"truncate {self.dir.name} to negative offset {offset}")
        if offset >= self._log_end_offset:
            # an epoch begun at the log end with nothing written (a leadership that wrote
            # nothing) is still forgotten, or the next fetch would diverge on it again
            self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=self._active.created_ms)
            return True
        keep = self._segment_for(offset)
        for segment in self._segments[keep + 1 :]:
            segment.delete()
        del self._segments[keep + 1 :]
        self._bases = self._bases[: keep + 1]
        active = self._active
        if not active.offset_index.writable:
            active.open_for_append(self._config)
        active.truncate_to(offset)
        entries = read_entries(active.txn_index_path)
        kept = [each for each in entries if each.last_offset < offset]
        if len(kept) != len(entries):
            write_entries(active.txn_index_path, kept)
            self._txn_index_written(active.txn_index_path)
        self._directory_dirty = True
        self._log_end_offset = offset
        self._txns = None  # a marker may be gone: built again on next use
        self._producers = None  # so may producer batches: built again from a snapshot
        delete_snapshots(self.dir, above=offset)
        self.leader_epoch_cache.truncate_from_end(offset)
        self._log_start_offset = min(self._log_start_offset, offset)
        self._recovery_point = min(self._recovery_point, offset)
        self._high_watermark = min(self._high_watermark, offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int | None = None) -> None:
        """Drop every segment and restart the log, empty, at `offset`."""
        created_ms = now_ms if now_ms is not None else self._active.created_ms
        for segment in self._segments:
            segment.delete()
        segment = LogSegment.create(self.dir, offset, self._config, created_ms)
        self._segments, self._bases = [segment], (offset,)
        self._directory_dirty = True
        self.leader_epoch_cache.clear()
        self._log_start_offset = self._log_end_offset = offset
        self._recovery_point = self._high_watermark = offset
        self._roll_flush_offset = None
        self._txns = None
        self._producers = ProducerState(end_offset=offset)
        delete_snapshots(self.dir)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords); segments below it go at retention."""
        if offset > self._high_watermark:
            raise OffsetOutOfRange(
                f"cannot move the log start offset of {self.dir.name} to {offset}, above its "
                f"high watermark {self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        return True

    def delete_records(self, offset: int, now_ms: int) -> int:
        """DeleteRecords: move the log start to `offset` and delete the segments wholly below
        it at once (Kafka leaves that to the next retention pass); return the log start."""
        self.maybe_increment_log_start_offset(offset)
        self._delete_segments(self._below_log_start, now_ms)
        return self._log_start_offset

    # -- compaction ------------------------------------------------------------------------------

    def replace_segments(
        self, cleaned: LogSegment, old: Sequence[LogSegment], now_ms: int
    ) -> LogSegment | None:
        """Swap the cleaner's output in for `old`, consecutive inactive segments of this log.

        `cleaned` is a closed segment written with the `.cleaned` suffix and fsynced, at the
        base offset of `old[0]`. Kafka's order, each step durable before the next: its files
        are renamed `.swap` (the log file last), the old segments `.deleted`, then the swap
        files take their live names. `Log.open` finishes or discards any step a crash
        interrupted (see log_files). Returns the live segment, or None when `old` is no
        longer a run of this log's inactive segments (retention, DeleteRecords or truncation
        got there first); then nothing is changed.
        """
        if self._closed or not old or cleaned.base_offset != old[0].base_offset:
            return None
        first = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        last = None if first is None else first + len(old)
        if first is None or last is None or last >= len(self._segments) or any(
            a is not b for a, b in zip(self._segments[first:last], old, strict=True)
        ):
            return None
        # the aborted transactions of the old segments stay indexed (Kafka's cleaner too)
        write_entries(cleaned.txn_index_path,
                      [each for segment in old for each in read_entries(segment.txn_index_path)])
        fsync_file(cleaned.txn_index_path)
        cleaned_paths = [path for path in cleaned.paths()[1:] + cleaned.paths()[:1]
                         if path.exists()]
        swaps = [path.with_name(path.name[: -len(log_files.CLEANED_SUFFIX)]
                                + log_files.SWAP_SUFFIX) for path in cleaned_paths]
        for source, target in zip(cleaned_paths, swaps, strict=True):
            os.replace(source, target)
        fsync_directory(self.dir)
        for segment in old:
            self._schedule_delete(segment, now_ms)
        for swap in swaps:
            os.replace(swap, swap.with_name(swap.name[: -len(log_files.SWAP_SUFFIX)]))
        fsync_directory(self.dir)
        segment = LogSegment.load(self.dir, cleaned.base_offset, self._config, now_ms)
        self._segments[first:last] = [segment]
        self._bases = (*self._bases[:first], segment.base_offset, *self._bases[last:])
        return segment

    # -- retention -------------------------------------------------------------------------------

    def delete_retention_segments(self, now_ms: int) -> int:
        """Delete segments past retention.ms / retention.bytes / the log start; return count.

        Only segments entirely below the high watermark go. If every segment qualifies, a
        new empty segment is rolled first so the log always has an active one.
        """
        segments = self._segments
        if len(segments) == 1 and segments[0].size == 0:
            return 0  # the empty active segment stays: most logs, at 1,000,000 partitions
        config = self._config
        deleted = self._delete_segments(self._below_log_start, now_ms)
        if config.delete:
            if config.retention_ms >= 0:
                deleted += self._delete_segments(
                    lambda segment, _: now_ms - segment.largest_timestamp() > config.retention_ms,
                    now_ms,
                )
            if config.retention_bytes >= 0:
                excess = [self.size_bytes - config.retention_bytes]

                def over_size(segment: LogSegment, _: LogSegment | None) -> bool:
                    if excess[0] - segment.size < 0:
                        return False
                    excess[0] -= segment.size
                    return True

                deleted += self._delete_segments(over_size, now_ms)
        return deleted

    @staticmethod
    def _below_log_start_of(start: int, following: LogSegment | None) -> bool:
        return following is not None and following.base_offset <= start

    def _below_log_start(self, _: LogSegment, following: LogSegment | None) -> bool:
        return self._below_log_start_of(self._log_start_offset, following)

    def _delete_segments(self, predicate: _SegmentPredicate, now_ms: int) -> int:
        doomed: list[LogSegment] = []
        for index, segment in enumerate(self._segments):
            following = self._segments[index + 1] if index + 1 < len(self._segments) else None
            upper = following.base_offset if following is not None else self._log_end_offset
            if following is None and segment.size == 0:
                break  # the empty active segment stays
            if upper > self._high_watermark or not predicate(segment, following):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            try:
                self._roll_at(self._log_end_offset, now_ms)
            except OSError:
                doomed.pop()  # the disk is full: the active segment stays, the others go
                if not doomed:
                    raise
        for segment in doomed:
            self._segments.remove(segment)
            self._bases = tuple(base for base in self._bases if base != segment.base_offset)
            self._schedule_delete(segment, now_ms)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        snapshots = list_snapshots(self.dir)
        delete_snapshots(self.dir, snapshots[-1:], below=self._segments[0].base_offset)
        self._high_watermark = max(self._high_watermark, self._log_start_offset)
        self._recovery_point = max(self._recovery_point, self._log_start_offset)
        return len(doomed)

    def _schedule_delete(self, segment: LogSegment, now_ms: int) -> None:
        paths = segment.rename_with_suffix(DELETED_SUFFIX)
        self._directory_dirty = True
        self._pending_deletes = (
            *self._pending_deletes, (now_ms + self._config.file_delete_delay_ms, paths))
        self.delete_pending(now_ms)

    def delete_pending(self, now_ms: int) -> int:
        """Remove `.deleted` files whose delay has passed; return how many segments went."""
        if not self._pending_deletes:
            return 0
        due = [paths for due_ms, paths in self._pending_deletes if due_ms <= now_ms]
        self._pending_deletes = tuple(
            item for item in self._pending_deletes if item[0] > now_ms)
        for paths in due:
            for path in paths:
                path.unlink(missing_ok=True)
        return len(due)

    # -- closing ---------------------------------------------------------------------------------

    def close(self, *, snapshot: bool = True) -> None:
        """Close files (no fsync: call flush first for a clean shutdown). A producer state
        in use is written as a snapshot at the log end, so the next open reads no batch, and
        the leader-epoch checkpoint if a new epoch is not yet in it.
        `snapshot=False` (the log is being deleted) writes nothing at all: deleting a log
        must work on a full disk."""
        if self._closed:
            return
        if snapshot:
            # a new epoch noted since the last flush, unless only past the log end
            self.leader_epoch_cache.write_if_stale(self._log_end_offset)
            try:
                self._snapshot_producers()
            except OSError as error:
                log.warning("cannot write the producer snapshot of %s: %s", self.dir.name, error)
        failure: OSError | None = None
        for segment in self._segments:  # every file is closed, whatever fails
            try:
                segment.close(final_entry=snapshot)
            except OSError as error:
                failure = failure or error
        self._closed = True
        if failure is not None:
            raise failure

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        self.close(snapshot=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def check_invariants(self) -> None:
        """Used by tests: offsets, segment order and index contents are consistent."""
        invariant(
            self._log_start_offset <= self._high_watermark <= self._log_end_offset,
            f"{self._log_start_offset} <= {self._high_watermark} <= {self._log_end_offset}",
        )
        invariant(list(self._bases) == sorted(set(self._bases)), f"segment bases {self._bases}")
        previous = -1
        for segment in self._segments:
            invariant(segment.base_offset > previous, "segment bases increase")
            segment.check_invariants()
            for _, header in segment.iter_headers(0):
                invariant(header.base_offset > previous, "offsets increase across batches")
                invariant(header.base_offset >= segment.base_offset, "batch below its segment")
                previous = header.last_offset
        invariant(previous < self._log_end_offset, f"batch at {previous} beyond log end")

    def __repr__(self) -> str:
        return (
            f"Log({self.dir.name}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )

