"""Partition reassignment in the controller core (KIP-455): start, completion through the
leader's AlterPartition, removal-only moves, replacement, cancellation, listing."""

from __future__ import annotations

from typing import Any

from pykraft.controller.requests import (
    OngoingReassignment,
    OngoingTopicReassignments,
    ReassignablePartition,
    ReassignableTopic,
)
from pykraft.errors import ErrorCode
from pykraft.metadata.records import PartitionChangeRecord
from tests.unit.controller.controller_harness import Harness, log_dir
from tests.unit.test_controller_replication import alter, part

TIMEOUT_MS = 9000


def started(brokers: int = 5) -> Harness:
    h = Harness()
    h.start_brokers(brokers)
    h.create("t", -1, -1, assignments={0: (0, 1, 2)})
    return h


def reassign(h: Harness, replicas: tuple[int, ...] | None, *, topic: str = "t",
             index: int = 0, **kw: Any) -> tuple[tuple[ErrorCode, str | None],
                                                tuple[Any, ...]]:
    op = h.controller.alter_partition_reassignments(
        [ReassignableTopic(topic, (ReassignablePartition(index, replicas),))], **kw)
    h.run(op)
    ((answer,),) = [t.partitions for t in op.response]
    return (answer.error_code, answer.error_message), op.records


def listed(h: Harness, partitions: dict[str, list[int]] | None = None) -> Any:
    return h.controller.list_partition_reassignments(partitions).response


def test_a_move_adds_then_completes_when_the_new_replica_joins_the_isr() -> None:
    h = started()
    answer, (record,) = reassign(h, (1, 2, 3))
    assert answer == (ErrorCode.none, None)
    assert isinstance(record, PartitionChangeRecord)
    assert (record.replicas, record.adding_replicas, record.removing_replicas) == (
        (1, 2, 3, 0), (3,), (0,))
    assert record.directories == (log_dir(1), log_dir(2), log_dir(3), log_dir(0))
    p = part(h, "t")
    assert (p.leader, p.isr) == (0, (0, 1, 2))
    assert listed(h) == (OngoingTopicReassignments(
        "t", (OngoingReassignment(0, (1, 2, 3, 0), (3,), (0,)),)),)
    assert listed(h, {"t": [0, 5], "nope": [0]}) == listed(h)
    # the leader (0, leaving) adds 3 to the ISR: the move completes, 1 leads
    answer_isr, (done,) = alter(h, "t", (0, 1, 2, 3))
    assert answer_isr.error_code == ErrorCode.new_leader_elected
    assert isinstance(done, PartitionChangeRecord)
    assert (done.replicas, done.isr, done.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert (done.adding_replicas, done.removing_replicas) == ((), ())
    p = part(h, "t")
    assert (p.replicas, p.isr, p.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert p.directories == (log_dir(1), log_dir(2), log_dir(3))
    assert listed(h) == ()
    assert h.replayed_image().topics == h.controller.image.topics


def test_a_follower_joining_first_does_not_complete_the_move() -> None:
    h = started()
    reassign(h, (0, 3, 4))
    assert part(h, "t").adding_replicas == (3, 4)
    answer, _ = alter(h, "t", (0, 1, 2, 3))
    assert answer.error_code == ErrorCode.none
    assert part(h, "t").replicas == (0, 3, 4, 1, 2)
    answer, _ = alter(h, "t", (0, 1, 2, 3, 4))
    assert answer.error_code == ErrorCode.none  # 0 stays leader
    p = part(h, "t")
    assert (p.replicas, p.isr, p.leader) == ((0, 3, 4), (0, 3, 4), 0)
    assert answer.isr == (0, 3, 4)


def test_removing_replicas_only_completes_at_once() -> None:
    h = started()
    answer, (record,) = reassign(h, (2, 1))
    assert answer[0] == ErrorCode.none
    assert isinstance(record, PartitionChangeRecord)
    p = part(h, "t")
    assert (p.replicas, p.isr, p.leader) == ((2, 1), (1, 2), 2)  # in replica order
    assert (p.adding_replicas, p.removing_replicas) == ((), ())


def test_the_same_assignment_changes_nothing() -> None:
    h = started()
    answer, records = reassign(h, (0, 1, 2))
    assert answer == (ErrorCode.none, None) and records == ()


def test_cancel_reverts_to_the_original_replicas() -> None:
    h = started()
    reassign(h, (1, 2, 3))
    answer, (record,) = reassign(h, None)
    assert answer == (ErrorCode.none, None)
    assert isinstance(record, PartitionChangeRecord)
    p = part(h, "t")
    # as Kafka: the replicas in their reassigned order, without the adding ones
    assert (p.replicas, p.isr, p.leader) == ((1, 2, 0), (0, 1, 2), 0)
    assert (p.adding_replicas, p.removing_replicas) == ((), ())
    answer, records = reassign(h, None)
    assert answer[0] == ErrorCode.no_reassignment_in_progress and records == ()


def test_a_new_target_replaces_the_reassignment_in_progress() -> None:
    h = started()
    reassign(h, (1, 2, 3))
    reassign(h, (0, 1, 4))
    p = part(h, "t")
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((0, 1, 4, 2), (4,), (2,))
    assert p.isr == (0, 1, 2)


def test_refused_targets() -> None:
    h = started()
    cases = [
        ((), ErrorCode.invalid_replica_assignment, "empty replica list"),
        ((0, 9), ErrorCode.invalid_replica_assignment, "broker 9, but no such broker"),
        ((0, 1, 1), ErrorCode.invalid_replica_assignment, "the broker 1 more than once"),
    ]
    for target, code, words in cases:
        (error, message), records = reassign(h, target)
        assert error == code and message is not None and words in message, (target, message)
        assert records == ()
    (error, message), _ = reassign(h, (1, 2), allow_replication_factor_change=False)
    assert error == ErrorCode.invalid_replication_factor
    (error, _), _ = reassign(h, (1, 2), topic="nope")
    assert error == ErrorCode.unknown_topic_or_partition
    (error, message), _ = reassign(h, (1, 2), index=4)
    assert error == ErrorCode.unknown_topic_or_partition and message == (
        "Unable to find partition t:4.")


def test_a_fenced_leaving_replica_leaves_the_isr_and_the_move_goes_on() -> None:
    h = started()
    reassign(h, (1, 2, 3))
    for broker in (1, 2, 3, 4):
        h.heartbeat(broker, TIMEOUT_MS)
    h.run(h.controller.tick(TIMEOUT_MS + 1))  # fences 0, the leader
    p = part(h, "t")
    assert (p.leader, p.isr, p.adding_replicas) == (1, (1, 2), (3,))
    answer, _ = alter(h, "t", (1, 2, 3))
    assert answer.error_code == ErrorCode.none
    p = part(h, "t")
    assert (p.replicas, p.isr, p.leader) == ((1, 2, 3), (1, 2, 3), 1)
