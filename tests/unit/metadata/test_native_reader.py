"""The compiled metadata reader (metadata/_read.c) against the generated Python readers, its
reference and fallback: the same bytes give the same record or both a MetadataDecodeError,
and the same record streams fold into the same images."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.metadata import codec
from pykraft.metadata.codec import (
    MetadataDecodeError,
    decode_message,
    decode_metadata_record,
    encode_message,
    encode_metadata_record,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import (
    METADATA_RECORD_TYPES,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
)
from pykraft.metadata.schema import VERSION_MAX, FieldSpec, Versions
from pykraft.server.image_digest import image_digest
from tests.unit.metadata.metadata_workload import workload
from tests.unit.metadata.test_metadata_codec import EVERY_VERSION, message_strategy

# The kinds with an array of structs, which only the Python reader reads.
PYTHON_ONLY = {"RegisterBrokerRecord", "RegisterControllerRecord", "ClientQuotaRecord"}


def test_the_compiled_reader_is_built_and_reads_the_partition_records() -> None:
    # setup.py builds it at install; a silent fallback would make every node's metadata
    # path several times slower without any other test noticing
    assert codec.native_reader_loaded()
    for cls in METADATA_RECORD_TYPES.values():
        for version in range(cls.LOWEST_VERSION, cls.LATEST_VERSION + 1):
            compiled = codec._struct_codec(cls, version, codec._is_flexible(cls, version))
            assert compiled.native == (cls.__name__ not in PYTHON_ONLY), (cls, version)
    with codec.native_reader(False):
        assert not codec._struct_codec(PartitionChangeRecord, 1, True).native


@dataclass(slots=True)
class _Two:
    a: int = 0
    b: int = 0


class _MadeByInt(int):
    pass


def _reader_arguments(**changed: Any) -> tuple[Any, ...]:
    """Arguments that make a valid compiled reader of `_Two` (two int32s), with `changed`."""
    arguments: dict[str, Any] = {
        "cls": _Two, "setters": (vars(_Two)["a"], vars(_Two)["b"]), "defaults": (0, 0),
        "regular": ((0, 3), (1, 3)), "tagged": (), "error": MetadataDecodeError,
        "uuids": {}, "uuid_of": uuid.UUID, "uuid_arrays": {}, "uuid_array_of": tuple}
    arguments.update(changed)
    return tuple(arguments.values())


def test_the_compiled_reader_refuses_arguments_it_could_not_read_with() -> None:
    from pykraft.metadata import _read  # type: ignore[attr-defined]

    read = _read.Reader(*_reader_arguments())
    assert read(bytes.fromhex("0000000100000002" "00"), 0) == (_Two(1, 2), 9)
    # each a TypeError, not a SystemError left by an exception set and ignored, nor a
    # reader that would build its messages wrong
    for changed in ({"error": 5}, {"error": int}, {"cls": _MadeByInt, "setters": (
            vars(_Two)["a"], vars(_Two)["b"])}):
        with pytest.raises(TypeError):
            _read.Reader(*_reader_arguments(**changed))


def _outcome(data: bytes, compiled: bool) -> tuple[str, str]:
    with codec.native_reader(compiled):
        try:
            # repr: equal records, and a float NaN equal to itself
            return ("ok", repr(decode_metadata_record(data)))
        except MetadataDecodeError:
            return ("error", "")  # messages may be worded apart


def _assert_agree(data: bytes) -> None:
    assert _outcome(data, True) == _outcome(data, False), data.hex()


@pytest.mark.parametrize(("cls", "version"), EVERY_VERSION)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_and_python_agree_on_records_and_their_corruptions(
    cls: type[Any], version: int, data: st.DataObject
) -> None:
    """A valid record of every kind and version, then the same bytes cut short, with a byte
    changed, inserted or removed, or with bytes appended."""
    encoded = encode_metadata_record(data.draw(message_strategy(cls, version)), version)
    _assert_agree(encoded)
    index = data.draw(st.integers(3, max(3, len(encoded) - 1)))  # past the frame header
    changed = bytearray(encoded)
    if index < len(changed):
        changed[index] = data.draw(st.integers(0, 255))
    inserted = encoded[:index] + data.draw(st.binary(min_size=1, max_size=3)) + encoded[index:]
    for variant in (encoded[:index], bytes(changed), inserted,
                    encoded[:index] + encoded[index + 1:], encoded + b"\x00"):
        _assert_agree(variant)


@settings(max_examples=2000, deadline=None)
@given(st.sampled_from([b"\x01\x03\x00", b"\x01\x03\x01", b"\x01\x03\x02", b"\x01\x05\x00",
                        b"\x01\x05\x01", b"\x01\x05\x02", b"\x01\x02\x00", b"\x01\x0c\x00"]),
       st.binary(max_size=80))
def test_compiled_and_python_agree_on_any_body(header: bytes, body: bytes) -> None:
    """Arbitrary bytes after the header of a PartitionRecord, PartitionChangeRecord,
    TopicRecord or ConfigRecord."""
    _assert_agree(header + body)


ALL = Versions(0, VERSION_MAX)
NULLABLE_FROM_1 = Versions(1, VERSION_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class EveryKind:
    """A flexible message with every kind of field the compiled reader reads, regular and
    tagged, nullable from version 1: no metadata record has bools, floats, uint16s or
    arrays of strings outside an array of structs, which the Python reader reads."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 1
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    e: int = 0
    f: float = 0.0
    g: bool = False
    h: Any = None
    i: str | None = ""
    j: bytes | None = b""
    k: tuple[Any, ...] | None = ()
    m: tuple[Any, ...] | None = ()
    n: tuple[Any, ...] | None = ()
    o: tuple[Any, ...] | None = ()
    p: tuple[Any, ...] | None = ()
    q: bool = True
    r: tuple[Any, ...] | None = None
    s: str | None = None

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("a", "int8", ALL, default=0),
        FieldSpec("b", "int16", ALL, default=0),
        FieldSpec("c", "uint16", ALL, default=0),
        FieldSpec("d", "int32", ALL, default=0),
        FieldSpec("e", "int64", ALL, default=0),
        FieldSpec("f", "float64", ALL, default=0.0),
        FieldSpec("g", "bool", ALL, default=False),
        FieldSpec("h", "uuid", ALL, default=None),
        FieldSpec("i", "string", ALL, nullable_versions=NULLABLE_FROM_1, default=""),
        FieldSpec("j", "bytes", ALL, nullable_versions=NULLABLE_FROM_1, default=b""),
        FieldSpec("k", "[]string", ALL, nullable_versions=NULLABLE_FROM_1, default=()),
        FieldSpec("m", "[]bytes", ALL, nullable_versions=NULLABLE_FROM_1, default=()),
        FieldSpec("n", "[]uuid", ALL, nullable_versions=NULLABLE_FROM_1, default=()),
        FieldSpec("o", "[]int64", ALL, nullable_versions=NULLABLE_FROM_1, default=()),
        FieldSpec("p", "[]uint16", ALL, nullable_versions=NULLABLE_FROM_1, default=()),
        FieldSpec("q", "bool", ALL, tag=0, tagged_versions=ALL, default=True),
        FieldSpec("r", "[]int8", ALL, nullable_versions=ALL, tag=7, tagged_versions=ALL,
                  default=None),
        FieldSpec("s", "string", NULLABLE_FROM_1, nullable_versions=NULLABLE_FROM_1, tag=300,
                  tagged_versions=NULLABLE_FROM_1, default=None),
    )  # fmt: skip


