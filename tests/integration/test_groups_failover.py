"""Group coordinator failover (issue 6, done-when 3): three brokers, `__consumer_offsets`
replicated three ways; the broker coordinating a consumer group is killed with SIGKILL while
the group consumes and commits. The group moves to the new leader of its offsets partition,
which rebuilds the group from the replicated log: committed offsets are intact (never
behind what was committed before the kill), and the members finish the topic."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pykraft.testing import LocalCluster
from tests.integration.tool_helpers import eventually

PARTITIONS = 6
CONFIGS = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "6000",
}


class Member:
    """A group member on its own thread: reads, commits every 20 records (synchronously,
    after processing), and notes what it read."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.read: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500})
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        since_commit = 0
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            self.read.append(int(message.value()))
            since_commit += 1
            if since_commit >= 20:
                try:
                    self._consumer.commit(asynchronous=False)
                    since_commit = 0
                except KafkaException as error:  # retriable while the coordinator moves
                    if not error.args[0].retriable():
                        self.errors.append(str(error))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=1, brokers=3, configs=CONFIGS,
                      startup_timeout_s=60) as running:
        yield running


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, str(value).encode(), partition=value % PARTITIONS)
    assert producer.flush(60) == 0


def _committed(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    result = admin.list_consumer_group_offsets([request])[group].result(10)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _coordinator(admin: AdminClient, group: str) -> int:
    described = admin.describe_consumer_groups([group])[group].result(10)
    return int(described.coordinator.id)


@pytest.mark.slow
def test_killing_the_coordinators_broker_keeps_the_groups_offsets(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, group = f"failover-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                  replication_factor=3)])[topic].result(30)
    _produce(bootstrap, topic, range(0, 600))
    members = [Member(bootstrap, group, topic) for _ in range(2)]
    try:
        eventually(lambda: _read_at_least(members, 300), timeout_s=60)
        before = eventually(lambda: _some_commits(admin, group, topic), timeout_s=30)
        coordinator = eventually(lambda: _known(_coordinator(admin, group)), timeout_s=30)
        # the offsets partition is replicated on all three brokers
        offsets_topic = admin.list_topics("__consumer_offsets", timeout=10)
        for partition in offsets_topic.topics["__consumer_offsets"].partitions.values():
            assert len(partition.replicas) == 3
        cluster.kill_node(coordinator)
        survivors = [b for b in cluster.broker_ids if b != coordinator]
        alive = ",".join(cluster.node(b).bootstrap_servers for b in survivors)
        admin = AdminClient({"bootstrap.servers": alive})
        _produce(alive, topic, range(600, 900))
        moved = eventually(lambda: _moved(_coordinator(admin, group), coordinator),
                           timeout_s=60)
        assert moved in survivors
        after = _committed(admin, group, topic)
        assert all(after[p] >= before[p] for p in before), (before, after)
        eventually(lambda: _read_everything(members, 900), timeout_s=90)
        final = eventually(lambda: _all_committed(admin, group, topic, before), timeout_s=60)
        assert sum(final.values()) >= sum(before.values())
    finally:
        for member in members:
            member.close()
    assert [m.errors for m in members] == [[], []]


def _known(coordinator: int) -> int:
    assert coordinator >= 0
    return coordinator


def _moved(coordinator: int, old: int) -> int:
    assert coordinator not in (-1, old)
    return coordinator


def _read_at_least(members: list[Member], count: int) -> None:
    assert len({v for m in members for v in m.read}) >= count


def _read_everything(members: list[Member], count: int) -> None:
    assert {v for m in members for v in m.read} == set(range(count))


def _some_commits(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    committed = _committed(admin, group, topic)
    assert sum(max(0, o) for o in committed.values()) >= 100, committed
    return committed


def _all_committed(admin: AdminClient, group: str, topic: str,
                   before: dict[int, int]) -> dict[int, int]:
    committed = _committed(admin, group, topic)
    assert all(committed[p] >= before[p] for p in before)
    assert sum(committed.values()) >= 900 - 2 * 20, committed  # up to 19 uncommitted each
    return committed
