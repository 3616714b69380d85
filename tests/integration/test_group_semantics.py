"""Group semantics as Kafka 4.0's coordinator has them, against one real node: who may commit
offsets (an assign() consumer of either protocol commits again and again), a static leader
restarting without a rebalance (KIP-345: JoinGroup v5 on the wire, kafka-python, aiokafka,
confluent-kafka), a regex subscription resolved after the heartbeat that brought it
(KIP-848), groups with offsets but no members listed, described and fetched as Empty,
cooperative-sticky members (KIP-429, confluent-kafka and kafka-python), max.poll.interval.ms
as the rebalance timeout, GROUP config resources, and KIP-430 authorized operations."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.group_helpers import assignments_of, poll_until

TOPIC = "semantics"
PARTITIONS = 4
CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "offsets.topic.num.partitions": "3",
    "group.consumer.session.timeout.ms": "2000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "200",
}
SESSION = datetime.timedelta(seconds=5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONFIGS) as node:
        admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": node.bootstrap_servers})
        for i in range(40):
            producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
        producer.flush(30)
        yield node


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_an_assign_consumer_commits_again_and_again(cluster: LocalCluster,
                                                    protocol: str) -> None:
    """A consumer using assign() (no group management) commits with generation -1; its
    second and third commits succeed too, with either group.protocol (librdkafka's
    consumer protocol sends its member id with them), and the offsets read back."""
    group = f"assign-{protocol}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                         "group.protocol": protocol, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        for offset in (3, 5, 8):
            done = consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)],
                                   asynchronous=False)
            assert done is not None and [tp.error for tp in done] == [None]
        [committed] = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
        assert committed.offset == 8
    finally:
        consumer.close()


def _find_coordinator(client: WireClient, group: str) -> None:
    """FindCoordinator until the group's coordinator is loaded (it creates the offsets
    topic on first use), as a client does before its first group request."""
    for _ in range(100):
        found = client.request(10, 4, FindCoordinatorRequest(key_type=0,
                                                            coordinator_keys=(group,)))
        if found.coordinators[0].error_code == ErrorCode.none:
            return
    raise AssertionError(f"no coordinator for {group}: {found}")


def _join(client: WireClient, group: str, instance: str, member_id: str = "") -> Any:
    return client.request(11, 5, JoinGroupRequest(
        group_id=group, session_timeout=SESSION, rebalance_timeout=SESSION,
        member_id=member_id, group_instance_id=instance, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),)))


def test_a_static_leader_restarting_with_join_v5_gets_no_rebalance(
    cluster: LocalCluster,
) -> None:
    """Two static members over the wire (JoinGroup v5, which cannot skip the assignment);
    the leader comes back without its member id: answered at once from the same generation,
    with the old leader id so it syncs as a follower and gets its assignment back; the other
    member's heartbeats see no rebalance; the old member id is fenced."""
    group = "static-leader"
    with WireClient(cluster.bootstrap_servers) as one, \
            WireClient(cluster.bootstrap_servers) as two:
        _find_coordinator(one, group)
        first = _join(one, group, "i-1")
        assert first.error_code == ErrorCode.none and first.leader == first.member_id
        two.send(11, 5, JoinGroupRequest(
            group_id=group, session_timeout=SESSION, rebalance_timeout=SESSION, member_id="",
            group_instance_id="i-2", protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),)))
        for _ in range(200):  # the join on the other connection has reached the broker
            [described] = one.request(15, 5, DescribeGroupsRequest(
                groups=(group,), include_authorized_operations=False)).groups
            if described.group_state == "PreparingRebalance":
                break
        assert described.group_state == "PreparingRebalance"
        leader = _join(one, group, "i-1", first.member_id)  # rejoins the rebalance i-2 began
        _, follower = two.receive(11, 5)
        generation = leader.generation_id
        assert leader.leader == leader.member_id == first.member_id and len(leader.members) == 2
        assert follower.generation_id == generation and follower.leader == leader.member_id
        leader_instance, follower_instance = "i-1", "i-2"
        leader_client, follower_client = one, two
        follower_client.send(14, 3, SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=follower.member_id,
            group_instance_id=follower_instance, assignments=()))
        synced = leader_client.request(14, 3, SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=leader.member_id,
            group_instance_id=leader_instance, assignments=(
                SyncGroupRequestAssignment(member_id=leader.member_id, assignment=b"L"),
                SyncGroupRequestAssignment(member_id=follower.member_id, assignment=b"F"))))
        assert synced.error_code == ErrorCode.none and synced.assignment == b"L"
        assert follower_client.receive(14, 3)[1].assignment == b"F"

        again = _join(leader_client, group, leader_instance)  # restarted: no member id
        assert again.error_code == ErrorCode.none and again.member_id != leader.member_id
        assert (again.generation_id, again.leader, again.members) == (
            generation, leader.member_id, ())
        back = leader_client.request(14, 3, SyncGroupRequest(
            group_id=group, generation_id=generation, member_id=again.member_id,
            group_instance_id=leader_instance, assignments=()))
        assert back.error_code == ErrorCode.none and back.assignment == b"L"
        beat = follower_client.request(12, 4, HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=follower.member_id,
            group_instance_id=follower_instance))
        assert beat.error_code == ErrorCode.none  # no REBALANCE_IN_PROGRESS
        fenced = leader_client.request(12, 4, HeartbeatRequest(
            group_id=group, generation_id=generation, member_id=leader.member_id,
            group_instance_id=leader_instance))
        assert fenced.error_code == ErrorCode.fenced_instance_id


