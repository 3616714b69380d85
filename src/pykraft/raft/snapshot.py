"""Snapshots of the metadata log (KIP-630): file names, contents, and a streaming checker.

A snapshot `<end offset:020>-<epoch:010>.checkpoint` in the metadata log directory holds the
state machine's image after every entry below its end offset. Its content is RecordBatch v2
batches, as Kafka writes them: offsets count from 0 within the snapshot, every batch carries
the snapshot's epoch, the first batch is a control batch holding one SnapshotHeader record,
the last a control batch holding one SnapshotFooter record, and the batches between hold the
state machine's records (their values are the state machine's business).

A snapshot is written as `<name>.checkpoint.part`, fsynced, checked and then renamed, so a
`.checkpoint` file is whole; a `.part` file is what a crash interrupted and is removed on
open. `SnapshotParser` takes the bytes in chunks of any size (a fetched snapshot arrives in
unaligned chunks, a file is read in blocks) and checks the framing, every CRC, contiguous
offsets from 0, and the header-first / footer-last layout; nothing may follow the footer.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from pykraft.errors import CorruptRecord
from pykraft.raft.control import (
    decode_snapshot_footer,
    decode_snapshot_header,
    snapshot_footer_record,
    snapshot_header_record,
)
from pykraft.raft.messages import SnapshotId
from pykraft.records.batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, check_batch
from pykraft.records.record import (
    ControlRecordType,
    build_batch,
    iter_records,
    read_control_record_type,
)

__all__ = [
    "SNAPSHOT_SUFFIX",
    "PARTIAL_SUFFIX",
    "SnapshotSummary",
    "SnapshotParser",
    "snapshot_file_name",
    "parse_snapshot_file_name",
    "build_snapshot",
    "check_snapshot",
    "snapshot_values",
]

SNAPSHOT_SUFFIX: Final = ".checkpoint"
PARTIAL_SUFFIX: Final = ".checkpoint.part"
SNAPSHOT_BATCH_BYTES_MAX: Final = 8 * 1024 * 1024 + 1024  # as the metadata log's batches
_BATCH_LENGTH: Final = struct.Struct(">i")
_NAME: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> SnapshotId | None:
    """The id a `.checkpoint` file name stands for; None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(end_offset=int(match.group(1)), epoch=int(match.group(2)))


def build_snapshot(
    snapshot_id: SnapshotId,
    values: Iterable[bytes],
    *,
    last_contained_log_timestamp: int,
    timestamp_ms: int,
    batch_bytes_max: int = 1024 * 1024,
) -> list[bytes]:
    """The batches of a snapshot holding `values`, one record each, in order."""
    epoch = snapshot_id.epoch
    key, value = snapshot_header_record(last_contained_log_timestamp=last_contained_log_timestamp)
    batches = [
        build_batch(
            [(key, value, (), timestamp_ms)],
            base_offset=0,
            partition_leader_epoch=epoch,
            is_control=True,
        )
    ]
    offset = 1
    pending: list[bytes] = []
    pending_bytes = 0

    def seal() -> None:
        nonlocal offset, pending_bytes
        records = [(None, record, (), timestamp_ms) for record in pending]
        batches.append(build_batch(records, base_offset=offset, partition_leader_epoch=epoch))
        offset += len(pending)
        pending.clear()
        pending_bytes = 0

    for record in values:
        if pending and pending_bytes + len(record) > batch_bytes_max:
            seal()
        pending.append(record)
        pending_bytes += len(record) + 24  # a record's framing around its value, at most
    if pending:
        seal()
    key, value = snapshot_footer_record()
    batches.append(
        build_batch(
            [(key, value, (), timestamp_ms)],
            base_offset=offset,
            partition_leader_epoch=epoch,
            is_control=True,
        )
    )
    return batches


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    size_bytes: int
    record_count: int  # data records, the header and footer not counted
    last_contained_log_timestamp: int


class SnapshotParser:
    """Checks a snapshot fed in chunks; `feed` returns the whole batches completed so far
    (header, bytes), `finish` checks that the footer ended it. Raises CorruptRecord."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._size_bytes = 0
        self._next_offset = 0
        self._record_count = 0
        self._timestamp: int | None = None
        self._footer_seen = False

    def feed(self, data: bytes) -> list[tuple[BatchHeader, bytes]]:
        self._buffer += data
        self._size_bytes += len(data)
        batches: list[tuple[BatchHeader, bytes]] = []
        position = 0
        while len(self._buffer) - position >= LOG_OVERHEAD:
            (batch_length,) = _BATCH_LENGTH.unpack_from(self._buffer, position + 8)
            size = LOG_OVERHEAD + batch_length
            if not HEADER_SIZE <= size <= SNAPSHOT_BATCH_BYTES_MAX:
                raise CorruptRecord(f"snapshot batch of {size} bytes")
            if len(self._buffer) - position < size:
                break
            batch = bytes(self._buffer[position : position + size])
            batches.append((self._check(batch), batch))
            position += size
        del self._buffer[:position]
        if len(self._buffer) > SNAPSHOT_BATCH_BYTES_MAX:
            raise CorruptRecord(f"{len(self._buffer)} snapshot bytes without a whole batch")
        return batches

    def finish(self) -> SnapshotSummary:
        if self._buffer or not self._footer_seen or self._timestamp is None:
            raise CorruptRecord(
                f"snapshot of {self._size_bytes} bytes is torn: "
                f"{len(self._buffer)} trailing bytes, footer seen {self._footer_seen}"
            )
        return SnapshotSummary(self._size_bytes, self._record_count, self._timestamp)

    def _check(self, batch: bytes) -> BatchHeader:
        header = check_batch(batch)
        if self._footer_seen:
            raise CorruptRecord("a snapshot batch after the footer")
        if header.base_offset != self._next_offset:
            raise CorruptRecord(
                f"snapshot batch at offset {header.base_offset}, expected {self._next_offset}"
            )
        self._next_offset = header.next_offset
        first = self._timestamp is None
        if header.is_control:
            records = list(iter_records(batch))
            if len(records) != 1:
                raise CorruptRecord(f"a snapshot control batch of {len(records)} records")
            kind = read_control_record_type(records[0].key)
            if first and kind is ControlRecordType.SNAPSHOT_HEADER:
                header_record = decode_snapshot_header(records[0].value)
                self._timestamp = int(header_record.last_contained_log_timestamp)
            elif not first and kind is ControlRecordType.SNAPSHOT_FOOTER:
                decode_snapshot_footer(records[0].value)
                self._footer_seen = True
            else:
                raise CorruptRecord(f"snapshot control record {kind.name} out of place")
        elif first:
            raise CorruptRecord("a snapshot that does not open with its header")
        else:
            self._record_count += header.records_count
        return header


def check_snapshot(data: bytes) -> SnapshotSummary:
    """Check a whole snapshot held in memory."""
    parser = SnapshotParser()
    parser.feed(data)
    return parser.finish()


def snapshot_values(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The state machine's record values in a snapshot given as chunks, after checking it."""
    parser = SnapshotParser()
    for chunk in chunks:
        for header, batch in parser.feed(chunk):
            if header.is_control:
                continue
            for record in iter_records(batch):
                if record.value is None:
                    raise CorruptRecord(f"null value at snapshot offset {record.offset}")
                yield record.value
    parser.finish()
