"""Compression codecs of RecordBatch v2: what the bytes after a compressed batch's header are.

The codec id is the low three bits of the batch attributes. Everything here runs in C or Rust
(`zlib`, `cramjam`); Python only frames and bounds.

Formats, as Kafka's clients write and read them:

- gzip (1): one gzip member (several are accepted on read).
- snappy (2): the Java client writes the xerial stream: magic b"\\x82SNAPPY\\x00", two int32
  (version 1, minimum compatible version 1), then blocks of int32 length + raw snappy data,
  each block compressing at most 32 KiB. librdkafka reads that and may write plain raw snappy.
  We read both and write xerial. The two cannot be confused: a raw snappy stream starts with
  a varint length and then a literal, while the magic read as raw snappy would be the length
  varint 0x82 0x53 followed by the tag 0x4E, a copy, which no stream may start with.
- lz4 (3): the LZ4 frame format with independent blocks. Kafka's Java reader decodes every
  block on its own, so frames with linked blocks (lz4's own default) break Java consumers.
- zstd (4): zstd frames.

Decompression bombs: a few kilobytes of zstd can expand to gigabytes. `decompress` never
holds more than `max_bytes` of output; past that it raises MessageTooLarge, the error a
producer answers by splitting its batch. lz4 and zstd decompress into a buffer of fixed size:
a guess first (eight times the input), retried eight times larger while the output does not
fit. Each failed attempt produced less than the final output and each is an eighth of the
next, so all attempts together cost at most about twice the final one; usually the first
fits. Large buffers are anonymous mmaps, whose pages cost nothing until written. gzip is
bounded by zlib's own `max_length`, raw snappy by the size its header declares.
"""

from __future__ import annotations

import mmap
import struct
import threading
import zlib
from enum import IntEnum
from types import ModuleType
from typing import Final

import cramjam

from pykraft.errors import (
    CorruptRecord,
    InvalidConfig,
    MessageTooLarge,
    UnsupportedCompressionType,
)

__all__ = [
    "CompressionType",
    "DECOMPRESSED_BYTES_MAX",
    "SCRATCH_BYTES_MAX",
    "compress",
    "decompress",
    "decompress_scratch",
]


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Well above anything a sane producer sends (Kafka's message.max.bytes defaults to 1 MiB of
# compressed data), well below what would hurt the node.
DECOMPRESSED_BYTES_MAX: Final = 256 * 1024 * 1024

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = struct.Struct(">8sii")  # magic, version, minimum compatible version
_XERIAL_VERSION: Final = 1
_XERIAL_BLOCK_BYTES: Final = 32 * 1024  # the Java client's block size
_INT32: Final = struct.Struct(">i")

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS  # gzip header and trailer, 32 KiB window
_GZIP_LEVEL_DEFAULT: Final = -1  # zlib's default, 6, as Java's Deflater
# Kafka's accepted ranges for compression.{gzip,lz4,zstd}.level
_LEVELS: Final[dict[int, range]] = {
    CompressionType.GZIP: range(-1, 10),
    CompressionType.LZ4: range(1, 18),
    CompressionType.ZSTD: range(-131072, 23),
}

_FIRST_GUESS_BYTES_MIN: Final = 64 * 1024
SCRATCH_BYTES_MAX: Final = 16 * 1024 * 1024  # the most decompress_scratch keeps per thread
_scratch = threading.local()
_GROWTH: Final = 8
_MMAP_FROM_BYTES: Final = 1024 * 1024  # below this a zero-filled bytearray is cheaper
# What cramjam's Rust core says when the output buffer is full (std::io::ErrorKind::WriteZero)
_OUTPUT_FULL: Final = "failed to write whole buffer"

Data = bytes | bytearray | memoryview


def compress(codec: int, data: Data, *, level: int | None = None) -> bytes:
    """Compress `data` as a batch's records section; `level` None means the codec's default."""
    if level is not None and (codec not in _LEVELS or level not in _LEVELS[codec]):
        raise InvalidConfig(f"compression level {level} is not valid for codec {codec}")
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        gzip_level = _GZIP_LEVEL_DEFAULT if level is None else level
        return zlib.compress(data, gzip_level, _GZIP_WBITS)
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        compressor = cramjam.lz4.Compressor(level, content_checksum=False, block_linked=False)
        compressor.compress(data if isinstance(data, bytes) else bytes(data))  # bytes only
        return bytes(compressor.finish())
    if codec == CompressionType.ZSTD:
        return bytes(cramjam.zstd.compress(data, level))
    raise UnsupportedCompressionType(f"unknown compression codec {codec}")


def decompress(codec: int, data: Data, *, max_bytes: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """Decompress a batch's records section, refusing to produce more than `max_bytes`.

    Raises CorruptRecord for data the codec rejects, MessageTooLarge past `max_bytes`,
    UnsupportedCompressionType for a codec id outside 0..4.
    """
    if codec == CompressionType.NONE:
        _check_size(len(data), max_bytes)
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gunzip(data, max_bytes)
    if codec == CompressionType.SNAPPY:
        if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _xerial_decompress(data, max_bytes)
        return _snappy_raw_decompress(data, max_bytes)
    if codec == CompressionType.LZ4:
        return _decompress_bounded(cramjam.lz4, "lz4", data, max_bytes)
    if codec == CompressionType.ZSTD:
        return _decompress_bounded(cramjam.zstd, "zstd", data, max_bytes)
    raise UnsupportedCompressionType(f"unknown compression codec {codec}")


def decompress_scratch(codec: int, data: Data, *, max_bytes: int) -> memoryview:
    """`decompress`, for a look that ends before this thread's next call: lz4 and zstd go
    into a buffer kept per thread (up to SCRATCH_BYTES_MAX), so the produce check neither
    allocates nor page-faults a fresh output buffer per batch, which cost it 5x the
    decompression itself. Larger output, and the other codecs, take `decompress`."""
    if codec in _SCRATCH_CODECS:
        module, name = _SCRATCH_CODECS[codec]
        buffer: bytearray = getattr(_scratch, "buffer", bytearray())
        limit = min(max_bytes, SCRATCH_BYTES_MAX)
        while True:
            if buffer:
                size = _decompress_or_full(module, name, data, buffer)
                if size is not None:
                    _check_size(size, max_bytes)
                    return memoryview(buffer)[:size]
            if len(buffer) >= limit:
                break  # more than the scratch holds: the bounded, growing path
            buffer = bytearray(min(limit, max(_FIRST_GUESS_BYTES_MIN, 2 * len(buffer),
                                              len(data) * _GROWTH)))
            _scratch.buffer = buffer
    return memoryview(decompress(codec, data, max_bytes=max_bytes))


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise MessageTooLarge(f"records decompress to more than {max_bytes} bytes")


def _gunzip(data: Data, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    remaining: Data = data
    total = 0
    while True:  # one pass per gzip member; each consumes input, so this ends
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        try:
            chunk = decompressor.decompress(remaining, max_bytes - total + 1)
        except zlib.error as error:
            raise CorruptRecord(f"gzip: {error}") from error
        total += len(chunk)
        _check_size(total, max_bytes)
        if not decompressor.eof:
            raise CorruptRecord("gzip: stream is truncated")
        chunks.append(chunk)
        remaining = decompressor.unused_data
        if not remaining:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _xerial_compress(data: Data) -> bytes:
    view = memoryview(data)
    parts: list[bytes | cramjam.Buffer] = [
        _XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION)
    ]
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES])
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: Data, max_bytes: int) -> bytes:
    view = memoryview(data)
    if len(view) < _XERIAL_HEADER.size:
        raise CorruptRecord(f"snappy: xerial header needs 16 bytes, {len(view)} are there")
    blocks: list[memoryview] = []
    position, total = _XERIAL_HEADER.size, 0
    # The version fields are not checked: some producers write them little-endian.
    while position < len(view):  # the size of every block is checked before any is expanded
        if len(view) - position < _INT32.size:
            raise CorruptRecord("snappy: xerial block length is truncated")
        (block_length,) = _INT32.unpack_from(view, position)
        position += _INT32.size
        if block_length < 0 or position + block_length > len(view):
            raise CorruptRecord(f"snappy: xerial block of {block_length} bytes overruns the data")
        block = view[position : position + block_length]
        total += _snappy_raw_length(block)
        _check_size(total, max_bytes)
        blocks.append(block)
        position += block_length
    return b"".join([_snappy_raw(block) for block in blocks])


