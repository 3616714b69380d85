"""The metadata record codec: round trips, golden bytes, framing, malformed input, and an
independent cross-check of the generic codec against kio's Kafka RPC serializer."""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0 import response as kio_api_versions_v0
from kio.schema.api_versions.v3 import response as kio_api_versions_v3
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v1 import response as kio_sasl_v1
from kio.schema.sasl_authenticate.v2 import response as kio_sasl_v2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32Timedelta, i64, i64Timedelta

from pykraft.errors import CorruptRecord
from pykraft.metadata import codec
from pykraft.metadata.codec import (
    MetadataDecodeError,
    MetadataEncodeError,
    decode_message,
    decode_metadata_record,
    decode_metadata_record_and_version,
    encode_message,
    encode_metadata_record,
    read_unsigned_varint,
    write_unsigned_varint,
)
from pykraft.metadata.records import (
    METADATA_RECORD_TYPES,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from pykraft.metadata.schema import VERSION_MAX, FieldSpec, Versions


@pytest.fixture(scope="module", autouse=True, params=["compiled", "python"])
def reader(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs with the compiled reader (_read.c) and with the generated Python
    one, the fallback when the extension is not built."""
    with codec.native_reader(request.param == "compiled"):
        yield request.param


INT_BOUNDS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}


def scalar_strategy(kind: str) -> st.SearchStrategy[Any]:
    if kind in INT_BOUNDS:
        low, high = INT_BOUNDS[kind]
        return st.integers(low, high)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=20),
        "bytes": st.binary(max_size=20),
        "uuid": st.uuids(allow_nil=True),
    }[kind]


def value_strategy(spec: FieldSpec, version: int) -> st.SearchStrategy[Any]:
    if spec.struct is not None:
        element = message_strategy(spec.struct, version)
    else:
        element = scalar_strategy(spec.element_type)
    strategy = st.lists(element, max_size=4).map(tuple) if spec.is_array else element
    if version in spec.nullable_versions:
        strategy = st.none() | strategy
    return strategy


def message_strategy(cls: type[Any], version: int) -> st.SearchStrategy[Any]:
    """Any value of `cls` writable at `version`: fields the version lacks keep defaults."""
    arguments = {
        spec.name: value_strategy(spec, version)
        if version in spec.versions
        else st.just(spec.default)
        for spec in cls.FIELDS
    }
    return st.builds(cls, **arguments)


EVERY_VERSION = [
    pytest.param(cls, version, id=f"{cls.__name__}-v{version}")
    for cls in METADATA_RECORD_TYPES.values()
    for version in range(cls.LOWEST_VERSION, cls.LATEST_VERSION + 1)
]


@pytest.mark.parametrize(("cls", "version"), EVERY_VERSION)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_round_trip_every_record_kind_at_every_version(
    cls: type[Any], version: int, data: st.DataObject
) -> None:
    """decode(encode(r, v)) == r and reports v, for every kind and version; no strict prefix
    of the bytes decodes."""
    record = data.draw(message_strategy(cls, version))
    encoded = encode_metadata_record(record, version)
    assert decode_metadata_record_and_version(encoded) == (record, version)
    assert decode_metadata_record(memoryview(encoded)) == record
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MetadataDecodeError):
        decode_metadata_record(encoded[:cut])


def test_every_schema_record_kind_is_generated() -> None:
    """The 25 record kinds of the schemas, by Kafka's api keys, and a class per kind."""
    assert sorted(METADATA_RECORD_TYPES) == [
        0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27
    ]  # fmt: skip
    for api_key, cls in METADATA_RECORD_TYPES.items():
        assert cls.API_KEY == api_key
        assert cls.FLEXIBLE_FROM == 0
    assert PartitionRecord.LATEST_VERSION == 2
    assert RegisterBrokerRecord.LATEST_VERSION == 3
    assert [spec.name for spec in PartitionChangeRecord.FIELDS][:4] == [
        "partition_id", "topic_id", "isr", "leader"
    ]  # fmt: skip


def test_defaults_follow_the_schema() -> None:
    """Schema defaults, and Kafka's implicit ones where the schema gives none."""
    change = PartitionChangeRecord()
    assert change.leader == -2 and change.isr is None and change.leader_recovery_state == -1
    assert change.topic_id == uuid.UUID(int=0) and change.partition_id == -1
    broker = RegisterBrokerRecord()
    assert broker.fenced is True and broker.rack == "" and broker.end_points == ()
    assert PartitionRecord().eligible_leader_replicas is None


TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")
TOPIC_ID_BYTES = bytes(range(1, 17))


def int32s(*values: int) -> bytes:
    return b"".join(value.to_bytes(4, "big", signed=True) for value in values)


def test_golden_topic_record() -> None:
    """TopicRecord v0, byte by byte from TopicRecord.json (flexible from v0)."""
    expected = (
        b"\x01"  # frame version 1 (unsigned varint)
        + b"\x02"  # api key 2 = TopicRecord
        + b"\x00"  # record version 0
        + b"\x04foo"  # Name: compact string, unsigned varint length+1 = 4, then UTF-8
        + TOPIC_ID_BYTES  # TopicId: 16 bytes, most significant first
        + b"\x00"  # tag buffer: no tagged fields
    )
    record = TopicRecord(name="foo", topic_id=TOPIC_ID)
    assert encode_metadata_record(record) == expected
    assert decode_metadata_record(expected) == record


def test_golden_partition_record_v0_with_a_tagged_field() -> None:
    """PartitionRecord v0: LeaderRecoveryState is tagged (tag 0) and written only when it
    differs from its default 0."""
    expected = (
        b"\x01\x03\x00"  # frame 1, api key 3, version 0
        + int32s(0)  # PartitionId
        + TOPIC_ID_BYTES  # TopicId
        + b"\x04" + int32s(1, 2, 3)  # Replicas: compact array, count+1 = 4, int32 each
        + b"\x03" + int32s(1, 2)  # Isr
        + b"\x01"  # RemovingReplicas: empty compact array (0+1)
        + b"\x01"  # AddingReplicas: empty
        + int32s(1)  # Leader
        + int32s(4)  # LeaderEpoch (the tagged LeaderRecoveryState sits between, in the tags)
        + int32s(6)  # PartitionEpoch
        + b"\x01"  # tag buffer: one tagged field
        + b"\x00\x01\x01"  # tag 0, size 1, LeaderRecoveryState int8 1 (RECOVERING)
    )  # fmt: skip
    record = PartitionRecord(
        partition_id=0, topic_id=TOPIC_ID, replicas=(1, 2, 3), isr=(1, 2), leader=1,
        leader_recovery_state=1, leader_epoch=4, partition_epoch=6,
    )  # fmt: skip
    assert encode_metadata_record(record, 0) == expected
    assert decode_metadata_record(expected) == record
    recovered = replace(record, leader_recovery_state=0)  # the default: not in the tags
    assert encode_metadata_record(recovered, 0) == expected[:-4] + b"\x00"


def test_golden_partition_record_v2_directories_and_elr() -> None:
    """PartitionRecord v2 adds Directories (regular, v1+) and the tagged ELR fields (tags 1
    and 2, default null): an empty array is not null, so it is written."""
    directory_a, directory_b = uuid.UUID(int=0xAA), uuid.UUID(int=0xBB)
    expected = (
        b"\x01\x03\x02"  # frame 1, api key 3, version 2
        + int32s(7) + TOPIC_ID_BYTES
        + b"\x03" + int32s(1, 2)  # Replicas
        + b"\x02" + int32s(1)  # Isr
        + b"\x01\x01"  # RemovingReplicas, AddingReplicas: empty
        + int32s(1, 5, 9)  # Leader, LeaderEpoch, PartitionEpoch
        + b"\x03" + directory_a.bytes + directory_b.bytes  # Directories: compact []uuid
        + b"\x02"  # two tagged fields, ascending tags
        + b"\x01\x05" + b"\x02" + int32s(2)  # tag 1 EligibleLeaderReplicas = [2], 5 bytes
        + b"\x02\x01" + b"\x01"  # tag 2 LastKnownElr = [] (not null), 1 byte
    )  # fmt: skip
    record = PartitionRecord(
        partition_id=7, topic_id=TOPIC_ID, replicas=(1, 2), isr=(1,), leader=1,
        leader_epoch=5, partition_epoch=9, directories=(directory_a, directory_b),
        eligible_leader_replicas=(2,), last_known_elr=(),
    )  # fmt: skip
    assert encode_metadata_record(record) == expected
    assert decode_metadata_record(expected) == record


def test_equal_directories_decode_to_one_shared_tuple() -> None:
    """A topic's partitions name the same replica directories over and over: decoded, they
    share one tuple (one object for the garbage collector, not one per partition); an
    array cut short is refused, not matched against a shorter cached one."""
    directories = (uuid.UUID(int=0xA1), uuid.UUID(int=0xB2), uuid.UUID(int=0xC3))
    encoded = [encode_metadata_record(PartitionRecord(
        partition_id=index, topic_id=TOPIC_ID, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1,
        leader_epoch=0, partition_epoch=0, directories=directories)) for index in range(3)]
    decoded = [decode_metadata_record(data) for data in encoded]
    assert all(isinstance(record, PartitionRecord) for record in decoded)
    first = decoded[0].directories  # type: ignore[union-attr]
    assert first == directories
    assert all(record.directories is first for record in decoded)  # type: ignore[union-attr]
    end = encoded[0].index(directories[2].bytes)  # cut inside the third directory
    with pytest.raises(MetadataDecodeError):
        decode_metadata_record(encoded[0][:end + 8])


def test_golden_partition_change_record_omits_no_change_defaults() -> None:
    """PartitionChangeRecord: every optional field is tagged; Leader -2 ("no change") and
    null ISR are defaults and take no bytes."""
    expected = (
        b"\x01\x05\x00"  # frame 1, api key 5, version 0
        + int32s(3) + TOPIC_ID_BYTES  # PartitionId, TopicId
        + b"\x01"  # one tagged field
        + b"\x00\x05" + b"\x02" + int32s(4)  # tag 0 Isr = [4]
    )  # fmt: skip
    record = PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, isr=(4,))
    assert encode_metadata_record(record, 0) == expected
    assert decode_metadata_record(expected) == record


def test_fields_a_version_lacks_must_hold_their_default() -> None:
    """Writing a value the version cannot carry is refused, not silently dropped."""
    record = PartitionRecord(topic_id=TOPIC_ID, directories=(uuid.UUID(int=5),))
    with pytest.raises(MetadataEncodeError, match="directories"):
        encode_metadata_record(record, 0)
    assert decode_metadata_record(encode_metadata_record(record, 1)) == record
    with pytest.raises(MetadataEncodeError, match="is_migrating_zk_broker"):
        encode_metadata_record(RegisterBrokerRecord(is_migrating_zk_broker=True), 1)
    with pytest.raises(MetadataEncodeError, match="versions 0-2"):
        encode_metadata_record(PartitionRecord(), 3)


def test_encode_refuses_bad_values() -> None:
    """Out-of-range integers, null in a non-nullable field and wrong types are errors."""
    with pytest.raises(MetadataEncodeError):
        encode_metadata_record(PartitionRecord(partition_id=1 << 31))
    with pytest.raises(MetadataEncodeError):
        encode_metadata_record(TopicRecord(name=None))  # type: ignore[arg-type]
    with pytest.raises(MetadataEncodeError):
        encode_metadata_record(TopicRecord(name="t", topic_id="not a uuid"))  # type: ignore[arg-type]
    with pytest.raises(MetadataEncodeError):
        encode_metadata_record(PartitionRecord(replicas=(1, "2")))  # type: ignore[arg-type]


def test_unknown_tags_are_skipped() -> None:
    """A newer writer's tagged field (tag 7 here) is skipped; known ones still decode."""
    plain = encode_metadata_record(TopicRecord(name="foo", topic_id=TOPIC_ID))
    with_unknown = plain[:-1] + b"\x01" + b"\x07\x02\xab\xcd"
    assert decode_metadata_record(with_unknown) == TopicRecord(name="foo", topic_id=TOPIC_ID)
    record = PartitionRecord(topic_id=TOPIC_ID, leader_recovery_state=1)
    known = encode_metadata_record(record, 0)
    assert known.endswith(b"\x01\x00\x01\x01")
    both = known[:-4] + b"\x02\x00\x01\x01\x09\x00"  # tag 0, then unknown tag 9 (empty)
    assert decode_metadata_record(both) == record


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "truncated"),
        (b"\x00\x02\x00\x04foo" + TOPIC_ID_BYTES + b"\x00", "frame version 0"),
        (b"\x02\x02\x00\x04foo" + TOPIC_ID_BYTES + b"\x00", "frame version 2"),
        (b"\x01\x06\x00", "api key 6"),  # retired AccessControlRecord
        (b"\x01\x63\x00", "api key 99"),
        (b"\x01\x02\x01\x04foo" + TOPIC_ID_BYTES + b"\x00", "TopicRecord v1"),
        (b"\x01\x02\x00\x04foo" + TOPIC_ID_BYTES + b"\x00\x00", "trailing byte"),
        (b"\x01\x02\x00\x00" + TOPIC_ID_BYTES + b"\x00", "null name"),
        (b"\x01\x02\x00\x04f\xffo" + TOPIC_ID_BYTES + b"\x00", "bad UTF-8"),
        (b"\x01\x02\x00\x7ffoo" + TOPIC_ID_BYTES + b"\x00", "string past the end"),
        (b"\x01\x02\x00\x04foo" + TOPIC_ID_BYTES + b"\x01\x07\x09\x00", "tag past the end"),
        (b"\x01\x02\x00\x04foo" + TOPIC_ID_BYTES + b"\x02\x07\x00\x07\x00", "duplicate tag"),
        (b"\x01\x02\x00\xff\xff\xff\xff\xff\x01", "6-byte varint"),
        (b"\x01\x02\x00\xff\xff\xff\xff\x7f", "varint over 32 bits"),
    ],
)
def test_malformed_records_raise_decode_errors(data: bytes, reason: str) -> None:
    """Each malformed input is a MetadataDecodeError: a ValueError and a CorruptRecord."""
    with pytest.raises(MetadataDecodeError) as caught:
        decode_metadata_record(data)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, CorruptRecord)


