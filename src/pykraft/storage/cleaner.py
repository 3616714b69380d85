"""The log cleaner: compaction of partitions whose cleanup.policy includes `compact`.

Theory of operation (Kafka's design). A compacted log has a *clean* head, already
deduplicated, and a *dirty* tail, starting at the first dirty offset recorded per partition
in `cleaner-offset-checkpoint` (in each log dir; the log start offset when there is none).
The *cleanable* part of the tail ends at the first uncleanable offset: the base offset of the
first segment that is the active one, or reaches above the high watermark, or holds a record
younger than min.compaction.lag.ms. Whole segments only: the active segment and anything
above the high watermark are never touched.

    dirty ratio = cleanable bytes / (clean bytes + cleanable bytes)

A log is cleaned when its ratio exceeds min.cleanable.dirty.ratio, when its oldest dirty
record is older than max.compaction.lag.ms, or when tombstones it holds have passed their
delete horizon; of those, the dirtiest goes first. A cleaning:

1. builds an offset map key -> latest offset over the cleanable part, starting at the first
   dirty offset and stopping early when the map would outgrow its budget
   (log.cleaner.dedupe.buffer.size / log.cleaner.threads, times the load factor); the map
   then covers [first dirty, end offset) and the next cleaning continues from there;
2. rewrites the segments below the end offset in groups (each group's total size fits one
   segment) keeping a record unless the map holds its key at a higher offset, unless it has
   no key, or unless it is a tombstone whose batch's delete horizon has passed (KIP-534: a
   batch keeping a tombstone is stamped with horizon = now + delete.retention.ms, in its
   baseTimestamp, with the delete-horizon attribute bit). Offsets are preserved: a batch
   keeps its base offset, last offset delta, producer id/epoch, base sequence, leader epoch,
   transactional and control bits; unchanged batches are copied byte for byte. A batch left
   without records goes, unless it is its producer's last batch in the log: then its header
   stays, empty, so the producer's sequence survives.
   Transactions (KIP-98): a scan of the whole log first finds the aborted transactions
   (data batches of a producer closed by its ABORT marker) and the first offset of a
   transaction still open, which bounds the cleanable part like the high watermark (its
   records may yet be aborted). Aborted batches never enter the offset map and are dropped
   (emptied when they are their producer's last). A COMMIT/ABORT marker stays while any
   batch of its transaction is left; the first cleaning that finds none stamps it with a
   delete horizon (now + delete.retention.ms, as tombstones) and a cleaning after that
   drops it. Other control batches are kept as they are.
3. swaps each group's output in (`Log.replace_segments`: `.cleaned` -> `.swap` -> live
   names) and records the end offset as the partition's first dirty offset.

Shape: `plan_cleaning` and `choose_filthiest` are pure (facts and `now_ms` in, a decision
out); `CleaningJob.run` is the file work, safe in a worker thread because it only reads
segment files through its own descriptors and writes new `.cleaned` files; `LogCleaner`
builds jobs and finishes them (the swap) on the caller's thread, which owns the Log. A swap
whose segments changed meanwhile is dropped, and the next round starts over.

Memory: the offset map is a dict of exact keys (no hash collisions, unlike Kafka's MD5 map),
charged `len(key) + MAP_ENTRY_OVERHEAD_BYTES` per entry against the budget.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import crc32c
from kio._kio_native import read_signed_varint, read_signed_varlong
from kio.serial.errors import DecodeError

from pykraft.errors import CorruptRecord, InvalidConfig, KafkaStorageError, invariant
from pykraft.records.batch import (
    BATCH_HEADER,
    COMPRESSION_MASK,
    CRC_AT,
    CRC_FROM,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_batch,
    read_header,
)
from pykraft.records.codecs import compress, decompress
from pykraft.records.record import (
    BatchBuilder,
    ControlRecordType,
    Record,
    iter_records,
    read_control_record_type,
)
from pykraft.storage import log_files
from pykraft.storage.checkpoint import read_offsets_checkpoint, write_offsets_checkpoint
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from pykraft.storage.segment import RELATIVE_OFFSET_MAX, LogSegment, segment_base_name

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "AbortedTxn",
    "LogTransactions",
    "CleanerConfig",
    "CleaningJob",
    "CleaningPlan",
    "CleanStats",
    "SwapFailed",
    "Throttle",
    "LogCleaner",
    "LogFacts",
    "SegmentFacts",
    "choose_filthiest",
    "log_facts",
    "plan_cleaning",
    "scan_transactions",
]

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
# a Python dict entry with a bytes key and an int value, beyond the key's own bytes
MAP_ENTRY_OVERHEAD_BYTES: Final = 120
_READ_CHUNK_BYTES: Final = 8 * 1024 * 1024
_WRITE_CHUNK_BYTES: Final = 1024 * 1024
_LENGTH: Final = struct.Struct(">qi")
_NO_PRODUCER: Final = -1


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings (Kafka's names and defaults)."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_buffer_load_factor: float = 0.9
    backoff_ms: int = 15_000
    io_max_bytes_per_second: float = float("inf")

    @classmethod
    def from_server_configs(cls, values: Mapping[str, str]) -> CleanerConfig:
        def number(key: str, default: str, parse: Callable[[str], float]) -> float:
            text = values.get(key, default).strip()
            try:
                return parse(text)
            except ValueError:
                raise InvalidConfig(f"Invalid value {text} for configuration {key}") from None

        enable = values.get("log.cleaner.enable", "true").strip().lower()
        if enable not in ("true", "false"):
            raise InvalidConfig(f"Invalid value {enable} for configuration log.cleaner.enable")
        config = cls(
            enable=enable == "true",
            threads=int(number("log.cleaner.threads", "1", int)),
            dedupe_buffer_size=int(number("log.cleaner.dedupe.buffer.size", "134217728", int)),
            io_buffer_load_factor=number("log.cleaner.io.buffer.load.factor", "0.9", float),
            backoff_ms=int(number("log.cleaner.backoff.ms", "15000", int)),
            io_max_bytes_per_second=number("log.cleaner.io.max.bytes.per.second",
                                           "1.7976931348623157E308", float),
        )
        if config.threads < 0 or config.backoff_ms < 0 or config.dedupe_buffer_size <= 0:
            raise InvalidConfig("log.cleaner.threads and log.cleaner.backoff.ms must be >= 0, "
                                "log.cleaner.dedupe.buffer.size > 0")
        if config.io_max_bytes_per_second <= 0:
            raise InvalidConfig("log.cleaner.io.max.bytes.per.second must be > 0")
        if not 0 < config.io_buffer_load_factor <= 1:
            raise InvalidConfig("log.cleaner.io.buffer.load.factor must be in (0, 1]")
        return config

    @property
    def map_bytes_max(self) -> int:
        """The offset map's budget: the dedupe buffer shared by the cleaner threads."""
        per_thread = self.dedupe_buffer_size // max(1, self.threads)
        return max(1, int(per_thread * self.io_buffer_load_factor))

    @property
    def active(self) -> bool:
        return self.enable and self.threads > 0


