"""Broker registration, heartbeats, fencing, unfencing and controlled shutdown."""

from __future__ import annotations

import uuid

import pytest

from pykraft.controller.requests import BrokerFeatureRange, Listener
from pykraft.errors import (
    DuplicateBrokerRegistration,
    InconsistentClusterId,
    InvalidRegistration,
    NotController,
    StaleBrokerEpoch,
    UnsupportedVersion,
)
from pykraft.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)
from pykraft.metadata.registrations import NO_LEADER_CHANGE
from tests.unit.controller.controller_harness import Harness, incarnation, log_dir

TIMEOUT_MS = 9000


def partitions(h: Harness, topic: str) -> dict[int, object]:
    return dict(h.controller.image.topics.by_name[topic].partitions)


# -- registration ----------------------------------------------------------------------


def test_registration_record_and_epoch_is_its_offset() -> None:
    """A new broker is registered fenced, with epoch = the offset of its record."""
    h = Harness()
    offset = h.controller.next_write_offset
    op = h.controller.register_broker(
        5,
        incarnation(5),
        [Listener("PLAINTEXT", "h", 9092, 0)],
        [BrokerFeatureRange("metadata.version", 1, 22)],
        "rack-a",
        0,
        log_dirs=[log_dir(5)],
    )
    (record,) = op.records
    assert isinstance(record, RegisterBrokerRecord)
    assert op.response.broker_epoch == record.broker_epoch == offset
    assert record.fenced and not record.in_controlled_shutdown
    assert record.rack == "rack-a" and record.log_dirs == (log_dir(5),)
    assert [(e.name, e.host, e.port) for e in record.end_points] == [("PLAINTEXT", "h", 9092)]
    h.run(op)
    broker = h.controller.image.cluster.brokers[5]
    assert broker.fenced and broker.epoch == offset
    assert h.controller.state.registration_offsets[5] == offset


def test_same_incarnation_amends_and_keeps_epoch_and_state() -> None:
    h = Harness()
    h.start_brokers(1)
    epoch = h.epochs[0]
    assert h.register(0) == epoch
    assert not h.controller.image.cluster.brokers[0].fenced


def test_new_incarnation_while_session_alive_is_a_duplicate() -> None:
    """Another process with the same id may not register while the first heartbeats."""
    h = Harness()
    h.start_brokers(1)
    with pytest.raises(DuplicateBrokerRegistration):
        h.register(0, generation=1, now_ms=TIMEOUT_MS)
    new_epoch = h.register(0, generation=1, now_ms=TIMEOUT_MS + 1)
    assert new_epoch > 0 and h.controller.image.cluster.brokers[0].fenced


def test_registration_checks() -> None:
    """Cluster id, supported metadata.version and log directories are checked."""
    h = Harness(cluster_id="abc")

    def register(**kwargs: object) -> None:
        arguments: dict[str, object] = {
            "broker_id": 1,
            "incarnation_id": incarnation(1),
            "listeners": [],
            "features": [BrokerFeatureRange("metadata.version", 1, 22)],
            "rack": None,
            "now_ms": 0,
            "log_dirs": [log_dir(1)],
            "cluster_id": "abc",
        }
        arguments.update(kwargs)
        h.controller.register_broker(**arguments)  # type: ignore[arg-type]

    register()
    with pytest.raises(
        InconsistentClusterId, match="Expected cluster ID abc, but got cluster ID x"
    ):
        register(cluster_id="x")
    with pytest.raises(UnsupportedVersion, match="finalized version 21 of metadata.version"):
        register(features=[BrokerFeatureRange("metadata.version", 1, 20)])
    with pytest.raises(UnsupportedVersion, match="finalized version 21"):
        register(features=[])  # a broker that says nothing supports level 1 only
    with pytest.raises(InvalidRegistration, match="No directories specified"):
        register(log_dirs=[])
    with pytest.raises(InvalidRegistration, match="Reserved directory ID"):
        register(log_dirs=[uuid.UUID(int=5)])
    with pytest.raises(InvalidRegistration, match="Duplicate directory ID"):
        register(log_dirs=[log_dir(1), log_dir(1)])
    h.run(
        h.controller.register_broker(
            2,
            incarnation(2),
            [],
            [BrokerFeatureRange("metadata.version", 1, 22)],
            None,
            0,
            log_dirs=[log_dir(2)],
            cluster_id="abc",
        )
    )
    with pytest.raises(InvalidRegistration, match="Broker 2 is already registered with directory"):
        register(log_dirs=[log_dir(2)])


