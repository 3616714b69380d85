"""Partition reassignment (KIP-455): AlterPartitionReassignments and
ListPartitionReassignments.

Theory of operation. Moving a partition from replicas O (its *original* assignment) to a
target T happens in the partition's own registration, so every broker sees it:

1. Start: one PartitionChangeRecord sets replicas = T followed by the replicas leaving
   (O - T), adding = T - O, removing = O - T. The adding replicas start following the
   leader; the ISR is what it was (leaving members included).
2. The leader adds the new replicas to the ISR with AlterPartition as they catch up. The
   change that puts the last adding replica into the ISR also completes the reassignment
   (partitions.build_partition_change): the removing replicas leave the replica set and the
   ISR, adding/removing are cleared, and if the leader was leaving another ISR member
   leads. A reassignment that only removes replicas completes at once.
3. Cancel (replicas null): the adding replicas leave replicas and ISR, the removing ones
   stay; should no ISR member remain, that needs an unclean election, refused
   (INVALID_REPLICA_ASSIGNMENT) unless the topic allows it.

A new target for a partition being reassigned replaces the old one, computed from the
original assignment (the replicas that are not being added), so replicas the old target
was adding and the new one does not want are dropped.

The target must name registered brokers, each once, at least one (Kafka's
INVALID_REPLICA_ASSIGNMENT messages). With `allow_replication_factor_change` false
(AlterPartitionReassignments v1, KIP-860) it must keep the replication factor.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from pykraft.controller.features import has_directory_assignment
from pykraft.controller.partitions import Election, build_partition_change
from pykraft.controller.requests import (
    OngoingReassignment,
    OngoingTopicReassignments,
    ReassignablePartition,
    ReassignableTopic,
    ReassignmentPartitionResult,
    ReassignmentTopicResult,
)
from pykraft.controller.state import ControllerState
from pykraft.errors import (
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    KafkaError,
    NoReassignmentInProgress,
    UnknownTopicOrPartition,
)
from pykraft.metadata.records import MetadataRecord, PartitionChangeRecord
from pykraft.metadata.registrations import (
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
    PartitionRegistration,
    shared_directories,
)

__all__ = ["alter_reassignments", "list_reassignments", "in_progress"]

IsActive = Callable[[int], bool]
UncleanAllowed = Callable[[str], bool]


def in_progress(partition: PartitionRegistration) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def _default_directory(state: ControllerState, broker_id: int) -> uuid.UUID:
    broker = state.image.cluster.brokers.get(broker_id)
    if broker is None:
        return UNASSIGNED_DIRECTORY
    if not broker.log_dirs:
        return MIGRATING_DIRECTORY
    return broker.log_dirs[0] if len(broker.log_dirs) == 1 else UNASSIGNED_DIRECTORY


def _with_directories(
    state: ControllerState, partition: PartitionRegistration, record: PartitionChangeRecord
) -> PartitionChangeRecord:
    """New replicas get their broker's only log dir (else "unassigned"), as at creation."""
    if record.replicas is None or not has_directory_assignment(
        state.image.features.metadata_version
    ):
        return record
    where = dict(zip(partition.replicas, partition.directories, strict=True))
    directories = shared_directories(tuple(
        where[replica] if replica in where else _default_directory(state, replica)
        for replica in record.replicas
    ))
    return replace(record, directories=directories)


def _check_target(
    state: ControllerState, target: tuple[int, ...], current: int, allow_rf_change: bool
) -> None:
    if not target:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    seen: set[int] = set()
    for broker_id in sorted(target):
        if broker_id not in state.image.cluster.brokers:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered."
            )
        if broker_id in seen:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes the broker {broker_id} more than "
                "once."
            )
        seen.add(broker_id)
    if not allow_rf_change and len(target) != current:
        raise InvalidReplicationFactor(
            f"The replication factor is changed from {current} to {len(target)}"
        )


def _change(
    state: ControllerState,
    is_active: IsActive,
    topic_id: uuid.UUID,
    index: int,
    partition: PartitionRegistration,
    target: tuple[int, ...],
    allow_rf_change: bool,
) -> PartitionChangeRecord | None:
    original = tuple(r for r in partition.replicas if r not in partition.adding_replicas)
    _check_target(state, target, len(original), allow_rf_change)
    removing = tuple(r for r in original if r not in target)
    adding = tuple(r for r in target if r not in original)
    replicas = target + removing
    isr = tuple(r for r in partition.isr if r in replicas) or partition.isr
    record = build_partition_change(
        partition,
        topic_id,
        index,
        target_isr=isr,
        is_acceptable_leader=is_active,
        metadata_version=state.image.features.metadata_version,
        target_replicas=replicas,
        target_adding=adding,
        target_removing=removing,
    )
    return None if record is None else _with_directories(state, partition, record)