def test_tagged_field_size_must_match_its_value() -> None:
    """A known tag whose declared size disagrees with its value is corrupt."""
    good = encode_metadata_record(PartitionRecord(topic_id=TOPIC_ID, leader_recovery_state=1), 0)
    bad = good[:-4] + b"\x01\x00\x02\x01\x00"  # size 2, but an int8 is one byte
    with pytest.raises(MetadataDecodeError, match="size"):
        decode_metadata_record(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    """No input crashes the decoder with anything but MetadataDecodeError."""
    try:
        decode_metadata_record(b"\x01" + data)
    except MetadataDecodeError:
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_corrupted_records_decode_or_raise_decode_error(data: st.DataObject) -> None:
    """Flipping a byte of a valid record never escapes as another exception."""
    record = data.draw(message_strategy(RegisterBrokerRecord, 3))
    encoded = bytearray(encode_metadata_record(record))
    index = data.draw(st.integers(0, len(encoded) - 1))
    encoded[index] ^= data.draw(st.integers(1, 255))
    try:
        decode_metadata_record(bytes(encoded))
    except MetadataDecodeError:
        pass


@given(st.integers(0, 0xFFFFFFFF))
def test_unsigned_varint_round_trip(value: int) -> None:
    """Unsigned varints: 7 bits a byte, low first, at most 5 bytes."""
    out = bytearray()
    write_unsigned_varint(out, value)
    assert len(out) == max(1, (value.bit_length() + 6) // 7)
    assert read_unsigned_varint(memoryview(bytes(out)), 0) == (value, len(out))


def test_unsigned_varint_examples() -> None:
    """Known encodings: 300 is 0xac 0x02."""
    out = bytearray()
    write_unsigned_varint(out, 300)
    assert bytes(out) == b"\xac\x02"
    with pytest.raises(MetadataEncodeError):
        write_unsigned_varint(bytearray(), -1)
    with pytest.raises(MetadataEncodeError):
        write_unsigned_varint(bytearray(), 1 << 32)


def test_empty_record_kind() -> None:
    """NoOpRecord has no fields: frame, api key 20, version, empty tag buffer."""
    assert encode_metadata_record(NoOpRecord()) == b"\x01\x14\x00\x00"
    assert decode_metadata_record(b"\x01\x14\x00\x00") == NoOpRecord()


def test_only_metadata_records_are_framed() -> None:
    """encode_metadata_record refuses a class that is not a registered record kind."""
    with pytest.raises(MetadataEncodeError):
        encode_metadata_record(ApiVersionsBody())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Cross-check against kio, an independent implementation of the same Kafka RPC format. The
# classes below are field-spec tables written by hand from ApiVersionsResponse.json and
# SaslAuthenticateResponse.json; the codec must produce kio's bytes and read them back.

ALL = Versions(0, VERSION_MAX)
FROM_3 = Versions(3, VERSION_MAX)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsBody:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 3
    FLEXIBLE_FROM: ClassVar[int | None] = 3

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ApiVersion:
        api_key: int = 0
        min_version: int = 0
        max_version: int = 0
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("api_key", "int16", ALL, default=0),
            FieldSpec("min_version", "int16", ALL, default=0),
            FieldSpec("max_version", "int16", ALL, default=0),
        )

    @dataclass(frozen=True, slots=True, kw_only=True)
    class Feature:
        name: str = ""
        low: int = 0
        high: int = 0
        FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
            FieldSpec("name", "string", FROM_3, default=""),
            FieldSpec("low", "int16", FROM_3, default=0),
            FieldSpec("high", "int16", FROM_3, default=0),
        )

    error_code: int = 0
    api_keys: tuple[ApiVersionsBody.ApiVersion, ...] = ()
    throttle_time_ms: int = 0
    supported_features: tuple[ApiVersionsBody.Feature, ...] = ()
    finalized_features_epoch: int = -1
    finalized_features: tuple[ApiVersionsBody.Feature, ...] = ()
    zk_migration_ready: bool = False

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("error_code", "int16", ALL, default=0),
        FieldSpec("api_keys", "[]ApiVersion", ALL, default=(), struct=ApiVersion),
        FieldSpec("throttle_time_ms", "int32", Versions(1, VERSION_MAX), default=0),
        FieldSpec("supported_features", "[]Feature", FROM_3, tag=0, tagged_versions=FROM_3,
                  default=(), struct=Feature),
        FieldSpec("finalized_features_epoch", "int64", FROM_3, tag=1, tagged_versions=FROM_3,
                  default=-1),
        FieldSpec("finalized_features", "[]Feature", FROM_3, tag=2, tagged_versions=FROM_3,
                  default=(), struct=Feature),
        FieldSpec("zk_migration_ready", "bool", FROM_3, tag=3, tagged_versions=FROM_3,
                  default=False),
    )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateBody:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 2
    FLEXIBLE_FROM: ClassVar[int | None] = 2

    error_code: int = 0
    error_message: str | None = ""
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("error_code", "int16", ALL, default=0),
        FieldSpec("error_message", "string", ALL, nullable_versions=ALL, default=""),
        FieldSpec("auth_bytes", "bytes", ALL, default=b""),
        FieldSpec("session_lifetime_ms", "int64", Versions(1, VERSION_MAX), default=0),
    )


