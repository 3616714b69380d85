"""The partition APIs against real processes: one controller and two brokers, each with
two log dirs (LocalCluster), RF=2 topics (two brokers start in half the time of three, and
a leader change needs no more).

- DescribeTopicPartitions (KIP-966) through kafka-python's describe_topic_partitions, paged
  with the cursor, agrees with Metadata.
- DescribeLogDirs through kafka-python's describe_log_dirs: each broker lists its two dirs
  and each of its replicas in exactly one of them, with its size.
- AlterReplicaLogDirs through kafka-python's alter_replica_log_dirs: a dir that is not
  configured, a replica's own dir, and a leader's replica moved to the other dir while a
  producer writes, every record then read back from it.
- OffsetForLeaderEpoch after a leader change, at the wire and by a real consumer: the new
  leader tells where the old epoch ended, fences stale epochs, and librdkafka validates its
  position with it (KIP-320) and reads on without losing or repeating a record.
"""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka import KafkaAdminClient  # type: ignore[import-untyped]
from kafka.errors import (  # type: ignore[import-untyped]
    LogDirNotFoundError,
    NoError,
    ReplicaNotAvailableError,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request

from pykraft.broker.partition_apis import OFFSET_FOR_LEADER_EPOCH, TOPIC_AUTHORIZED_OPERATIONS
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import waits

T = TypeVar("T")
FAST = {
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
    return waits.wait_for(predicate, what, timeout_s, retry_on=(OSError, KafkaException))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(controllers=1, brokers=2, configs=FAST)
    for broker in cluster.broker_ids:
        node = cluster.nodes[broker]
        cluster.set_node_configs(broker, {"log.dirs": f"{node.log_dir},{second_dir(node)}"})
    with cluster as running:
        yield running


def second_dir(node: LocalCluster) -> Path:
    return node.data_dir / "logs-2"


def bootstrap_of(cluster: LocalCluster) -> str:
    return ",".join(cluster.nodes[i].bootstrap_servers for i in cluster.broker_ids
                    if cluster.running(i))


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Any]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap_of(cluster))
    yield client
    client.close()


def create_topic(cluster: LocalCluster, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=2,
                                  config={"min.insync.replicas": "1"})])[name].result(30)
    for index in range(partitions):
        wait_for(lambda index=index: (state := partition_state(cluster, name, index))
                 and state[0] >= 0 and len(state[2]) == 2, f"{name}-{index} fully in sync")


def partition_state(cluster: LocalCluster, topic: str, index: int = 0
                    ) -> tuple[int, int, tuple[int, ...]] | None:
    """(leader, leader epoch, ISR) as a running broker's Metadata shows it."""
    node = next(i for i in cluster.broker_ids if cluster.running(i))
    request = MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                              allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(cluster.nodes[node].bootstrap_servers, timeout_s=5) as client:
        response = client.request(3, 12, request)
    for found in response.topics:
        for partition in found.partitions:
            if partition.partition_index == index:
                return (int(partition.leader_id), int(partition.leader_epoch),
                        tuple(sorted(int(r) for r in partition.isr_nodes)))
    return None


def produce(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap_of(cluster), "acks": "all"})
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def test_describe_topic_partitions_pages_with_the_cursor(cluster: LocalCluster,
                                                         admin: Any) -> None:
    """kafka-python's describe_topic_partitions, three partitions a page: the first page
    ends at dtp-b's partition 0, the cursor brings the rest; each partition as Metadata
    says; a missing topic is UNKNOWN_TOPIC_OR_PARTITION."""
    create_topic(cluster, "dtp-a", partitions=2)
    create_topic(cluster, "dtp-b", partitions=2)
    first = admin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-missing"],
                                            response_partition_limit=3)
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
            for t in first["topics"]] == [("dtp-a", [0, 1]), ("dtp-b", [0])]
    assert first["next_cursor"] == {"topic_name": "dtp-b", "partition_index": 1}
    rest = admin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-missing"],
                                           response_partition_limit=3,
                                           cursor=first["next_cursor"])
    assert [(t["name"], t["error_code"], [p["partition_index"] for p in t["partitions"]])
            for t in rest["topics"]] == [
        ("dtp-b", 0, [1]), ("dtp-missing", int(ErrorCode.unknown_topic_or_partition), [])]
    assert rest["next_cursor"] is None
    for topic in first["topics"] + rest["topics"][:1]:
        assert topic["topic_authorized_operations"] == TOPIC_AUTHORIZED_OPERATIONS
        assert not topic["is_internal"]
        for partition in topic["partitions"]:
            leader, epoch, isr = partition_state(  # type: ignore[misc]
                cluster, topic["name"], partition["partition_index"])
            assert (partition["leader_id"], partition["leader_epoch"]) == (leader, epoch)
            assert tuple(sorted(partition["isr_nodes"])) == isr
            assert sorted(partition["replica_nodes"]) == cluster.broker_ids
            assert partition["offline_replicas"] == []