# -- the decision (pure) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    base_offset: int
    size_bytes: int
    largest_timestamp_ms: int  # max timestamp, or the file's mtime when there is none
    first_batch_timestamp_ms: int  # -1 when unknown or empty


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What the decision needs about one log; the last segment is the active one."""

    segments: tuple[SegmentFacts, ...]
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    checkpoint_offset: int | None  # from cleaner-offset-checkpoint
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_horizon_due_ms: int | None = None  # earliest horizon of tombstones left behind
    first_unstable_offset: int | None = None  # first batch of an open transaction, if known


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int  # > 0: max.compaction.lag.ms is overdue by that much
    horizon_due: bool  # tombstones past their delete horizon wait to be removed
    min_cleanable_dirty_ratio: float

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_cleaning(self) -> bool:
        if self.horizon_due:
            return True
        if self.cleanable_bytes <= 0:
            return False
        return self.max_compaction_delay_ms > 0 or (
            self.dirty_ratio > self.min_cleanable_dirty_ratio)


def plan_cleaning(facts: LogFacts, now_ms: int) -> CleaningPlan:
    """Where the dirty section starts and ends, how dirty the log is, whether it is due."""
    segments = facts.segments
    invariant(len(segments) > 0, "a log has an active segment")
    uppers = [s.base_offset for s in segments[1:]] + [facts.log_end_offset]
    checkpoint = facts.checkpoint_offset
    if checkpoint is None or not facts.log_start_offset <= checkpoint <= facts.log_end_offset:
        first_dirty = facts.log_start_offset  # none yet, or deleted past, or truncated below
    else:
        first_dirty = checkpoint
    first_uncleanable = segments[-1].base_offset
    stable_end = facts.high_watermark  # the last stable offset (KIP-98) when it is known
    if facts.first_unstable_offset is not None:
        stable_end = min(stable_end, facts.first_unstable_offset)
    for segment, upper in zip(segments[:-1], uppers[:-1], strict=True):
        if upper > stable_end:
            first_uncleanable = min(first_uncleanable, segment.base_offset)
            break
    if facts.min_compaction_lag_ms > 0:
        young_from = now_ms - facts.min_compaction_lag_ms
        for segment, upper in zip(segments[:-1], uppers[:-1], strict=True):
            if upper > first_dirty and segment.largest_timestamp_ms > young_from:
                first_uncleanable = min(first_uncleanable, segment.base_offset)
                break
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(
        s.size_bytes for s, upper in zip(segments, uppers, strict=True)
        if s.base_offset < first_uncleanable and upper > first_dirty
    )
    first_timestamps = [
        s.first_batch_timestamp_ms for s, upper in zip(segments[:-1], uppers[:-1], strict=True)
        if upper > first_dirty and s.first_batch_timestamp_ms > 0
    ]
    delay = 0
    if first_timestamps:
        clean_until = now_ms - max(facts.max_compaction_lag_ms, 0)
        delay = max(0, clean_until - min(first_timestamps))
    due = facts.delete_horizon_due_ms is not None and facts.delete_horizon_due_ms <= now_ms
    return CleaningPlan(
        first_dirty_offset=first_dirty, first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes, cleanable_bytes=cleanable_bytes,
        max_compaction_delay_ms=delay, horizon_due=due,
        min_cleanable_dirty_ratio=facts.min_cleanable_dirty_ratio,
    )


K = TypeVar("K")


def choose_filthiest(plans: Sequence[tuple[K, CleaningPlan]]) -> K | None:
    """The log to clean next: of those that need it, the highest dirty ratio (Kafka)."""
    due = [(plan.dirty_ratio, index) for index, (_, plan) in enumerate(plans)
           if plan.needs_cleaning]
    if not due:
        return None
    return plans[max(due)[1]][0]


def log_facts(
    log_: Log, checkpoint_offset: int | None, delete_horizon_due_ms: int | None,
    first_unstable_offset: int | None = None,
) -> LogFacts:
    config = log_.config
    return LogFacts(
        segments=tuple(
            SegmentFacts(s.base_offset, s.size, s.largest_timestamp(),
                         s.first_batch_timestamp() or -1)
            for s in log_.segments
        ),
        log_start_offset=log_.log_start_offset, high_watermark=log_.high_watermark,
        log_end_offset=log_.log_end_offset, checkpoint_offset=checkpoint_offset,
        min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
        min_compaction_lag_ms=config.min_compaction_lag_ms,
        max_compaction_lag_ms=config.max_compaction_lag_ms,
        delete_horizon_due_ms=delete_horizon_due_ms,
        first_unstable_offset=first_unstable_offset,
    )


# -- the work (file I/O, thread-safe) ----------------------------------------------------------


class CleaningAborted(Exception):
    """The job was asked to stop (the node is stopping)."""


class SwapFailed(KafkaStorageError):
    """An I/O error in the middle of a swap: the Log's files and its segment list may
    disagree until a restart, whose leftover rules finish or undo the swap."""


@dataclass(slots=True)
class CleanStats:
    dirty_bytes_read: int = 0  # bytes of the dirty section mapped
    bytes_read: int = 0  # bytes of every segment rewritten
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    batches_kept_empty: int = 0
    tombstones_removed: int = 0
    aborted_records_removed: int = 0  # records of aborted transactions dropped
    markers_removed: int = 0  # COMMIT/ABORT markers dropped once their data was gone
    map_entries: int = 0
    map_bytes: int = 0
    passes_needed: bool = False  # the map filled before the end of the dirty section


@dataclass(slots=True)
class _Source:
    segment: LogSegment  # only its identity and path are used off the owner's thread
    path: Path
    base_offset: int
    upper: int  # the next segment's base offset
    size: int


@dataclass(slots=True)
class _Output:
    segment: LogSegment
    sources: list[_Source]


class _OffsetMap:
    """key -> latest offset, within a byte budget."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes_used = 0
        self.offsets: dict[bytes, int] = {}

    def try_put_batch(self, keyed: list[tuple[bytes, int]]) -> bool:
        """Add a batch's (key, offset) pairs whole, or nothing when over budget (unless the
        map is empty: a batch too large for the budget is still mapped, to make progress)."""
        offsets = self.offsets
        cost = sum(len(key) + MAP_ENTRY_OVERHEAD_BYTES for key, _ in keyed if key not in offsets)
        if offsets and self.bytes_used + cost > self.bytes_max:
            return False
        for key, offset in keyed:
            offsets[key] = offset
        self.bytes_used += cost
        return True


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """An aborted transaction: its producer's first batch at `first_offset`, its ABORT
    marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class LogTransactions:
    """What one scan of the whole log says about producers and transactions."""

    producer_last: dict[int, int] = field(default_factory=dict)  # id -> last batch's offset
    aborted: list[AbortedTxn] = field(default_factory=list)  # by first offset
    first_unstable_offset: int | None = None  # first batch of a transaction still open


def scan_transactions(batches: Iterable[tuple[BatchHeader, bytes]]) -> LogTransactions:
    """Fold the log's batches, in offset order, into its transactions: a producer's
    transactional data batches after its last marker form its open transaction, which its
    next COMMIT or ABORT marker closes. (Until the log keeps Kafka's `.txnindex`, this scan
    is how the cleaner learns which transactions were aborted.)"""
    found = LogTransactions()
    open_first: dict[int, int] = {}
    for header, batch in batches:
        producer_id = header.producer_id
        if producer_id == _NO_PRODUCER:
            continue
        found.producer_last[producer_id] = header.last_offset
        if not header.is_transactional:
            continue
        if not header.is_control:
            open_first.setdefault(producer_id, header.base_offset)
            continue
        kind = _marker_type(header, batch)
        first = open_first.pop(producer_id, None) if kind is not None else None
        if kind is ControlRecordType.ABORT and first is not None:
            found.aborted.append(AbortedTxn(producer_id, first, header.base_offset))
    found.aborted.sort(key=lambda txn: txn.first_offset)
    found.first_unstable_offset = min(open_first.values(), default=None)
    return found


def _marker_type(header: BatchHeader, batch: bytes) -> ControlRecordType | None:
    """COMMIT or ABORT for a transaction marker batch; None for any other control batch."""
    if header.records_count < 1:
        return None
    kind = read_control_record_type(next(iter(iter_records(batch))).key)
    return kind if kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT) else None


class _TransactionWalk:
    """Follows transactions batch by batch, in offset order, from wherever the walk starts
    (`aborted` holds only the aborted transactions whose marker is at or after that point):
    says which data batches belong to an aborted transaction (the cleaner drops them and
    keeps them out of the offset map) and which markers no longer guard any data (the
    cleaner may drop those once their delete horizon passes, KIP-534 style)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._ahead = collections.deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._aborting: dict[int, bool] = {}  # producer id -> saw a batch of it this walk
        self._committing: set[int] = set()

    def _enter(self, offset: int) -> None:
        ahead = self._ahead
        while ahead and ahead[0].first_offset <= offset:
            self._aborting[ahead.popleft().producer_id] = False

    def data_batch(self, header: BatchHeader) -> bool:
        """True if the batch is part of an aborted transaction."""
        self._enter(header.last_offset)
        if not header.is_transactional:
            return False
        if header.producer_id in self._aborting:
            self._aborting[header.producer_id] = True
            return True
        self._committing.add(header.producer_id)
        return False

    def marker(self, header: BatchHeader, kind: ControlRecordType) -> bool:
        """True if the marker guards no data left in this walk: every batch of its
        transaction has already been removed."""
        self._enter(header.last_offset)
        if kind is ControlRecordType.ABORT:
            return not self._aborting.pop(header.producer_id, False)
        if header.producer_id in self._committing:
            self._committing.discard(header.producer_id)
            return False
        return True


