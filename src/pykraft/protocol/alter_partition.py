"""AlterPartition v3 requests (KIP-497, KIP-903), encoded straight from a leader's ISR
proposals rather than through kio entities.

A leader that a restarted broker rejoins proposes an ISR change for every partition it
leads, up to 10,000 in one request (broker.replica_manager). Through kio -- an entity for
the request, each topic, partition and ISR member, then its generic writer -- the request
was 14% of such a leader's time at 1,000,000 partitions (py-spy: building the entities 8%,
encoding them 6%); here a partition is one `struct.pack` for its fixed fields and one per
ISR member.

The layout is AlterPartitionRequest.json at version 3 (flexible): BrokerId int32,
BrokerEpoch int64, Topics [TopicId uuid, Partitions [PartitionIndex int32, LeaderEpoch
int32, NewIsrWithEpochs [BrokerId int32, BrokerEpoch int64], LeaderRecoveryState int8,
PartitionEpoch int32]], with an empty tagged-field section after every struct.
test_alter_partition_encoding.py checks it against kio's encoding of the same values.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Final

from pykraft.protocol.framing import compact_length

__all__ = ["AlterPartitionItem", "by_topic", "encode_alter_partition_v3"]

_HEAD: Final = struct.Struct(">iq")  # BrokerId, BrokerEpoch
_PARTITION: Final = struct.Struct(">ii")  # PartitionIndex, LeaderEpoch
_MEMBER: Final = struct.Struct(">iqB")  # BrokerId, BrokerEpoch, no tagged fields
_PARTITION_TAIL: Final = struct.Struct(">biB")  # LeaderRecoveryState, PartitionEpoch, tags
_NO_TAGS: Final = b"\x00"

# (partition, leader epoch, new ISR members with their broker epochs, partition epoch)
AlterPartitionItem = tuple[int, int, Sequence[tuple[int, int]], int]


def encode_alter_partition_v3(
    broker_id: int, broker_epoch: int,
    topics: Sequence[tuple[uuid.UUID, Sequence[AlterPartitionItem]]],
) -> bytes:
    """The body of an AlterPartition v3 request: per topic id, its partitions' proposals
    (LeaderRecoveryState 0: a leader proposes only ISR changes)."""
    parts: list[bytes] = [_HEAD.pack(broker_id, broker_epoch), compact_length(len(topics))]
    append = parts.append
    for topic_id, items in topics:
        append(topic_id.bytes)
        append(compact_length(len(items)))
        for partition, leader_epoch, members, partition_epoch in items:
            append(_PARTITION.pack(partition, leader_epoch))
            append(compact_length(len(members)))
            for member in members:
                append(_MEMBER.pack(member[0], member[1], 0))
            append(_PARTITION_TAIL.pack(0, partition_epoch, 0))
        append(_NO_TAGS)  # the topic's tagged fields
    append(_NO_TAGS)  # the request's
    return b"".join(parts)


def by_topic(items: Iterable[tuple[uuid.UUID, AlterPartitionItem]]
             ) -> list[tuple[uuid.UUID, list[AlterPartitionItem]]]:
    """Proposals grouped by topic id, topics in the order first met."""
    grouped: dict[uuid.UUID, list[AlterPartitionItem]] = {}
    for topic_id, item in items:
        grouped.setdefault(topic_id, []).append(item)
    return list(grouped.items())