def _beat(client: WireClient, group: str, member_id: str, epoch: int, **fields: Any) -> Any:
    return client.request(68, 1, ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=5), **fields))


def test_a_regex_subscription_is_assigned_in_a_later_heartbeat(cluster: LocalCluster) -> None:
    """ConsumerGroupHeartbeat v1 with SubscribedTopicRegex: the joining heartbeat is answered
    with epoch 1 and no partitions, as Kafka (the regex is resolved in the background); a
    later heartbeat gets every partition of the matching topic at a new epoch. OffsetFetch
    v9 then checks the member's epoch."""
    group, member = "regex-order", str(uuid.uuid4())
    with WireClient(cluster.bootstrap_servers) as client:
        _find_coordinator(client, group)
        first = _beat(client, group, member, 0, subscribed_topic_regex="sem.*",
                      topic_partitions=())
        assert first.error_code == ErrorCode.none, first
        assert first.member_epoch == 1
        assert first.assignment is not None and first.assignment.topic_partitions == ()
        later = first
        for _ in range(50):
            later = _beat(client, group, member, later.member_epoch, topic_partitions=())
            if later.assignment is not None and later.assignment.topic_partitions:
                break
        assert later.member_epoch == 2 and later.assignment is not None
        assert sorted(later.assignment.topic_partitions[0].partitions) == list(
            range(PARTITIONS))

        def fetch(member_id: str | None, epoch: int) -> Any:
            return client.request(9, 9, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
                group_id=group, member_id=member_id, member_epoch=epoch, topics=(
                    OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),),
                require_stable=False)).groups[0].error_code

        assert fetch(member, 2) == ErrorCode.none
        assert fetch(member, 1) == ErrorCode.stale_member_epoch
        assert fetch("stranger", 2) == ErrorCode.unknown_member_id
        assert fetch(None, -1) == ErrorCode.none  # an admin
        assert _beat(client, group, member, -1, topic_partitions=None).error_code == (
            ErrorCode.none)


