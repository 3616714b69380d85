"""Topic decisions: CreateTopics, DeleteTopics and CreatePartitions.

Each function takes the controller's state and a request and returns the records to
append plus the per-topic results; nothing is changed here. Topics of one request are
decided one after another against the state as it would be once the previous ones were
applied (a name or id taken earlier in the request is taken), and a topic whose checks fail
contributes no record at all, so each topic succeeds or fails on its own.

Records of a new topic, in Kafka's order: TopicRecord, its ConfigRecords, then one
PartitionRecord per partition. The configs come before the partitions so that a broker
creating the partition's log already sees the topic's overrides. A new partition has
leader = its first in-sync replica, ISR = its replicas that are active (registered,
unfenced, not shutting down), leader epoch 0 and partition epoch 0.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pykraft.controller import configs
from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import has_directory_assignment
from pykraft.controller.naming import new_topic_id, validate_topic_name
from pykraft.controller.placement import UsableBroker, place_replicas
from pykraft.controller.requests import (
    NO_TOPIC_ID,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
)
from pykraft.controller.state import ControllerState, has_collision_chars, unify_collision_chars
from pykraft.errors import (
    ErrorCode,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTopic,
    KafkaError,
    PolicyViolation,
    TopicAlreadyExists,
    TopicDeletionDisabled,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from pykraft.metadata.records import (
    ConfigRecord,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from pykraft.metadata.registrations import (
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
    ConfigResourceType,
    LeaderRecoveryState,
    shared_directories,
)
from pykraft.topic_names import METADATA_TOPIC

__all__ = [
    "MAX_RECORDS_PER_USER_OP",
    "TopicContext",
    "create_topics",
    "delete_topics",
    "create_partitions",
]

# Kafka's bound on the records one user operation may write; more is refused as a whole.
MAX_RECORDS_PER_USER_OP = 10_000


@dataclass(frozen=True, slots=True)
class TopicContext:
    """What topic decisions need besides the request."""

    state: ControllerState
    config: ControllerConfig
    rng: random.Random
    metadata_version: int
    usable_brokers: Sequence[UsableBroker]  # may receive replicas (not shutting down)
    is_active: Callable[[int], bool]  # may be in an ISR / lead (unfenced, not shutting down)


def _check_records_bound(records: Sequence[MetadataRecord]) -> None:
    if len(records) > MAX_RECORDS_PER_USER_OP:
        raise PolicyViolation("Unable to perform excessively large batch operation.")


def _default_directory(context: TopicContext, broker_id: int) -> uuid.UUID:
    """Where a new replica goes: the broker's only log dir, else "to be assigned"."""
    broker = context.state.image.cluster.brokers.get(broker_id)
    if broker is None:
        return UNASSIGNED_DIRECTORY
    if not broker.log_dirs:
        return MIGRATING_DIRECTORY
    if len(broker.log_dirs) == 1:
        return broker.log_dirs[0]
    return UNASSIGNED_DIRECTORY


def _partition_record(
    context: TopicContext,
    topic_id: uuid.UUID,
    partition_id: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
) -> PartitionRecord:
    directories: tuple[uuid.UUID, ...] = ()
    if has_directory_assignment(context.metadata_version):
        directories = shared_directories(
            tuple(_default_directory(context, replica) for replica in replicas))
    return PartitionRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        replicas=replicas,
        isr=isr,
        removing_replicas=(),
        adding_replicas=(),
        leader=isr[0],
        leader_recovery_state=int(LeaderRecoveryState.RECOVERED),
        leader_epoch=0,
        partition_epoch=0,
        directories=directories,
    )


# -- manual assignments -----------------------------------------------------------------


def _check_manual_assignment(
    context: TopicContext, replicas: Sequence[int], replication_factor: int | None
) -> None:
    if not replicas:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in context.state.image.cluster.brokers:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {broker_id}, but no such "
                "broker is registered."
            )
        if broker_id == previous:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes the broker {broker_id} more than once."
            )
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise InvalidReplicaAssignment(
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s)."
        )


