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
    3      ConsumerGroupMetadataKey                 -> ...Value (group epoch)
    4      ConsumerGroupPartitionMetadataKey        -> ...Value (subscribed topics' metadata)
    5      ConsumerGroupMemberMetadataKey           -> ...Value (a member's subscription)
    6      ConsumerGroupTargetAssignmentMetadataKey -> ...Value (assignment epoch)
    7      ConsumerGroupTargetAssignmentMemberKey   -> ...Value (a member's target)
    8      ConsumerGroupCurrentMemberAssignmentKey  -> ...Value (a member's epoch and state)
    16     ConsumerGroupRegularExpressionKey        -> ...Value (a regex's resolved topics)

Versions 3-8 and 16 are KIP-848's consumer-group records (from the group-coordinator schemas'
ConsumerGroup*Key/Value); keys are non-flexible, values flexible at version 0. Later key
versions (share groups and others) are not read: `decode_record` returns None for them so a
loader can skip them.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar, Final

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


def _group_key(version: int) -> tuple[FieldSpec, ...]:
    return (FieldSpec("group_id", "string", Versions(version, version), default=""),)


def _member_key(version: int) -> tuple[FieldSpec, ...]:
    return (*_group_key(version),
            FieldSpec("member_id", "string", Versions(version, version), default=""))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataKey:
    LOWEST_VERSION: ClassVar[int] = 3
    LATEST_VERSION: ClassVar[int] = 3
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _group_key(3)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadataValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    epoch: int = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (FieldSpec("epoch", "int32", _ALL, default=0),)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataKey:
    LOWEST_VERSION: ClassVar[int] = 4
    LATEST_VERSION: ClassVar[int] = 4
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _group_key(4)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionRacks:
    partition: int = 0
    racks: tuple[str, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("partition", "int32", _ALL, default=0),
        FieldSpec("racks", "[]string", _ALL, default=()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    topic_id: uuid.UUID = uuid.UUID(int=0)
    topic_name: str = ""
    num_partitions: int = 0
    partition_metadata: tuple[PartitionRacks, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topic_id", "uuid", _ALL, default=uuid.UUID(int=0)),
        FieldSpec("topic_name", "string", _ALL, default=""),
        FieldSpec("num_partitions", "int32", _ALL, default=0),
        FieldSpec("partition_metadata", "[]PartitionMetadata", _ALL, default=(),
                  struct=PartitionRacks),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupPartitionMetadataValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    topics: tuple[TopicMetadata, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topics", "[]TopicMetadata", _ALL, default=(), struct=TopicMetadata),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataKey:
    LOWEST_VERSION: ClassVar[int] = 5
    LATEST_VERSION: ClassVar[int] = 5
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    member_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _member_key(5)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMemberMetadataValue:
    """Tagged ClassicMemberMetadata (tag 0, members that joined with JoinGroup) is not
    written, and skipped on read: classic members of consumer groups are not supported."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("instance_id", "string", _ALL, nullable_versions=_ALL, default=None),
        FieldSpec("rack_id", "string", _ALL, nullable_versions=_ALL, default=None),
        FieldSpec("client_id", "string", _ALL, default=""),
        FieldSpec("client_host", "string", _ALL, default=""),
        FieldSpec("subscribed_topic_names", "[]string", _ALL, default=()),
        FieldSpec("subscribed_topic_regex", "string", _ALL, nullable_versions=_ALL,
                  default=None),
        FieldSpec("rebalance_timeout_ms", "int32", _ALL, default=-1),
        FieldSpec("server_assignor", "string", _ALL, nullable_versions=_ALL, default=None),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    LOWEST_VERSION: ClassVar[int] = 6
    LATEST_VERSION: ClassVar[int] = 6
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _group_key(6)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    assignment_epoch: int = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("assignment_epoch", "int32", _ALL, default=0),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitions:
    topic_id: uuid.UUID = uuid.UUID(int=0)
    partitions: tuple[int, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topic_id", "uuid", _ALL, default=uuid.UUID(int=0)),
        FieldSpec("partitions", "[]int32", _ALL, default=()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberKey:
    LOWEST_VERSION: ClassVar[int] = 7
    LATEST_VERSION: ClassVar[int] = 7
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    member_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _member_key(7)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTargetAssignmentMemberValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    topic_partitions: tuple[TopicPartitions, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topic_partitions", "[]TopicPartition", _ALL, default=(),
                  struct=TopicPartitions),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    LOWEST_VERSION: ClassVar[int] = 8
    LATEST_VERSION: ClassVar[int] = 8
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    member_id: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = _member_key(8)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """`state`: Kafka's MemberState byte (0 stable, 1 unrevoked, 2 unreleased partitions)."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0
    assigned_partitions: tuple[TopicPartitions, ...] = ()
    partitions_pending_revocation: tuple[TopicPartitions, ...] = ()
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("member_epoch", "int32", _ALL, default=0),
        FieldSpec("previous_member_epoch", "int32", _ALL, default=0),
        FieldSpec("state", "int8", _ALL, default=0),
        FieldSpec("assigned_partitions", "[]TopicPartitions", _ALL, default=(),
                  struct=TopicPartitions),
        FieldSpec("partitions_pending_revocation", "[]TopicPartitions", _ALL, default=(),
                  struct=TopicPartitions),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRegularExpressionKey:
    LOWEST_VERSION: ClassVar[int] = 16
    LATEST_VERSION: ClassVar[int] = 16
    FLEXIBLE_FROM: ClassVar[int | None] = None
    group_id: str = ""
    regular_expression: str = ""
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        *_group_key(16),
        FieldSpec("regular_expression", "string", Versions(16, 16), default=""),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupRegularExpressionValue:
    """`version`: the metadata version the regex was resolved at (Kafka: the image's
    offset; pykraft writes -1 and does not read it), `timestamp`: when, in ms."""

    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = 0
    topics: tuple[str, ...] = ()
    version: int = 0
    timestamp: int = 0
    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topics", "[]string", _ALL, default=()),
        FieldSpec("version", "int64", _ALL, default=0),
        FieldSpec("timestamp", "int64", _ALL, default=0),
    )


ConsumerGroupKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey
                    | ConsumerGroupMemberMetadataKey | ConsumerGroupTargetAssignmentMetadataKey
                    | ConsumerGroupTargetAssignmentMemberKey
                    | ConsumerGroupCurrentMemberAssignmentKey
                    | ConsumerGroupRegularExpressionKey)
ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                      | ConsumerGroupMemberMetadataValue
                      | ConsumerGroupTargetAssignmentMetadataValue
                      | ConsumerGroupTargetAssignmentMemberValue
                      | ConsumerGroupCurrentMemberAssignmentValue
                      | ConsumerGroupRegularExpressionValue)

# key version -> (key type, value type), for KIP-848's records
CONSUMER_GROUP_RECORDS: Final[dict[int, tuple[type[Any], type[Any]]]] = {
    3: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue),
    4: (ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue),
    5: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue),
    7: (ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue),
    16: (ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue),
}
_CONSUMER_KEY_VERSIONS: Final = {key: version
                                 for version, (key, _) in CONSUMER_GROUP_RECORDS.items()}

CoordinatorKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey
CoordinatorValue = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One `__consumer_offsets` record: a key, and its value or None for a tombstone."""

    key: CoordinatorKey
    value: CoordinatorValue | None


def encode_key(key: CoordinatorKey) -> bytes:
    version = (OFFSET_COMMIT_KEY_VERSION if isinstance(key, OffsetCommitKey)
               else GROUP_METADATA_KEY_VERSION if isinstance(key, GroupMetadataKey)
               else _CONSUMER_KEY_VERSIONS[type(key)])
    return _INT16.pack(version) + encode_message(key, version)


def encode_value(value: CoordinatorValue | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        version = (OFFSET_COMMIT_VALUE_VERSION_EXPIRE if value.expire_timestamp >= 0
                   else OFFSET_COMMIT_VALUE_VERSION)
    elif isinstance(value, GroupMetadataValue):
        version = GROUP_METADATA_VALUE_VERSION
    else:
        version = 0  # every KIP-848 value is at version 0
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
    value_type: type[Any]
    try:
        if key_version in (0, 1):
            decoded_key = decode_message(OffsetCommitKey, key[2:], key_version)
            value_type = OffsetCommitValue
        elif key_version == GROUP_METADATA_KEY_VERSION:
            decoded_key = decode_message(GroupMetadataKey, key[2:], key_version)
            value_type = GroupMetadataValue
        elif key_version in CONSUMER_GROUP_RECORDS:
            key_type, value_type = CONSUMER_GROUP_RECORDS[key_version]
            decoded_key = decode_message(key_type, key[2:], key_version)
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
