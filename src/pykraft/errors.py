"""Exceptions that carry their Kafka error code, and the invariant guard.

Inside the node, code raises these; the protocol edge turns each into the error field the
API defines (STYLE.md section 6). `InvariantViolation` is different: only a bug can raise
it, and the node's supervisor stops the node rather than answer a client.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = [
    "ErrorCode",
    "KafkaError",
    "InvariantViolation",
    "invariant",
]


class KafkaError(Exception):
    """An error a client can be told about, with the Kafka error code that tells it."""

    code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error


class InvariantViolation(Exception):
    """A broken internal invariant: a bug. Never mapped to an error code."""


def invariant(condition: bool, message: str, *args: object) -> None:
    """Raise InvariantViolation(message % args) unless `condition` holds. On hot paths pass
    the values as `args`, as logging does: the message is formatted only on failure."""
    if not condition:  # unlike `assert`, this survives `python -O`
        raise InvariantViolation(message % args if args else message)


class CorruptRecord(KafkaError):
    code = ErrorCode.corrupt_message


class InvalidRecord(KafkaError):
    code = ErrorCode.invalid_record

    def __init__(self, message: str,
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        """`record_errors`: (index of the record in its batch, why), for Produce's
        per-record errors (KIP-467)."""
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class MessageTooLarge(KafkaError):
    code = ErrorCode.message_too_large


class RecordListTooLarge(KafkaError):
    code = ErrorCode.record_list_too_large


class InvalidTimestamp(KafkaError):
    code = ErrorCode.invalid_timestamp

    def __init__(self, message: str,
                 record_errors: Sequence[tuple[int, str | None]] = ()) -> None:
        """`record_errors` as InvalidRecord's."""
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class UnsupportedCompressionType(KafkaError):
    code = ErrorCode.unsupported_compression_type


class UnsupportedForMessageFormat(KafkaError):
    code = ErrorCode.unsupported_for_message_format


class OffsetOutOfRange(KafkaError):
    code = ErrorCode.offset_out_of_range


class UnknownTopicOrPartition(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class UnknownTopicId(KafkaError):
    code = ErrorCode.unknown_topic_id


class NotLeaderOrFollower(KafkaError):
    code = ErrorCode.not_leader_or_follower


class FencedLeaderEpoch(KafkaError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpoch(KafkaError):
    code = ErrorCode.unknown_leader_epoch


class InvalidTopic(KafkaError):
    code = ErrorCode.invalid_topic_exception


class TopicAlreadyExists(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitions(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactor(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignment(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfig(KafkaError):
    code = ErrorCode.invalid_config


class InvalidRequest(KafkaError):
    code = ErrorCode.invalid_request


class PolicyViolation(KafkaError):
    code = ErrorCode.policy_violation


class UnsupportedVersion(KafkaError):
    code = ErrorCode.unsupported_version


class NotController(KafkaError):
    code = ErrorCode.not_controller


class KafkaStorageError(KafkaError):
    code = ErrorCode.kafka_storage_error


class RequestTimedOut(KafkaError):
    code = ErrorCode.request_timed_out


class InconsistentClusterId(KafkaError):
    code = ErrorCode.inconsistent_cluster_id


class BrokerNotAvailable(KafkaError):
    code = ErrorCode.broker_not_available


class LeaderNotAvailable(KafkaError):
    code = ErrorCode.leader_not_available


class InvalidRequiredAcks(KafkaError):
    code = ErrorCode.invalid_required_acks


class ThrottlingQuotaExceeded(KafkaError):
    code = ErrorCode.throttling_quota_exceeded


class NotLeaderError(NotLeaderOrFollower):
    """This node is not the Raft leader; says which node is (-1 when unknown) and in what epoch.

    At the controller edge it maps to NOT_CONTROLLER; on a partition, to NOT_LEADER_OR_FOLLOWER.
    """

    def __init__(self, leader_id: int, leader_epoch: int) -> None:
        super().__init__(f"not the leader; leader is {leader_id} in epoch {leader_epoch}")
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch


class InconsistentVoterSet(KafkaError):
    code = ErrorCode.inconsistent_voter_set


class StaleBrokerEpoch(KafkaError):
    code = ErrorCode.stale_broker_epoch


class BrokerIdNotRegistered(KafkaError):
    code = ErrorCode.broker_id_not_registered


class DuplicateBrokerRegistration(KafkaError):
    code = ErrorCode.duplicate_broker_registration


class InvalidRegistration(KafkaError):
    code = ErrorCode.invalid_registration


class TopicDeletionDisabled(KafkaError):
    code = ErrorCode.topic_deletion_disabled


class InconsistentTopicId(KafkaError):
    code = ErrorCode.inconsistent_topic_id


class SnapshotNotFound(KafkaError):
    code = ErrorCode.snapshot_not_found


class PositionOutOfRange(KafkaError):
    code = ErrorCode.position_out_of_range


class NotEnoughReplicas(KafkaError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppend(KafkaError):
    code = ErrorCode.not_enough_replicas_after_append


class NoReassignmentInProgress(KafkaError):
    code = ErrorCode.no_reassignment_in_progress


class OutOfOrderSequenceNumber(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpoch(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class TransactionCoordinatorFenced(KafkaError):
    """A transaction marker from a coordinator older than one whose marker this partition
    already holds for the producer."""

    code = ErrorCode.transaction_coordinator_fenced