def test_a_regex_subscription_with_confluent_kafka(cluster: LocalCluster) -> None:
    """librdkafka with group.protocol=consumer subscribing to a regex gets every matching
    partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": "regex-confluent", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["^sem.*"])
        poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_with_offsets_and_no_members_is_empty_everywhere(
    cluster: LocalCluster, protocol: str,
) -> None:
    """A member consumed and committed, then left: ListGroups and DescribeGroups show the
    group Empty with no members, OffsetFetch returns its offsets, as Kafka answers
    `kafka-consumer-groups --describe` of such a group."""
    group = f"emptied-{protocol}"
    bootstrap = cluster.bootstrap_servers
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": protocol, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         **({"session.timeout.ms": 1000, "heartbeat.interval.ms": 100}
                            if protocol == "classic" else {})})
    consumer.subscribe([TOPIC])
    poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
    consumer.commit(offsets=[TopicPartition(TOPIC, 1, 4)], asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id: g.state.name for g in admin.list_consumer_groups().result(10).valid}
    assert listed[group] == "EMPTY"
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.state.name == "EMPTY" and described.members == []
    offsets = admin.list_consumer_group_offsets(
        [_group_partitions(group)])[group].result(10)
    assert {(tp.partition, tp.offset) for tp in offsets.topic_partitions} == {(1, 4)}
    with WireClient(bootstrap) as client:
        groups = client.request(16, 4, ListGroupsRequest(states_filter=("Empty",))).groups
        assert group in {g.group_id for g in groups}
        [wire] = client.request(15, 5, DescribeGroupsRequest(
            groups=(group,), include_authorized_operations=False)).groups
        # Kafka 4.0's DescribeGroups describes classic groups only: a KIP-848 group is Dead
        classic = protocol == "classic"
        assert (wire.error_code, wire.group_state, wire.members) == (
            ErrorCode.none, "Empty" if classic else "Dead", ())
        assert wire.protocol_type == ("consumer" if classic else "")


def _group_partitions(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions
    return ConsumerGroupTopicPartitions(group)


def _poll_checking(consumers: list[Consumer], done: Any, timeout_s: float = 20.0) -> None:
    """Poll until done(), checking after every poll that no partition has two owners."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.05)
            owned = [p for c in consumers for p in {tp.partition for tp in c.assignment()}]
            assert len(owned) == len(set(owned)), f"a partition with two owners: {owned}"
        if done():
            return
    raise AssertionError(f"not done in {timeout_s}s: {assignments_of(consumers)}")


def test_cooperative_sticky_members_move_only_what_they_must(cluster: LocalCluster) -> None:
    """KIP-429 over the classic protocol: confluent-kafka with cooperative-sticky. A second
    and a third member join, then one leaves; at no point does a partition have two
    owners, the first member is never told to give up all it owns (incremental
    revocation, two rounds), and the partitions end up covered once."""
    group = "cooperative"
    revoked: dict[int, list[set[int]]] = {0: [], 1: [], 2: []}

    def member(index: int) -> Consumer:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "partition.assignment.strategy": "cooperative-sticky",
                             "session.timeout.ms": 1000, "heartbeat.interval.ms": 100,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC], on_revoke=lambda _, parts: revoked[index].append(
            {tp.partition for tp in parts}))
        return consumer

    consumers = [member(0)]
    try:
        _poll_checking(consumers, lambda: len(consumers[0].assignment()) == PARTITIONS)
        consumers.append(member(1))
        _poll_checking(consumers, lambda: [len(o) for o in assignments_of(consumers)] == [2, 2])
        consumers.append(member(2))
        _poll_checking(consumers, lambda: sorted(len(o) for o in assignments_of(consumers))
                       == [1, 1, 2])
        assert all(0 < len(parts) < PARTITIONS for parts in revoked[0] if parts)
        assert any(revoked[0]), "the first member gave up partitions incrementally"
        consumers.pop(1).close()
        _poll_checking(consumers, lambda: sorted(
            p for owned in assignments_of(consumers) for p in owned) == list(range(PARTITIONS)))
        assert all(len(parts) < PARTITIONS for parts in revoked[0])
    finally:
        for consumer in consumers:
            consumer.close()