def _cancel(
    state: ControllerState,
    is_active: IsActive,
    topic_name: str,
    topic_id: uuid.UUID,
    index: int,
    partition: PartitionRegistration,
    unclean_allowed: bool,
) -> PartitionChangeRecord | None:
    if not in_progress(partition):
        raise NoReassignmentInProgress("No partition reassignment is in progress.")
    adding = partition.adding_replicas
    replicas = tuple(r for r in partition.replicas if r not in adding)
    isr = tuple(r for r in partition.isr if r not in adding)
    if not isr and not unclean_allowed:
        raise InvalidReplicaAssignment(
            f"Unable to revert partition assignment for {topic_name}:{index} because it "
            "would require an unclean leader election."
        )
    return build_partition_change(
        partition,
        topic_id,
        index,
        target_isr=isr,
        is_acceptable_leader=is_active,
        metadata_version=state.image.features.metadata_version,
        election=Election.UNCLEAN if unclean_allowed else Election.ONLINE,
        target_replicas=replicas,
        target_adding=(),
        target_removing=(),
    )


def alter_reassignments(
    state: ControllerState,
    is_active: IsActive,
    unclean_allowed: UncleanAllowed,
    topics: Sequence[ReassignableTopic],
    *,
    allow_replication_factor_change: bool = True,
) -> tuple[list[MetadataRecord], tuple[ReassignmentTopicResult, ...]]:
    """Start, replace or cancel reassignments, partition by partition."""
    records: list[MetadataRecord] = []
    results = []
    for topic in topics:
        answers = []
        for wanted in topic.partitions:
            try:
                record = _one(state, is_active, unclean_allowed, topic.name, wanted,
                              allow_replication_factor_change)
            except KafkaError as error:
                answers.append(ReassignmentPartitionResult(
                    wanted.partition_index, error.code, str(error) or None))
                continue
            if record is not None:
                records.append(record)
            answers.append(ReassignmentPartitionResult(wanted.partition_index))
        results.append(ReassignmentTopicResult(topic.name, tuple(answers)))
    return records, tuple(results)


def _one(
    state: ControllerState,
    is_active: IsActive,
    unclean_allowed: UncleanAllowed,
    topic_name: str,
    wanted: ReassignablePartition,
    allow_rf_change: bool,
) -> PartitionChangeRecord | None:
    topic = state.image.topics.by_name.get(topic_name)
    if topic is None:
        raise UnknownTopicOrPartition("This server does not host this topic-partition.")
    partition = topic.partitions.get(wanted.partition_index)
    if partition is None:
        raise UnknownTopicOrPartition(
            f"Unable to find partition {topic_name}:{wanted.partition_index}."
        )
    if wanted.replicas is None:
        return _cancel(state, is_active, topic_name, topic.topic_id, wanted.partition_index,
                       partition, unclean_allowed(topic_name))
    return _change(state, is_active, topic.topic_id, wanted.partition_index, partition,
                   tuple(wanted.replicas), allow_rf_change)


def list_reassignments(
    state: ControllerState, topics: Mapping[str, Sequence[int]] | None
) -> tuple[OngoingTopicReassignments, ...]:
    """The reassignments in progress, of the named partitions or of all (None); unknown
    topics and partitions are left out, as Kafka does."""
    if topics is None:
        topics = {
            name: sorted(topic.partitions.keys())
            for name, topic in sorted(state.image.topics.by_name.items())
        }
    results = []
    for name, indexes in topics.items():
        topic = state.image.topics.by_name.get(name)
        if topic is None:
            continue
        ongoing = tuple(
            OngoingReassignment(index, p.replicas, p.adding_replicas, p.removing_replicas)
            for index in indexes
            for p in (topic.partitions.get(index),)
            if p is not None and in_progress(p)
        )
        if ongoing:
            results.append(OngoingTopicReassignments(name, ongoing))
    return tuple(results)

