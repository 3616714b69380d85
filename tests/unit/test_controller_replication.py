"""The controller's replication decisions: AlterPartition, ElectLeaders, unclean election
and leader rebalancing (controller/replication.py, quorum_controller.py)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pykraft.controller.requests import (
    AlterPartitionItem,
    AlterPartitionPartitionResult,
    AlterPartitionTopic,
    ElectionType,
    IsrMember,
    OpResult,
)
from pykraft.errors import ErrorCode, StaleBrokerEpoch
from pykraft.metadata.records import PartitionChangeRecord
from pykraft.metadata.registrations import (
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
)
from tests.unit.controller.controller_harness import Harness

TIMEOUT_MS = 9000


def part(h: Harness, topic: str, index: int = 0) -> PartitionRegistration:
    return h.controller.image.topics.by_name[topic].partitions[index]


def topic_id(h: Harness, topic: str) -> uuid.UUID:
    return h.controller.image.topics.by_name[topic].topic_id


def alter(
    h: Harness,
    topic: str,
    isr: tuple[int, ...],
    *,
    sender: int | None = None,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    epochs: dict[int, int] | None = None,
    recovery: int = 0,
    index: int = 0,
    commit: bool = True,
) -> tuple[AlterPartitionPartitionResult, tuple[Any, ...]]:
    """Send AlterPartition for one partition as its leader would (overridable)."""
    current = part(h, topic, index)
    members = tuple(
        IsrMember(b, h.epochs.get(b, -1) if epochs is None else epochs.get(b, -1)) for b in isr
    )
    item = AlterPartitionItem(
        partition_index=index,
        leader_epoch=current.leader_epoch if leader_epoch is None else leader_epoch,
        new_isr=members,
        partition_epoch=current.partition_epoch if partition_epoch is None else partition_epoch,
        leader_recovery_state=recovery,
    )
    who = current.leader if sender is None else sender
    op = h.controller.alter_partition(
        who, h.epochs[who], [AlterPartitionTopic(topic_id(h, topic), (item,))]
    )
    if commit:
        h.run(op)
    ((answer,),) = [t.partitions for t in op.response]
    return answer, op.records


def started(brokers: int = 3, **config: Any) -> Harness:
    h = Harness(**config)
    h.start_brokers(brokers)
    h.create("t", -1, -1, assignments={0: tuple(range(brokers))})
    return h


# -- AlterPartition: accepted -----------------------------------------------------------


def test_shrink_and_expand_bump_the_partition_epoch_only() -> None:
    h = started()
    before = part(h, "t")
    assert (before.leader, before.isr) == (0, (0, 1, 2))
    answer, records = alter(h, "t", (0, 1))
    (record,) = records
    assert isinstance(record, PartitionChangeRecord)
    assert (record.isr, record.leader) == ((0, 1), NO_LEADER_CHANGE)
    after = part(h, "t")
    assert after.isr == (0, 1)
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1
    assert answer == AlterPartitionPartitionResult(
        0, ErrorCode.none, 0, after.leader_epoch, (0, 1), 0, after.partition_epoch
    )
    answer, _ = alter(h, "t", (0, 1, 2))
    assert answer.error_code == ErrorCode.none and answer.isr == (0, 1, 2)
    assert part(h, "t").partition_epoch == before.partition_epoch + 2
    assert h.replayed_image().topics == h.controller.image.topics


def test_the_same_isr_writes_nothing_and_answers_the_state() -> None:
    h = started()
    answer, records = alter(h, "t", (0, 1, 2))
    assert records == ()
    assert answer.error_code == ErrorCode.none and answer.isr == (0, 1, 2)


def test_a_shrink_before_3_6_bumps_the_leader_epoch_and_answers_it() -> None:
    h = started(metadata_version=11)
    before = part(h, "t")
    answer, (record,) = alter(h, "t", (0, 2))
    assert isinstance(record, PartitionChangeRecord) and record.leader == 0
    assert answer.error_code == ErrorCode.none
    assert answer.leader_epoch == before.leader_epoch + 1 == part(h, "t").leader_epoch


def test_v2_members_without_broker_epochs_are_accepted() -> None:
    h = started()
    answer, _ = alter(h, "t", (0, 1), epochs={})
    assert answer.error_code == ErrorCode.none


def test_a_recovered_leader_clears_recovering() -> None:
    h = started(2)
    record = PartitionChangeRecord(
        partition_id=0, topic_id=topic_id(h, "t"), leader=1, isr=(1,), leader_recovery_state=1
    )
    h.run(OpResult((record,), None))  # as an unclean election leaves it
    assert part(h, "t").leader_recovery_state == LeaderRecoveryState.RECOVERING
    answer, _ = alter(h, "t", (1,), recovery=1)
    assert answer.error_code == ErrorCode.none  # still recovering: allowed, nothing changes
    answer, _ = alter(h, "t", (0, 1), recovery=1)
    assert answer.error_code == ErrorCode.invalid_request  # RECOVERING needs ISR = {leader}
    answer, (change,) = alter(h, "t", (1,), recovery=0)
    assert isinstance(change, PartitionChangeRecord) and change.leader_recovery_state == 0
    assert answer.leader_recovery_state == 0
    assert part(h, "t").leader_recovery_state == LeaderRecoveryState.RECOVERED
    answer, _ = alter(h, "t", (1,), recovery=1)
    assert answer.error_code == ErrorCode.invalid_request  # never back to RECOVERING


# -- AlterPartition: refused --------------------------------------------------------------


def test_stale_sender_epoch_refuses_the_whole_request() -> None:
    h = started()
    item = AlterPartitionItem(0, 0, (IsrMember(0), IsrMember(1)), 0)
    with pytest.raises(StaleBrokerEpoch):
        h.controller.alter_partition(0, h.epochs[0] + 1, [AlterPartitionTopic(
            topic_id(h, "t"), (item,))])
    with pytest.raises(StaleBrokerEpoch):
        h.controller.alter_partition(7, 0, [])


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"sender": 1}, ErrorCode.invalid_request),
        ({"leader_epoch": -1}, ErrorCode.fenced_leader_epoch),
        ({"leader_epoch": 5}, ErrorCode.not_controller),
        ({"partition_epoch": -1}, ErrorCode.invalid_update_version),
        ({"partition_epoch": 9}, ErrorCode.not_controller),
    ],
)
def test_epochs_and_sender_are_checked(kwargs: dict[str, Any], code: ErrorCode) -> None:
    h = started()
    answer, records = alter(h, "t", (0, 1), **kwargs)
    assert answer.error_code == code and records == ()
    assert answer.isr == () and answer.leader_id == 0 and answer.partition_epoch == 0
    assert part(h, "t").isr == (0, 1, 2)


def test_an_old_partition_epoch_is_refused_after_a_change() -> None:
    h = started()
    epoch = part(h, "t").partition_epoch
    alter(h, "t", (0, 1))
    answer, _ = alter(h, "t", (0, 1, 2), partition_epoch=epoch)
    assert answer.error_code == ErrorCode.invalid_update_version


@pytest.mark.parametrize(
    ("isr", "code"),
    [
        ((1, 2), ErrorCode.invalid_request),  # the leader must stay
        ((0, 0, 1), ErrorCode.invalid_request),  # duplicates
        ((0, 5), ErrorCode.invalid_request),  # not a replica
        ((), ErrorCode.invalid_request),
    ],
)
def test_the_new_isr_must_be_of_the_assignment_with_the_leader(
    isr: tuple[int, ...], code: ErrorCode
) -> None:
    h = started()
    answer, records = alter(h, "t", isr)
    assert answer.error_code == code and records == ()


def test_fenced_shutting_down_or_stale_replicas_are_ineligible() -> None:
    h = started(4)
    h.create("w", -1, -1, assignments={0: (0, 1, 2, 3)})
    answer, _ = alter(h, "w", (0, 1), epochs={0: h.epochs[0], 1: h.epochs[1] + 1})
    assert answer.error_code == ErrorCode.ineligible_replica
    for broker in (0, 1, 2):
        h.heartbeat(broker, TIMEOUT_MS)
    h.run(h.controller.tick(TIMEOUT_MS + 1))  # fences 3
    assert h.controller.image.cluster.brokers[3].fenced
    assert part(h, "w").isr == (0, 1, 2)
    answer, _ = alter(h, "w", (0, 1, 2, 3))
    assert answer.error_code == ErrorCode.ineligible_replica
    h.heartbeat(2, TIMEOUT_MS + 2, want_shutdown=True)  # leads nothing: stops at once
    assert 2 not in part(h, "w").isr
    answer, _ = alter(h, "w", (0, 1, 2))
    assert answer.error_code == ErrorCode.ineligible_replica


def test_a_broker_in_controlled_shutdown_is_ineligible() -> None:
    h = started(3)
    h.create("led", -1, -1, assignments={0: (1, 0)})
    h.heartbeat(1, 1, want_shutdown=True)  # leads "led": stays in controlled shutdown
    assert h.controller.state.partitions_led_by(1) == ()
    answer, _ = alter(h, "t", (0, 1))
    assert answer.error_code == ErrorCode.ineligible_replica


def test_unknown_topic_id_and_partition() -> None:
    h = started()
    item = AlterPartitionItem(0, 0, (IsrMember(0),), 0)
    op = h.controller.alter_partition(0, h.epochs[0], [
        AlterPartitionTopic(uuid.uuid4(), (item,)),
        AlterPartitionTopic(topic_id(h, "t"), (AlterPartitionItem(4, 0, (IsrMember(0),), 0),)),
    ])
    unknown_topic, unknown_partition = op.response
    assert unknown_topic.partitions[0].error_code == ErrorCode.unknown_topic_id
    assert unknown_partition.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert op.records == ()


# -- unclean.leader.election.enable ---------------------------------------------------------


def fence_all_but(h: Harness, alive: tuple[int, ...], now_ms: int = TIMEOUT_MS) -> None:
    for broker in alive:
        h.heartbeat(broker, now_ms)
    h.run(h.controller.tick(now_ms + 1))


def shrink_to(h: Harness, topic: str, isr: tuple[int, ...]) -> None:
    answer, _ = alter(h, topic, isr)
    assert answer.error_code == ErrorCode.none


def test_no_live_isr_member_leaves_the_partition_leaderless_until_one_returns() -> None:
    h = started(3)
    shrink_to(h, "t", (0,))
    fence_all_but(h, (1, 2))
    after = part(h, "t")
    assert (after.leader, after.isr) == (-1, (0,))
    h.heartbeat(2, TIMEOUT_MS + 5)  # an out-of-sync replica staying alive changes nothing
    assert part(h, "t").leader == -1
    h.heartbeat(0, TIMEOUT_MS + 6)  # fenced broker 0 asks to unfence: elected again
    back = part(h, "t")
    assert (back.leader, back.isr) == (0, (0,))
    assert back.leader_recovery_state == LeaderRecoveryState.RECOVERED


def test_the_broker_key_allows_unclean_election() -> None:
    h = started(3, server_configs={"unclean.leader.election.enable": "true"})
    shrink_to(h, "t", (0,))
    fence_all_but(h, (1, 2))
    after = part(h, "t")
    assert (after.leader, after.isr) == (1, (1,))
    assert after.leader_recovery_state == LeaderRecoveryState.RECOVERING


def test_the_topic_override_wins_over_the_broker_key() -> None:
    h = Harness(server_configs={"unclean.leader.election.enable": "true"})
    h.start_brokers(2)
    h.create("c", -1, -1, assignments={0: (0, 1)},
             configs={"unclean.leader.election.enable": "false"})
    shrink_to(h, "c", (0,))
    fence_all_but(h, (1,))
    assert part(h, "c").leader == -1


# -- ElectLeaders ------------------------------------------------------------------------------


def elect(
    h: Harness, kind: ElectionType, partitions: dict[str, list[int]] | None
) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    op = h.controller.elect_leaders(kind, partitions)
    h.run(op)
    return {
        (topic.topic, p.partition_id): (p.error_code, p.error_message)
        for topic in op.response
        for p in topic.partitions
    }


def test_preferred_election_moves_leadership_back() -> None:
    h = started(3)
    fence_all_but(h, (1, 2))
    assert part(h, "t").leader == 1
    h.heartbeat(0, TIMEOUT_MS + 2)
    assert part(h, "t").leader == 1  # unfencing does not move a led partition
    answer, _ = alter(h, "t", (1, 2, 0))
    assert answer.error_code == ErrorCode.none
    epoch = part(h, "t").leader_epoch
    assert elect(h, ElectionType.PREFERRED, {"t": [0]}) == {("t", 0): (ErrorCode.none, None)}
    after = part(h, "t")
    assert after.leader == 0 and after.leader_epoch == epoch + 1
    code, message = elect(h, ElectionType.PREFERRED, {"t": [0]})[("t", 0)]
    assert code == ErrorCode.election_not_needed and message


def test_preferred_leader_not_in_the_isr_is_not_available() -> None:
    h = started(3)
    fence_all_but(h, (1, 2))
    h.heartbeat(0, TIMEOUT_MS + 2)  # unfenced, but not back in the ISR
    code, _ = elect(h, ElectionType.PREFERRED, {"t": [0]})[("t", 0)]
    assert code == ErrorCode.preferred_leader_not_available
    assert part(h, "t").leader == 1


def test_unclean_election_of_a_leaderless_partition() -> None:
    h = started(3)
    shrink_to(h, "t", (0,))
    fence_all_but(h, (1, 2))
    assert part(h, "t").leader == -1
    results = elect(h, ElectionType.UNCLEAN, {"t": [0, 3], "nope": [0]})
    assert results[("t", 0)] == (ErrorCode.none, None)
    assert results[("t", 3)] == (ErrorCode.unknown_topic_or_partition, "No such partition as t-3")
    assert results[("nope", 0)] == (ErrorCode.unknown_topic_or_partition, "No such topic as nope")
    after = part(h, "t")
    assert (after.leader, after.isr) == (1, (1,))
    assert after.leader_recovery_state == LeaderRecoveryState.RECOVERING
    code, _ = elect(h, ElectionType.UNCLEAN, {"t": [0]})[("t", 0)]
    assert code == ErrorCode.election_not_needed


def test_unclean_election_with_nobody_alive() -> None:
    h = Harness()
    h.start_brokers(2)
    h.create("s", -1, -1, assignments={0: (0,)})
    fence_all_but(h, (1,))
    code, _ = elect(h, ElectionType.UNCLEAN, {"s": [0]})[("s", 0)]
    assert code == ErrorCode.eligible_leaders_not_available


def test_all_partitions_report_only_the_elections_needed() -> None:
    h = started(3)
    h.create("other", 2, 3)
    fence_all_but(h, (1, 2))
    h.heartbeat(0, TIMEOUT_MS + 2)
    shrink_to(h, "t", (1, 2, 0))
    results = elect(h, ElectionType.PREFERRED, None)
    moved = {key for key, (code, _) in results.items() if code == ErrorCode.none}
    assert ("t", 0) in moved
    assert all(code != ErrorCode.election_not_needed for code, _ in results.values())
    assert part(h, "t").leader == 0


# -- auto.leader.rebalance.enable ---------------------------------------------------------------


def rebalance_setup(**config: Any) -> Harness:
    h = started(3, leader_imbalance_check_interval_ms=20_000, **config)
    h.create("m", 6, 3)
    fence_all_but(h, (1, 2))
    h.heartbeat(0, TIMEOUT_MS + 2)
    for name in ("t", "m"):
        for index, partition in h.controller.image.topics.by_name[name].partitions.items():
            if 0 not in partition.isr:
                answer, _ = alter(h, name, (*partition.isr, 0), index=index)
                assert answer.error_code == ErrorCode.none
    return h


def preferred_leading(h: Harness) -> bool:
    return all(
        p.leader == p.preferred_replica
        for topic in h.controller.image.topics.by_id.values()
        for p in topic.partitions.values()
    )


def test_the_controller_moves_leaders_back_every_check_interval() -> None:
    h = rebalance_setup()
    assert not preferred_leading(h)
    for broker in (0, 1, 2):
        h.heartbeat(broker, 19_000)
    op = h.controller.tick(19_500)
    assert op.records == () and op.response.wake_at_ms <= 20_000
    h.run(op)
    op = h.controller.tick(20_000)
    assert op.records and all(isinstance(r, PartitionChangeRecord) for r in op.records)
    h.run(op)
    assert preferred_leading(h)
    assert h.controller.tick(20_001).records == ()


def not_preferred_led(h: Harness) -> list[tuple[str, int]]:
    return sorted(
        (topic.name, index)
        for topic in h.controller.image.topics.by_id.values()
        for index, p in topic.partitions.items()
        if p.leader != p.preferred_replica
    )


def test_rebalancing_moves_a_bounded_number_of_leaders_a_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka's MAX_ELECTIONS_PER_IMBALANCE: a pass moves at most that many leaders and the
    next pass comes 10 ms later, until the partitions found at the check are done; a
    partition that can no longer move by then is left alone."""
    from pykraft.controller import quorum_controller

    monkeypatch.setattr(quorum_controller, "MAX_ELECTIONS_PER_IMBALANCE", 1)
    h = rebalance_setup()
    waiting = not_preferred_led(h)
    assert len(waiting) >= 3
    for broker in (0, 1, 2):
        h.heartbeat(broker, 19_000)
    op = h.controller.tick(20_000)
    assert len(op.records) == 1
    assert op.response.rebalance is not None
    assert (op.response.rebalance.found, op.response.rebalance.elected) == (len(waiting), 1)
    assert op.response.rebalance.left == len(waiting) - 1
    assert op.response.wake_at_ms == 20_010
    h.run(op)
    assert len(not_preferred_led(h)) == len(waiting) - 1
    # one of those left drops its preferred replica from the ISR: no longer movable
    name, index = not_preferred_led(h)[-1]
    isr = tuple(b for b in part(h, name, index).isr if b != 0)
    answer, _ = alter(h, name, isr, index=index)
    assert answer.error_code == ErrorCode.none
    now = 20_010
    passes = 1
    while True:
        op = h.controller.tick(now)
        h.run(op)
        passes += 1
        rebalance = op.response.rebalance
        assert rebalance is not None and rebalance.found == 0
        assert len(op.records) <= 1
        if rebalance.left == 0:
            break
        assert op.response.wake_at_ms == now + 10
        now += 10
    assert passes == len(waiting)
    assert rebalance.elected_in_all == len(waiting) - 1
    assert not_preferred_led(h) == [(name, index)]
    # done: the next check is an interval away
    assert op.response.wake_at_ms > now + 10
    later = h.controller.tick(now + 10)
    assert later.records == () and later.response.rebalance is None