def _snappy_raw_decompress(data: Data, max_bytes: int) -> bytes:
    _check_size(_snappy_raw_length(data), max_bytes)
    return bytes(_snappy_raw(data))


def _snappy_raw_length(block: Data) -> int:
    """The uncompressed size a raw snappy block declares in its leading varint."""
    try:
        return int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as error:
        raise CorruptRecord(f"snappy: {error}") from error


def _snappy_raw(block: Data) -> cramjam.Buffer:
    try:
        return cramjam.snappy.decompress_raw(block)
    except cramjam.DecompressionError as error:
        raise CorruptRecord(f"snappy: {error}") from error


def _decompress_bounded(codec: ModuleType, name: str, data: Data, max_bytes: int) -> bytes:
    capacity = min(max_bytes, max(_FIRST_GUESS_BYTES_MIN, len(data) * _GROWTH))
    while True:  # capacity grows each turn and is capped, so at most a few turns
        result = _decompress_into(codec, name, data, capacity)
        if result is not None:
            return result
        if capacity >= max_bytes:
            raise MessageTooLarge(f"records decompress to more than {max_bytes} bytes")
        capacity = min(max_bytes, capacity * _GROWTH)


def _decompress_into(codec: ModuleType, name: str, data: Data, capacity: int) -> bytes | None:
    """Decompress into `capacity` bytes; None if the output does not fit."""
    if capacity < _MMAP_FROM_BYTES:
        buffer = bytearray(capacity)
        size = _decompress_or_full(codec, name, data, buffer)
        return None if size is None else bytes(memoryview(buffer)[:size])
    with mmap.mmap(-1, capacity) as region:
        size = _decompress_or_full(codec, name, data, region)
        return None if size is None else region.read(size)


def _decompress_or_full(
    codec: ModuleType, name: str, data: Data, output: bytearray | mmap.mmap
) -> int | None:
    try:
        return int(codec.decompress_into(data, output))
    except cramjam.DecompressionError as error:
        if _OUTPUT_FULL in str(error):
            return None
        raise CorruptRecord(f"{name}: {error}") from error


_SCRATCH_CODECS: Final[dict[int, tuple[ModuleType, str]]] = {
    CompressionType.LZ4: (cramjam.lz4, "lz4"),
    CompressionType.ZSTD: (cramjam.zstd, "zstd"),
}