def kio_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


error_codes = st.sampled_from(list(ErrorCode))
int16s = st.integers(-(1 << 15), (1 << 15) - 1)
features = st.lists(st.tuples(st.text(max_size=8), int16s, int16s), max_size=3)


@settings(max_examples=100, deadline=None)
@given(
    error_code=error_codes,
    api_keys=st.lists(st.tuples(int16s, int16s, int16s), max_size=4),
    throttle_ms=st.integers(0, (1 << 31) - 1),
    supported=features,
    finalized=features,
    epoch=st.integers(-1, 1 << 40),
    zk_ready=st.booleans(),
)
def test_codec_matches_kio_for_api_versions_response(
    error_code: ErrorCode,
    api_keys: list[tuple[int, int, int]],
    throttle_ms: int,
    supported: list[tuple[str, int, int]],
    finalized: list[tuple[str, int, int]],
    epoch: int,
    zk_ready: bool,
) -> None:
    """Flexible v3 (compact arrays of structs, four tagged fields) and non-flexible v0."""
    ours = ApiVersionsBody(
        error_code=error_code.value,
        api_keys=tuple(ApiVersionsBody.ApiVersion(api_key=a, min_version=b, max_version=c)
                       for a, b, c in api_keys),
        throttle_time_ms=throttle_ms,
        supported_features=tuple(ApiVersionsBody.Feature(name=n, low=a, high=b)
                                 for n, a, b in supported),
        finalized_features_epoch=epoch,
        finalized_features=tuple(ApiVersionsBody.Feature(name=n, low=a, high=b)
                                 for n, a, b in finalized),
        zk_migration_ready=zk_ready,
    )  # fmt: skip
    v3 = kio_api_versions_v3
    theirs = v3.ApiVersionsResponse(
        error_code=error_code,
        api_keys=tuple(v3.ApiVersion(api_key=i16(a), min_version=i16(b), max_version=i16(c))
                       for a, b, c in api_keys),
        throttle_time=i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms)),
        supported_features=tuple(v3.SupportedFeatureKey(name=n, min_version=i16(a),
                                                        max_version=i16(b))
                                 for n, a, b in supported),
        finalized_features_epoch=i64(epoch),
        # kio's FinalizedFeatureKey orders max before min, as the schema does
        finalized_features=tuple(v3.FinalizedFeatureKey(name=n, max_version_level=i16(a),
                                                        min_version_level=i16(b))
                                 for n, a, b in finalized),
        zk_migration_ready=zk_ready,
    )  # fmt: skip
    expected = kio_bytes(theirs)
    assert encode_message(ours, 3) == expected
    assert decode_message(ApiVersionsBody, expected, 3) == ours

    v0 = kio_api_versions_v0
    legacy = replace(ours, throttle_time_ms=0, supported_features=(), finalized_features=(),
                     finalized_features_epoch=-1, zk_migration_ready=False)  # fmt: skip
    theirs_v0 = v0.ApiVersionsResponse(
        error_code=error_code,
        api_keys=tuple(v0.ApiVersion(api_key=i16(a), min_version=i16(b), max_version=i16(c))
                       for a, b, c in api_keys),
    )  # fmt: skip
    assert encode_message(legacy, 0) == kio_bytes(theirs_v0)
    assert decode_message(ApiVersionsBody, kio_bytes(theirs_v0), 0) == legacy


