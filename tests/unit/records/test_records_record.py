"""Records in v2 batches: build/iterate round trips, validation of every length, control records."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.errors import CorruptRecord, InvalidRecord, InvariantViolation
from pykraft.records.batch import check_batch, read_header
from pykraft.records.codecs import CompressionType
from pykraft.records.record import (
    BatchBuilder,
    ControlRecordType,
    Record,
    build_batch,
    control_record_key,
    end_txn_marker_value,
    iter_batch_records,
    iter_records,
    read_control_record_type,
    read_end_txn_marker,
)

INT64_MAX = (1 << 63) - 1

maybe_bytes = st.one_of(st.none(), st.binary(max_size=80))
headers = st.lists(st.tuples(st.text(max_size=12), maybe_bytes), max_size=3)
# Timestamps spread so deltas are sometimes negative and sometimes need many varint bytes.
timestamps = st.one_of(st.integers(-1, 2_000_000_000_000), st.integers(0, 1 << 62))
records_strategy = st.lists(
    st.tuples(maybe_bytes, maybe_bytes, headers, timestamps), min_size=1, max_size=20
)


@given(
    records=records_strategy,
    codec=st.sampled_from(list(CompressionType)),
    base_offset=st.integers(0, (1 << 62)),
    producer_id=st.integers(-1, INT64_MAX),
    producer_epoch=st.integers(-1, 32767),
    base_sequence=st.integers(-1, (1 << 31) - 1),
    partition_leader_epoch=st.integers(-1, (1 << 31) - 1),
    is_transactional=st.booleans(),
    is_control=st.booleans(),
    log_append_time=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_build_then_iterate_round_trip(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: int,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    is_transactional: bool,
    is_control: bool,
    log_append_time: bool,
) -> None:
    """Every field and attribute we build comes back from the header and from iter_records."""
    batch = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        log_append_time=log_append_time,
    )
    header = check_batch(batch)
    assert header.size == len(batch)
    assert header.compression == codec
    assert (header.is_transactional, header.is_control, header.is_log_append_time) == (
        is_transactional,
        is_control,
        log_append_time,
    )
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer_id,
        producer_epoch,
        base_sequence,
    )
    assert header.partition_leader_epoch == partition_leader_epoch
    assert header.base_offset == base_offset
    assert header.last_offset_delta == len(records) - 1
    assert header.records_count == len(records)
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(record[3] for record in records)
    expected = [
        Record(
            base_offset + index,
            header.max_timestamp if log_append_time else timestamp,
            key,
            value,
            tuple(record_headers),
        )
        for index, (key, value, record_headers, timestamp) in enumerate(records)
    ]
    assert list(iter_records(batch)) == expected


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    """LogAppendTime: readers take maxTimestamp for every record, whatever the deltas say."""
    batch = build_batch(
        [(b"a", b"1", (), 100), (b"b", b"2", (), 300), (b"c", b"3", (), 200)], log_append_time=True
    )
    assert [record.timestamp for record in iter_records(batch)] == [300, 300, 300]
    create_time = build_batch([(b"a", b"1", (), 100), (b"b", b"2", (), 300), (b"c", b"3", (), 200)])
    assert [record.timestamp for record in iter_records(create_time)] == [100, 300, 200]


@given(records=records_strategy, codec=st.sampled_from(list(CompressionType)), data=st.data())
@settings(max_examples=150, deadline=None)
def test_any_flipped_bit_under_the_crc_is_corrupt(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    codec: int,
    data: st.DataObject,
) -> None:
    """Flip any bit from the CRC field to the end: iter_records raises CorruptRecord."""
    batch = bytearray(build_batch(records, compression=codec))
    index = data.draw(st.integers(17, len(batch) - 1), label="byte")
    batch[index] ^= 1 << data.draw(st.integers(0, 7), label="bit")
    with pytest.raises(CorruptRecord):
        list(iter_records(batch))


def test_offset_and_leader_epoch_are_outside_the_crc() -> None:
    """baseOffset and partitionLeaderEpoch can be restamped without breaking the CRC."""
    batch = bytearray(build_batch([(b"k", b"v", (), 5), (None, None, (), 6)]))
    struct.pack_into(">q", batch, 0, 1000)
    struct.pack_into(">i", batch, 12, 7)
    assert [record.offset for record in iter_records(batch)] == [1000, 1001]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_truncated_batch(codec: int) -> None:
    """A batch cut anywhere is CorruptRecord for iter_records, skipped by iter_batch_records."""
    batch = build_batch([(b"key", b"value" * 40, [("h", b"x")], 1)] * 5, compression=codec)
    for cut in (1, 10, 60, 61, len(batch) // 2, len(batch) - 1):
        with pytest.raises(CorruptRecord):
            list(iter_records(batch[:cut]))
        assert list(iter_batch_records(batch + batch[:cut])) == [
            (read_header(batch), list(iter_records(batch)))
        ]


def test_position_and_several_batches() -> None:
    """iter_records reads the batch at `position`; iter_batch_records reads them all."""
    first = build_batch([(b"a", b"1", (), 10)], base_offset=0)
    second = build_batch(
        [(b"b", b"2", (), 20), (b"c", b"3", (), 21)],
        base_offset=1,
        compression=CompressionType.ZSTD,
    )
    buffer = memoryview(first + second)
    assert list(iter_records(buffer, len(first))) == [
        Record(1, 20, b"b", b"2", ()),
        Record(2, 21, b"c", b"3", ()),
    ]
    batches = list(iter_batch_records(buffer))
    assert [header.base_offset for header, _ in batches] == [0, 1]
    assert [len(records) for _, records in batches] == [1, 2]


# --- hand-made record sections, with a correct CRC so that only the records are wrong ---------


def zigzag(value: int) -> bytes:
    """An independent varint encoder for the malformed batches below."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append(unsigned & 0x7F | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def record_bytes(*fields: bytes, length: int | None = None) -> bytes:
    body = b"".join(fields)
    return zigzag(len(body) if length is None else length) + body


