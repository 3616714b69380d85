"""Codecs: round trips, the wire formats other clients expect, corruption and the size bound."""

from __future__ import annotations

import gzip
import os
import struct
import time
import zlib

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import (
    CorruptRecord,
    InvalidConfig,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from pykraft.records.codecs import (
    SCRATCH_BYTES_MAX,
    XERIAL_MAGIC,
    CompressionType,
    compress,
    decompress,
    decompress_scratch,
)

CODECS = [int(codec) for codec in CompressionType]
COMPRESSED = [codec for codec in CODECS if codec != CompressionType.NONE]

# Random bytes interleaved with runs, so both incompressible and compressible stretches occur.
payloads = st.lists(
    st.one_of(
        st.binary(max_size=300),
        st.tuples(st.binary(min_size=1, max_size=4), st.integers(1, 5000)).map(
            lambda t: t[0] * t[1]
        ),
    ),
    max_size=8,
).map(b"".join)


@pytest.mark.parametrize("codec", CODECS)
@given(data=payloads)
@settings(max_examples=60, deadline=None)
def test_round_trip(codec: int, data: bytes) -> None:
    """Whatever we compress, we decompress to the same bytes, from bytes and memoryviews."""
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data
    assert decompress(codec, memoryview(bytearray(compressed))) == data
    assert compress(codec, bytearray(data)) == compressed


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec: int) -> None:
    """Codec ids outside 0..4 are UNSUPPORTED_COMPRESSION_TYPE both ways."""
    with pytest.raises(UnsupportedCompressionType):
        compress(codec, b"data")
    with pytest.raises(UnsupportedCompressionType):
        decompress(codec, b"data")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_or_garbage_is_corrupt(codec: int) -> None:
    """Data the codec rejects is CORRUPT_MESSAGE, never a library exception."""
    compressed = compress(codec, os.urandom(2000) * 20)
    for bad in (compressed[: len(compressed) // 2], compressed[:3], b"", b"\x00" * 64):
        with pytest.raises(CorruptRecord):
            decompress(codec, bad)


@pytest.mark.parametrize("codec", CODECS)
def test_max_bytes_is_exact(codec: int) -> None:
    """Output of exactly max_bytes passes; one byte less is MESSAGE_TOO_LARGE."""
    data = os.urandom(3000) * 100 + b"z" * 200_000  # several lz4/xerial blocks
    compressed = compress(codec, data)
    assert decompress(codec, compressed, max_bytes=len(data)) == data
    with pytest.raises(MessageTooLarge):
        decompress(codec, compressed, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_decompression_bomb_is_refused_early(codec: int) -> None:
    """64 MiB of zeros (a few KiB of zstd) against a 1 MiB bound fails fast, not after 64 MiB."""
    bomb = compress(codec, bytes(64 * 1024 * 1024))
    started = time.perf_counter()
    with pytest.raises(MessageTooLarge):
        decompress(codec, bomb, max_bytes=1024 * 1024)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("codec", [CompressionType.LZ4, CompressionType.ZSTD])
def test_output_bigger_than_first_guess(codec: int) -> None:
    """Data that expands far beyond the first buffer guess (8x input) is still returned whole."""
    data = b"a" * (3 * 1024 * 1024) + os.urandom(100)
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_writes_xerial_frames() -> None:
    """Our snappy output is xerial: magic, version 1, compatible 1, blocks of <= 32 KiB."""
    data = os.urandom(1000) * 100  # 100 KB: four blocks
    compressed = compress(CompressionType.SNAPPY, data)
    magic, version, compatible = struct.unpack_from(">8sii", compressed)
    assert (magic, version, compatible) == (XERIAL_MAGIC, 1, 1)
    position, pieces = 16, []
    while position < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, position)
        block = compressed[position + 4 : position + 4 + length]
        pieces.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += 4 + length
    assert [len(piece) for piece in pieces] == [32768, 32768, 32768, 1696]
    assert b"".join(pieces) == data


@given(data=payloads, block_bytes=st.sampled_from([1, 100, 32768, 1 << 20]))
@settings(max_examples=50, deadline=None)
def test_snappy_reads_raw_and_any_xerial_block_size(data: bytes, block_bytes: int) -> None:
    """librdkafka's raw snappy and xerial streams cut at any block size both decompress."""
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw) == data
    blocks = [
        bytes(cramjam.snappy.compress_raw(data[start : start + block_bytes]))
        for start in range(0, len(data), block_bytes)
    ]
    xerial = struct.pack(">8sii", XERIAL_MAGIC, 1, 1) + b"".join(
        struct.pack(">i", len(block)) + block for block in blocks
    )
    assert decompress(CompressionType.SNAPPY, xerial) == data


def test_snappy_xerial_framing_errors() -> None:
    """A short header, a cut length, a block that overruns or a bad block: CORRUPT_MESSAGE."""
    good = compress(CompressionType.SNAPPY, b"hello" * 1000)
    for bad in (
        XERIAL_MAGIC + b"\x00\x00",  # header cut
        good + b"\x00\x00",  # a block length cut short
        good[:16] + struct.pack(">i", 1 << 20) + good[20:],  # first block claims 1 MiB
        good[:16] + struct.pack(">i", -5) + good[20:],
        good[:20] + b"\xff" * (len(good) - 20),  # garbage block
    ):
        with pytest.raises(CorruptRecord):
            decompress(CompressionType.SNAPPY, bad)


def test_snappy_raw_declared_size_is_bounded_before_decompressing() -> None:
    """A raw snappy header declaring 4 GiB is refused from its varint alone."""
    with pytest.raises(MessageTooLarge):
        decompress(CompressionType.SNAPPY, b"\xff\xff\xff\xff\x0f" + b"\x00" * 10)


def test_lz4_frames_have_independent_blocks() -> None:
    """Kafka's Java reader decodes each lz4 block on its own: FLG must say independent."""
    compressed = compress(CompressionType.LZ4, os.urandom(200) * 2000)  # several 64 KiB blocks
    assert compressed[:4] == b"\x04\x22\x4d\x18"
    flags, block_descriptor = compressed[4], compressed[5]
    assert flags >> 6 == 0b01  # frame version 1
    assert flags & 0x20  # block independence
    assert not flags & 0x08  # no content size: Kafka writes none either
    assert (block_descriptor >> 4) & 0x07 == 4  # 64 KiB blocks, as Kafka's writer


def test_lz4_reads_linked_block_frames() -> None:
    """Frames from other writers, with linked blocks and checksums, still decompress."""
    data = os.urandom(300) * 1000
    assert decompress(CompressionType.LZ4, bytes(cramjam.lz4.compress(data))) == data


def test_gzip_interoperates_with_python_gzip() -> None:
    """Python's gzip module (an independent framing) reads ours, and we read its members."""
    data = os.urandom(500) * 50
    assert gzip.decompress(compress(CompressionType.GZIP, data)) == data
    two_members = gzip.compress(data[:1000]) + gzip.compress(data[1000:])
    assert decompress(CompressionType.GZIP, two_members) == data
    with pytest.raises(CorruptRecord):
        decompress(CompressionType.GZIP, gzip.compress(data) + b"trailing")
    bad_crc = bytearray(gzip.compress(data))
    bad_crc[-8] ^= 0xFF  # the trailer's CRC32
    with pytest.raises(CorruptRecord):
        decompress(CompressionType.GZIP, bytes(bad_crc))


def test_levels() -> None:
    """Levels within Kafka's ranges apply; others are INVALID_CONFIG."""
    data = b"".join(b"%d," % (i * 7919 % 1000) for i in range(20000))
    fast = compress(CompressionType.GZIP, data, level=1)
    best = compress(CompressionType.GZIP, data, level=9)
    assert len(best) < len(fast)
    assert zlib.decompress(best, 31) == data
    for codec, level in (
        (CompressionType.LZ4, 17),
        (CompressionType.ZSTD, 22),
        (CompressionType.ZSTD, -5),
    ):
        assert decompress(codec, compress(codec, data, level=level)) == data
    for codec, level in (
        (CompressionType.GZIP, 10),
        (CompressionType.LZ4, 0),
        (CompressionType.ZSTD, 23),
        (CompressionType.SNAPPY, 1),
        (CompressionType.NONE, 1),
    ):
        with pytest.raises(InvalidConfig):
            compress(codec, data, level=level)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_decompress_scratch_gives_what_decompress_gives(codec: CompressionType) -> None:
    """The per-thread scratch path answers as `decompress` does, for output that fits the
    scratch, output larger than it (the growing path), and past the bound."""
    for size in (10, 200_000, SCRATCH_BYTES_MAX + 100_000):
        data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        packed = compress(codec, data)
        assert bytes(decompress_scratch(codec, packed, max_bytes=size)) == data
        with pytest.raises(MessageTooLarge):
            decompress_scratch(codec, packed, max_bytes=size - 1)
    # a later, smaller call does not see the bytes of an earlier, larger one
    assert bytes(decompress_scratch(codec, compress(codec, b"ab"), max_bytes=10)) == b"ab"