def replica_homes(admin: Any, topic: str) -> dict[int, dict[int, tuple[str, int]]]:
    """broker -> partition -> (log dir, size) of its current log (not of a move's future
    log), from DescribeLogDirs of every broker."""
    homes: dict[int, dict[int, tuple[str, int]]] = {}
    for answer in admin.describe_log_dirs():
        found = homes.setdefault(answer["broker"], {})
        for result in answer["log_dirs"]:
            assert result["error_code"] == 0
            for described in result["topics"]:
                if described["name"] != topic:
                    continue
                for partition in described["partitions"]:
                    if partition["is_future_key"]:
                        continue
                    index = partition["partition_index"]
                    assert index not in found, f"{topic}-{index} in two dirs"
                    found[index] = (result["log_dir"], partition["partition_size"])
    return homes


def test_describe_log_dirs_lists_each_replica_in_one_of_two_dirs(cluster: LocalCluster,
                                                                 admin: Any) -> None:
    create_topic(cluster, "dirs", partitions=2)
    produce(cluster, "dirs", [b"x" * 100] * 10)
    answers = {answer["broker"]: answer["log_dirs"] for answer in admin.describe_log_dirs()}
    assert sorted(answers) == cluster.broker_ids
    for broker, results in answers.items():
        node = cluster.nodes[broker]
        assert sorted(result["log_dir"] for result in results) == sorted(
            [str(node.log_dir.absolute()), str(second_dir(node).absolute())])
        for result in results:  # v4: the volume's sizes
            assert 0 < result["usable_bytes"] <= result["total_bytes"]
    homes = replica_homes(admin, "dirs")  # each replica in exactly one of its broker's dirs
    for broker in cluster.broker_ids:
        assert sorted(homes[broker]) == [0, 1]
    wait_for(lambda: sum(size for broker in cluster.broker_ids
                         for _, size in replica_homes(admin, "dirs")[broker].values())
             >= 2 * 10 * 100, "every replica has the records")


def test_alter_replica_log_dirs_moves_a_replica_that_goes_on_serving(
        cluster: LocalCluster, admin: Any) -> None:
    """An unconfigured path: LogDirNotFound; the replica's own dir: nothing moves; the other
    dir: the leader's replica moves there while a producer writes, and a consumer then
    reads every record from it, in order."""
    create_topic(cluster, "moves")
    leader = wait_for(lambda: partition_state(cluster, "moves"), "metadata")[0]
    home, _ = replica_homes(admin, "moves")[leader][0]
    outcome = admin.alter_replica_log_dirs({("moves", 0, leader): home,
                                            ("moves", 7, leader): home})
    assert outcome == {("moves", 0, leader): NoError,
                       ("moves", 7, leader): ReplicaNotAvailableError}
    outcome = admin.alter_replica_log_dirs({("moves", 0, leader): "/no/such/dir"})
    assert list(outcome.values()) == [LogDirNotFoundError]
    assert replica_homes(admin, "moves")[leader][0][0] == home
    node = cluster.nodes[leader]
    other = next(str(d.absolute()) for d in (node.log_dir, second_dir(node))
                 if str(d.absolute()) != home)
    values = [b"m%04d" % i for i in range(2000)]
    producer = Producer({"bootstrap.servers": bootstrap_of(cluster), "acks": "all",
                         "linger.ms": 2})
    for value in values[:1000]:
        producer.produce("moves", value)
    assert producer.flush(30) == 0
    outcome = admin.alter_replica_log_dirs({("moves", 0, leader): other})
    assert list(outcome.values()) == [NoError]
    for value in values[1000:]:
        producer.produce("moves", value)
    assert producer.flush(30) == 0
    wait_for(lambda: replica_homes(admin, "moves")[leader][0][0] == other,
             "the replica in its new dir")
    assert not (Path(home) / "moves-0").exists()
    assert consume(cluster, "moves", len(values)) == values


