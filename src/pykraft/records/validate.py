"""What a producer's batch must be before it is appended: Kafka's LogValidator, per batch.

The produce path checks each batch's header and CRC (batch.py), then every record in it here,
so that nothing a consumer cannot read is ever stored (a valid CRC over garbage records once
stalled every consumer at that offset). A compressed batch is decompressed first, under a
bound on the decompressed size, and its records checked the same way; the bytes appended are
still the producer's own.

The record rules (`scan_records_python` is the reference, `_scan.c` its C twin on the hot
path, and a property test holds them to the same answer on any input):

- exactly `count` records fill the section, no byte left over;
- each record's length is non-negative and within the section, and its fields take exactly
  that many bytes;
- varints fit their type (at most 5 bytes and 32 bits; varlongs 10 bytes and 64 bits);
- the offset delta of record i is i (Kafka rewrites a compressed batch whose inner offsets
  are off and stores an uncompressed one as it came; we refuse both, see deviations.md);
- key and value lengths are -1 (null) or fit the record; the header count is not negative;
  a header key is never null and its value length is -1 or fits.

A record's timestamp is the batch's base timestamp plus its delta, wrapping at 64 bits as
Java's long addition does. The scan returns the largest timestamp, the smallest one other
than -1 (no timestamp) and how many records have no key; the caller checks them against the
topic's timestamp bounds and cleanup policy, and only when one fails does it decode the
records again (slowly, here) to name each offending record, as Produce's record_errors do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, NamedTuple

from pykraft.errors import CorruptRecord, InvalidRecord, MessageTooLarge
from pykraft.records.batch import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
)
from pykraft.records.codecs import CompressionType, decompress_scratch

__all__ = [
    "DECOMPRESSED_BATCH_BYTES_MAX",
    "DECOMPRESSED_BATCH_BYTES_MAX_KEY",
    "RECORD_ERRORS_MAX",
    "RecordsSummary",
    "check_client_batch",
    "native_scan_loaded",
    "scan_records",
    "scan_records_python",
    "timestamp_errors",
    "validate_batch",
]

log = logging.getLogger(__name__)

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
_UINT64: Final = 1 << 64
# A produce answer names at most this many bad records (Kafka names all of them; a batch of
# a million keyless records would make a response of tens of megabytes).
RECORD_ERRORS_MAX: Final = 1000
# The most a produced batch may decompress to, unless the node says otherwise
# (DECOMPRESSED_BATCH_BYTES_MAX_KEY): 128 times Kafka's 1 MiB max.message.bytes.
DECOMPRESSED_BATCH_BYTES_MAX: Final = 128 * 1024 * 1024
DECOMPRESSED_BATCH_BYTES_MAX_KEY: Final = "pykraft.produce.decompressed.batch.max.bytes"


class RecordsSummary(NamedTuple):
    max_timestamp: int  # over all records
    min_timestamp: int  # over records with a timestamp (not -1); INT64_MAX if none has one
    keyless_count: int


# -- the scan --------------------------------------------------------------------------------


class _Malformed(Exception):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(index, message)
        self.index, self.message = index, message


def _read_varint(data: bytes, position: int, end: int, bits: int, what: str,
                 index: int) -> tuple[int, int]:
    """A zigzag varint of at most `bits` bits, read within data[position:end]."""
    raw, shift, last_shift = 0, 0, (bits - 1) // 7 * 7
    while True:
        if position >= end:
            raise _Malformed(index, f"record {index}: its {what} runs past the end of the "
                                    "record")
        byte = data[position]
        position += 1
        if shift == last_shift and byte >> (bits - last_shift):
            raise _Malformed(index, f"record {index}: its {what} is longer than its type")
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7


def _skip(position: int, end: int, length: int, nullable: bool) -> int | None:
    """The position after a field of `length` bytes, or None if it does not fit."""
    if length < (-1 if nullable else 0) or length > end - position:
        return None
    return position + max(length, 0)


def scan_records_python(section: bytes | bytearray | memoryview, count: int,
                        base_timestamp: int) -> tuple[int, int, int]:
    """The reference scan: (max timestamp, min timestamp other than -1, keyless count), or
    ValueError(index, message) for the first malformed record (index -1: the section's)."""
    data = bytes(section)
    position, end = 0, len(data)
    max_timestamp, min_timestamp, keyless = INT64_MIN, INT64_MAX, 0
    try:
        for index in range(count):
            length, position = _read_varint(data, position, end, 32, "length varint", index)
            if length < 0 or length > end - position:
                raise _Malformed(index, f"record {index} declares {length} bytes, "
                                        f"{end - position} are left")
            record_end = position + length
            if position >= record_end:
                raise _Malformed(index, f"record {index} is empty")
            position += 1  # attributes: unused in v2
            delta, position = _read_varint(data, position, record_end, 64, "timestamp delta",
                                           index)
            offset_delta, position = _read_varint(data, position, record_end, 32,
                                                  "offset delta", index)
            if offset_delta != index:
                raise _Malformed(index, f"record {index} has offset delta {offset_delta}")
            for what in ("key", "value"):
                field_length, position = _read_varint(data, position, record_end, 32,
                                                      f"{what} length", index)
                after = _skip(position, record_end, field_length, nullable=True)
                if after is None:
                    raise _Malformed(index, f"record {index}: {what} length {field_length} "
                                            "does not fit the record")
                if what == "key" and field_length == -1:
                    keyless += 1
                position = after
            header_count, position = _read_varint(data, position, record_end, 32,
                                                  "header count", index)
            if header_count < 0:
                raise _Malformed(index, f"record {index} has {header_count} headers")
            for header in range(header_count):
                for part, nullable in (("key", False), ("value", True)):
                    field_length, position = _read_varint(
                        data, position, record_end, 32, f"header {header}'s {part} length",
                        index)
                    after = _skip(position, record_end, field_length, nullable)
                    if after is None:
                        raise _Malformed(index, f"record {index}: header {header}'s {part} "
                                                f"length {field_length} does not fit the "
                                                "record")
                    position = after
            if position != record_end:
                raise _Malformed(index, f"record {index} declares {length} bytes, its fields "
                                        f"take {length - (record_end - position)}")
            timestamp = (base_timestamp + delta) % _UINT64  # wraps as Java's long does
            if timestamp > INT64_MAX:
                timestamp -= _UINT64
            max_timestamp = max(max_timestamp, timestamp)
            if timestamp != NO_TIMESTAMP:
                min_timestamp = min(min_timestamp, timestamp)
        if position != end:
            raise _Malformed(-1, f"{end - position} bytes follow the batch's {count} records")
    except _Malformed as malformed:
        raise ValueError(malformed.index, malformed.message) from None
    return max_timestamp, min_timestamp, keyless


def _load_native() -> Callable[[bytes | bytearray | memoryview, int, int],
                               tuple[int, int, int]] | None:
    try:
        from pykraft.records import _scan  # type: ignore[attr-defined]  # built by setup
    except ImportError:
        log.warning("pykraft.records._scan is not built: produce checks records in Python, "
                    "several times slower (reinstall pykraft with a C compiler to build it)")
        return None
    native: Callable[[bytes | bytearray | memoryview, int, int], tuple[int, int, int]]
    native = _scan.scan
    return native


_native_scan = _load_native()
_scan_impl = _native_scan or scan_records_python


def native_scan_loaded() -> bool:
    return _native_scan is not None


def scan_records(section: bytes | bytearray | memoryview, count: int,
                 base_timestamp: int) -> RecordsSummary:
    """Check an (uncompressed) records section of `count` records; InvalidRecord naming the
    first malformed record otherwise."""
    try:
        return RecordsSummary._make(_scan_impl(section, count, base_timestamp))
    except ValueError as error:
        index, message = error.args
        raise InvalidRecord(message, [(index, message)] if index >= 0 else []) from None


# -- a batch ---------------------------------------------------------------------------------


def validate_batch(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                   *, decompressed_bytes_max: int) -> RecordsSummary:
    """Check every record of the (header- and CRC-checked) batch at `position`.

    A compressed batch is decompressed under `decompressed_bytes_max` (MessageTooLarge past
    it); data its codec rejects is CorruptRecord; an unknown codec id is CorruptRecord too.
    """
    section = memoryview(buffer)[position + HEADER_SIZE : position + header.size]
    codec = header.compression
    if codec != CompressionType.NONE:
        if codec not in CompressionType.__members__.values():
            raise CorruptRecord(f"batch has unknown compression codec id {codec}")
        try:
            section = decompress_scratch(codec, section, max_bytes=decompressed_bytes_max)
        except MessageTooLarge as error:
            raise MessageTooLarge(
                f"a {CompressionType(codec).name.lower()} batch of {header.size} bytes "
                f"decompresses to more than {decompressed_bytes_max} bytes") from error
    return scan_records(section, header.records_count, header.base_timestamp)


def check_client_batch(header: BatchHeader, partition: str) -> None:
    """What only a client's batch must not be (Kafka's validateBatch for AppendOrigin.CLIENT):
    coordinators write control batches and stamp delete horizons; clients may not."""
    if header.is_control:
        raise InvalidRecord("Clients are not allowed to write control records in topic "
                            f"partition {partition}")
    if header.attributes & DELETE_HORIZON_BIT:
        raise InvalidRecord(f"Clients may not set the delete horizon flag (topic partition "
                            f"{partition})")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecord(f"Invalid sequence number {header.base_sequence} in record batch "
                            f"with producerId {header.producer_id} in topic partition "
                            f"{partition}")
    if header.is_transactional and header.producer_id < 0:
        raise InvalidRecord(f"A transactional batch without a producer id in topic partition "
                            f"{partition}")


def timestamp_errors(summary: RecordsSummary, now_ms: int, before_max_ms: int,
                     after_max_ms: int) -> bool:
    """Whether some record's CreateTime lies outside [now - before, now + after]."""
    return (summary.min_timestamp != INT64_MAX and now_ms - summary.min_timestamp > before_max_ms
            or summary.max_timestamp != NO_TIMESTAMP
            and summary.max_timestamp - now_ms > after_max_ms)
