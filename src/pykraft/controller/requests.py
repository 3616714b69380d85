"""Neutral request and response values of the quorum controller's operations.

The broker's protocol handlers translate kio entities to these and back; the controller
core never sees the wire. Names follow Kafka's RPC fields (CreateTopics, DeleteTopics,
CreatePartitions, IncrementalAlterConfigs, AlterConfigs, BrokerRegistration,
BrokerHeartbeat, AlterPartition, ElectLeaders, Alter/ListPartitionReassignments). Error
codes are kio's `ErrorCode` (an `IntEnum`); messages are Kafka's wording where Kafka has
one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final, Generic, TypeVar

from pykraft.errors import ErrorCode
from pykraft.metadata.records import MetadataRecord
from pykraft.metadata.registrations import ConfigResourceType
from pykraft.storage.log_config import ConfigSource

__all__ = [
    "NO_TOPIC_ID",
    "OpResult",
    "ConfigResourceType",
    "ConfigSource",
    "AlterConfigOp",
    "CreatableTopic",
    "CreatableTopicConfig",
    "CreateTopicResult",
    "DeleteTopicResult",
    "CreatePartitionsTopic",
    "CreatePartitionsResult",
    "AlterableConfig",
    "AlterConfigsResource",
    "LegacyAlterConfigsResource",
    "AlterConfigsResult",
    "Listener",
    "BrokerFeatureRange",
    "BrokerRegistrationResult",
    "BrokerHeartbeatResult",
    "RebalancePass",
    "TickResult",
    "IsrMember",
    "AlterPartitionItem",
    "AlterPartitionTopic",
    "AlterPartitionPartitionResult",
    "AlterPartitionTopicResult",
    "ElectionType",
    "PartitionElectionResult",
    "TopicElectionResult",
    "ReassignablePartition",
    "ReassignableTopic",
    "ReassignmentPartitionResult",
    "ReassignmentTopicResult",
    "OngoingReassignment",
    "OngoingTopicReassignments",
]

NO_TOPIC_ID: Final = uuid.UUID(int=0)

ResponseT = TypeVar("ResponseT")


@dataclass(frozen=True, slots=True)
class OpResult(Generic[ResponseT]):
    """What an operation decided: records to append (in order) and the answer.

    The answer may be given to the client only once every record is committed. An empty
    `records` means nothing changes (a validate-only request, or every item failed).
    `atomic` records go into one batch; others (Kafka's non-atomic ControllerResult: each
    record stands alone, e.g. one partition's leader change when a broker is fenced) may
    be split into several, so that no batch of a change to every partition has to be
    applied in one go.
    """

    records: tuple[MetadataRecord, ...]
    response: ResponseT
    atomic: bool = True


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs `ConfigOperation` ids."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# -- CreateTopics ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """One topic of a CreateTopics request; -1 means "use the cluster default"."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatableTopicConfig:
    """One effective config of a created topic, as CreateTopics v5+ reports it."""

    name: str
    value: str | None
    read_only: bool
    config_source: ConfigSource
    is_sensitive: bool


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    topic_id: uuid.UUID = NO_TOPIC_ID
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: tuple[CreatableTopicConfig, ...] = ()


# -- DeleteTopics ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    """`name` is None when the request named the topic by an unknown id."""

    name: str | None
    topic_id: uuid.UUID = NO_TOPIC_ID
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


# -- CreatePartitions -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """Grow `name` to `count` partitions; `assignments` lists the new partitions' replicas."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


# -- IncrementalAlterConfigs / AlterConfigs -------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterableConfig:
    name: str
    op: AlterConfigOp
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@dataclass(frozen=True, slots=True)
class LegacyAlterConfigsResource:
    """A legacy AlterConfigs resource: `configs` replaces every existing override."""

    resource_type: int
    resource_name: str
    configs: Mapping[str, str | None]


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


# -- BrokerRegistration / BrokerHeartbeat ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerFeatureRange:
    name: str
    min_supported_version: int
    max_supported_version: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResult:
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResult:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


@dataclass(frozen=True, slots=True)
class RebalancePass:
    """One pass of the leader rebalancing: partitions `found` not led by their preferred
    replica (when this pass checked, else 0), the leaders it `elected`, `elected_in_all`
    since that check, and the partitions `left` for the next passes."""

    found: int
    elected: int
    elected_in_all: int
    left: int


@dataclass(frozen=True, slots=True)
class TickResult:
    """`fenced_broker_ids`: brokers whose session expired; call `tick` again at `wake_at_ms`;
    `rebalance`: what the leader rebalancing did, if it ran."""

    fenced_broker_ids: tuple[int, ...]
    wake_at_ms: int
    rebalance: RebalancePass | None = None


# -- AlterPartition (KIP-497) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IsrMember:
    """A replica of a proposed ISR; `broker_epoch` -1 when the sender does not say (v2)."""

    broker_id: int
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """The partition leader's proposal: this ISR, at these epochs."""

    partition_index: int
    leader_epoch: int
    new_isr: tuple[IsrMember, ...]
    partition_epoch: int
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionTopic:
    topic_id: uuid.UUID
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionPartitionResult:
    """The partition's state after the change, or only an error (other fields as Kafka's
    defaults, 0)."""

    partition_index: int
    error_code: ErrorCode = ErrorCode.none
    leader_id: int = 0
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionTopicResult:
    topic_id: uuid.UUID
    partitions: tuple[AlterPartitionPartitionResult, ...]


# -- ElectLeaders (KIP-460) ---------------------------------------------------------------


class ElectionType(IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class PartitionElectionResult:
    partition_id: int
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class TopicElectionResult:
    topic: str
    partitions: tuple[PartitionElectionResult, ...]


# -- AlterPartitionReassignments / ListPartitionReassignments (KIP-455) --------------------


@dataclass(frozen=True, slots=True)
class ReassignablePartition:
    """Move a partition to `replicas`; None cancels its reassignment."""

    partition_index: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ReassignableTopic:
    name: str
    partitions: tuple[ReassignablePartition, ...]


@dataclass(frozen=True, slots=True)
class ReassignmentPartitionResult:
    partition_index: int
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ReassignmentTopicResult:
    name: str
    partitions: tuple[ReassignmentPartitionResult, ...]


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    partition_index: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OngoingTopicReassignments:
    name: str
    partitions: tuple[OngoingReassignment, ...]