def test_a_member_that_stops_polling_is_gone_after_its_max_poll_interval(
    cluster: LocalCluster,
) -> None:
    """max.poll.interval.ms is the member's rebalance timeout: a kafka-python member that
    stops polling (its heartbeat thread lives on) does not rejoin the rebalance a new
    member starts, and within that interval (plus a little) the newcomer owns every
    partition and the group has one member."""
    from kafka import KafkaConsumer

    group = "stops-polling"
    bootstrap = cluster.bootstrap_servers
    idle = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=1000,
                         heartbeat_interval_ms=100, max_poll_interval_ms=2000,
                         enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 20
        while not idle.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
            time.sleep(0.01)
        idle.subscribe([TOPIC])
        while len(idle.assignment()) < PARTITIONS and time.monotonic() < deadline:
            idle.poll(timeout_ms=200)
        assert len(idle.assignment()) == PARTITIONS
        newcomer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "session.timeout.ms": 1000, "heartbeat.interval.ms": 100,
                             "max.poll.interval.ms": 2000, "enable.auto.commit": False})
        try:
            newcomer.subscribe([TOPIC])
            started = time.monotonic()
            poll_until([newcomer], lambda: len(newcomer.assignment()) == PARTITIONS, 15)
            assert time.monotonic() - started < 2.0 + 3.0
            admin = AdminClient({"bootstrap.servers": bootstrap})
            described = admin.describe_consumer_groups([group])[group].result(10)
            assert len(described.members) == 1
        finally:
            newcomer.close()
    finally:
        idle.close(autocommit=False)