@settings(max_examples=100, deadline=None)
@given(
    error_code=error_codes,
    message=st.none() | st.text(max_size=30),
    auth=st.binary(max_size=30),
    lifetime_ms=st.integers(0, 1 << 45),
)
def test_codec_matches_kio_for_nullable_strings_and_bytes(
    error_code: ErrorCode, message: str | None, auth: bytes, lifetime_ms: int
) -> None:
    """Nullable string and bytes, legacy (v1: int16/int32 lengths) and compact (v2)."""
    ours = SaslAuthenticateBody(
        error_code=error_code.value, error_message=message, auth_bytes=auth,
        session_lifetime_ms=lifetime_ms,
    )  # fmt: skip
    lifetime = i64Timedelta.parse(datetime.timedelta(milliseconds=lifetime_ms))
    for version, module in ((1, kio_sasl_v1), (2, kio_sasl_v2)):
        theirs = module.SaslAuthenticateResponse(
            error_code=error_code, error_message=message, auth_bytes=auth,
            session_lifetime=lifetime,
        )  # fmt: skip
        expected = kio_bytes(theirs)
        assert encode_message(ours, version) == expected
        assert decode_message(SaslAuthenticateBody, expected, version) == ours


# ---------------------------------------------------------------------------------------------
# The generated readers and writers: every byte path they specialise (fixed runs, inline
# one-byte varints, the empty tag buffer, the tag dispatch, the slot-storing constructor)


