"""ISR changes asked by partition leaders (AlterPartition), leader elections asked by
administrators (ElectLeaders), and the periodic move of leaderships back to the preferred
replicas (auto.leader.rebalance.enable).

Theory of operation. In KRaft the controller owns every partition's leader and ISR; a
leader that wants its ISR shrunk (a follower fell behind replica.lag.time.max.ms) or grown
(a follower caught up) proposes the new ISR with the leader epoch and partition epoch it
knows (KIP-497). The controller accepts only a proposal made against the current state:

- from the current leader (else INVALID_REQUEST), at the current leader epoch (an older
  one: FENCED_LEADER_EPOCH) and partition epoch (an older one: INVALID_UPDATE_VERSION); an
  epoch *newer* than the controller's means this controller is behind, so NOT_CONTROLLER
  sends the leader looking for the active one;
- naming only replicas of the assignment, once each, the leader among them
  (INVALID_REQUEST), each registered, unfenced and not shutting down, at the broker epoch
  the leader saw if it gave one (INELIGIBLE_REPLICA, KIP-841/KIP-903);
- not putting a recovered partition back into RECOVERING, nor claiming RECOVERING with
  more than the leader in the ISR (INVALID_REQUEST).

An accepted proposal becomes a PartitionChangeRecord with the new ISR (and RECOVERED, when
the leader says it has recovered from an unclean election); replaying it bumps the
partition epoch and, for an ISR-only change, keeps the leader epoch. The answer is the
partition's state after the change. The whole request is refused with
STALE_BROKER_EPOCH when the sender's broker epoch is not its registration's.

Elections (ElectLeaders, KIP-460). PREFERRED moves leadership to the first replica of the
assignment when it is in the ISR and active (ELECTION_NOT_NEEDED when it leads already,
PREFERRED_LEADER_NOT_AVAILABLE when it cannot). UNCLEAN elects a leader for a partition
without one, from the ISR if any member is active, else any active replica with the ISR
reset to it (ELECTION_NOT_NEEDED when there is a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE
when nobody can lead). All partitions (topics null) report only the partitions for which
an election was needed.

Unclean elections. Every unclean.leader.election.interval.ms the active controller elects a
leader for each leaderless partition whose topic allows unclean election (so that turning
unclean.leader.election.enable on takes effect without a broker coming back); a broker
unfencing does so at once for the partitions it can lead.

Leader rebalancing. Every leader.imbalance.check.interval.seconds the active controller
counts, for each broker, the partitions whose preferred replica it is and how many of
those it does not lead; when that share is above leader.imbalance.per.broker.percentage,
each of those partitions gets a preferred election (moved only if the preferred replica
is in the ISR and active). As in Kafka, a pass elects at most 1,000 leaders and the next
pass follows 10 ms later, so that a broker back after a restart gets its leaderships in
steps the brokers apply between other changes, not as one change of 300,000 partitions.
"""

from __future__ import annotations

import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from pykraft.controller.partitions import Election, build_partition_change
from pykraft.controller.requests import (
    AlterPartitionItem,
    AlterPartitionPartitionResult,
    AlterPartitionTopic,
    AlterPartitionTopicResult,
    ElectionType,
    PartitionElectionResult,
    TopicElectionResult,
)
from pykraft.controller.state import ControllerState
from pykraft.errors import ErrorCode
from pykraft.metadata.records import MetadataRecord, PartitionChangeRecord
from pykraft.metadata.registrations import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)

__all__ = [
    "alter_partition", "elect_leaders", "imbalanced_partitions", "preferred_elections",
    "elect_unclean_leaders",
]

IsActive = Callable[[int], bool]


# -- AlterPartition ------------------------------------------------------------------------


def _validate(
    state: ControllerState,
    is_active: IsActive,
    broker_id: int,
    partition: PartitionRegistration | None,
    item: AlterPartitionItem,
) -> ErrorCode:
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if item.leader_epoch > partition.leader_epoch:
        return ErrorCode.not_controller
    if item.partition_epoch > partition.partition_epoch:
        return ErrorCode.not_controller
    if broker_id != partition.leader:
        return ErrorCode.invalid_request
    if item.leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if item.partition_epoch < partition.partition_epoch:
        return ErrorCode.invalid_update_version
    new_isr = [member.broker_id for member in item.new_isr]
    if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(partition.replicas):
        return ErrorCode.invalid_request
    if partition.leader not in new_isr:
        return ErrorCode.invalid_request
    recovering = item.leader_recovery_state == LeaderRecoveryState.RECOVERING
    if item.leader_recovery_state not in (0, 1) or (recovering and len(new_isr) > 1):
        return ErrorCode.invalid_request
    if recovering and partition.leader_recovery_state == LeaderRecoveryState.RECOVERED:
        return ErrorCode.invalid_request
    brokers = state.image.cluster.brokers
    for member in item.new_isr:
        registration = brokers.get(member.broker_id)
        if (
            registration is None
            or not is_active(member.broker_id)
            or (member.broker_epoch != -1 and member.broker_epoch != registration.epoch)
        ):
            return ErrorCode.ineligible_replica
    return ErrorCode.none