def consume(cluster: LocalCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap_of(cluster), "group.id": topic,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        return read(consumer, count)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, *partitions: tuple[int, int]) -> list[Any]:
    """OffsetForLeaderEpoch v4 for partition 0: (current leader epoch, leader epoch) each;
    (error code, epoch, end offset) back."""
    request = epoch_request.OffsetForLeaderEpochRequest(replica_id=-1, topics=(  # type: ignore[arg-type]
        epoch_request.OffsetForLeaderTopic(topic=topic, partitions=tuple(  # type: ignore[arg-type]
            epoch_request.OffsetForLeaderPartition(partition=0, current_leader_epoch=current,  # type: ignore[arg-type]
                                                   leader_epoch=epoch)
            for current, epoch in partitions)),))
    with WireClient(bootstrap, timeout_s=10) as client:
        response = client.request(OFFSET_FOR_LEADER_EPOCH, 4, request)
    return [(int(p.error_code), int(p.leader_epoch), int(p.end_offset))
            for p in response.topics[0].partitions]


def test_offset_for_leader_epoch_across_a_leader_change(cluster: LocalCluster) -> None:
    """Five records in epoch e0; the leader stops (controlled shutdown) and three more are
    written in e1. The new leader says e0 ended at 5 and e1 at 8, fences e0 as a current
    epoch; a librdkafka consumer that read the first five validates its position with
    OffsetForLeaderEpoch at the new leader and reads the other three, each once.
    Runs last: it stops a broker."""
    topic = "epochs"
    create_topic(cluster, topic)
    produce(cluster, topic, [b"a%d" % i for i in range(5)])
    leader, e0, _ = wait_for(lambda: partition_state(cluster, topic), "metadata")
    follower = next(b for b in cluster.broker_ids if b != leader)
    assert end_offsets(cluster.nodes[leader].bootstrap_servers, topic, (e0, e0)) == [
        (0, e0, 5)]
    assert end_offsets(cluster.nodes[follower].bootstrap_servers, topic, (e0, e0)) == [
        (int(ErrorCode.not_leader_or_follower), -1, -1)]

    lines: list[str] = []
    capture = logging.getLogger(f"librdkafka-{uuid.uuid4().hex[:6]}")
    capture.setLevel(logging.DEBUG)
    capture.propagate = False
    capture.addHandler(_ListHandler(lines))
    consumer = Consumer({"bootstrap.servers": bootstrap_of(cluster), "group.id": "epochs",
                         "enable.auto.commit": False, "debug": "protocol",
                         "topic.metadata.refresh.interval.ms": 500}, logger=capture)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = read(consumer, 5)
        cluster.kill_node(leader, signal.SIGTERM)
        new_leader, e1, _ = wait_for(
            lambda: (state := partition_state(cluster, topic)) and state[0] not in (-1, leader)
            and state, "a new leader")
        assert e1 > e0
        produce(cluster, topic, [b"b%d" % i for i in range(3)])
        bootstrap = cluster.nodes[new_leader].bootstrap_servers
        assert end_offsets(bootstrap, topic, (e1, e0), (e1, e1), (-1, e0)) == [
            (0, e0, 5), (0, e1, 8), (0, e0, 5)]
        assert end_offsets(bootstrap, topic, (e0, e0), (e1 + 1, e0)) == [
            (int(ErrorCode.fenced_leader_epoch), -1, -1),
            (int(ErrorCode.unknown_leader_epoch), -1, -1)]
        seen += read(consumer, 3)
    finally:
        consumer.close()
    assert seen == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(3)]
    sent = [line for line in lines if "Sent OffsetForLeaderEpochRequest" in line]
    assert any(f"/{new_leader}: Sent" in line for line in sent), \
        f"librdkafka did not validate its position at the new leader: {sent}"


def read(consumer: Consumer, count: int) -> list[bytes]:
    values: list[bytes] = []

    def more() -> bool:
        for message in consumer.consume(num_messages=count - len(values), timeout=0.2):
            if message.error() is None:
                values.append(message.value())
        return len(values) >= count

    wait_for(more, f"{count} records")
    return values


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