def change_record_v1(*tags: bytes) -> bytes:
    """A PartitionChangeRecord v1 of partition 3 of TOPIC_ID with the given tag entries."""
    return b"\x01\x05\x01" + int32s(3) + TOPIC_ID_BYTES + bytes([len(tags)]) + b"".join(tags)


@pytest.mark.parametrize(
    "record",
    [
        PartitionRecord(
            partition_id=3,
            topic_id=TOPIC_ID,
            replicas=(1, 2, 3),
            isr=(1, 2),
            leader=1,
            leader_epoch=4,
            partition_epoch=6,
            directories=(uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)),
        ),
        PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, isr=(2, 3), leader=2),
        RegisterBrokerRecord(
            broker_id=1,
            rack=None,
            end_points=(
                RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092),
            ),
        ),
    ],
    ids=["PartitionRecord", "PartitionChangeRecord", "RegisterBrokerRecord"],
)
def test_every_prefix_is_a_decode_error(record: Any) -> None:
    """A record cut short anywhere (in a run of fixed-width fields, inside a replica list,
    a uuid, a string or the tag buffer) is a MetadataDecodeError, never struct.error or
    IndexError; the whole record, as bytes, bytearray or a memoryview slice, decodes."""
    encoded = encode_metadata_record(record, 1)
    for cut in range(len(encoded)):
        with pytest.raises(MetadataDecodeError):
            decode_metadata_record(encoded[:cut])
    padded = b"xx" + encoded
    for data in (encoded, bytearray(encoded), memoryview(padded)[2:]):
        assert decode_metadata_record_and_version(data) == (record, 1)