def test_operations_need_an_active_controller() -> None:
    h = Harness()
    h.controller.deactivate()
    with pytest.raises(NotController):
        h.controller.tick(0)
    with pytest.raises(NotController):
        h.controller.create_topics([], validate_only=False, now_ms=0)


# -- heartbeats --------------------------------------------------------------------------


def test_unfence_only_once_caught_up_with_the_registration() -> None:
    """A fenced broker behind its own registration stays fenced; caught up, it is unfenced."""
    h = Harness()
    epoch = h.register(0)
    behind = h.heartbeat(0, 10, offset=epoch - 1)
    assert behind.is_fenced and not behind.is_caught_up and not h.records
    caught_up = h.heartbeat(0, 20, offset=epoch)
    assert not caught_up.is_fenced and caught_up.is_caught_up
    assert h.records == (
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=epoch, fenced=-1),
    )
    assert not h.controller.image.cluster.brokers[0].fenced


def test_stale_epochs_are_refused() -> None:
    h = Harness()
    h.start_brokers(1)
    with pytest.raises(StaleBrokerEpoch, match="Expected broker epoch"):
        h.controller.broker_heartbeat(0, h.epochs[0] + 1, 0, False, False, 0)
    with pytest.raises(StaleBrokerEpoch, match="No broker registration found for broker id 4"):
        h.controller.broker_heartbeat(4, 1, 0, False, False, 0)


def test_old_metadata_versions_use_fence_and_unfence_records() -> None:
    """Before 3.3-IV2 (level 6) fencing is FenceBrokerRecord / UnfenceBrokerRecord."""
    h = Harness(metadata_version=5)
    epoch = h.register(0)
    h.heartbeat(0, 0)
    assert h.records == (UnfenceBrokerRecord(id=0, epoch=epoch),)
    op = h.controller.tick(TIMEOUT_MS + 1)
    assert op.records == (FenceBrokerRecord(id=0, epoch=epoch),)


# -- fencing on session expiry ---------------------------------------------------------


def test_tick_fences_expired_brokers_and_moves_their_leaderships() -> None:
    """After broker.session.timeout.ms without heartbeat: leaders move to another ISR
    member, the broker leaves every ISR, then the fence record."""
    h = Harness()
    h.start_brokers(3)
    h.create("t", 6, 2)
    led_by_0 = [i for i, p in partitions(h, "t").items() if p.leader == 0]  # type: ignore[attr-defined]
    assert led_by_0
    for broker_id in (1, 2):
        h.heartbeat(broker_id, TIMEOUT_MS)
    assert h.controller.tick(TIMEOUT_MS).records == ()  # broker 0: exactly at the limit
    op = h.controller.tick(TIMEOUT_MS + 1)
    assert op.response.fenced_broker_ids == (0,)
    *changes, fence = op.records
    assert fence == BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=h.epochs[0], fenced=1)
    assert all(isinstance(change, PartitionChangeRecord) for change in changes)
    h.run(op)
    assert h.controller.image.cluster.brokers[0].fenced
    for index, partition in partitions(h, "t").items():
        assert 0 not in partition.isr  # type: ignore[attr-defined]
        if index in led_by_0:
            assert partition.leader in (1, 2)  # type: ignore[attr-defined]
            assert partition.leader_epoch == 1  # type: ignore[attr-defined]
    assert op.response.wake_at_ms == TIMEOUT_MS * 2 + 1
    assert h.replayed_image().topics == h.controller.image.topics


