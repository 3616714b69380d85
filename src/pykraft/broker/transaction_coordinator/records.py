"""The records of `__transaction_state`, in Kafka's layout.

Written by hand from Kafka's transaction-coordinator JSON schemas (TransactionLogKey v0,
TransactionLogValue v0-1); the `FIELDS` tables are the schema as data for the generic codec in
`pykraft.metadata.codec`. Field names are the snake_case of Kafka's.

Framing (as `__consumer_offsets`): a key is an int16 key version (0) followed by the key
body; a value is an int16 value version followed by the value body, or null (a tombstone:
the transactional id expired and is forgotten). Value version 1 is flexible and adds three
tagged fields (previous/next producer id and the client's transaction version, KIP-890); a
value is written at version 0 unless one of them differs from its default, so what a
classic (transaction version 0) client causes is byte for byte what Kafka writes.

`TransactionPartitions` is null when the state is Empty (Kafka requires no partitions then),
else the partitions grouped by topic, topics and ids sorted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar, Final

from pykraft.errors import CorruptRecord
from pykraft.metadata.codec import MetadataDecodeError, decode_message, encode_message
from pykraft.metadata.schema import VERSION_MAX, FieldSpec, Versions

__all__ = [
    "TRANSACTION_LOG_KEY_VERSION",
    "PartitionsSchema",
    "TransactionLogKey",
    "TransactionLogValue",
    "TransactionRecord",
    "TxnStatus",
    "decode_record",
    "encode_key",
    "encode_record",
    "encode_value",
    "group_partitions",
]

_ALL: Final = Versions(0, VERSION_MAX)
_FROM_1: Final = Versions(1, VERSION_MAX)
_INT16: Final = struct.Struct(">h")

TRANSACTION_LOG_KEY_VERSION: Final = 0


class TxnStatus(IntEnum):
    """Kafka's TransactionState ids, the `TransactionStatus` byte of a value."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions' `TransactionState`)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 0
    FLEXIBLE_FROM: ClassVar[int | None] = None

    transactional_id: str = ""

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("transactional_id", "string", Versions(0, 0), default=""),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionsSchema:
    topic: str = ""
    partition_ids: tuple[int, ...] = ()

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("topic", "string", _ALL, default=""),
        FieldSpec("partition_ids", "[]int32", _ALL, default=()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValue:
    LOWEST_VERSION: ClassVar[int] = 0
    LATEST_VERSION: ClassVar[int] = 1
    FLEXIBLE_FROM: ClassVar[int | None] = 1

    producer_id: int = 0
    previous_producer_id: int = -1
    next_producer_id: int = -1
    producer_epoch: int = 0
    transaction_timeout_ms: int = 0
    transaction_status: int = 0
    transaction_partitions: tuple[PartitionsSchema, ...] | None = None
    transaction_last_update_timestamp_ms: int = 0
    transaction_start_timestamp_ms: int = 0
    client_transaction_version: int = 0

    FIELDS: ClassVar[tuple[FieldSpec, ...]] = (
        FieldSpec("producer_id", "int64", _ALL, default=0),
        FieldSpec("previous_producer_id", "int64", _FROM_1, tag=0, tagged_versions=_FROM_1,
                  default=-1),
        FieldSpec("next_producer_id", "int64", _FROM_1, tag=1, tagged_versions=_FROM_1,
                  default=-1),
        FieldSpec("producer_epoch", "int16", _ALL, default=0),
        FieldSpec("transaction_timeout_ms", "int32", _ALL, default=0),
        FieldSpec("transaction_status", "int8", _ALL, default=0),
        FieldSpec("transaction_partitions", "[]PartitionsSchema", _ALL, nullable_versions=_ALL,
                  default=None, struct=PartitionsSchema),
        FieldSpec("transaction_last_update_timestamp_ms", "int64", _ALL, default=0),
        FieldSpec("transaction_start_timestamp_ms", "int64", _ALL, default=0),
        FieldSpec("client_transaction_version", "int16", _FROM_1, tag=2,
                  tagged_versions=_FROM_1, default=0),
    )

    @property
    def status(self) -> TxnStatus:
        return TxnStatus(self.transaction_status)

    def partitions(self) -> frozenset[tuple[str, int]]:
        """The (topic, partition) pairs of the transaction."""
        return frozenset((each.topic, index) for each in self.transaction_partitions or ()
                         for index in each.partition_ids)

    @property
    def version(self) -> int:
        """The version this value is written at: 1 only when a tagged field is set."""
        tagged = (self.previous_producer_id != -1 or self.next_producer_id != -1
                  or self.client_transaction_version != 0)
        return 1 if tagged else 0


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One `__transaction_state` record: a key, and its value or None for a tombstone."""

    key: TransactionLogKey
    value: TransactionLogValue | None


def group_partitions(partitions: Iterable[tuple[str, int]]) -> tuple[PartitionsSchema, ...]:
    """Partitions grouped by topic (topics sorted, ids sorted): a stable value layout."""
    by_topic: dict[str, set[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, set()).add(index)
    return tuple(PartitionsSchema(topic=topic, partition_ids=tuple(sorted(ids)))
                 for topic, ids in sorted(by_topic.items()))


def encode_key(key: TransactionLogKey) -> bytes:
    return _INT16.pack(TRANSACTION_LOG_KEY_VERSION) + encode_message(
        key, TRANSACTION_LOG_KEY_VERSION)


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    if value is None:
        return None
    version = value.version
    return _INT16.pack(version) + encode_message(value, version)


def encode_record(record: TransactionRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)


def decode_record(key: bytes | None, value: bytes | None) -> TransactionRecord | None:
    """The record stored as (key, value); None for a key version this node does not read.
    Malformed bytes (and an unknown transaction status) raise CorruptRecord."""
    if key is None or len(key) < 2:
        raise CorruptRecord("a __transaction_state record needs a versioned key")
    (key_version,) = _INT16.unpack_from(key)
    if key_version != TRANSACTION_LOG_KEY_VERSION:
        return None
    try:
        decoded_key = decode_message(TransactionLogKey, key[2:], key_version)
        if value is None:
            return TransactionRecord(decoded_key, None)
        if len(value) < 2:
            raise CorruptRecord("a __transaction_state value needs a version")
        (value_version,) = _INT16.unpack_from(value)
        decoded = decode_message(TransactionLogValue, value[2:], value_version)
    except MetadataDecodeError as error:
        raise CorruptRecord(f"malformed __transaction_state record: {error}") from error
    if decoded.transaction_status not in TxnStatus.__members__.values():
        raise CorruptRecord(f"unknown transaction status {decoded.transaction_status} for "
                            f"{decoded_key.transactional_id!r}")
    return TransactionRecord(decoded_key, decoded)