def _message_outcome(data: bytes, version: int, compiled: bool) -> tuple[str, str]:
    with codec.native_reader(compiled):
        assert codec._struct_codec(EveryKind, version, True).native == compiled
        try:
            return ("ok", repr(decode_message(EveryKind, data, version)))
        except MetadataDecodeError:
            return ("error", "")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 1), st.data())
def test_compiled_and_python_agree_on_every_kind_of_field(version: int,
                                                          data: st.DataObject) -> None:
    """A message of every kind of field, written, then cut, changed or padded."""
    message = data.draw(message_strategy(EveryKind, version))
    encoded = encode_message(message, version)
    index = data.draw(st.integers(0, len(encoded) - 1))
    changed = bytearray(encoded)
    changed[index] = data.draw(st.integers(0, 255))
    for variant in (encoded, encoded[:index], bytes(changed), encoded + b"\x00",
                    encoded[:index] + data.draw(st.binary(min_size=1, max_size=3))
                    + encoded[index:]):
        outcome = _message_outcome(variant, version, True)
        assert outcome == _message_outcome(variant, version, False), variant.hex()
        if variant is encoded:
            assert outcome == ("ok", repr(message))


@pytest.mark.parametrize("byte", [1, 2, 0x80, 0xFF])
def test_any_non_zero_byte_is_a_true_bool(byte: int) -> None:
    encoded = bytearray(encode_message(EveryKind(h=uuid.UUID(int=5)), 1))
    encoded[25] = byte  # g, after 1 + 2 + 2 + 4 + 8 + 8 bytes of integers and a float
    for compiled in (True, False):
        with codec.native_reader(compiled):
            assert decode_message(EveryKind, bytes(encoded), 1).g is True