def test_a_heartbeat_still_queued_keeps_its_broker_unfenced() -> None:
    """The tick hears of heartbeats that arrived but wait behind a long operation: one with
    the broker's epoch counts from its arrival; one with an older epoch does not."""
    h = Harness()
    h.start_brokers(3)
    for broker_id in (1, 2):
        h.heartbeat(broker_id, TIMEOUT_MS)
    queued = [(0, (h.epochs[0], TIMEOUT_MS)), (1, (h.epochs[1] - 1, 2 * TIMEOUT_MS))]
    op = h.controller.tick(TIMEOUT_MS + 1, queued)
    assert op.records == () and op.response.fenced_broker_ids == ()
    assert op.response.wake_at_ms == 2 * TIMEOUT_MS + 1  # all three from their last contact
    op = h.controller.tick(2 * TIMEOUT_MS + 1, queued)
    assert set(op.response.fenced_broker_ids) == {0, 1, 2}


def test_last_in_sync_replica_fenced_keeps_the_isr_and_loses_the_leader() -> None:
    """A single-replica partition: leader -1, ISR unchanged; unfencing elects it again."""
    h = Harness()
    h.start_brokers(2)
    h.create("solo", -1, -1, assignments={0: (0,)})
    h.heartbeat(1, TIMEOUT_MS)
    op = h.controller.tick(TIMEOUT_MS + 1)
    change = op.records[0]
    assert isinstance(change, PartitionChangeRecord)
    assert (change.leader, change.isr) == (-1, None)
    h.run(op)
    (partition,) = partitions(h, "solo").values()
    assert (partition.leader, partition.isr) == (-1, (0,))  # type: ignore[attr-defined]
    assert h.controller.state.leaderless_partitions()
    h.heartbeat(0, TIMEOUT_MS + 2)
    unfence, elect = h.records
    assert isinstance(unfence, BrokerRegistrationChangeRecord) and unfence.fenced == -1
    assert isinstance(elect, PartitionChangeRecord) and elect.leader == 0
    (partition,) = partitions(h, "solo").values()
    assert partition.leader == 0 and partition.leader_epoch == 2  # type: ignore[attr-defined]
    assert not h.controller.state.leaderless_partitions()


def test_fencing_several_brokers_sees_earlier_fences() -> None:
    """Two brokers expire together: no leadership moves to the other expiring broker."""
    h = Harness()
    h.start_brokers(3)
    h.create("t", 6, 3)
    h.heartbeat(2, TIMEOUT_MS)
    h.run(h.controller.tick(TIMEOUT_MS + 1))
    for partition in partitions(h, "t").values():
        assert partition.leader == 2 and partition.isr == (2,)  # type: ignore[attr-defined]


def test_unclean_election_when_the_topic_allows_it() -> None:
    """unclean.leader.election.enable=true: an out-of-sync replica may lead (RECOVERING)."""
    h = Harness()
    h.start_brokers(2)
    h.create(
        "u", -1, -1, assignments={0: (0, 1)}, configs={"unclean.leader.election.enable": "true"}
    )
    topic = h.controller.image.topics.by_name["u"]
    shrink = PartitionChangeRecord(partition_id=0, topic_id=topic.topic_id, isr=(0,))
    h.controller.propose((shrink,))
    h.heartbeat(1, TIMEOUT_MS)
    op = h.controller.tick(TIMEOUT_MS + 1)
    change = op.records[0]
    assert isinstance(change, PartitionChangeRecord)
    assert (change.leader, change.isr, change.leader_recovery_state) == (1, (1,), 1)


def test_want_fence_fences_a_running_broker() -> None:
    h = Harness()
    h.start_brokers(2)
    reply = h.heartbeat(1, 5, want_fence=True)
    assert reply.is_fenced and not reply.should_shut_down
    assert h.controller.image.cluster.brokers[1].fenced


# -- controlled shutdown ---------------------------------------------------------------