def batch_of(section: bytes, records_count: int) -> bytes:
    covered = (
        struct.pack(">hiqqqhii", 0, max(records_count - 1, 0), 0, 0, -1, -1, -1, records_count)
        + section
    )
    return struct.pack(">qiibI", 0, 49 + len(section), -1, 2, crc32c.crc32c(covered)) + covered


def simple_record(offset_delta: int = 0) -> bytes:
    # attributes, timestamp delta, offset delta, key "k", value "v", no headers
    return record_bytes(
        b"\x00", zigzag(0), zigzag(offset_delta), zigzag(1), b"k", zigzag(1), b"v", zigzag(0)
    )


def test_hand_made_batch_reads() -> None:
    """The helpers below build valid batches: only the injected fault makes them fail."""
    assert list(iter_records(batch_of(simple_record() + simple_record(1), 2))) == [
        Record(0, 0, b"k", b"v", ()),
        Record(1, 0, b"k", b"v", ()),
    ]


BAD_SECTIONS = {
    "overlong varint": (b"\xff\xff\xff\xff\xff\x01" + simple_record()[1:], 1),
    "varint cut short": (b"\x80", 1),
    "empty section, one record claimed": (b"", 1),
    "fewer records than the count": (simple_record(), 2),
    "bytes after the last record": (simple_record() + b"\x00", 1),
    "record longer than declared": (
        record_bytes(
            b"\x00", zigzag(0), zigzag(0), zigzag(1), b"k", zigzag(1), b"v", zigzag(0), length=7
        ),
        1,
    ),
    "record shorter than declared": (
        record_bytes(
            b"\x00", zigzag(0), zigzag(0), zigzag(1), b"k", zigzag(1), b"v", zigzag(0), length=9
        )
        + b"\x00",
        1,
    ),
    "record length overruns section": (zigzag(1000) + b"\x00" * 10, 1),
    "negative record length": (zigzag(-3) + b"\x00" * 10, 1),
    "key length -2": (
        record_bytes(b"\x00", zigzag(0), zigzag(0), zigzag(-2), zigzag(-1), zigzag(0)),
        1,
    ),
    "key overruns": (record_bytes(b"\x00", zigzag(0), zigzag(0), zigzag(50), b"k"), 1),
    "value overruns": (record_bytes(b"\x00", zigzag(0), zigzag(0), zigzag(-1), zigzag(9), b"v"), 1),
    "negative header count": (
        record_bytes(b"\x00", zigzag(0), zigzag(0), zigzag(-1), zigzag(-1), zigzag(-1)),
        1,
    ),
    "header count beyond the bytes": (
        record_bytes(
            b"\x00", zigzag(0), zigzag(0), zigzag(-1), zigzag(-1), zigzag(1000), b"\x00\x00"
        ),
        1,
    ),
    "null header key": (
        record_bytes(
            b"\x00", zigzag(0), zigzag(0), zigzag(-1), zigzag(-1), zigzag(1), zigzag(-1), zigzag(-1)
        ),
        1,
    ),
    "offset delta beyond int32": (
        record_bytes(
            b"\x00", zigzag(0), b"\xff\xff\xff\xff\x1f", zigzag(-1), zigzag(-1), zigzag(0)
        ),
        1,
    ),
    "timestamp varlong too long": (
        record_bytes(b"\x00", b"\xff" * 10 + b"\x01", zigzag(0), zigzag(-1), zigzag(-1), zigzag(0)),
        1,
    ),
}


