"""Records inside a RecordBatch v2 (Kafka's DefaultRecord), decoded and built.

Hot paths never come here (STYLE.md section 5): produce and fetch move whole batches. Records
are decoded for compaction, control records, transaction markers, tools and the Spark source,
and built by the coordinators, the controller and tests. After the 61-byte batch header (see
batch.py) the records section, compressed as the attributes say, holds `recordsCount` of:

    length varint                  bytes of the record after this field
    attributes int8                unused, written 0
    timestampDelta varlong         from the batch's baseTimestamp
    offsetDelta varint             from the batch's baseOffset
    keyLength varint, key          length -1 means a null key
    valueLength varint, value      length -1 means a null value
    headerCount varint, headers    each: keyLength varint, key (UTF-8, never null),
                                   valueLength varint, value (-1: null)

Varints are zigzag-encoded, as in protobuf: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, and so on.

What decoding guarantees: every length is checked against the bytes there are, a varint
longer than its type allows or outside int32 (varint) / int64 (varlong) is rejected, each
record consumes exactly its declared length, and the records section holds exactly
`recordsCount` records. Any violation raises CorruptRecord; so does a bad CRC, since the CRC
is checked before anything is decoded.

Records are decoded in C (`_scan.records`, built by setup.py beside the produce check) and
in Python where it is not built: the same records, the same sections refused. The metadata
log is read through here on every node.

Header keys are decoded with `surrogateescape`: bytes that are not UTF-8 (librdkafka lets a
client send any) survive a decode/encode round trip, so a compacted batch keeps the header
keys its producer wrote, byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

import crc32c
from kio._kio_native import read_signed_varint, read_signed_varlong
from kio.serial.errors import DecodeError

from pykraft.errors import CorruptRecord, InvalidRecord, invariant
from pykraft.records.batch import (
    CONTROL_BIT,
    CRC_FROM,
    CURRENT_MAGIC,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    check_batch,
    iter_headers,
)
from pykraft.records.codecs import DECOMPRESSED_BYTES_MAX, compress, decompress

__all__ = [
    "BatchBuilder",
    "ControlRecordType",
    "Header",
    "Record",
    "build_batch",
    "control_record_key",
    "end_txn_marker_value",
    "iter_batch_records",
    "iter_records",
    "marker_type",
    "native_records_loaded",
    "read_control_record_type",
    "read_end_txn_marker",
]

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_HEADER_KEY_ENCODING: Final = "utf-8"
_HEADER_KEY_ERRORS: Final = "surrogateescape"
_NO_HEADERS: Final[tuple[Header, ...]] = ()


# ---------------------------------------------------------------------------------------------
# Decoding


def iter_records(
    batch: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    max_bytes: int = DECOMPRESSED_BYTES_MAX,
) -> Iterator[Record]:
    """The records of the batch at `position`, after checking its framing and CRC.

    The whole batch is checked and decoded before the first record is returned, so a corrupt
    batch raises CorruptRecord here, never halfway through. `max_bytes` bounds the
    decompressed records section (MessageTooLarge past it).
    """
    header = check_batch(batch, position)
    return iter(_decode_batch(batch, position, header, max_bytes))


def iter_batch_records(
    buffer: bytes | bytearray | memoryview, *, max_bytes: int = DECOMPRESSED_BYTES_MAX
) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Yield (header, records) for every whole batch in `buffer`, each CRC-checked.

    A trailing partial batch, as a Fetch response may end with, is skipped.
    """
    for position, header in iter_headers(buffer, check=True):
        yield header, _decode_batch(buffer, position, header, max_bytes)


def _decode_batch(
    buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader, max_bytes: int
) -> list[Record]:
    section = memoryview(buffer)[position + HEADER_SIZE : position + header.size]
    # One copy into `bytes` up front: slicing bytes then yields keys and values directly,
    # and the varint readers take it (they refuse writable buffers).
    data = decompress(header.compression, section, max_bytes=max_bytes)
    log_append_time = header.max_timestamp if header.is_log_append_time else None
    return _decode_records(
        data, header.records_count, header.base_offset, header.base_timestamp, log_append_time
    )


