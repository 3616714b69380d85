"""Group semantics as Kafka 4.0's coordinator has them, against one real node: who may commit
offsets (an assign() consumer of either protocol commits again and again), a static leader
restarting without a rebalance (KIP-345, JoinGroup v5 as librdkafka sends it), a regex
subscription resolved after the heartbeat that brought it (KIP-848), and groups with
offsets but no members listed, described and fetched as Empty."""

from __future__ import annotations

import datetime
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
from tests.integration.group_helpers import poll_until

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
    """Two static members over the wire (JoinGroup v5, librdkafka's version); the leader
    comes back without its member id: answered at once from the same generation, with the
    old leader id so it syncs as a follower and gets its assignment back; the other member's
    heartbeats see no rebalance; the old member id is fenced."""
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
        assert (wire.error_code, wire.group_state, wire.members) == (ErrorCode.none, "Empty",
                                                                    ())
        assert wire.protocol_type == "consumer"


def _group_partitions(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions
    return ConsumerGroupTopicPartitions(group)