def test_unknown_tags_are_skipped_among_known_ones() -> None:
    """Unknown tags (9, and 300 in a two-byte varint) before, between and after known ones
    are skipped; the known ones (ISR tag 0, leader tag 1) still decode."""
    data = change_record_v1(
        b"\x00\x09\x03" + int32s(1, 2),  # tag 0: ISR [1, 2]
        b"\x01\x04" + int32s(7),  # tag 1: leader 7
        b"\x09\x02\xab\xcd",  # unknown tag 9
        b"\xac\x02\x00",  # unknown tag 300, empty
    )
    expected = PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, isr=(1, 2), leader=7)
    assert decode_metadata_record_and_version(data) == (expected, 1)


@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ((b"\x01\x04" + int32s(7), b"\x01\x04" + int32s(8)), "known tag twice"),
        ((b"\x09\x00", b"\x09\x00"), "unknown tag twice"),
        ((b"\x01\x02" + int32s(7),), "int32 in 2 bytes: read past its size"),
        ((b"\x01\x06" + int32s(7) + b"\x00\x00",), "int32 in 6 bytes"),
        ((b"\x00\x02\x03" + int32s(1, 2),), "ISR longer than its size"),
        ((b"\x00\x01\x00", b"\x00\x01\x00"), "null ISR twice"),
        ((b"\x08\x01\x02" + bytes(16),), "directory longer than its size"),
        ((b"\x01\x05" + int32s(7),), "size past the end"),
    ],
)
def test_malformed_tags_are_decode_errors(tags: tuple[bytes, ...], reason: str) -> None:
    """A known tagged field is read from the whole record, yet must end exactly at its
    declared size; duplicate tags, known or not, are refused."""
    with pytest.raises(MetadataDecodeError):
        decode_metadata_record(change_record_v1(*tags))


