"""Partition replication with real processes: one controller and three brokers
(LocalCluster), RF=3 topics, confluent-kafka clients.

Followers fetch from the leader and append its batches as they are: every replica's log ends
equal, byte for byte, and a consumer sees what was acknowledged with acks=all. The leader is
killed with SIGKILL while a producer (acks=all, retries, no idempotence) keeps sending: after
a new leader is elected from the ISR, every acknowledged record is there exactly once and in
send order on every surviving replica.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

T = TypeVar("T")
WAIT_S = 30.0
FAST = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (OSError, KafkaException, ConnectionError) as error:
            last = error
        else:
            if value:
                return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=1, brokers=3, configs=FAST) as running:
        yield running


def bootstrap_of(cluster: LocalCluster, alive: list[int] | None = None) -> str:
    ids = alive if alive is not None else [i for i in cluster.broker_ids if cluster.running(i)]
    return ",".join(cluster.nodes[i].bootstrap_servers for i in ids)


def create_topic(cluster: LocalCluster, name: str, *, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=3, config=configs or {})],
                                  operation_timeout=20)
    futures[name].result(30)
    wait_for(lambda: partition_state(cluster, name) is not None
             and partition_state(cluster, name)[0] >= 0, f"{name} has a leader")


def partition_state(cluster: LocalCluster, topic: str, index: int = 0,
                    via: int | None = None) -> tuple[int, int, tuple[int, ...]] | None:
    """(leader, leader epoch, ISR) as a running broker's Metadata shows it."""
    node = via if via is not None else next(i for i in cluster.broker_ids if cluster.running(i))
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


def replica_log(cluster: LocalCluster, broker: int, topic: str, index: int = 0) -> bytes:
    """The concatenated segment files of one replica (whole batches, as stored)."""
    directory = cluster.nodes[broker].log_dir / f"{topic}-{index}"
    return b"".join(path.read_bytes() for path in sorted(
        directory.glob("*.log"), key=lambda p: int(p.stem)))


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = WAIT_S
                ) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values


def producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": False, "linger.ms": 5, **extra})


def test_rf3_acks_all_replicates_to_every_broker(cluster: LocalCluster) -> None:
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    create_topic(cluster, topic, configs={"min.insync.replicas": "2"})
    leader, _, isr = wait_for(lambda: partition_state(cluster, topic), "metadata")
    assert isr == (2, 3, 4)
    acked: list[int] = []
    errors: list[Any] = []

    def report(error: Any, message: Any) -> None:
        if error is None:
            acked.append(message.offset())
        else:
            errors.append(error)

    p = producer(bootstrap_of(cluster))
    for i in range(500):
        p.produce(topic, value=f"v{i}".encode(), on_delivery=report)
    assert p.flush(30) == 0
    assert errors == [] and sorted(acked) == list(range(500))
    values = consume_all(bootstrap_of(cluster), topic, 500)
    assert values == [f"v{i}".encode() for i in range(500)]
    # the followers' logs end equal to the leader's, byte for byte
    wait_for(lambda: len({replica_log(cluster, b, topic) for b in (2, 3, 4)}) == 1,
             "identical replica logs")
    assert len(replica_log(cluster, leader, topic)) > 0
