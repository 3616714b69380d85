"""KIP-848 consumer groups against a real node with confluent-kafka (`group.protocol:
consumer`, server-side assignment): members share the partitions, a killed member's move
within the group session timeout, committed offsets survive the consumers' and the node's
restart, commits after processing lose nothing; admin tools and the wire see the group as
Kafka shows it."""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.group_helpers import (
    assignments_of,
    closing_all,
    poll_until,
    start_member,
)

TOPIC = "kip848"
PARTITIONS = 6
RECORDS_PER_PARTITION = 100
SESSION_MS = 2000
CONSUMER_GROUP_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "200",
}


def _fill(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * RECORDS_PER_PARTITION):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    producer.flush(30)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONSUMER_GROUP_CONFIGS) as node:
        _fill(node.bootstrap_servers, TOPIC)
        yield node


def consumer_of(bootstrap: str, group: str, **extra: Any) -> Consumer:
    """A KIP-848 member (session and heartbeat timing come from the broker)."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **extra})


def owned_in_thirds(assignments: list[set[int]]) -> bool:
    every = [p for owned in assignments for p in owned]
    return sorted(every) == list(range(PARTITIONS)) and all(
        len(owned) == PARTITIONS // len(assignments) for owned in assignments)


def test_three_members_own_a_third_each_and_a_killed_ones_partitions_move(
    cluster: LocalCluster,
) -> None:
    """Three members on six partitions own two each, no overlap; SIGKILL one (no leave) and
    its partitions reach the two others within the group session timeout (plus a
    heartbeat or two)."""
    group = "kip848-three"
    victim = start_member(cluster.bootstrap_servers, group, TOPIC, "consumer")
    try:
        assert victim.stdout is not None and victim.stdout.readline().strip() == "assigned"
        consumers = [consumer_of(cluster.bootstrap_servers, group) for _ in range(2)]
        for consumer in consumers:
            consumer.subscribe([TOPIC])
        poll_until(consumers, lambda: [len(a) for a in assignments_of(consumers)] == [2, 2])
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        described = admin.describe_consumer_groups([group])[group].result(10)
        owned = [{tp.partition for tp in m.assignment.topic_partitions}
                 for m in described.members]
        assert owned_in_thirds(owned), owned
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        killed_at = time.monotonic()
        poll_until(consumers, lambda: owned_in_thirds(assignments_of(consumers)))
        took_s = time.monotonic() - killed_at
        assert took_s < SESSION_MS / 1000 + 2, took_s
        for consumer in consumers:
            consumer.close()
    finally:
        if victim.poll() is None:
            victim.kill()


def test_commits_after_processing_lose_nothing_and_repeat_only_after_the_last_commit(
    cluster: LocalCluster,
) -> None:
    """A member committing every 25 records is SIGKILLed mid-stream; its successor starts
    exactly at the group's committed offsets: nothing lost, the only records read twice
    are those read after the last commit."""
    group = "kip848-at-least-once"
    victim = start_member(cluster.bootstrap_servers, group, TOPIC, "consumer", commit_every=25)
    first_reads: set[tuple[int, int]] = set()
    try:
        assert victim.stdout is not None
        for line in victim.stdout:
            kind, *fields = line.split()
            if kind == "R":
                first_reads.add((int(fields[0]), int(fields[1])))
            if len(first_reads) >= 300 and kind == "C":
                break
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        for line in victim.stdout.read().splitlines():
            kind, *fields = line.split()
            if kind == "R":
                first_reads.add((int(fields[0]), int(fields[1])))
    finally:
        victim.kill()
    # The group's offsets are the truth (the member may die between commit and print).
    reader = consumer_of(cluster.bootstrap_servers, group)
    committed = {tp.partition: tp.offset for tp in reader.committed(
        [TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30) if tp.offset >= 0}
    reader.close()
    assert committed
    for partition, offset in committed.items():
        assert offset <= 1 + max(o for p, o in first_reads if p == partition), partition
    successor = consumer_of(cluster.bootstrap_servers, group)
    successor.subscribe([TOPIC])
    second_reads: set[tuple[int, int]] = set()
    total = PARTITIONS * RECORDS_PER_PARTITION
    deadline = time.monotonic() + 30
    while len(first_reads | second_reads) < total and time.monotonic() < deadline:
        message = successor.poll(0.1)
        if message is not None and message.error() is None:
            second_reads.add((message.partition(), message.offset()))
    successor.close()
    assert first_reads | second_reads == {(p, o) for p in range(PARTITIONS)
                                          for o in range(RECORDS_PER_PARTITION)}
    for partition in range(PARTITIONS):
        resumed = min((o for p, o in second_reads if p == partition),
                      default=RECORDS_PER_PARTITION)
        assert resumed == committed.get(partition, 0), partition


def test_three_members_read_everything_once_and_successors_resume(
    cluster: LocalCluster,
) -> None:
    """Three members read all records exactly once between them (each pauses what it is
    given until the group is stable: a lone early member would rightly hand uncommitted
    records to their next owner), commit, close; a new consumer in the group reads
    nothing again."""
    group = "kip848-resume"
    consumers = [consumer_of(cluster.bootstrap_servers, group) for _ in range(3)]

    def pause_assigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.incremental_assign(partitions)  # KIP-848 assignments are incremental
        consumer.pause(partitions)

    with closing_all(consumers):
        for consumer in consumers:
            consumer.subscribe([TOPIC], on_assign=pause_assigned)
        poll_until(consumers, lambda: owned_in_thirds(assignments_of(consumers)))
        seen: list[tuple[int, int]] = []
        total = PARTITIONS * RECORDS_PER_PARTITION
        for consumer in consumers:
            consumer.resume(consumer.assignment())
        deadline = time.monotonic() + 30
        while len(seen) < total and time.monotonic() < deadline:
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    seen.append((message.partition(), message.offset()))
        assert owned_in_thirds(assignments_of(consumers))
        assert len(set(seen)) == total
        # All commit while the group is stable, then all leave. A commit after another
        # member left may race the member's own heartbeat that takes the new epoch, and
        # Kafka refuses a commit at the old one (STALE_MEMBER_EPOCH, as we do).
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    again = consumer_of(cluster.bootstrap_servers, group)
    committed = again.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
    assert [tp.offset for tp in committed] == [RECORDS_PER_PARTITION] * PARTITIONS
    again.subscribe([TOPIC])
    poll_until([again], lambda: len(again.assignment()) == PARTITIONS)
    assert again.poll(1.0) is None
    again.close()


def test_committed_offsets_survive_a_node_restart(tmp_path: Any) -> None:
    """A consumer group commits, the node restarts (cleanly, then SIGKILL): the group's
    members come back and resume at the committed offsets."""
    with LocalCluster(data_dir=tmp_path / "node", configs=CONSUMER_GROUP_CONFIGS) as node:
        bootstrap = node.bootstrap_servers
        _fill(bootstrap, "kept")
        consumer = consumer_of(bootstrap, "kip848-kept")
        consumer.subscribe(["kept"])
        poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
        consumer.commit(offsets=[TopicPartition("kept", p, 10 + p) for p in range(PARTITIONS)],
                        asynchronous=False)
        consumer.close()
        epoch = _described(bootstrap, "kip848-kept").group_epoch
        assert epoch >= 2  # joined, then left
        for restart in (node.stop, node.kill):
            restart()
            node.start()
            deadline = time.monotonic() + 20
            while (described := _described(bootstrap, "kip848-kept")).error_code in (
                    ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert described.error_code == ErrorCode.none, restart  # replayed from the log
            assert described.group_epoch >= epoch and described.group_state == "Empty"
            epoch = described.group_epoch
            consumer = consumer_of(bootstrap, "kip848-kept")
            consumer.subscribe(["kept"])
            first: dict[int, int] = {}
            deadline = time.monotonic() + 30
            while len(first) < PARTITIONS and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    first.setdefault(message.partition(), message.offset())
            consumer.close()
            assert first == {p: 10 + p for p in range(PARTITIONS)}, restart


def _described(bootstrap: str, group: str) -> Any:
    with WireClient(bootstrap) as client:
        response = client.request(69, 0, ConsumerGroupDescribeRequest(
            group_ids=(group,), include_authorized_operations=False))
    return response.groups[0]


def test_admin_and_cli_see_a_consumer_group(cluster: LocalCluster) -> None:
    """ListGroups gives type consumer; DescribeConsumerGroups (ConsumerGroupDescribe) the
    members and assignor; the consumer-groups tool describes its lag."""
    bootstrap, group = cluster.bootstrap_servers, "kip848-admin"
    consumer = consumer_of(bootstrap, group)
    consumer.subscribe([TOPIC])
    poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
    consumer.commit(offsets=[TopicPartition(TOPIC, p, 40) for p in range(PARTITIONS)],
                    asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = {g.group_id: g for g in admin.list_consumer_groups().result(10).valid}
    assert listed[group].type.name == "CONSUMER" and listed[group].state.name == "STABLE"
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.type.name == "CONSUMER" and described.partition_assignor == "uniform"
    [member] = described.members
    assert len(member.assignment.topic_partitions) == PARTITIONS
    tool = subprocess.run([sys.executable, "-m", "pykraft", "consumer-groups",
                           "--bootstrap-server", bootstrap, "--describe", "--group", group],
                          capture_output=True, text=True, timeout=60)
    assert tool.returncode == 0, tool.stderr
    rows = [line.split() for line in tool.stdout.splitlines() if line.startswith(f"{group} ")]
    assert sorted((r[2], r[3], r[4], r[5]) for r in rows) == [
        (str(p), "40", "100", "60") for p in range(PARTITIONS)]
    consumer.close()


TEN_S = datetime.timedelta(seconds=10)


def test_wire_classic_and_consumer_groups_do_not_mix(cluster: LocalCluster) -> None:
    """A classic JoinGroup on a consumer group: INCONSISTENT_GROUP_PROTOCOL; a
    ConsumerGroupHeartbeat on a classic group: GROUP_ID_NOT_FOUND, and so does
    ConsumerGroupDescribe (clients then fall back to DescribeGroups)."""
    with WireClient(cluster.bootstrap_servers) as client:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # the first lookup creates __consumer_offsets
            found = client.request(10, 4, FindCoordinatorRequest(
                key_type=0, coordinator_keys=("wire-consumer", "wire-classic")))
            if all(c.error_code == ErrorCode.none for c in found.coordinators):
                break
            time.sleep(0.1)
        while True:  # until the coordinator has loaded the group's partition
            joined = client.request(68, 0, ConsumerGroupHeartbeatRequest(
                group_id="wire-consumer", member_id="", member_epoch=0, instance_id=None,
                rack_id=None, rebalance_timeout=datetime.timedelta(seconds=5),
                subscribed_topic_names=(TOPIC,), server_assignor=None, topic_partitions=()))
            if joined.error_code not in (ErrorCode.not_coordinator,
                                         ErrorCode.coordinator_load_in_progress):
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert joined.error_code == ErrorCode.none and joined.member_id
        assert joined.member_epoch == 1 and joined.heartbeat_interval.total_seconds() == 0.2
        assert sorted(joined.assignment.topic_partitions[0].partitions) == list(
            range(PARTITIONS))
        classic = client.request(11, 5, JoinGroupRequest(
            group_id="wire-consumer", session_timeout=TEN_S, rebalance_timeout=TEN_S,
            member_id="", group_instance_id=None, protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),)))
        assert classic.error_code == ErrorCode.inconsistent_group_protocol
        client.request(11, 5, JoinGroupRequest(
            group_id="wire-classic", session_timeout=TEN_S,
            rebalance_timeout=TEN_S, member_id="", group_instance_id=None,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),)))
        refused = client.request(68, 0, ConsumerGroupHeartbeatRequest(
            group_id="wire-classic", member_id="", member_epoch=0, instance_id=None,
            rack_id=None, rebalance_timeout=datetime.timedelta(seconds=5),
            subscribed_topic_names=(TOPIC,), server_assignor=None, topic_partitions=()))
        assert refused.error_code == ErrorCode.group_id_not_found  # (a pending member)
        described = client.request(69, 0, ConsumerGroupDescribeRequest(
            group_ids=("wire-consumer", "nothing-here"), include_authorized_operations=False))
        assert [g.error_code for g in described.groups] == [ErrorCode.none,
                                                            ErrorCode.group_id_not_found]
        assert described.groups[0].group_epoch == 1
        left = client.request(68, 0, ConsumerGroupHeartbeatRequest(
            group_id="wire-consumer", member_id=joined.member_id, member_epoch=-1,
            instance_id=None, rack_id=None, rebalance_timeout=datetime.timedelta(0),
            subscribed_topic_names=None, server_assignor=None, topic_partitions=None))
        assert left.error_code == ErrorCode.none and left.member_epoch == -1


def test_a_member_running_through_a_node_restart_keeps_its_partitions(tmp_path: Any) -> None:
    """The group is replayed from __consumer_offsets when the node comes back: a member that
    stays up heartbeats again at its epoch and keeps its partitions — no new group epoch,
    no revocation."""
    with LocalCluster(data_dir=tmp_path / "node", configs=CONSUMER_GROUP_CONFIGS) as node:
        bootstrap = node.bootstrap_servers
        _fill(bootstrap, "steady")
        revoked: list[int] = []
        consumer = consumer_of(bootstrap, "kip848-steady")
        with closing_all([consumer]):
            consumer.subscribe(["steady"], on_revoke=lambda _, tps: revoked.extend(
                tp.partition for tp in tps))
            poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
            visitor = consumer_of(bootstrap, "kip848-steady")  # joins and leaves: epoch 3
            visitor.subscribe(["steady"])
            poll_until([consumer, visitor], lambda: len(visitor.assignment()) == PARTITIONS // 2)
            visitor.close()
            poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS)
            revoked.clear()
            before = _described(bootstrap, "kip848-steady")
            assert before.group_epoch == 3 and len(before.members) == 1
            node.stop()
            node.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                consumer.poll(0.1)
                after = _described(bootstrap, "kip848-steady")
                if after.error_code == ErrorCode.none and after.members and (
                        after.members[0].member_epoch == before.members[0].member_epoch):
                    break
            assert after.error_code == ErrorCode.none
            assert after.group_epoch == before.group_epoch
            assert [m.member_id for m in after.members] == [m.member_id for m in before.members]
            for _ in range(10):  # a few heartbeats after the restart
                consumer.poll(0.1)
            assert len(consumer.assignment()) == PARTITIONS and not revoked
            assert _described(bootstrap, "kip848-steady").group_epoch == before.group_epoch


def test_a_regex_subscription_follows_topics_created_and_grown(cluster: LocalCluster) -> None:
    """Subscribed by pattern: the member gets the matching topic's partitions, then those of
    a matching topic created later, then a grown topic's new partitions (each metadata
    change is a new group epoch); a topic that does not match stays out."""
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("rx-a", 2, 1), NewTopic("rx_not", 2, 1)]).values():
        future.result(30)
    consumer = consumer_of(bootstrap, "kip848-regex")
    consumer.subscribe(["^rx-.*"])

    def owned() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    poll_until([consumer], lambda: owned() == {("rx-a", 0), ("rx-a", 1)})
    admin.create_topics([NewTopic("rx-b", 3, 1)])["rx-b"].result(30)
    poll_until([consumer], lambda: len(owned()) == 5)
    assert {topic for topic, _ in owned()} == {"rx-a", "rx-b"}
    admin.create_partitions([NewPartitions("rx-a", 4)])["rx-a"].result(30)
    poll_until([consumer], lambda: len(owned()) == 7)
    epoch = _described(bootstrap, "kip848-regex").group_epoch
    assert epoch >= 3  # joined, topic created, partitions added
    consumer.close()


def test_a_restarted_static_member_takes_its_place_back_without_a_new_epoch(
    cluster: LocalCluster,
) -> None:
    """group.instance.id under KIP-848: a static member closing leaves temporarily (epoch
    -2); its successor under the same instance id gets the same partitions at once, the
    other member keeps its own, and the group epoch does not move."""
    bootstrap, group = cluster.bootstrap_servers, "kip848-static"
    first = consumer_of(bootstrap, group, **{"group.instance.id": "s-1"})
    second = consumer_of(bootstrap, group, **{"group.instance.id": "s-2"})
    for consumer in (first, second):
        consumer.subscribe([TOPIC])
    poll_until([first, second], lambda: owned_in_thirds(assignments_of([first, second])))
    kept, before = assignments_of([first, second])
    epoch = _described(bootstrap, group).group_epoch
    second.close()
    again = consumer_of(bootstrap, group, **{"group.instance.id": "s-2"})
    again.subscribe([TOPIC])
    poll_until([first, again], lambda: bool(again.assignment()))
    assert assignments_of([first, again]) == [kept, before]
    assert _described(bootstrap, group).group_epoch == epoch
    for consumer in (first, again):
        consumer.close()
