"""The records of a section decoded in C (`_scan.records`) against the Python reference
(`record._decode_records_python`): the same records, the same sections refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.errors import CorruptRecord
from pykraft.records import record as record_module
from pykraft.records.record import Record, build_batch, iter_records
from pykraft.testing.batches import raw_record, varint

BASE_TS = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1


def _native(section: bytes, count: int, base_offset: int, base_ts: int,
            append_time: int | None) -> list[Record]:
    from pykraft.records import _scan  # type: ignore[attr-defined]

    try:
        records: list[Record] = _scan.records(section, count, base_offset, base_ts,
                                               append_time, Record,
                                               record_module._RECORD_SETTERS)
    except ValueError as error:
        raise CorruptRecord(str(error)) from None
    return records


def _outcome(decode: Any, section: bytes, count: int, base_offset: int = 0,
             base_ts: int = BASE_TS, append_time: int | None = None) -> Any:
    try:
        return ("ok", decode(section, count, base_offset, base_ts, append_time))
    except CorruptRecord:
        return ("corrupt",)  # messages are worded apart


def _agree(section: bytes, count: int, base_offset: int = 0, base_ts: int = BASE_TS,
           append_time: int | None = None) -> Any:
    native = _outcome(_native, section, count, base_offset, base_ts, append_time)
    python = _outcome(record_module._decode_records_python, section, count, base_offset,
                      base_ts, append_time)
    assert native == python
    return native


def test_the_c_decoder_is_built_and_used() -> None:
    # the metadata log of every node is read through it: a silent fallback to Python
    # would make that many times slower without any test noticing
    assert record_module.native_records_loaded()
    batch = build_batch([(b"k", b"v", [("h", b"x")], BASE_TS)], base_offset=7)
    calls = []
    native = record_module._native_records

    def counted(*args: Any) -> Any:
        calls.append(args[1])
        return native(*args)  # type: ignore[misc]

    record_module._native_records = counted
    try:
        [only] = list(iter_records(batch))
    finally:
        record_module._native_records = native
    assert calls == [1]
    assert only == Record(7, BASE_TS, b"k", b"v", (("h", b"x"),))


_records = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=8)),
    st.integers(-(1 << 62), 1 << 62),
    st.lists(st.tuples(st.binary(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
             max_size=3)), min_size=0, max_size=6)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(_records, st.integers(-(1 << 63), INT64_MAX), st.integers(-(1 << 63), INT64_MAX),
       st.one_of(st.none(), st.integers(-(1 << 63), INT64_MAX)))
def test_valid_sections_decode_alike(records: list[Any], base_offset: int, base_ts: int,
                                     append_time: int | None) -> None:
    """Any keys, values, headers (keys not UTF-8 too), deltas; offsets and timestamps that
    pass int64 when added are Python's larger ints in both."""
    section = b"".join(
        raw_record(index, key, value, timestamp_delta=delta, headers=headers)
        for index, (key, value, delta, headers) in enumerate(records))
    outcome = _agree(section, len(records), base_offset, base_ts, append_time)
    assert outcome[0] == "ok"
    decoded = outcome[1]
    assert [r.offset for r in decoded] == [base_offset + i for i in range(len(records))]
    assert [(r.key, r.value) for r in decoded] == [(k, v) for k, v, _, _ in records]
    assert [r.timestamp for r in decoded] == [
        base_ts + delta if append_time is None else append_time for _, _, delta, _ in records]
    assert [tuple(h.encode("utf-8", "surrogateescape") for h, _ in r.headers)
            for r in decoded] == [tuple(k for k, _ in headers) for *_, headers in records]


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=120), st.integers(-1, 8))
def test_any_bytes_are_refused_or_decoded_alike(section: bytes, count: int) -> None:
    _agree(section, count)


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(_records, st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), min_size=1,
                          max_size=4), st.integers(-2, 2))
def test_mutated_valid_sections_are_refused_or_decoded_alike(
        records: list[Any], flips: list[tuple[int, int]], count_change: int) -> None:
    section = bytearray(b"".join(
        raw_record(index, key, value, timestamp_delta=delta, headers=headers)
        for index, (key, value, delta, headers) in enumerate(records)))
    for position, byte in flips:
        if section:
            section[position % len(section)] = byte
    _agree(bytes(section), max(0, len(records) + count_change))


def _body(*fields: bytes) -> bytes:
    body = b"\x00" + b"".join(fields)
    return varint(len(body)) + body


@pytest.mark.parametrize("name, section, ok", [
    # kio's varints: a fifth byte with more than four bits is a value outside int32,
    # refused by whichever field reads it; a tenth varlong byte keeps only its low bit
    ("offset delta past int32", _body(varint(0), b"\xff\xff\xff\xff\x7f", varint(-1),
                                      varint(-1), varint(0)), False),
    ("key length past int32", _body(varint(0), varint(0), b"\xff\xff\xff\xff\x7f",
                                    varint(-1), varint(0)), False),
    ("a tenth varlong byte", _body(b"\xff" * 9 + b"\x7f", varint(0), varint(-1), varint(-1),
                                   varint(0)), True),
    ("an eleventh varlong byte", _body(b"\xff" * 10 + b"\x01", varint(0), varint(-1),
                                       varint(-1), varint(0)), False),
    ("a null header key", _body(varint(0), varint(0), varint(-1), varint(-1), varint(1),
                                varint(-1), varint(-1)), False),
    ("a key length of -2", _body(varint(0), varint(0), varint(-2), varint(-1), varint(0)),
     False),
    ("an empty record", varint(0), False),
    ("a record longer than its fields", _body(varint(0), varint(0), varint(-1), varint(-1),
                                             varint(0), b"\x00"), False),
    ("a header count past the record", _body(varint(0), varint(0), varint(-1), varint(-1),
                                             varint(3)), False),
    ("a key that runs into the next record", _body(varint(0), varint(0), varint(5), b"ab") +
     _body(varint(0), varint(1), varint(-1), varint(-1), varint(0)), False),
])
def test_hand_made_sections(name: str, section: bytes, ok: bool) -> None:
    assert (_agree(section, 1)[0] == "ok") is ok, name


def test_a_large_batch_decodes_alike() -> None:
    entries = [(b"key-%d" % i, b"value" * (i % 7), [("h", b"x")] * (i % 3), BASE_TS + i)
               for i in range(5000)]
    batch = build_batch(entries, base_offset=1 << 40)
    section = batch[61:]
    assert _agree(section, 5000, 1 << 40, BASE_TS)[1] == list(iter_records(batch))