def test_rebalancing_can_be_disabled_or_tolerate_an_imbalance() -> None:
    h = rebalance_setup(auto_leader_rebalance_enable=False)
    for broker in (0, 1, 2):
        h.heartbeat(broker, 19_000)
    assert h.controller.tick(20_000).records == ()
    h = rebalance_setup(leader_imbalance_per_broker_percentage=100)
    for broker in (0, 1, 2):
        h.heartbeat(broker, 19_000)
    assert h.controller.tick(20_000).records == ()


def test_enabling_unclean_election_elects_at_the_next_check() -> None:
    """unclean.leader.election.interval.ms: a partition left leaderless gets an unclean
    leader at the next check once its topic allows it (Kafka's periodic check)."""
    from pykraft.controller.requests import AlterableConfig, AlterConfigOp, AlterConfigsResource

    h = started(3, unclean_leader_election_interval_ms=60_000)
    shrink_to(h, "t", (0,))
    fence_all_but(h, (1, 2))
    assert part(h, "t").leader == -1
    for broker in (1, 2):
        h.heartbeat(broker, 59_000)
    assert h.controller.tick(60_000).records == ()  # not allowed yet
    h.run(h.controller.incremental_alter_configs([AlterConfigsResource(2, "t", (
        AlterableConfig("unclean.leader.election.enable", AlterConfigOp.SET, "true"),))],
        validate_only=False))
    op = h.controller.tick(60_001)
    assert op.records == () and op.response.wake_at_ms <= 120_000
    for broker in (1, 2):
        h.heartbeat(broker, 119_000)
    (record,) = h.controller.tick(120_000).records
    assert isinstance(record, PartitionChangeRecord)
    assert (record.leader, record.isr, record.leader_recovery_state) == (1, (1,), 1)