def _manual_isr(
    context: TopicContext, partition_id: int, replicas: Sequence[int]
) -> tuple[int, ...]:
    isr = tuple(replica for replica in replicas if context.is_active(replica))
    if not isr:
        raise InvalidReplicaAssignment(
            "All brokers specified in the manual partition assignment for partition "
            f"{partition_id} are fenced or in controlled shutdown."
        )
    return isr


def _manual_partitions(
    context: TopicContext, topic: CreatableTopic
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    if topic.replication_factor != -1:
        raise InvalidRequest(
            "A manual partition assignment was specified, but replication factor was not set to -1."
        )
    if topic.num_partitions != -1:
        raise InvalidRequest(
            "A manual partition assignment was specified, but numPartitions was not set to -1."
        )
    replication_factor: int | None = None
    for partition_id, replicas in topic.assignments.items():
        _check_manual_assignment(context, replicas, replication_factor)
        replication_factor = len(replicas)
        _manual_isr(context, partition_id, replicas)
    if sorted(topic.assignments) != list(range(len(topic.assignments))):
        raise InvalidReplicaAssignment(
            "partitions should be a consecutive 0-based integer sequence"
        )
    return [
        (tuple(topic.assignments[index]), _manual_isr(context, index, topic.assignments[index]))
        for index in range(len(topic.assignments))
    ]


# -- automatic placement ----------------------------------------------------------------


def _placed_partitions(
    context: TopicContext, partition_count: int, replication_factor: int
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    try:
        placements = place_replicas(
            context.usable_brokers,
            partition_count=partition_count,
            replication_factor=replication_factor,
            rng=context.rng,
        )
    except InvalidReplicationFactor as error:
        raise InvalidReplicationFactor(
            f"Unable to replicate the partition {replication_factor} time(s): {error}"
        ) from None
    result = []
    for replicas in placements:
        isr = tuple(replica for replica in replicas if context.is_active(replica))
        if not isr:
            raise InvalidReplicationFactor(
                f"Unable to replicate the partition {replication_factor} time(s): All brokers "
                "are currently fenced or in controlled shutdown."
            )
        result.append((replicas, isr))
    return result


def _automatic_partitions(
    context: TopicContext, topic: CreatableTopic
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise InvalidReplicationFactor(
            "Replication factor must be larger than 0, or -1 to use the default value."
        )
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise InvalidPartitions("Number of partitions was set to an invalid non-positive value.")
    partition_count = topic.num_partitions
    if partition_count == -1:
        partition_count = context.config.num_partitions
    replication_factor = topic.replication_factor
    if replication_factor == -1:
        replication_factor = context.config.default_replication_factor
    if partition_count > MAX_RECORDS_PER_USER_OP:
        raise PolicyViolation("Unable to perform excessively large batch operation.")
    return _placed_partitions(context, partition_count, replication_factor)


# -- CreateTopics -----------------------------------------------------------------------


class _Creation:
    """The topics of one CreateTopics request, decided one by one."""

    def __init__(self, context: TopicContext) -> None:
        self.context = context
        self.records: list[MetadataRecord] = []
        self.new_ids: set[uuid.UUID] = set()
        self.new_names: set[str] = set()
        self.new_unified_names: dict[str, str] = {}  # unified name -> name, for collisions

    def _check_name(self, name: str) -> None:
        validate_topic_name(name)
        if name == METADATA_TOPIC:  # its directory is the metadata log's (topic_names)
            raise InvalidRequest(f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
        state = self.context.state
        if has_collision_chars(name):
            colliding = state.colliding_topic(name)
            if colliding is None:
                found = self.new_unified_names.get(unify_collision_chars(name))
                colliding = None if found == name else found
            if colliding is not None:
                raise InvalidTopic(f"Topic '{name}' collides with existing topic: {colliding}")
        if name in state.image.topics.by_name or name in self.new_names:
            raise TopicAlreadyExists(f"Topic '{name}' already exists.")

    def create(self, topic: CreatableTopic) -> CreateTopicResult:
        context = self.context
        self._check_name(topic.name)
        configs.check_topic_creation_configs(topic.configs, context.config)
        if topic.assignments:
            partitions = _manual_partitions(context, topic)
        else:
            partitions = _automatic_partitions(context, topic)
        in_use = _InUse(context.state.image.topics.by_id, self.new_ids)
        topic_id = new_topic_id(context.rng, in_use)
        overrides = {name: value for name, value in topic.configs.items() if value is not None}
        self.records.append(TopicRecord(name=topic.name, topic_id=topic_id))
        self.records.extend(
            ConfigRecord(
                resource_type=int(ConfigResourceType.TOPIC),
                resource_name=topic.name,
                name=name,
                value=value,
            )
            for name, value in overrides.items()
        )
        for partition_id, (replicas, isr) in enumerate(partitions):
            self.records.append(_partition_record(context, topic_id, partition_id, replicas, isr))
        self.new_ids.add(topic_id)
        self.new_names.add(topic.name)
        self.new_unified_names[unify_collision_chars(topic.name)] = topic.name
        return CreateTopicResult(
            name=topic.name,
            topic_id=topic_id,
            num_partitions=len(partitions),
            replication_factor=len(partitions[0][0]),
            configs=configs.effective_topic_configs(context.state, context.config, overrides),
        )


class _InUse:
    """Topic ids taken: in the image or earlier in this request."""

    def __init__(self, existing: Mapping[uuid.UUID, object], new: set[uuid.UUID]) -> None:
        self.existing, self.new = existing, new

    def __contains__(self, topic_id: object) -> bool:
        return topic_id in self.new or topic_id in self.existing


def _duplicates(names: Sequence[str]) -> set[str]:
    return {name for name, count in Counter(names).items() if count > 1}


def create_topics(
    context: TopicContext, topics: Sequence[CreatableTopic], *, validate_only: bool
) -> tuple[list[MetadataRecord], tuple[CreateTopicResult, ...]]:
    """Records and one result per distinct topic name, in request order."""
    duplicates = _duplicates([topic.name for topic in topics])
    creation = _Creation(context)
    results: dict[str, CreateTopicResult] = {}
    for topic in topics:
        if topic.name in results:
            continue
        if topic.name in duplicates:
            results[topic.name] = CreateTopicResult(
                topic.name,
                error_code=ErrorCode.invalid_request,
                error_message="Duplicate topic name.",
            )
            continue
        try:
            results[topic.name] = creation.create(topic)
        except KafkaError as error:
            results[topic.name] = CreateTopicResult(
                topic.name, error_code=error.code, error_message=str(error) or None
            )
    _check_records_bound(creation.records)
    return ([] if validate_only else creation.records), tuple(results.values())


# -- DeleteTopics -----------------------------------------------------------------------


def delete_topics(
    context: TopicContext, names_or_ids: Sequence[str | uuid.UUID]
) -> tuple[list[MetadataRecord], tuple[DeleteTopicResult, ...]]:
    """A RemoveTopicRecord per existing topic named (by name or id); one result each."""
    state = context.state
    records: list[MetadataRecord] = []
    results: list[DeleteTopicResult] = []
    removed: set[uuid.UUID] = set()
    duplicates = _duplicates([str(item) for item in names_or_ids])
    reported: set[str] = set()
    for item in names_or_ids:
        name, topic_id, error = _find_topic(state, item)
        if str(item) in duplicates:
            if str(item) not in reported:
                reported.add(str(item))
                what = "name" if isinstance(item, str) else "id"
                results.append(
                    DeleteTopicResult(
                        name if isinstance(item, str) else None,
                        NO_TOPIC_ID if isinstance(item, str) else item,
                        ErrorCode.invalid_request,
                        f"Duplicate topic {what}.",
                    )
                )
            continue
        if error is None and not context.config.delete_topic_enable:
            error = TopicDeletionDisabled("Topic deletion is disabled.")
        if error is None and topic_id in removed:
            error = InvalidRequest("The same topic was named by both its name and its id.")
        if error is not None:
            results.append(DeleteTopicResult(name, topic_id, error.code, str(error) or None))
            continue
        removed.add(topic_id)
        records.append(RemoveTopicRecord(topic_id=topic_id))
        results.append(DeleteTopicResult(name, topic_id))
    _check_records_bound(records)
    return records, tuple(results)


def _find_topic(
    state: ControllerState, item: str | uuid.UUID
) -> tuple[str | None, uuid.UUID, KafkaError | None]:
    if isinstance(item, str):
        topic = state.image.topics.by_name.get(item)
        if topic is None:
            return (
                item,
                NO_TOPIC_ID,
                UnknownTopicOrPartition("This server does not host this topic-partition."),
            )
        return item, topic.topic_id, None
    if item == NO_TOPIC_ID:
        return None, item, InvalidRequest(f"Attempt to find topic with invalid topicId {item}")
    by_id = state.image.topics.by_id.get(item)
    if by_id is None:
        return None, item, UnknownTopicId("This server does not host this topic ID.")
    return by_id.name, item, None


# -- CreatePartitions -------------------------------------------------------------------


def _new_partitions(context: TopicContext, request: CreatePartitionsTopic) -> list[PartitionRecord]:
    topic = context.state.image.topics.by_name.get(request.name)
    if topic is None:
        raise UnknownTopicOrPartition("This server does not host this topic-partition.")
    current = len(topic.partitions)
    if request.count == current:
        raise InvalidPartitions(f"Topic already has {current} partition(s).")
    if request.count < current:
        raise InvalidPartitions(
            f"The topic {request.name} currently has {current} partition(s); "
            f"{request.count} would not be an increase."
        )
    additional = request.count - current
    if request.assignments is not None and len(request.assignments) != additional:
        raise InvalidReplicaAssignment(
            f"Attempted to add {additional} additional partition(s), but only "
            f"{len(request.assignments)} assignment(s) were specified."
        )
    if additional > MAX_RECORDS_PER_USER_OP:
        raise PolicyViolation("Unable to perform excessively large batch operation.")
    replication_factor = len(next(iter(topic.partitions.values())).replicas)
    if request.assignments is not None:
        partitions = []
        for position, replicas in enumerate(request.assignments):
            _check_manual_assignment(context, replicas, replication_factor)
            isr = _manual_isr(context, current + position, replicas)
            partitions.append((tuple(replicas), isr))
    else:
        partitions = _placed_partitions(context, additional, replication_factor)
    return [
        _partition_record(context, topic.topic_id, current + position, replicas, isr)
        for position, (replicas, isr) in enumerate(partitions)
    ]


def create_partitions(
    context: TopicContext, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool
) -> tuple[list[MetadataRecord], tuple[CreatePartitionsResult, ...]]:
    """PartitionRecords for the partitions each topic gains; one result per topic."""
    records: list[MetadataRecord] = []
    results: list[CreatePartitionsResult] = []
    duplicates = _duplicates([topic.name for topic in topics])
    reported: set[str] = set()
    for request in topics:
        if request.name in duplicates:
            if request.name not in reported:
                reported.add(request.name)
                results.append(
                    CreatePartitionsResult(
                        request.name, ErrorCode.invalid_request, "Duplicate topic name."
                    )
                )
            continue
        try:
            records.extend(_new_partitions(context, request))
        except KafkaError as error:
            results.append(CreatePartitionsResult(request.name, error.code, str(error) or None))
            continue
        results.append(CreatePartitionsResult(request.name))
    _check_records_bound(records)
    return ([] if validate_only else records), tuple(results)
