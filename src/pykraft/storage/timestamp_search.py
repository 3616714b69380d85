"""ListOffsets by timestamp: the exact record inside the one batch the indexes lead to.

The log finds the first batch whose max timestamp reaches the target from batch headers;
Kafka answers with the first *record* at or after the target, so that one batch is decoded
here: decompressed if needed, then each record's timestamp and offset deltas are read and
everything else skipped by the record's length prefix.
"""

from __future__ import annotations

from typing import Final

from pykraft.errors import CorruptRecord
from pykraft.records.batch import HEADER_SIZE, read_header
from pykraft.records.codecs import decompress

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "first_record_at_or_after",
]

LATEST_TIMESTAMP: Final = -1
EARLIEST_TIMESTAMP: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL_TIMESTAMP: Final = -4


def _varint(data: bytes, position: int) -> tuple[int, int]:
    """A zigzag varint at `position`: (value, next position)."""
    raw, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise CorruptRecord("malformed varint in record")
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def first_record_at_or_after(
    batch: bytes, target_timestamp: int, min_offset: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with timestamp >= target and offset >= min."""
    header = read_header(batch)
    if header.max_timestamp < target_timestamp:
        return None
    if header.is_log_append_time:
        offset = max(header.base_offset, min_offset)
        return (offset, header.max_timestamp) if offset <= header.last_offset else None
    records = bytes(batch[HEADER_SIZE:])
    if header.compression:
        records = decompress(header.compression, records)
    position = 0
    for _ in range(header.records_count):
        length, position = _varint(records, position)
        end = position + length
        if length < 0 or end > len(records):
            raise CorruptRecord("record length runs past its batch")
        timestamp_delta, cursor = _varint(records, position + 1)  # after the attributes byte
        offset_delta, _ = _varint(records, cursor)
        timestamp = header.base_timestamp + timestamp_delta
        offset = header.base_offset + offset_delta
        if timestamp >= target_timestamp and offset >= min_offset:
            return offset, timestamp
        position = end
    return None
