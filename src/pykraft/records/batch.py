"""RecordBatch v2 header: a view over the 61 bytes every batch starts with.

The hot paths (produce, fetch, replication, recovery) only ever look at batch headers. A
batch on the wire and on disk is:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 (=2)
    | crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64
    | maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32
    | recordsCount int32 | records...

`batchLength` counts the bytes after itself (so a whole batch is 12 + batchLength bytes).
The CRC32C covers everything from `attributes` to the end, so `baseOffset` and
`partitionLeaderEpoch` can be rewritten in place without recomputing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

import crc32c

from pykraft.errors import CorruptRecord

BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE: Final = BATCH_HEADER.size  # 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the bytes batchLength does not count
LEADER_EPOCH_AT: Final = 12
MAGIC_AT: Final = 16
CRC_AT: Final = 17
CRC_FROM: Final = 21  # the CRC covers attributes .. end of batch
ATTRIBUTES_AT: Final = 21
MAX_TIMESTAMP_AT: Final = 35
CURRENT_MAGIC: Final = 2

# attributes bits
COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
NO_TIMESTAMP: Final = -1

_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_LENGTH: Final = struct.Struct(">qi")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def read_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the header at `position`; raise CorruptRecord if fewer than 61 bytes remain."""
    if len(buffer) - position < HEADER_SIZE:
        raise CorruptRecord(f"{len(buffer) - position} bytes left, a batch header needs 61")
    return BatchHeader._make(BATCH_HEADER.unpack_from(buffer, position))


def check_batch(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Check framing, magic and CRC32C of the batch at `position`; return its header."""
    header = read_header(buffer, position)
    if header.magic != CURRENT_MAGIC:
        raise CorruptRecord(f"batch at byte {position} has magic {header.magic}, expected 2")
    end = position + header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or end > len(buffer):
        raise CorruptRecord(
            f"batch at byte {position} claims {header.batch_length} bytes, "
            f"{len(buffer) - position - LOG_OVERHEAD} are there"
        )
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecord(f"batch at byte {position} has negative counts")
    if crc32c.crc32c(memoryview(buffer)[position + CRC_FROM : end]) != header.crc:
        raise CorruptRecord(f"CRC32C mismatch in batch at byte {position}")
    return header


def iter_headers(
    buffer: bytes | bytearray | memoryview, *, check: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each whole batch in `buffer`.

    A trailing partial batch (as Fetch responses may end with) is not yielded. With
    `check=True` every batch's CRC is verified and framing errors raise CorruptRecord.
    """
    position, length = 0, len(buffer)
    while length - position >= LOG_OVERHEAD:
        _, batch_length = _LENGTH.unpack_from(buffer, position)
        if position + LOG_OVERHEAD + batch_length > length:
            return
        header = check_batch(buffer, position) if check else read_header(buffer, position)
        yield position, header
        position += header.size


def split_batches(buffer: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    """Check a producer's records blob: whole, well-formed batches only, CRCs correct."""
    batches = list(iter_headers(buffer, check=True))
    consumed = batches[-1][0] + batches[-1][1].size if batches else 0
    if consumed != len(buffer) or not batches:
        raise CorruptRecord(f"records hold {len(buffer)} bytes, whole batches {consumed}")
    return batches


def stamp_batch(batch: bytearray, position: int, base_offset: int, leader_epoch: int) -> None:
    """Assign the batch at `position` its base offset and leader epoch, in place.

    Neither field is under the CRC, so nothing is recomputed.
    """
    _INT64.pack_into(batch, position, base_offset)
    _INT32.pack_into(batch, position + LEADER_EPOCH_AT, leader_epoch)


def set_log_append_time(batch: bytearray, position: int, timestamp_ms: int) -> None:
    """Mark the batch at `position` LogAppendTime with `timestamp_ms`, recomputing its CRC.

    Unlike offset stamping this touches CRC-covered bytes, so it costs one CRC pass.
    """
    header = read_header(batch, position)
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", batch, position + ATTRIBUTES_AT, attributes)
    _INT64.pack_into(batch, position + MAX_TIMESTAMP_AT, timestamp_ms)
    end = position + header.size
    crc = crc32c.crc32c(memoryview(batch)[position + CRC_FROM : end])
    _UINT32.pack_into(batch, position + CRC_AT, crc)


def set_max_timestamp(batch: bytearray, position: int, timestamp_ms: int) -> None:
    """Set the maxTimestamp of the (CreateTime) batch at `position`, recomputing its CRC, as
    Kafka's validator does when a producer's header disagrees with its records."""
    header = read_header(batch, position)
    _INT64.pack_into(batch, position + MAX_TIMESTAMP_AT, timestamp_ms)
    end = position + header.size
    _UINT32.pack_into(batch, position + CRC_AT,
                      crc32c.crc32c(memoryview(batch)[position + CRC_FROM : end]))


def compute_crc(batch: bytes | bytearray | memoryview, position: int = 0) -> int:
    header = read_header(batch, position)
    return crc32c.crc32c(memoryview(batch)[position + CRC_FROM : position + header.size])