def _state_of(index: int, partition: PartitionRegistration) -> AlterPartitionPartitionResult:
    return AlterPartitionPartitionResult(
        partition_index=index,
        leader_id=partition.leader,
        leader_epoch=partition.leader_epoch,
        isr=partition.isr,
        leader_recovery_state=int(partition.leader_recovery_state),
        partition_epoch=partition.partition_epoch,
    )


def alter_partition(
    state: ControllerState,
    is_active: IsActive,
    broker_id: int,
    topics: Sequence[AlterPartitionTopic],
) -> tuple[list[MetadataRecord], tuple[AlterPartitionTopicResult, ...]]:
    """The records and per-partition answers of an AlterPartition request whose sender's
    broker epoch has been checked already."""
    records: list[MetadataRecord] = []
    results = []
    metadata_version = state.image.features.metadata_version
    for topic in topics:
        image = state.image.topics.by_id.get(topic.topic_id)
        if image is None or topic.topic_id == uuid.UUID(int=0):
            results.append(AlterPartitionTopicResult(topic.topic_id, tuple(
                AlterPartitionPartitionResult(item.partition_index, ErrorCode.unknown_topic_id)
                for item in topic.partitions)))
            continue
        answers = []
        for item in topic.partitions:
            partition = image.partitions.get(item.partition_index)
            error = _validate(state, is_active, broker_id, partition, item)
            if error != ErrorCode.none or partition is None:
                answers.append(AlterPartitionPartitionResult(item.partition_index, error))
                continue
            record = build_partition_change(
                partition,
                topic.topic_id,
                item.partition_index,
                target_isr=tuple(member.broker_id for member in item.new_isr),
                is_acceptable_leader=is_active,
                metadata_version=metadata_version,
            )
            if (
                item.leader_recovery_state == LeaderRecoveryState.RECOVERED
                and partition.leader_recovery_state == LeaderRecoveryState.RECOVERING
            ):
                if record is None:
                    record = PartitionChangeRecord(
                        partition_id=item.partition_index, topic_id=topic.topic_id
                    )
                record = replace(record, leader_recovery_state=int(LeaderRecoveryState.RECOVERED))
            if record is not None:
                records.append(record)
                partition = partition.merge(record)
                if record.leader not in (NO_LEADER_CHANGE, broker_id):
                    answers.append(AlterPartitionPartitionResult(
                        item.partition_index, ErrorCode.new_leader_elected))
                    continue
            answers.append(_state_of(item.partition_index, partition))
        results.append(AlterPartitionTopicResult(topic.topic_id, tuple(answers)))
    return records, tuple(results)


# -- ElectLeaders ----------------------------------------------------------------------------


_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader was not available.",
    ErrorCode.eligible_leaders_not_available:
        "Eligible topic partition leaders are not available.",
}


def _elect_one(
    state: ControllerState,
    is_active: IsActive,
    topic_name: str,
    partition_id: int,
    election_type: ElectionType,
) -> tuple[PartitionChangeRecord | None, ErrorCode, str | None]:
    topic = state.image.topics.by_name.get(topic_name)
    if topic is None:
        return None, ErrorCode.unknown_topic_or_partition, f"No such topic as {topic_name}"
    partition = topic.partitions.get(partition_id)
    if partition is None:
        return (None, ErrorCode.unknown_topic_or_partition,
                f"No such partition as {topic_name}-{partition_id}")
    if election_type == ElectionType.PREFERRED:
        if partition.leader == partition.preferred_replica:
            return None, ErrorCode.election_not_needed, _MESSAGES[ErrorCode.election_not_needed]
        election = Election.PREFERRED
        failure = ErrorCode.preferred_leader_not_available
    else:
        if partition.leader != NO_LEADER:
            return None, ErrorCode.election_not_needed, _MESSAGES[ErrorCode.election_not_needed]
        election = Election.UNCLEAN
        failure = ErrorCode.eligible_leaders_not_available
    record = build_partition_change(
        partition,
        topic.topic_id,
        partition_id,
        target_isr=partition.isr,
        is_acceptable_leader=is_active,
        metadata_version=state.image.features.metadata_version,
        election=election,
    )
    if record is None or record.leader == NO_LEADER_CHANGE:
        return None, failure, _MESSAGES[failure]
    return record, ErrorCode.none, None