def test_describe_groups_answers_the_authorized_operations_when_asked(
    cluster: LocalCluster,
) -> None:
    """KIP-430: DescribeGroups and ConsumerGroupDescribe with include_authorized_operations
    answer the group's operations (no authorizer: every operation a group supports: READ,
    DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), else Kafka's sentinel; an unknown
    group keeps the sentinel. The admin client reads them."""
    from confluent_kafka.admin import AclOperation
    from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest

    group = "operations"
    bootstrap = cluster.bootstrap_servers
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
        every = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        with WireClient(bootstrap) as client:
            def described(include: bool, name: str = group) -> int:
                [result] = client.request(15, 5, DescribeGroupsRequest(
                    groups=(name,), include_authorized_operations=include)).groups
                return int(result.authorized_operations)

            def consumer_described(include: bool, name: str = group) -> int:
                [result] = client.request(69, 0, ConsumerGroupDescribeRequest(
                    group_ids=(name,), include_authorized_operations=include)).groups
                return int(result.authorized_operations)

            assert consumer_described(True) == every
            # (DescribeGroups does not describe a KIP-848 group: Dead, Kafka's sentinel)
            assert described(True) == described(False) == consumer_described(False) == -(
                1 << 31)
            assert described(True, "no-such-group") == -(1 << 31)
            assert consumer_described(True, "no-such-group") == -(1 << 31)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        result = admin.describe_consumer_groups(
            [group], include_authorized_operations=True)[group].result(10)
        assert set(result.authorized_operations) == {
            AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    finally:
        consumer.close()


def test_group_configs_are_set_described_and_used(cluster: LocalCluster) -> None:
    """GROUP config resources through the admin client: IncrementalAlterConfigs sets a
    group's consumer.heartbeat.interval.ms and session timeout within the broker's bounds
    (outside: INVALID_CONFIG with Kafka's message), DescribeConfigs shows them as group
    configs and the unset keys as the broker's defaults, and the group's next
    ConsumerGroupHeartbeat hands out its interval."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        ResourceType,
    )

    group = "configured"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.heartbeat.interval.ms", "6000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.session.timeout.ms", "50000",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    bad = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "70000",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="consumer.session.timeout.ms must be less than or "
                       "equal to group.consumer.max.session.timeout.ms"):
        admin.incremental_alter_configs([bad])[bad].result(10)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(10)
    interval = entries["consumer.heartbeat.interval.ms"]
    assert interval.value == "6000" and interval.source == ConfigSource.GROUP_CONFIG.value
    assert entries["consumer.session.timeout.ms"].value == "50000"
    share = entries["share.session.timeout.ms"]  # unset: the broker's default
    assert share.value == "45000" and share.source == ConfigSource.DEFAULT_CONFIG.value
    with WireClient(cluster.bootstrap_servers) as client:
        _find_coordinator(client, group)
        member = str(uuid.uuid4())
        for _ in range(100):  # the coordinator sees the record once the broker applied it
            joined = _beat(client, group, member, 0, subscribed_topic_names=(TOPIC,),
                           topic_partitions=())
            if joined.heartbeat_interval == datetime.timedelta(seconds=6):
                break
            _beat(client, group, member, -1, topic_partitions=None)
            time.sleep(0.05)
        assert joined.heartbeat_interval == datetime.timedelta(seconds=6)
        _beat(client, group, member, -1, topic_partitions=None)


def test_cooperative_sticky_with_kafka_python(cluster: LocalCluster) -> None:
    """KIP-429 with kafka-python's CooperativeStickyAssignor: a second member joining takes
    half the partitions from the first without the first ever giving up all of them, and no
    partition is ever seen with two owners (leaving is the confluent-kafka test's)."""
    import threading

    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

    group = "cooperative-kafka-python"
    revoked: list[set[int]] = []

    class Recorder(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked_partitions: Any) -> None:
            revoked.append({tp.partition for tp in revoked_partitions})

        def on_partitions_assigned(self, assigned: Any) -> None:
            pass

    stop = threading.Event()

    def member(listener: Any = None) -> Any:
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                 session_timeout_ms=1000, heartbeat_interval_ms=100,
                                 enable_auto_commit=False,
                                 partition_assignment_strategy=(CooperativeStickyAssignor,))
        deadline = time.monotonic() + 20
        while not consumer.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer.subscribe([TOPIC], listener=listener)
        thread = threading.Thread(target=lambda: [consumer.poll(timeout_ms=500)
                                                  for _ in iter(stop.is_set, True)],
                                  daemon=True)
        thread.start()
        return consumer, thread

    def wait(consumers: list[Any], done: Any) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            every = [p for parts in owned for p in parts]
            assert len(every) == len(set(every)), f"a partition with two owners: {owned}"
            if done(owned):
                return
            time.sleep(0.01)
        raise AssertionError(f"not done: {owned}")

    first, first_thread = member(Recorder())
    second = second_thread = None
    try:
        wait([first], lambda owned: len(owned[0]) == PARTITIONS)
        second, second_thread = member()
        wait([first, second], lambda owned: [len(o) for o in owned] == [2, 2])
        assert revoked and all(0 < len(parts) < PARTITIONS for parts in revoked if parts)
    finally:
        stop.set()
        for consumer, thread in ((first, first_thread), (second, second_thread)):
            if consumer is not None and thread is not None:
                thread.join(10)
                consumer.close(autocommit=False)


def test_a_static_confluent_leader_restarts_without_a_rebalance(cluster: LocalCluster) -> None:
    """confluent-kafka with group.instance.id: the leader closes (static members send no
    LeaveGroup) and comes back under the same instance id within its session; it gets its
    partitions back and the other member is never asked to revoke. (librdkafka 2.16 joins
    with a version that can skip the assignment; the JoinGroup v5 path is the wire test's.)"""
    group = "static-confluent"
    revoked: list[set[int]] = []

    def member(instance: str, **callbacks: Any) -> Consumer:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                             "group.instance.id": instance, "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 100, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([TOPIC], **callbacks)
        return consumer

    leader = member("i-1")
    poll_until([leader], lambda: len(leader.assignment()) == PARTITIONS)
    follower = member("i-2", on_revoke=lambda _, parts: revoked.append(
        {tp.partition for tp in parts}))
    try:
        poll_until([leader, follower],
                   lambda: [len(o) for o in assignments_of([leader, follower])] == [2, 2])
        owned = {tp.partition for tp in leader.assignment()}
        revoked.clear()
        leader.close()
        leader = member("i-1")
        poll_until([leader, follower], lambda: {tp.partition for tp in leader.assignment()}
                   == owned)
        for _ in range(10):  # a while longer: still no revocation at the follower
            follower.poll(0.05)
        assert not any(revoked), revoked
        assert len(follower.assignment()) == 2
    finally:
        leader.close()
        follower.close()


class _StaticLeader:
    """A kafka-python or aiokafka member with group.instance.id "k-1", polled from its own
    thread (as the kafka-python note in docs/deviations.md advises); `close` leaves no
    LeaveGroup behind (static)."""

    def __init__(self, client: str, bootstrap: str, group: str) -> None:
        import threading

        self.owned: set[int] = set()
        self._stop = threading.Event()
        target = self._kafka_python if client == "kafka-python" else self._aiokafka
        self._thread = threading.Thread(target=target, args=(bootstrap, group), daemon=True)
        self._thread.start()

    def _kafka_python(self, bootstrap: str, group: str) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                 group_instance_id="k-1", session_timeout_ms=6000,
                                 heartbeat_interval_ms=100, enable_auto_commit=False)
        deadline = time.monotonic() + 20
        while not consumer.partitions_for_topic(TOPIC) and time.monotonic() < deadline:
            time.sleep(0.01)
        consumer.subscribe([TOPIC])
        while not self._stop.is_set():
            consumer.poll(timeout_ms=500)
            self.owned = {tp.partition for tp in consumer.assignment()}
        consumer.close(autocommit=False)

    def _aiokafka(self, bootstrap: str, group: str) -> None:
        import asyncio

        from aiokafka import AIOKafkaConsumer

        async def run() -> None:
            consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id=group,
                                        group_instance_id="k-1", session_timeout_ms=6000,
                                        heartbeat_interval_ms=100, enable_auto_commit=False)
            await consumer.start()
            try:
                while not self._stop.is_set():
                    await consumer.getmany(timeout_ms=100)
                    self.owned = {tp.partition for tp in consumer.assignment()}
            finally:
                await consumer.stop()

        asyncio.run(run())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_a_static_python_client_leader_restarts_without_a_rebalance(
    cluster: LocalCluster, client: str,
) -> None:
    """kafka-python (JoinGroup v7) or aiokafka, neither able to skip the assignment, with
    group_instance_id leads the group, closes (no LeaveGroup: static) and comes back under
    the same instance id: it gets its partitions back while the confluent-kafka member is
    never asked to revoke (Kafka answers the rejoin from the current generation, naming the
    old leader)."""
    group = f"static-{client}"
    bootstrap = cluster.bootstrap_servers
    revoked: list[set[int]] = []
    leader = _StaticLeader(client, bootstrap, group)
    follower = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.instance.id": "c-2", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 100, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 20
        while len(leader.owned) != PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.01)
        follower.subscribe([TOPIC], on_revoke=lambda _, parts: revoked.append(
            {tp.partition for tp in parts}))
        poll_until([follower], lambda: len(follower.assignment()) == 2
                   and len(leader.owned) == 2)
        kept = set(leader.owned)
        revoked.clear()
        leader.close()
        leader = _StaticLeader(client, bootstrap, group)
        poll_until([follower], lambda: leader.owned == kept)
        for _ in range(10):  # a while longer: still no revocation at the follower
            follower.poll(0.05)
        assert not any(revoked), revoked
        assert len(follower.assignment()) == 2
    finally:
        leader.close()
        follower.close()