def _tagged(tag: int, value: bytes) -> bytes:
    return bytes([tag, len(value)]) + value


@pytest.mark.parametrize("tags", [
    [_tagged(1, b"\x00\x00\x00\x05"), _tagged(1, b"\x00\x00\x00\x06")],  # known twice
    [_tagged(9, b"xy"), _tagged(9, b"")],  # unknown twice
    [_tagged(1, b"\x00\x00\x00\x05\x00")],  # longer than the value
    [_tagged(1, b"\x00\x00")],  # shorter than the value
    [bytes([0, 5, 3, 0, 0, 0, 1])],  # an ISR of two elements in a size of five bytes
    [bytes([0, 200])],  # past the end
    [b"\x80\x80\x80\x80\x80\x01"],  # a tag of six bytes
    [b"\xff\xff\xff\xff\x7f\x00"],  # a tag of 35 bits
    [bytes([0, 1, 0])],  # a null ISR, which the field allows
    [bytes([2, 1, 0]), _tagged(300 & 0x7F | 0x80, b"\x02\x00")],  # unknown two-byte tag
])
def test_compiled_and_python_agree_on_tag_buffers(tags: list[bytes]) -> None:
    topic = bytes(range(16))
    body = b"\x00\x00\x00\x03" + topic + bytes([len(tags)]) + b"".join(tags)
    for version in (0, 1, 2):
        _assert_agree(bytes([1, 5, version]) + body)


def _decoded(records: list[MetadataRecord], rng: random.Random, compiled: bool) \
        -> list[MetadataRecord]:
    """The records written at a random version that can hold them, and read back."""
    encoded: list[bytes] = []
    for record in records:
        versions = list(range(type(record).LOWEST_VERSION, type(record).LATEST_VERSION + 1))
        rng.shuffle(versions)
        for version in versions:
            try:
                encoded.append(encode_metadata_record(record, version))
                break
            except ValueError:  # a field this version lacks holds a value
                continue
        else:
            pytest.fail(f"no version of {type(record).__name__} holds {record}")
    with codec.native_reader(compiled):
        return [decode_metadata_record(data) for data in encoded]


def _image(records: list[MetadataRecord], rng: random.Random) -> MetadataImage:
    """The records folded in random batches, as the loader folds committed batches."""
    image, start = MetadataImage.EMPTY, 0
    while start < len(records):
        end = start + rng.randint(1, 40)
        delta = MetadataDelta(image)
        for record in records[start:end]:
            delta.replay(record)
        image = delta.apply(end, 1)
        start = end
    return image


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(80, 250))
def test_compiled_and_python_fold_random_streams_into_the_same_image(
    seed: int, steps: int
) -> None:
    """The metadata workload's random streams of valid records (topics and partitions
    created, changed and removed; brokers registered, fenced and unregistered; configs,
    ACLs, quotas, producer ids), each record at a random version, read by each reader and
    folded alike: the images are equal and so are their digests."""
    records = workload(seed, steps)
    compiled = _decoded(records, random.Random(seed), compiled=True)
    python = _decoded(records, random.Random(seed), compiled=False)
    assert [repr(record) for record in compiled] == [repr(record) for record in python]
    compiled_image = _image(compiled, random.Random(seed))
    python_image = _image(python, random.Random(seed))
    assert compiled_image == python_image
    assert image_digest(compiled_image) == image_digest(python_image)
    assert any(isinstance(record, PartitionChangeRecord) for record in compiled)
    assert any(isinstance(record, PartitionRecord) for record in compiled)