@pytest.mark.parametrize("name", list(BAD_SECTIONS))
def test_malformed_records_are_corrupt(name: str) -> None:
    """Each malformed length or varint, behind a valid CRC, is CorruptRecord."""
    section, records_count = BAD_SECTIONS[name]
    with pytest.raises(CorruptRecord):
        list(iter_records(batch_of(section, records_count)))


def test_zero_records() -> None:
    """A batch that claims no records and holds none decodes to nothing."""
    assert list(iter_records(batch_of(b"", 0))) == []


# --- building ---------------------------------------------------------------------------------


def test_builder_with_offset_gaps_and_kept_last_offset_delta() -> None:
    """Compaction keeps offsets and the batch's last offset delta: the builder allows both."""
    builder = BatchBuilder(base_offset=100)
    builder.append(100, 5, b"a", b"1")
    builder.append(103, 4, b"b", None, [("h", None)])
    batch = builder.build(last_offset_delta=9)
    header = check_batch(batch)
    assert (header.last_offset_delta, header.records_count) == (9, 2)
    assert (header.base_timestamp, header.max_timestamp) == (5, 5)
    assert list(iter_records(batch)) == [
        Record(100, 5, b"a", b"1", ()),
        Record(103, 4, b"b", None, (("h", None),)),
    ]


def test_builder_misuse() -> None:
    """Offsets going backwards are a bug; empty batches and out-of-range values are invalid."""
    builder = BatchBuilder(base_offset=10)
    with pytest.raises(InvalidRecord):
        builder.build()
    builder.append(10, 0, None, None)
    with pytest.raises(InvariantViolation, match=r"^offset 10 after 10$"):
        builder.append(10, 0, None, None)
    with pytest.raises(InvariantViolation, match=r"^last offset delta -1 < 0$"):
        builder.build(last_offset_delta=-1)
    with pytest.raises(InvalidRecord):
        builder.build(last_offset_delta=1 << 31)
    far = BatchBuilder()
    far.append(0, 0, None, None)
    with pytest.raises(InvalidRecord):
        far.append(1 << 31, 0, None, None)
    with pytest.raises(InvalidRecord):
        build_batch([(None, None, (), -(1 << 62)), (None, None, (), 1 << 62)])


def test_non_utf8_header_keys_survive() -> None:
    """Header key bytes that are not UTF-8 come back as the same bytes when rebuilt."""
    raw_key = b"trace\xff\xfe"
    section = record_bytes(
        b"\x00",
        zigzag(0),
        zigzag(0),
        zigzag(-1),
        zigzag(-1),
        zigzag(1),
        zigzag(len(raw_key)),
        raw_key,
        zigzag(-1),
    )
    (record,) = iter_records(batch_of(section, 1))
    rebuilt = build_batch([(record.key, record.value, record.headers, record.timestamp)])
    assert raw_key in rebuilt
    assert list(iter_records(rebuilt)) == [record]