def _has_horizon(header: BatchHeader) -> bool:
    return bool(header.attributes & DELETE_HORIZON_BIT)


def _empty_batch(header: BatchHeader) -> bytes:
    """The batch's header alone, with no records: what keeps a producer's last sequence."""
    attributes = header.attributes & ~COMPRESSION_MASK & ~DELETE_HORIZON_BIT
    data = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, header.max_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, 0))
    struct.pack_into(">I", data, CRC_AT, crc32c.crc32c(memoryview(data)[CRC_FROM:]))
    return bytes(data)


# (offset, key, value is null, timestamp delta, start, end): one record of a batch, with
# where its bytes (length prefix included) lie in the decompressed records section
_Scanned = tuple[int, bytes | None, bool, int, int, int]


def _scan_records(batch: bytes, header: BatchHeader) -> tuple[bytes, list[_Scanned]]:
    """The batch's records section (decompressed) and, per record, what compaction needs.

    Cheaper than decoding Records: headers and values are skipped, nothing is copied but the
    keys. The CRC is checked first, and every record must end where its length says."""
    check_batch(batch)
    data = decompress(header.compression, memoryview(batch)[HEADER_SIZE:])
    scanned: list[_Scanned] = []
    append = scanned.append
    base_offset, position, size = header.base_offset, 0, len(data)
    try:
        for _ in range(header.records_count):
            start = position
            length, used = read_signed_varint(data, position)
            position += used
            end = position + length
            timestamp_delta, used = read_signed_varlong(data, position + 1)
            position += 1 + used
            offset_delta, used = read_signed_varint(data, position)
            position += used
            key_length, used = read_signed_varint(data, position)
            position += used
            key = None
            if key_length >= 0:
                key = data[position : position + key_length]
                position += key_length
            value_length, _ = read_signed_varint(data, position)
            if length < 0 or end > size or position > end or key_length < -1:
                raise CorruptRecord(f"malformed record at byte {start} of a batch at "
                                    f"offset {base_offset}")
            append((base_offset + offset_delta, key, value_length < 0, timestamp_delta,
                    start, end))
            position = end
    except (DecodeError, ValueError) as error:
        raise CorruptRecord(f"malformed record in batch at offset {base_offset}") from error
    if position != size:
        raise CorruptRecord(f"{size - position} bytes follow the records of the batch at "
                            f"offset {base_offset}")
    return data, scanned


