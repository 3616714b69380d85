"""The produce path's record check (records.validate): the C scan and its Python reference
agree on every input, and each malformed records section is refused naming its record."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.errors import CorruptRecord, InvalidRecord, MessageTooLarge
from pykraft.records import validate
from pykraft.records.batch import CONTROL_BIT, DELETE_HORIZON_BIT, HEADER_SIZE, read_header
from pykraft.records.codecs import CompressionType
from pykraft.records.record import build_batch
from pykraft.records.validate import (
    INT64_MAX,
    check_client_batch,
    scan_records,
    scan_records_python,
    validate_batch,
)
from pykraft.testing.batches import frame_batch, raw_record, varint

BASE_TS = 1_700_000_000_000


def _native():  # type: ignore[no-untyped-def]
    from pykraft.records import _scan  # type: ignore[attr-defined]

    return _scan.scan


def test_the_c_scan_is_built_and_used() -> None:
    # setup.py builds it at install; a silent fallback would make produce several times
    # slower without any test noticing
    assert validate.native_scan_loaded()
    assert validate._scan_impl is _native()


def _outcome(scan, section: bytes, count: int, base: int):  # type: ignore[no-untyped-def]
    try:
        return ("ok", scan(section, count, base))
    except ValueError as error:
        return ("error", error.args[0])  # the index; messages may be worded apart


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(0, 12), st.integers(-(1 << 63), (1 << 63) - 1))
def test_c_and_python_agree_on_any_bytes(section: bytes, count: int, base: int) -> None:
    assert _outcome(_native(), section, count, base) == \
        _outcome(scan_records_python, section, count, base)


_records = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=8)),
    st.integers(-(1 << 40), 1 << 40),
    st.lists(st.tuples(st.binary(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
             max_size=2)), min_size=1, max_size=6)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(_records, st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
       st.integers(-2, 2))
def test_c_and_python_agree_on_mutated_valid_sections(
    records: list, flips: list[tuple[int, int]], count_change: int  # type: ignore[type-arg]
) -> None:
    section = bytearray(b"".join(
        raw_record(index, key, value, timestamp_delta=delta, headers=headers)
        for index, (key, value, delta, headers) in enumerate(records)))
    if not flips:
        summary = _native()(bytes(section), len(records), BASE_TS)
        assert summary[2] == sum(key is None for key, *_ in records)
        assert summary[0] == max(BASE_TS + delta for _, _, delta, _ in records)
    for position, byte in flips:
        if section:
            section[position % len(section)] = byte
    count = max(0, len(records) + count_change)
    assert _outcome(_native(), bytes(section), count, BASE_TS) == \
        _outcome(scan_records_python, bytes(section), count, BASE_TS)


def test_a_valid_batch_is_summarised() -> None:
    batch = build_batch([(b"k", b"v", (), BASE_TS + 5), (None, b"v", (("h", None),), BASE_TS),
                         (b"k", None, (), BASE_TS - 3)])
    summary = validate_batch(batch, 0, read_header(batch), decompressed_bytes_max=1 << 20)
    assert summary == (BASE_TS + 5, BASE_TS - 3, 1)


def test_no_timestamps_leave_min_unset() -> None:
    section = raw_record(0, b"k", b"v", timestamp_delta=0)
    assert scan_records(section, 1, -1) == (-1, INT64_MAX, 0)


_GOOD = raw_record(0, b"k", b"v")
MALFORMED = {
    # name: (section, count, index of the record named or -1)
    "length overruns the section": (raw_record(0, b"k", b"v", length_adjust=5), 1, 0),
    "length shorter than the fields": (raw_record(0, b"k", b"v", length_adjust=-1), 1, 0),
    "negative length": (varint(-3) + b"\x00" * 8, 1, 0),
    "empty record": (varint(0), 1, 0),
    "overlong varint": (b"\xff\xff\xff\xff\x7f" + b"\x00" * 8, 1, 0),
    "offset delta out of order": (_GOOD + raw_record(5, b"k", b"v"), 2, 1),
    "fewer records than counted": (_GOOD + raw_record(1, b"k", b"v"), 3, 2),
    "bytes after the records": (_GOOD + b"\x00\x01", 1, -1),
    "key length below -1": (varint(6) + b"\x00\x00\x00" + varint(-2) + b"\x00\x00", 1, 0),
    "value overruns the record": (raw_record(0, b"k", b"vvvv")[:-1], 1, 0),
    "negative header count": (varint(6) + b"\x00\x00\x00\x00\x00" + varint(-1), 1, 0),
    "null header key": (raw_record(0, b"k", b"v", headers=[(b"", b"x")]).replace(
        varint(0) + varint(1) + b"x", varint(-1) + varint(1) + b"x"), 1, 0),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_sections_are_refused_naming_the_record(name: str) -> None:
    section, count, index = MALFORMED[name]
    for scan in (_native(), scan_records_python):
        with pytest.raises(ValueError) as raised:
            scan(section, count, BASE_TS)
        assert raised.value.args[0] == index
    with pytest.raises(InvalidRecord) as refused:
        scan_records(section, count, BASE_TS)
    assert refused.value.record_errors == (() if index < 0 else
                                           ((index, refused.value.args[0]),))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_compressed_batches_are_checked_record_by_record(codec: CompressionType) -> None:
    good = frame_batch(_GOOD + raw_record(1, None, b"v"), 2, codec=codec)
    assert validate_batch(good, 0, read_header(good), decompressed_bytes_max=1 << 20)[2] == 1
    garbage = frame_batch(_GOOD + b"\x07\x07", 1, codec=codec)
    with pytest.raises(InvalidRecord):
        validate_batch(garbage, 0, read_header(garbage), decompressed_bytes_max=1 << 20)
    undecodable = frame_batch(b"\x00not compressed at all" * 4, 1, codec=codec,
                              compress_section=False)
    with pytest.raises(CorruptRecord):
        validate_batch(undecodable, 0, read_header(undecodable),
                       decompressed_bytes_max=1 << 20)


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_a_decompression_bomb_stops_at_the_bound(codec: CompressionType) -> None:
    value = b"\x00" * (4 << 20)
    bomb = frame_batch(raw_record(0, b"k", value), 1, codec=codec)
    assert len(bomb) < (1 << 20)
    with pytest.raises(MessageTooLarge, match="decompresses to more than 1048576 bytes"):
        validate_batch(bomb, 0, read_header(bomb), decompressed_bytes_max=1 << 20)


def test_an_unknown_codec_is_corrupt() -> None:
    batch = frame_batch(_GOOD, 1, attributes=5, compress_section=False)
    with pytest.raises(CorruptRecord, match="unknown compression codec id 5"):
        validate_batch(batch, 0, read_header(batch), decompressed_bytes_max=1 << 20)


@pytest.mark.parametrize("attributes, producer, why", [
    (CONTROL_BIT, (-1, -1, -1), "not allowed to write control records"),
    (DELETE_HORIZON_BIT, (-1, -1, -1), "delete horizon"),
    (0, (7, 0, -1), "Invalid sequence number -1"),
    (0x10, (-1, -1, -1), "transactional batch without a producer id"),
])
def test_what_only_coordinators_may_write(attributes: int, producer: tuple[int, int, int],
                                         why: str) -> None:
    producer_id, epoch, sequence = producer
    batch = frame_batch(_GOOD, 1, attributes=attributes, producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence)
    with pytest.raises(InvalidRecord, match=why):
        check_client_batch(read_header(batch), "t-0")
    check_client_batch(read_header(frame_batch(_GOOD, 1)), "t-0")


def test_section_bytes_start_after_the_header() -> None:
    batch = frame_batch(_GOOD, 1)
    assert batch[HEADER_SIZE:] == _GOOD