def elect_leaders(
    state: ControllerState,
    is_active: IsActive,
    election_type: ElectionType,
    partitions: Mapping[str, Sequence[int]] | None,
) -> tuple[list[MetadataRecord], tuple[TopicElectionResult, ...]]:
    """ElectLeaders for the named partitions, or for every partition when None (then
    only the partitions that needed an election are reported)."""
    records: list[MetadataRecord] = []
    results = []
    everything = partitions is None
    if partitions is None:
        partitions = {
            name: sorted(topic.partitions.keys())
            for name, topic in sorted(state.image.topics.by_name.items())
        }
    for topic_name, partition_ids in partitions.items():
        answers = []
        for partition_id in partition_ids:
            record, error, message = _elect_one(
                state, is_active, topic_name, partition_id, election_type
            )
            if record is not None:
                records.append(record)
            if everything and error == ErrorCode.election_not_needed:
                continue
            answers.append(PartitionElectionResult(partition_id, error, message))
        if answers or not everything:
            results.append(TopicElectionResult(topic_name, tuple(answers)))
    return records, tuple(results)


# -- leader rebalancing ------------------------------------------------------------------------


def imbalanced_partitions(
    state: ControllerState, is_active: IsActive, imbalance_percentage: int
) -> list[tuple[uuid.UUID, int]]:
    """The partitions to move back to their preferred replica: those each active broker
    prefers but does not lead, for every broker whose share of them is above
    `imbalance_percentage` (broker by broker, in id order)."""
    preferred: dict[int, int] = defaultdict(int)
    not_led: dict[int, list[tuple[uuid.UUID, int]]] = defaultdict(list)
    for topic_id, topic in state.image.topics.by_id.items():
        for index, partition in topic.partitions.items():
            broker = partition.preferred_replica
            if broker == NO_LEADER:
                continue
            preferred[broker] += 1
            if partition.leader != broker:
                not_led[broker].append((topic_id, index))
    return [
        candidate
        for broker, candidates in sorted(not_led.items())
        if len(candidates) * 100 > imbalance_percentage * preferred[broker] and is_active(broker)
        for candidate in candidates
    ]


def preferred_elections(
    state: ControllerState, is_active: IsActive, candidates: deque[tuple[uuid.UUID, int]],
    limit: int,
) -> list[MetadataRecord]:
    """Preferred elections for the `candidates` (taken from the left) until `limit`
    partitions move or none is left; a candidate moves only if, in `state`, its preferred
    replica is active, in the ISR and not its leader yet."""
    records: list[MetadataRecord] = []
    metadata_version = state.image.features.metadata_version
    by_id = state.image.topics.by_id
    while candidates and len(records) < limit:
        topic_id, index = candidates.popleft()
        topic = by_id.get(topic_id)
        partition = topic.partitions.get(index) if topic is not None else None
        if partition is None:
            continue
        broker = partition.preferred_replica
        if partition.leader == broker or broker not in partition.isr or not is_active(broker):
            continue
        record = build_partition_change(
            partition,
            topic_id,
            index,
            target_isr=partition.isr,
            is_acceptable_leader=is_active,
            metadata_version=metadata_version,
            election=Election.PREFERRED,
        )
        if record is not None and record.leader == broker:
            records.append(record)
    return records


# -- periodic unclean elections ----------------------------------------------------------------


def elect_unclean_leaders(
    state: ControllerState, is_active: IsActive, unclean_allowed: Callable[[str], bool]
) -> list[MetadataRecord]:
    """A leader for every leaderless partition of a topic that allows unclean election:
    an active ISR member if there is one, else any active replica (ISR reset to it)."""
    records: list[MetadataRecord] = []
    allowed: dict[uuid.UUID, bool] = {}
    metadata_version = state.image.features.metadata_version
    for topic_id, index in state.leaderless_partitions():
        topic = state.image.topics.by_id[topic_id]
        if topic_id not in allowed:
            allowed[topic_id] = unclean_allowed(topic.name)
        if not allowed[topic_id]:
            continue
        record = build_partition_change(
            topic.partitions[index],
            topic_id,
            index,
            target_isr=topic.partitions[index].isr,
            is_acceptable_leader=is_active,
            metadata_version=metadata_version,
            election=Election.UNCLEAN,
        )
        if record is not None and record.leader not in (NO_LEADER, NO_LEADER_CHANGE):
            records.append(record)
    return records