def test_controlled_shutdown_moves_leaders_then_lets_the_broker_stop() -> None:
    """wants shutdown: in-controlled-shutdown, out of ISRs, leaders moved; it may stop once
    the other brokers have caught up with those records."""
    h = Harness()
    h.start_brokers(2)
    h.create("t", 4, 2)
    reply = h.heartbeat(0, 1, want_shutdown=True)
    assert not reply.is_fenced and not reply.should_shut_down
    marker, *changes = h.records
    assert marker == BrokerRegistrationChangeRecord(
        broker_id=0, broker_epoch=h.epochs[0], in_controlled_shutdown=1
    )
    assert changes and all(isinstance(c, PartitionChangeRecord) for c in changes)
    for partition in partitions(h, "t").values():
        assert partition.leader == 1 and partition.isr == (1,)  # type: ignore[attr-defined]
    assert h.controller.image.cluster.brokers[0].in_controlled_shutdown
    shutdown_offset = h.controller.image.offset
    h.heartbeat(1, 2, offset=shutdown_offset - 1)  # broker 1 has not seen it all yet
    assert not h.heartbeat(0, 3, want_shutdown=True).should_shut_down
    h.heartbeat(1, 4, offset=shutdown_offset)
    final = h.heartbeat(0, 5, want_shutdown=True)
    assert final.should_shut_down and final.is_fenced
    assert h.controller.image.cluster.brokers[0].fenced


def test_a_broker_leading_nothing_shuts_down_at_once() -> None:
    h = Harness()
    h.start_brokers(2)
    reply = h.heartbeat(1, 1, want_shutdown=True)
    assert reply.should_shut_down and reply.is_fenced


def test_controlled_shutdown_brokers_get_no_new_replicas() -> None:
    h = Harness()
    h.start_brokers(3)
    h.create("t", -1, -1, assignments={0: (0,)})
    h.heartbeat(0, 1, want_shutdown=True)
    result = h.create("fresh", 9, 2)
    assert result.error_code == 0
    for partition in partitions(h, "fresh").values():
        assert 0 not in partition.replicas  # type: ignore[attr-defined]


def test_isr_shrink_bumps_leader_epoch_before_3_6() -> None:
    """metadata.version < 3.6-IV0: a fence that shrinks an ISR re-states the leader."""
    h = Harness(metadata_version=11)
    h.start_brokers(2)
    h.create("t", -1, -1, assignments={0: (0, 1)})
    h.heartbeat(0, TIMEOUT_MS)
    change = h.controller.tick(TIMEOUT_MS + 1).records[0]
    assert isinstance(change, PartitionChangeRecord)
    assert (change.leader, change.isr) == (0, (0,))
    h2 = Harness(metadata_version=21)
    h2.start_brokers(2)
    h2.create("t", -1, -1, assignments={0: (0, 1)})
    h2.heartbeat(0, TIMEOUT_MS)
    change = h2.controller.tick(TIMEOUT_MS + 1).records[0]
    assert isinstance(change, PartitionChangeRecord)
    assert (change.leader, change.isr) == (NO_LEADER_CHANGE, (0,))


@pytest.mark.parametrize("how", ["fence", "controlled shutdown"])
def test_a_leaving_broker_s_leaderships_move_before_its_other_isr_changes(how: str) -> None:
    """Taking a broker out of every ISR writes the changes that move its leaderships
    first, across all topics, then those that only shrink an ISR: in a change of 300,000
    partitions its partitions get their new leaders early, not throughout."""
    h = Harness()
    h.start_brokers(3)
    for topic in ("a", "b", "c"):
        h.create(topic, 9, 3)
    led = {(topic, index) for topic in ("a", "b", "c")
           for index, p in partitions(h, topic).items() if p.leader == 0}  # type: ignore[attr-defined]
    assert 0 < len(led) < 27
    if how == "fence":
        for broker_id in (1, 2):
            h.heartbeat(broker_id, TIMEOUT_MS)
        records = list(h.controller.tick(TIMEOUT_MS + 1).records)
    else:
        h.heartbeat(0, 1, want_shutdown=True)
        records = list(h.records)
    changes = [r for r in records if isinstance(r, PartitionChangeRecord)]
    assert len(changes) == 27
    names = {t.topic_id: t.name for t in h.controller.image.topics.by_id.values()}
    moved = [(names[c.topic_id], c.partition_id) for c in changes
             if c.leader != NO_LEADER_CHANGE]
    assert set(moved) == led
    assert [c.leader != NO_LEADER_CHANGE for c in changes] == (
        [True] * len(led) + [False] * (27 - len(led)))