def test_long_arrays_strings_and_varints_round_trip() -> None:
    """Past the one-byte varint (127) and the tuple of small array layouts (16): a 200-
    replica list, 20 directories, a 300-byte name, a 200-element tagged ISR."""
    directories = tuple(uuid.UUID(int=index) for index in range(20))
    records = [
        (PartitionRecord(topic_id=TOPIC_ID, replicas=tuple(range(200)), isr=(1,),
                         directories=directories), 1),
        (TopicRecord(name="t" * 300, topic_id=TOPIC_ID), 0),
        (PartitionChangeRecord(topic_id=TOPIC_ID, isr=tuple(range(200)),
                               directories=directories), 1),
    ]  # fmt: skip
    for record, version in records:
        encoded = encode_metadata_record(record, version)
        assert decode_metadata_record_and_version(encoded) == (record, version)


def test_a_header_of_long_varints_decodes() -> None:
    """A frame header whose varints are not minimal (version 1 as 0x81 0x00) is still read,
    as Kafka reads it; the minimal header of the same record is unaffected."""
    record = PartitionChangeRecord(partition_id=3, topic_id=TOPIC_ID, leader=2)
    minimal = encode_metadata_record(record, 1)
    assert minimal[:3] == b"\x01\x05\x01"
    assert decode_metadata_record_and_version(b"\x01\x05\x81\x00" + minimal[3:]) == (record, 1)
    assert decode_metadata_record_and_version(minimal) == (record, 1)