def _rebuild_raw(header: BatchHeader, data: bytes, kept: list[_Scanned]) -> bytes:
    """The batch with only `kept` records, copied byte for byte (same base offset and base
    timestamp, so every delta stays valid); count, max timestamp and CRC are recomputed."""
    section = compress(header.compression, b"".join(data[k[4] : k[5]] for k in kept))
    if header.is_log_append_time:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + max(k[3] for k in kept)
    out = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(section),
        header.partition_leader_epoch, 2, 0, header.attributes, header.last_offset_delta,
        header.base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, len(kept)))
    out += section
    struct.pack_into(">I", out, CRC_AT, crc32c.crc32c(memoryview(out)[CRC_FROM:]))
    return bytes(out)


def _iter_file_batches(path: Path, abort: threading.Event) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every whole batch of a segment file, read through a descriptor of our own."""
    with open(path, "rb", buffering=0) as stream:
        buffer, position = b"", 0
        while True:
            if abort.is_set():
                raise CleaningAborted(str(path))
            if len(buffer) - position < LOG_OVERHEAD:
                more = stream.read(_READ_CHUNK_BYTES)
                if not more:
                    return
                buffer, position = buffer[position:] + more, 0
                continue
            _, batch_length = _LENGTH.unpack_from(buffer, position)
            size = LOG_OVERHEAD + batch_length
            if batch_length < HEADER_SIZE - LOG_OVERHEAD:
                return  # broken framing: the segment ends here, as recovery would say
            if len(buffer) - position < size:
                more = stream.read(max(_READ_CHUNK_BYTES, size))
                if not more:
                    return
                buffer, position = buffer[position:] + more, 0
                continue
            header = read_header(buffer, position)
            yield header, buffer[position : position + size]
            position += size


class Throttle:
    """Paces the cleaner's reads and writes to `rate_max` bytes/s (Kafka's
    log.cleaner.io.max.bytes.per.second): whenever a check interval's worth of bytes has
    gone, or the interval has passed, it sleeps off any excess. The clock and the sleep are
    injected (tests pass fakes); sleeping also gives the event loop's thread the GIL."""

    CHECK_INTERVAL_S: Final = 0.1

    def __init__(self, rate_max: float, clock: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.rate_max = rate_max
        self.clock = clock
        self.sleep = sleep
        self.slept_s = 0.0
        self._period_start = clock()
        self._period_bytes = 0

    def account(self, size: int) -> None:
        if self.rate_max == float("inf"):
            return
        self._period_bytes += size
        elapsed = self.clock() - self._period_start
        if elapsed < self.CHECK_INTERVAL_S and (
                self._period_bytes < self.rate_max * self.CHECK_INTERVAL_S):
            return
        excess = self._period_bytes / self.rate_max - elapsed
        if excess > 0:
            self.sleep(excess)
            self.slept_s += excess
        self._period_start = self.clock()
        self._period_bytes = 0


class CleaningJob:
    """One cleaning of one log. Built and finished by the Log's owner; `run` may go to a
    worker thread."""

    def __init__(
        self, log_: Log, plan: CleaningPlan, map_bytes_max: int, now_ms: int,
        throttle: Throttle | None = None,
    ) -> None:
        self.log = log_
        self.plan = plan
        self.config: LogConfig = log_.config
        self.map_bytes_max = map_bytes_max
        self.now_ms = now_ms
        segments = log_.segments
        uppers = [s.base_offset for s in segments[1:]] + [log_.log_end_offset]
        self._sources = [
            _Source(s, s.log_path, s.base_offset, upper, s.size)
            for s, upper in zip(segments[:-1], uppers[:-1], strict=True)
            if s.base_offset < plan.first_uncleanable_offset
        ]
        self._tail_paths = [s.log_path for s in segments]
        self._abort = threading.Event()
        self._throttle = throttle
        self.ran = False
        self.stats = CleanStats()
        self.end_offset = plan.first_dirty_offset
        self.delete_horizon_due_ms: int | None = None
        self._outputs: list[_Output] = []
        self.log_end_at_start = log_.log_end_offset
        self.transactions = LogTransactions()  # what run() finds in the whole log

    def abort(self) -> None:
        self._abort.set()

    def _account(self, size: int) -> None:
        if self._throttle is not None:
            self._throttle.account(size)

    # -- run: off the owner's thread ----------------------------------------------------------

    def run(self) -> None:
        """Scan the log's transactions, map the dirty section, then write each group's
        cleaned segment (`.cleaned`)."""
        try:
            self.transactions = scan_transactions(self._tail_batches())
            offset_map = self._build_offset_map()
            groups = self._groups([s for s in self._sources if s.base_offset < self.end_offset])
            invariant(all(s.upper <= self.plan.first_uncleanable_offset for g in groups
                          for s in g), "the cleaner never rewrites an uncleanable segment")
            walk = _TransactionWalk(self.transactions.aborted)
            for group in groups:
                self._outputs.append(
                    _Output(self._clean_group(group, offset_map, walk), group))
            self.ran = True
        except BaseException:
            self.discard()
            raise

    def _build_offset_map(self) -> _OffsetMap:
        plan, stats = self.plan, self.stats
        offset_map = _OffsetMap(self.map_bytes_max)
        start, stop = plan.first_dirty_offset, plan.first_uncleanable_offset
        unstable = self.transactions.first_unstable_offset
        if unstable is not None:
            stop = min(stop, unstable)  # an open transaction's records may yet be aborted
        walk = _TransactionWalk(t for t in self.transactions.aborted if t.last_offset >= start)
        end = start
        for source in self._sources:
            if source.upper <= start or source.base_offset >= stop:
                continue
            for header, batch in _iter_file_batches(source.path, self._abort):
                if header.base_offset >= stop:
                    break
                if header.is_control:
                    kind = _marker_type(header, batch) if header.last_offset >= start else None
                    if kind is not None:
                        walk.marker(header, kind)
                    end = max(end, header.next_offset)
                    continue
                if header.last_offset < start:
                    end = max(end, header.next_offset)
                    continue
                if walk.data_batch(header):  # aborted: never the latest value of its keys
                    end = header.next_offset
                    continue
                _, scanned = _scan_records(batch, header)
                keyed = [(key, offset) for offset, key, *_ in scanned if key is not None]
                if not offset_map.try_put_batch(keyed):
                    stats.passes_needed = True
                    self._finish_map(offset_map, end)
                    return offset_map
                stats.dirty_bytes_read += header.size
                self._account(header.size)
                end = header.next_offset
        self._finish_map(offset_map, max(end, stop) if stop > start else end)
        return offset_map

    def _finish_map(self, offset_map: _OffsetMap, end: int) -> None:
        self.end_offset = end
        self.stats.map_entries = len(offset_map.offsets)
        self.stats.map_bytes = offset_map.bytes_used

    def _groups(self, sources: list[_Source]) -> list[list[_Source]]:
        """Consecutive segments whose sizes add up to at most segment.bytes and whose
        offsets fit one segment's relative range."""
        groups: list[list[_Source]] = []
        for source in sources:
            current = groups[-1] if groups else None
            if (
                current is not None
                and sum(s.size for s in current) + source.size <= self.config.segment_bytes
                and source.upper - 1 - current[0].base_offset <= RELATIVE_OFFSET_MAX
            ):
                current.append(source)
            else:
                groups.append([source])
        return groups

    def _clean_group(
        self, group: list[_Source], offset_map: _OffsetMap, walk: _TransactionWalk
    ) -> LogSegment:
        directory, base = group[0].path.parent, group[0].base_offset
        name = segment_base_name(base)
        for path in directory.glob(f"{name}.*{log_files.CLEANED_SUFFIX}"):
            path.unlink()
        output = LogSegment(directory, base, self.config, self.now_ms,
                            suffix=log_files.CLEANED_SUFFIX)
        try:
            self._write_group(output, group, offset_map, walk)
        except BaseException:
            with contextlib.suppress(OSError):
                output.close()
            for path in output.paths():
                path.unlink(missing_ok=True)
            raise
        return output

    def _write_group(
        self, output: LogSegment, group: list[_Source], offset_map: _OffsetMap,
        walk: _TransactionWalk,
    ) -> None:
        output.open_for_append(self.config)
        output.fd  # noqa: B018 - the log file exists even if nothing is kept
        pending: list[bytes] = []
        entries: list[tuple[int, int, int]] = []
        pending_bytes = 0
        for source in group:
            for header, batch in _iter_file_batches(source.path, self._abort):
                self.stats.bytes_read += header.size
                self._account(header.size)
                kept = self._filter_batch(header, batch, offset_map, walk)
                if kept is None:
                    continue
                kept_header = read_header(kept)
                pending.append(kept)
                entries.append((len(kept), kept_header.last_offset, kept_header.max_timestamp))
                pending_bytes += len(kept)
                if pending_bytes >= _WRITE_CHUNK_BYTES:
                    output.append(b"".join(pending), entries)
                    self.stats.bytes_written += pending_bytes
                    self._account(pending_bytes)
                    pending, entries, pending_bytes = [], [], 0
        if pending:
            output.append(b"".join(pending), entries)
            self.stats.bytes_written += pending_bytes
        output.on_become_inactive()
        output.flush()
        os.fsync(output.fd)  # the new file is durable before any swap step
        output.close()

    def _filter_batch(
        self, header: BatchHeader, batch: bytes, offset_map: _OffsetMap, walk: _TransactionWalk
    ) -> bytes | None:
        """The batch as it stays in the cleaned log: unchanged, rebuilt, empty, or None."""
        if header.is_control:
            return self._filter_marker(header, batch, walk)
        data, scanned = _scan_records(batch, header)
        stats = self.stats
        stats.records_read += len(scanned)
        if walk.data_batch(header):
            stats.aborted_records_removed += len(scanned)
            return self._emptied(header)
        horizon = header.base_timestamp if _has_horizon(header) else None
        retain_deletes = horizon is None or self.now_ms < horizon
        offsets = offset_map.offsets
        kept: list[_Scanned] = []
        has_tombstone = False
        for item in scanned:
            offset, key, is_tombstone = item[0], item[1], item[2]
            if key is None or offset < offsets.get(key, -1):
                continue
            if is_tombstone:
                if not retain_deletes:
                    stats.tombstones_removed += 1
                    continue
                has_tombstone = True
            kept.append(item)
        stats.records_kept += len(kept)
        if has_tombstone:
            horizon = horizon if horizon is not None else (
                self.now_ms + self.config.delete_retention_ms)
            due = self.delete_horizon_due_ms
            self.delete_horizon_due_ms = horizon if due is None else min(due, horizon)
        if len(kept) == len(scanned) and (not has_tombstone or _has_horizon(header)):
            return batch
        if not kept:
            return self._emptied(header)
        if has_tombstone and not _has_horizon(header):
            assert horizon is not None
            wanted = {item[0] for item in kept}
            records = [r for r in iter_records(batch) if r.offset in wanted]
            return self._rebuild(header, records, horizon)
        return _rebuild_raw(header, data, kept)

    def _rebuild(self, header: BatchHeader, kept: list[Record], horizon: int | None) -> bytes:
        arguments: dict[str, Any] = dict(
            base_offset=header.base_offset, compression=header.compression,
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=header.partition_leader_epoch,
            is_transactional=header.is_transactional, is_control=header.is_control,
            log_append_time=header.is_log_append_time,
        )
        builder = BatchBuilder(delete_horizon_ms=horizon, **arguments)
        for record in kept:
            builder.append(record.offset, record.timestamp, record.key, record.value,
                           record.headers)
        return builder.build(last_offset_delta=header.last_offset_delta)

    def _emptied(self, header: BatchHeader) -> bytes | None:
        """A batch left without records: gone, unless it is its producer's last batch in the
        log, whose header stays (empty) so that the producer's sequence survives."""
        last = self.transactions.producer_last.get(header.producer_id)
        if header.producer_id != _NO_PRODUCER and last == header.last_offset:
            self.stats.batches_kept_empty += 1
            return _empty_batch(header)
        return None

    def _filter_marker(
        self, header: BatchHeader, batch: bytes, walk: _TransactionWalk
    ) -> bytes | None:
        """A COMMIT/ABORT marker stays while data of its transaction is left in the log;
        after that it is stamped with a delete horizon (now + delete.retention.ms, so a
        consumer mid-way through the log still sees it), and goes once that has passed.
        Other control batches stay as they are."""
        kind = _marker_type(header, batch)
        if kind is None or not walk.marker(header, kind):
            return batch
        if _has_horizon(header):
            horizon = header.base_timestamp
            if horizon <= self.now_ms:
                self.stats.markers_removed += 1
                return self._emptied(header)
        else:
            horizon = self.now_ms + self.config.delete_retention_ms
            batch = self._rebuild(header, list(iter_records(batch)), horizon)
        due = self.delete_horizon_due_ms
        self.delete_horizon_due_ms = horizon if due is None else min(due, horizon)
        return batch

    def _tail_batches(self) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch of the log as it is now, active segment included."""
        for path in self._tail_paths:
            try:
                yield from _iter_file_batches(path, self._abort)
            except FileNotFoundError:
                continue  # deleted meanwhile; the swap will notice

    # -- finish: on the owner's thread ------------------------------------------------------

    def swap(self, now_ms: int) -> bool:
        """Swap every cleaned group in; False if the log changed under the job (then the
        remaining output is discarded and nothing more is swapped)."""
        for index, output in enumerate(self._outputs):
            old = [source.segment for source in output.sources]
            if self.log.replace_segments(output.segment, old, now_ms) is None:
                self._outputs = self._outputs[index:]
                self.discard()
                return False
        self._outputs = []
        return True

    def discard(self) -> None:
        for output in self._outputs:
            for path in output.segment.paths():
                path.unlink(missing_ok=True)
        self._outputs = []


# -- the cleaner (owner's thread) --------------------------------------------------------------


@dataclass(slots=True)
class _PartitionState:
    owner: Log | None = None  # the log these facts are about (None: read from a file)
    checkpoint_offset: int | None = None
    delete_horizon_due_ms: int | None = None
    last_clean_ms: int = -1
    last_stats: CleanStats | None = None
    # the first offset of an open transaction, found by the last cleaning, while the log
    # ends where it ended then (a transaction closes only by an append)
    first_unstable_offset: int | None = None
    unstable_as_of_log_end: int = -1

    def facts(self, log_: Log) -> LogFacts:
        unstable = (self.first_unstable_offset
                    if self.unstable_as_of_log_end == log_.log_end_offset else None)
        return log_facts(log_, self.checkpoint_offset, self.delete_horizon_due_ms, unstable)


@dataclass(slots=True)
class LogCleaner:
    """Chooses logs and runs cleaning jobs; keeps `cleaner-offset-checkpoint` per log dir.

    `logs` lists (log, its log dir) each time it is called; the caller owns the logs.
    """

    config: CleanerConfig
    logs: Callable[[], Sequence[tuple[Log, Path]]]
    _states: dict[tuple[str, int], _PartitionState] = field(default_factory=dict)
    _loaded_dirs: set[Path] = field(default_factory=set)
    # partitions whose cleaning failed (a corrupt batch, an I/O error): skipped until restart,
    # as Kafka's cleaner marks them uncleanable
    uncleanable: set[tuple[str, int]] = field(default_factory=set)
    # only the I/O throttle reads a clock; decisions take now_ms
    io_clock: Callable[[], float] = time.monotonic
    io_sleep: Callable[[float], None] = time.sleep

    def _state(self, log_: Log, log_dir: Path) -> _PartitionState:
        if log_dir not in self._loaded_dirs:
            self._loaded_dirs.add(log_dir)
            for key, offset in read_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT).items():
                self._states.setdefault(key, _PartitionState()).checkpoint_offset = offset
        key = (log_.topic, log_.partition)
        state = self._states.setdefault(key, _PartitionState())
        if state.owner is None:
            state.owner = log_
        elif state.owner is not log_:  # the topic was deleted and created again
            state = self._states[key] = _PartitionState(owner=log_)
        return state

    def status(self, now_ms: int) -> dict[tuple[str, int], tuple[CleaningPlan, int]]:
        """Per compacted partition: its plan at `now_ms` (dirty ratio, first dirty offset)
        and the time of its last cleaning (-1: none since start), for tools."""
        result = {}
        for log_, log_dir in self.logs():
            if log_.config.compact:
                state = self._state(log_, log_dir)
                result[(log_.topic, log_.partition)] = (
                    plan_cleaning(state.facts(log_), now_ms), state.last_clean_ms)
        return result

    def next_job(self, now_ms: int) -> CleaningJob | None:
        """The job for the dirtiest compacted log that is due, if any."""
        candidates: list[tuple[Log, CleaningPlan]] = []
        for log_, log_dir in self.logs():
            if not log_.config.compact or (log_.topic, log_.partition) in self.uncleanable:
                continue
            state = self._state(log_, log_dir)
            candidates.append((log_, plan_cleaning(state.facts(log_), now_ms)))
        chosen = choose_filthiest(candidates)
        if chosen is None:
            return None
        plan = next(plan for candidate, plan in candidates if candidate is chosen)
        throttle = Throttle(self.config.io_max_bytes_per_second, self.io_clock, self.io_sleep)
        return CleaningJob(chosen, plan, self.config.map_bytes_max, now_ms, throttle)

    def finish(self, job: CleaningJob, now_ms: int) -> bool:
        """Swap the job's output in and record progress; False if it was dropped."""
        invariant(job.ran, f"cleaning job for {job.log.dir.name} finished before it ran")
        try:
            swapped = job.swap(now_ms)
        except OSError as error:
            raise SwapFailed(f"swapping cleaned segments into {job.log.dir.name} failed: "
                             f"{error}; a restart completes or undoes the swap") from error
        if not swapped:
            log.info("cleaning of %s dropped: its segments changed meanwhile", job.log.dir.name)
            return False
        stats = job.stats
        log.info(
            "cleaned %s: dirty ratio %.2f, offsets [%d, %d) mapped (%d keys, %d bytes of map), "
            "%d -> %d bytes, %d of %d records kept, %d tombstones, %d aborted records and "
            "%d transaction markers removed, next dirty offset %d",
            job.log.dir.name, job.plan.dirty_ratio, job.plan.first_dirty_offset,
            job.end_offset, stats.map_entries, stats.map_bytes, stats.bytes_read,
            stats.bytes_written, stats.records_kept, stats.records_read,
            stats.tombstones_removed, stats.aborted_records_removed, stats.markers_removed,
            job.end_offset)
        home = {(lg.topic, lg.partition): d for lg, d in self.logs()}
        key = (job.log.topic, job.log.partition)
        state = self._states.setdefault(key, _PartitionState(owner=job.log))
        state.checkpoint_offset = job.end_offset
        state.delete_horizon_due_ms = job.delete_horizon_due_ms
        state.first_unstable_offset = job.transactions.first_unstable_offset
        state.unstable_as_of_log_end = job.log_end_at_start
        state.last_clean_ms = now_ms
        state.last_stats = job.stats
        if key in home:
            self._write_checkpoint(home[key], home)
        return True

    def clean_once(self, now_ms: int) -> CleaningJob | None:
        """Choose, run and finish one job on this thread (tools, tests, benchmarks)."""
        job = self.next_job(now_ms)
        if job is None:
            return None
        job.run()
        self.finish(job, now_ms)
        return job

    def _write_checkpoint(self, log_dir: Path, home: Mapping[tuple[str, int], Path]) -> None:
        offsets = {key: state.checkpoint_offset for key, state in self._states.items()
                   if state.checkpoint_offset is not None and home.get(key) == log_dir}
        write_offsets_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