def _decode_records(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    """The `count` records of an uncompressed records section; in C (`_scan.records`) when
    it is built, else in Python (`_decode_records_python`, the reference)."""
    if _native_records is None:
        return _decode_records_python(data, count, base_offset, base_timestamp,
                                      log_append_time)
    try:
        return _native_records(data, count, base_offset, base_timestamp, log_append_time,
                               Record, _RECORD_SETTERS)
    except ValueError as error:
        raise CorruptRecord(f"malformed record: {error}") from None


def _decode_records_python(
    data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None
) -> list[Record]:
    records: list[Record] = []
    append = records.append
    position, end = 0, len(data)
    try:
        for _ in range(count):
            length, size = read_signed_varint(data, position)
            position += size
            record_end = position + length
            if length < 0 or record_end > end:
                raise CorruptRecord(f"record of {length} bytes at byte {position} overruns")
            # attributes (one byte) are unused in v2
            timestamp_delta, size = read_signed_varlong(data, position + 1)
            position += 1 + size
            offset_delta, size = read_signed_varint(data, position)
            position += size
            key, position = _read_bytes(data, position)
            value, position = _read_bytes(data, position)
            header_count, size = read_signed_varint(data, position)
            position += size
            if header_count == 0:
                headers = _NO_HEADERS
            else:
                headers, position = _read_headers(data, position, header_count)
            if position != record_end:
                raise CorruptRecord(f"record declares {length} bytes, its fields span otherwise")
            if log_append_time is None:
                timestamp = base_timestamp + timestamp_delta
            else:
                timestamp = log_append_time
            _check_int32(offset_delta)
            append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    except (DecodeError, ValueError) as error:  # kio: buffer exhausted, overlong varint
        raise CorruptRecord(f"malformed record: {error}") from error
    if position != end:
        raise CorruptRecord(f"{end - position} bytes follow the batch's {count} records")
    return records


def _load_native_records() -> Callable[..., list[Record]] | None:
    try:
        from pykraft.records import _scan  # type: ignore[attr-defined]  # built by setup
    except ImportError:  # records.validate warns that it is not built
        return None
    native: Callable[..., list[Record]] | None = getattr(_scan, "records", None)
    return native


_native_records = _load_native_records()
# the slots' descriptors, through which the C decoder sets a Record's fields
_RECORD_SETTERS: Final = tuple(
    Record.__dict__[name] for name in ("offset", "timestamp", "key", "value", "headers"))


def native_records_loaded() -> bool:
    return _native_records is not None


def _read_bytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    """Read a varint-length-prefixed byte string; length -1 is null."""
    length, size = read_signed_varint(data, position)
    position += size
    if length < 0:
        if length != -1:
            raise CorruptRecord(f"negative length {length} at byte {position}")
        return None, position
    end = position + length
    if end > len(data):
        raise CorruptRecord(f"{length} bytes at byte {position} overrun the records")
    return data[position:end], end


def _read_headers(data: bytes, position: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0 or count > len(data) - position:  # each header takes two bytes at least
        raise CorruptRecord(f"header count {count} at byte {position}")
    headers: list[Header] = []
    for _ in range(count):
        key_length, size = read_signed_varint(data, position)
        position += size
        key_end = position + key_length
        if key_length < 0 or key_end > len(data):
            raise CorruptRecord(f"header key of {key_length} bytes at byte {position}")
        key = str(data[position:key_end], _HEADER_KEY_ENCODING, _HEADER_KEY_ERRORS)
        value, position = _read_bytes(data, key_end)
        headers.append((key, value))
    return tuple(headers), position


def _check_int32(value: int) -> None:
    # kio's varint reader accepts a fifth byte above 0x0f, which decodes outside int32
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise CorruptRecord(f"varint {value} is outside int32")


# ---------------------------------------------------------------------------------------------
# Building

_SMALL_ZIGZAG_COUNT: Final = 1 << 14  # values whose zigzag encoding fits in two bytes


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Lengths, deltas and counts are almost always small: look their encodings up.
_SMALL_ZIGZAG: Final = tuple(_encode_unsigned(value) for value in range(_SMALL_ZIGZAG_COUNT))
_NULL_LENGTH: Final = _SMALL_ZIGZAG[1]  # zigzag(-1)
_ZERO: Final = _SMALL_ZIGZAG[0]


def _varint(value: int) -> bytes:
    """Zigzag varint of an int32; InvalidRecord outside that range."""
    zigzag = (value << 1) ^ (value >> 63)
    if 0 <= zigzag < _SMALL_ZIGZAG_COUNT:
        return _SMALL_ZIGZAG[zigzag]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise InvalidRecord(f"{value} does not fit a varint (int32)")
    return _encode_unsigned(zigzag)


def _varlong(value: int) -> bytes:
    """Zigzag varlong of an int64; InvalidRecord outside that range."""
    zigzag = (value << 1) ^ (value >> 63)
    if 0 <= zigzag < _SMALL_ZIGZAG_COUNT:
        return _SMALL_ZIGZAG[zigzag]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise InvalidRecord(f"{value} does not fit a varlong (int64)")
    return _encode_unsigned(zigzag)


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
) -> None:
    """Append one record to `out`; its length prefix needs the body's size first."""
    timestamp_field = _varlong(timestamp_delta)
    offset_field = _varint(offset_delta)
    if key is None:
        key_length, key = _NULL_LENGTH, b""
    else:
        key_length = _varint(len(key))
    if value is None:
        value_length, value = _NULL_LENGTH, b""
    else:
        value_length = _varint(len(value))
    headers_field = _encode_headers(headers) if headers else _ZERO
    size = (
        1  # attributes
        + len(timestamp_field)
        + len(offset_field)
        + len(key_length)
        + len(key)
        + len(value_length)
        + len(value)
        + len(headers_field)
    )
    out += _varint(size)
    out.append(0)
    out += timestamp_field
    out += offset_field
    out += key_length
    out += key
    out += value_length
    out += value
    out += headers_field


def _encode_headers(headers: Sequence[Header]) -> bytes:
    out = bytearray(_varint(len(headers)))
    for key, value in headers:
        try:
            encoded_key = key.encode(_HEADER_KEY_ENCODING, _HEADER_KEY_ERRORS)
        except UnicodeEncodeError as error:  # a lone surrogate that no decode produced
            raise InvalidRecord(f"header key {key!r} cannot be encoded") from error
        out += _varint(len(encoded_key))
        out += encoded_key
        if value is None:
            out += _NULL_LENGTH
        else:
            out += _varint(len(value))
            out += value
    return bytes(out)


_BATCH_PREFIX: Final = struct.Struct(">qiibI")  # baseOffset .. crc: outside the CRC
_BATCH_CRC_COVERED: Final = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
invariant(
    _BATCH_PREFIX.size == CRC_FROM and CRC_FROM + _BATCH_CRC_COVERED.size == HEADER_SIZE,
    "the two halves of the batch header add up to the v2 header",
)


class BatchBuilder:
    """Collects records with explicit offsets and builds one v2 batch.

    Offsets must strictly increase from `base_offset`; a compacted batch may have gaps. The
    first record's timestamp becomes the batch's baseTimestamp, as Kafka's builder does, so
    deltas may be negative. With `log_append_time` the batch is marked LogAppendTime and its
    maxTimestamp, which readers give every record, is the largest timestamp appended: pass
    the append time as each record's timestamp. With `delete_horizon_ms` (KIP-534, written by
    the log cleaner) the batch is marked as having a delete horizon, which is its
    baseTimestamp; record timestamps stay exact as deltas from it.
    """

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: int = 0,
        compression_level: int | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        partition_leader_epoch: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        log_append_time: bool = False,
        delete_horizon_ms: int | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.compression = compression
        self.compression_level = compression_level
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self.attributes = (
            (compression & 0x07)
            | (TIMESTAMP_TYPE_BIT if log_append_time else 0)
            | (TRANSACTIONAL_BIT if is_transactional else 0)
            | (CONTROL_BIT if is_control else 0)
            | (DELETE_HORIZON_BIT if delete_horizon_ms is not None else 0)
        )
        self._fixed_base_timestamp = delete_horizon_ms
        self.records_count = 0
        self.last_offset = base_offset - 1
        self.base_timestamp = -1
        self.max_timestamp = -1
        self._records = bytearray()

    def append(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> None:
        invariant(offset > self.last_offset, "offset %d after %d", offset, self.last_offset)
        first = self.records_count == 0
        if self._fixed_base_timestamp is not None:
            base_timestamp = self._fixed_base_timestamp
        else:
            base_timestamp = timestamp if first else self.base_timestamp
        # encoding checks the ranges before it writes anything, so a refused record leaves
        # the builder as it was
        _encode_record(
            self._records,
            offset - self.base_offset,
            timestamp - base_timestamp,
            key,
            value,
            headers,
        )
        self.base_timestamp = base_timestamp
        self.max_timestamp = timestamp if first else max(self.max_timestamp, timestamp)
        self.records_count += 1
        self.last_offset = offset

    def build(self, *, last_offset_delta: int | None = None) -> bytes:
        """The batch's bytes. `last_offset_delta` may claim offsets past the last record,
        as compaction does to keep a batch's offset range when it drops its tail."""
        if self.records_count == 0:
            raise InvalidRecord("a batch needs at least one record")
        actual_delta = self.last_offset - self.base_offset
        delta = actual_delta if last_offset_delta is None else last_offset_delta
        invariant(delta >= actual_delta, "last offset delta %d < %d", delta, actual_delta)
        if delta > _INT32_MAX or not _INT64_MIN <= self.max_timestamp <= _INT64_MAX:
            raise InvalidRecord(f"last offset delta {delta} or timestamps out of range")
        section = compress(self.compression, self._records, level=self.compression_level)
        covered = _BATCH_CRC_COVERED.pack(
            self.attributes,
            delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        )
        crc = crc32c.crc32c(section, crc32c.crc32c(covered))
        batch_length = HEADER_SIZE - LOG_OVERHEAD + len(section)
        prefix = _BATCH_PREFIX.pack(
            self.base_offset, batch_length, self.partition_leader_epoch, CURRENT_MAGIC, crc
        )
        return b"".join((prefix, covered, section))


def build_batch(
    records: Iterable[tuple[bytes | None, bytes | None, Sequence[Header], int]],
    *,
    base_offset: int = 0,
    compression: int = 0,
    compression_level: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytes:
    """One v2 batch of (key, value, headers, timestamp_ms) records at consecutive offsets."""
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=compression,
        compression_level=compression_level,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        log_append_time=log_append_time,
    )
    offset = base_offset
    for key, value, headers, timestamp in records:
        builder.append(offset, timestamp, key, value, headers)
        offset += 1
    return builder.build()


# ---------------------------------------------------------------------------------------------
# Control records: transaction markers and the Raft quorum's own records


class ControlRecordType(IntEnum):
    """The type in a control record's key. UNKNOWN stands for a type from a newer version,
    which readers skip rather than fail on, as Kafka's do."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


_CONTROL_KEY: Final = struct.Struct(">hh")  # version, type
_CONTROL_KEY_VERSION: Final = 0
_END_TXN_MARKER: Final = struct.Struct(">hi")  # version, coordinatorEpoch
_END_TXN_MARKER_VERSION: Final = 0
_KNOWN_CONTROL_TYPES: Final = frozenset(int(type_) for type_ in ControlRecordType) - {-1}


def control_record_key(type_: ControlRecordType) -> bytes:
    invariant(type_ is not ControlRecordType.UNKNOWN, "UNKNOWN is never written")
    return _CONTROL_KEY.pack(_CONTROL_KEY_VERSION, type_)


def read_control_record_type(key: bytes | None) -> ControlRecordType:
    """The type of a control record from its key; a newer key version is read as version 0."""
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecord(f"control record key {key!r} is shorter than 4 bytes")
    version, type_ = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecord(f"control record key version {version}")
    if type_ not in _KNOWN_CONTROL_TYPES:
        return ControlRecordType.UNKNOWN
    return ControlRecordType(type_)


def _marker_record(batch: bytes | bytearray) -> tuple[ControlRecordType, Record] | None:
    """The type and record of a transaction marker batch (a control batch's bytes); None for
    any other control batch, an empty one or one whose record cannot be read."""
    try:
        record = next(iter(iter_records(batch)), None)
        kind = read_control_record_type(None if record is None else record.key)
    except CorruptRecord:
        return None
    if record is None or kind not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return None
    return kind, record


def marker_type(batch: bytes | bytearray) -> ControlRecordType | None:
    """COMMIT or ABORT for a transaction marker batch (a control batch's bytes); None for
    any other control batch, an empty one or one whose record cannot be read."""
    marker = _marker_record(batch)
    return None if marker is None else marker[0]


def marker_coordinator_epoch(batch: bytes | bytearray) -> int:
    """The coordinator epoch of a transaction marker batch (a control batch's bytes); -1 for
    any other control batch, an empty one or one whose record cannot be read."""
    marker = _marker_record(batch)
    try:
        return -1 if marker is None else read_end_txn_marker(marker[1].value)
    except CorruptRecord:
        return -1


def end_txn_marker_value(coordinator_epoch: int) -> bytes:
    """The value of a COMMIT or ABORT control record."""
    return _END_TXN_MARKER.pack(_END_TXN_MARKER_VERSION, coordinator_epoch)


def read_end_txn_marker(value: bytes | None) -> int:
    """The coordinator epoch in a COMMIT or ABORT control record's value."""
    if value is None or len(value) < _END_TXN_MARKER.size:
        raise CorruptRecord(f"transaction marker value {value!r} is shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecord(f"transaction marker version {version}")
    return int(coordinator_epoch)