def test_any_non_zero_byte_is_a_true_bool() -> None:
    """A bool field (RegisterBrokerRecord.fenced, in a run of fixed fields) reads 2 as true."""
    record = RegisterBrokerRecord(broker_id=1, fenced=False, in_controlled_shutdown=False)
    encoded = bytearray(encode_metadata_record(record, 1))
    fenced_at = len(encoded) - 3  # fenced, in_controlled_shutdown, empty tag buffer
    assert encoded[fenced_at:] == b"\x00\x00\x00"
    encoded[fenced_at] = 2
    assert decode_metadata_record(bytes(encoded)) == replace(record, fenced=True)


def test_uuids_are_shared_and_the_cache_is_bounded() -> None:
    """Decoded ids are equal to the written ones whether cached or not, one object per id
    while cached; the cache starts over when full."""
    ids = tuple(uuid.UUID(int=(0xC0DE << 64) + index) for index in range(3))
    record = PartitionRecord(topic_id=ids[0], replicas=(1, 2, 3), directories=ids)
    encoded = encode_metadata_record(record, 1)
    codec._UUIDS.clear()
    codec._UUID_ARRAYS.clear()  # a tuple cached before holds ids from before the clear
    first, second = decode_metadata_record(encoded), decode_metadata_record(encoded)
    assert first == second == record
    assert isinstance(first, PartitionRecord) and isinstance(second, PartitionRecord)
    assert second.directories[0] is first.directories[0] is first.topic_id
    for index in range(codec._UUIDS_MAX + 1):
        codec._uuid_of(index.to_bytes(16, "big"))
    assert len(codec._UUIDS) <= codec._UUIDS_MAX
    assert decode_metadata_record(encoded) == record


def test_every_record_kind_is_built_by_storing_its_slots() -> None:
    """The generated readers build every record kind without calling its __init__ (see
    codec._builds_without_init): the records are slotted dataclasses made by the generator."""
    for cls in METADATA_RECORD_TYPES.values():
        assert codec._builds_without_init(cls, tuple(spec.name for spec in cls.FIELDS)), cls


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedBody:
    """A message whose __post_init__ must run: the reader calls its __init__."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0

    count: int = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("count", "int32", ALL, default=0),)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("negative count")


@dataclass(frozen=True, kw_only=True)
class UnslottedBody:
    """A message without slots: the reader calls its __init__."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = None

    name: str | None = ""
    ids: tuple[uuid.UUID, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("name", "string", ALL, nullable_versions=ALL, default=""),
        FieldSpec("ids", "[]uuid", ALL, default=()),
    )


def test_classes_that_need_their_init_get_it() -> None:
    """A class with a __post_init__, or without slots, is built through its __init__: the
    check runs (a negative count is refused), and the values are the same."""
    assert decode_message(CheckedBody, int32s(5) + b"\x00", 0) == CheckedBody(count=5)
    with pytest.raises(MetadataDecodeError, match="negative count"):
        decode_message(CheckedBody, int32s(-1) + b"\x00", 0)
    body = UnslottedBody(name=None, ids=(TOPIC_ID,))
    encoded = encode_message(body, 0)
    assert encoded == b"\xff\xff" + int32s(1) + TOPIC_ID_BYTES  # non-flexible: int16 null
    assert decode_message(UnslottedBody, encoded, 0) == body