def test_unencodable_header_key() -> None:
    """A header key with a lone surrogate that no decode produced is refused, not mangled."""
    with pytest.raises(InvalidRecord):
        build_batch([(None, None, [("bad\ud800", None)], 0)])


def test_varint_boundaries_round_trip() -> None:
    """Lengths and deltas at every varint byte-count boundary encode and decode exactly."""
    sizes = [0, 63, 64, 8191, 8192, 1 << 14, (1 << 20) + 3]
    records = [
        (b"k" * size, b"v" * size, (), -(1 << 40) if size % 2 else 1 << 40) for size in sizes
    ]
    assert [
        (record.key, record.value, record.timestamp)
        for record in iter_records(build_batch(records))
    ] == [(key, value, timestamp) for key, value, _, timestamp in records]


# --- control records --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "type_", [t for t in ControlRecordType if t is not ControlRecordType.UNKNOWN]
)
def test_control_record_key_round_trip(type_: ControlRecordType) -> None:
    """The key is version 0 then the type, as int16s."""
    key = control_record_key(type_)
    assert key == struct.pack(">hh", 0, int(type_))
    assert read_control_record_type(key) is type_


def test_control_record_key_edge_cases() -> None:
    """Newer versions are read, unknown types are UNKNOWN, short keys and negative versions fail."""
    assert read_control_record_type(struct.pack(">hh", 3, 1) + b"extra") is ControlRecordType.COMMIT
    assert read_control_record_type(struct.pack(">hh", 0, 99)) is ControlRecordType.UNKNOWN
    for bad in (None, b"\x00\x00\x00", struct.pack(">hh", -1, 0)):
        with pytest.raises(CorruptRecord):
            read_control_record_type(bad)
    with pytest.raises(InvariantViolation):
        control_record_key(ControlRecordType.UNKNOWN)


def test_end_txn_marker() -> None:
    """A COMMIT marker batch carries the coordinator epoch in its value."""
    batch = build_batch(
        [(control_record_key(ControlRecordType.COMMIT), end_txn_marker_value(42), (), 7)],
        producer_id=5,
        producer_epoch=1,
        is_transactional=True,
        is_control=True,
    )
    (record,) = iter_records(batch)
    assert read_control_record_type(record.key) is ControlRecordType.COMMIT
    assert read_end_txn_marker(record.value) == 42
    assert read_end_txn_marker(struct.pack(">hi", 1, 9) + b"more") == 9
    for bad in (None, b"\x00\x00\x00\x00\x00", struct.pack(">hi", -1, 0)):
        with pytest.raises(CorruptRecord):
            read_end_txn_marker(bad)


def test_a_delete_horizon_is_the_base_timestamp_and_records_keep_theirs() -> None:
    """KIP-534: the cleaner marks a batch with its delete horizon, carried as baseTimestamp;
    each record's timestamp is still exact (a delta from the horizon, negative if earlier)."""
    horizon = 1_700_000_500_000
    builder = BatchBuilder(base_offset=10, delete_horizon_ms=horizon)
    builder.append(10, 1_700_000_000_000, b"k", None)
    builder.append(12, 1_700_000_900_000, b"j", b"v")
    batch = builder.build(last_offset_delta=3)
    check_batch(batch)
    header = read_header(batch)
    assert header.attributes & 0x40 and header.base_timestamp == horizon
    assert header.max_timestamp == 1_700_000_900_000 and header.last_offset_delta == 3
    assert [(r.offset, r.timestamp, r.key) for r in iter_records(batch)] == [
        (10, 1_700_000_000_000, b"k"), (12, 1_700_000_900_000, b"j")]
    plain = BatchBuilder()
    plain.append(0, 5, b"k", b"v")
    assert not read_header(plain.build()).attributes & 0x40
