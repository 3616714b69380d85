"""The records of `__consumer_offsets`: keys and values of committed offsets and of classic
group metadata, in Kafka's layout.

Written by hand from Kafka's group-coordinator JSON schemas (OffsetCommitKey/Value,
GroupMetadataKey/Value); the `FIELDS` tables are the schema as data for the generic codec in
`pykraft.metadata.codec`. Field names are the snake_case of Kafka's.

Framing (Kafka's CoordinatorRecordSerde): a record's key is an int16 *key version* followed
by the key body, its value an int16 value version followed by the value body, or null (a
tombstone: the key is deleted). The key version names the kind of record:

    0, 1   OffsetCommitKey      -> OffsetCommitValue
    2      GroupMetadataKey     -> GroupMetadataValue

Versions 3 and up are the KIP-848 consumer-group records, which this module does not read
yet; `decode_record` returns None for them so a loader can skip them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar, Final

from pykraft.errors import CorruptRecord
from pykraft.metadata.codec import MetadataDecodeError, decode_message, encode_message
from pykraft.metadata.schema import VERSION_MAX, FieldSpec, Versions

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "CoordinatorRecord",
    "MemberMetadata",
    "encode_record",
    "decode_record",
    "encode_key",
    "encode_value",
]

_ALL: Final = Versions(0, VERSION_MAX)
_INT16: Final = struct.Struct(">h")

OFFSET_COMMIT_KEY_VERSION: Final = 1  # Kafka writes 1; 0 is read the same way
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3  # with the leader epoch; 1 when expire_timestamp set
OFFSET_COMMIT_VALUE_VERSION_EXPIRE: Final = 1
GROUP_METADATA_VALUE_VERSION: Final = 3  # with group instance ids (static membership)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 1
    FLEXIBLE_FROM: ClassVar[int | None] = None

    group: str = ""
    topic: str = ""
    partition: int = 0

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group", "string", Versions(0, 1), default=""),
        FieldSpec("topic", "string", Versions(0, 1), default=""),
        FieldSpec("partition", "int32", Versions(0, 1), default=0),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 4
    FLEXIBLE_FROM: ClassVar[int | None] = 4

    offset: int = 0
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("offset", "int64", _ALL, default=0),
        FieldSpec("leader_epoch", "int32", Versions(3, VERSION_MAX), default=-1, ignorable=True),
        FieldSpec("metadata", "string", _ALL, default=""),
        FieldSpec("commit_timestamp", "int64", _ALL, default=0),
        FieldSpec("expire_timestamp", "int64", Versions(1, 1), default=-1, ignorable=True),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    LOWEST_VERSION: ClassVar[int] = 2
    LATEST_VERSION: ClassVar[int] = 2
    FLEXIBLE_FROM: ClassVar[int | None] = None

    group: str = ""

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("group", "string", Versions(2, 2), default=""),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: int = -1
    session_timeout: int = 0
    subscription: bytes = b""
    assignment: bytes = b""

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("member_id", "string", _ALL, default=""),
        FieldSpec("group_instance_id", "string", Versions(3, VERSION_MAX),
                  nullable_versions=Versions(3, VERSION_MAX), default=None, ignorable=True),
        FieldSpec("client_id", "string", _ALL, default=""),
        FieldSpec("client_host", "string", _ALL, default=""),
        FieldSpec("rebalance_timeout", "int32", Versions(1, VERSION_MAX), default=-1,
                  ignorable=True),
        FieldSpec("session_timeout", "int32", _ALL, default=0),
        FieldSpec("subscription", "bytes", _ALL, default=b""),
        FieldSpec("assignment", "bytes", _ALL, default=b""),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 4
    FLEXIBLE_FROM: ClassVar[int | None] = 4

    protocol_type: str = ""
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("protocol_type", "string", _ALL, default=""),
        FieldSpec("generation", "int32", _ALL, default=0),
        FieldSpec("protocol", "string", _ALL, nullable_versions=_ALL, default=None),
        FieldSpec("leader", "string", _ALL, nullable_versions=_ALL, default=None),
        FieldSpec("current_state_timestamp", "int64", Versions(2, VERSION_MAX), default=-1,
                  ignorable=True),
        FieldSpec("members", "[]MemberMetadata", _ALL, default=(), struct=MemberMetadata),
    )


CoordinatorKey = OffsetCommitKey | GroupMetadataKey
CoordinatorValue = OffsetCommitValue | GroupMetadataValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One `__consumer_offsets` record: a key, and its value or None for a tombstone."""

    key: CoordinatorKey
    value: CoordinatorValue | None


def encode_key(key: CoordinatorKey) -> bytes:
    version = (OFFSET_COMMIT_KEY_VERSION if isinstance(key, OffsetCommitKey)
               else GROUP_METADATA_KEY_VERSION)
    return _INT16.pack(version) + encode_message(key, version)


def encode_value(value: CoordinatorValue | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        version = (OFFSET_COMMIT_VALUE_VERSION_EXPIRE if value.expire_timestamp >= 0
                   else OFFSET_COMMIT_VALUE_VERSION)
    else:
        version = GROUP_METADATA_VALUE_VERSION
    return _INT16.pack(version) + encode_message(value, version)


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)


def decode_record(key: bytes | None, value: bytes | None) -> CoordinatorRecord | None:
    """The record stored as (key, value); None for a kind this node does not read (KIP-848
    and share-group records). Malformed bytes raise CorruptRecord."""
    if key is None or len(key) < 2:
        raise CorruptRecord("a __consumer_offsets record needs a versioned key")
    (key_version,) = _INT16.unpack_from(key)
    decoded_key: CoordinatorKey
    value_type: type[OffsetCommitValue] | type[GroupMetadataValue]
    try:
        if key_version in (0, 1):
            decoded_key = decode_message(OffsetCommitKey, key[2:], key_version)
            value_type = OffsetCommitValue
        elif key_version == GROUP_METADATA_KEY_VERSION:
            decoded_key = decode_message(GroupMetadataKey, key[2:], key_version)
            value_type = GroupMetadataValue
        else:
            return None
        if value is None:
            return CoordinatorRecord(decoded_key, None)
        if len(value) < 2:
            raise CorruptRecord("a __consumer_offsets value needs a version")
        (value_version,) = _INT16.unpack_from(value)
        return CoordinatorRecord(decoded_key, decode_message(value_type, value[2:],
                                                             value_version))
    except MetadataDecodeError as error:
        raise CorruptRecord(f"malformed __consumer_offsets record: {error}") from error
