"""Hand-made RecordBatch v2 bytes for tests and fuzzing: any records section, garbage
included, framed by a header with a correct CRC, so that only the record check can refuse it.
(records.record.BatchBuilder builds only valid batches.)"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import Final

import crc32c

from pykraft.records.batch import CRC_FROM, HEADER_SIZE, LOG_OVERHEAD
from pykraft.records.codecs import compress

__all__ = ["frame_batch", "raw_record", "varint"]

_PREFIX: Final = struct.Struct(">qiibI")  # baseOffset, batchLength, epoch, magic, crc
_COVERED: Final = struct.Struct(">hiqqqhii")  # attributes .. recordsCount


def varint(value: int) -> bytes:
    """Zigzag varint of any int that fits 64 bits (no range check: tests want overlong ones
    too, see `overlong`)."""
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def raw_record(offset_delta: int, key: bytes | None, value: bytes | None, *,
               timestamp_delta: int = 0, headers: Sequence[tuple[bytes, bytes | None]] = (),
               length_adjust: int = 0) -> bytes:
    """One record as the wire has it; `length_adjust` makes its length field lie."""
    body = bytearray(b"\x00")  # attributes
    body += varint(timestamp_delta) + varint(offset_delta)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    body += varint(len(headers))
    for header_key, header_value in headers:
        body += varint(len(header_key)) + header_key
        body += varint(-1) if header_value is None else varint(len(header_value)) + header_value
    return varint(len(body) + length_adjust) + bytes(body)


def frame_batch(section: bytes, count: int, *, last_offset_delta: int | None = None,
                codec: int = 0, compress_section: bool = True, attributes: int = 0,
                base_timestamp: int | None = None, max_timestamp: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                magic: int = 2) -> bytes:
    """A batch around `section` (compressed with `codec` unless `compress_section` is
    False, when `section` is taken as the codec's bytes already), its CRC correct."""
    now_ms = int(time.time() * 1000)
    base_timestamp = now_ms if base_timestamp is None else base_timestamp
    max_timestamp = base_timestamp if max_timestamp is None else max_timestamp
    payload = compress(codec, section) if codec and compress_section else section
    covered = _COVERED.pack(
        attributes | codec, count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    ) + payload
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = _PREFIX.pack(0, batch_length, -1, magic, crc32c.crc32c(covered))
    assert len(prefix) == CRC_FROM
    return prefix + covered
