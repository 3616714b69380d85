"""Transaction coordinator failover (issue 8, done-when 3): three brokers, `__transaction_state`
replicated three ways; the broker coordinating a transactional id is killed with SIGKILL
just after the producer asks to commit. The leader of the id's `__transaction_state`
partition on another broker takes over from the replicated log and finishes the
transaction: afterwards every partition's last stable offset reaches its high watermark (no
transaction left hanging), and a read_committed consumer sees all of the transaction's
records or none of them, never a part; all of them whenever the producer was told the
commit succeeded."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i16

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 300
CONFIGS = {
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "100",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "6000",
}


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(controllers=1, brokers=3, configs=CONFIGS,
                      startup_timeout_s=60) as running:
        yield running


def bootstrap_of(cluster: LocalCluster) -> str:
    return ",".join(cluster.nodes[i].bootstrap_servers for i in cluster.broker_ids
                    if cluster.running(i))


def coordinator_of(cluster: LocalCluster, txn_id: str) -> int:
    deadline = time.monotonic() + 30
    while True:
        for broker in cluster.broker_ids:
            if not cluster.running(broker):
                continue
            with WireClient(cluster.nodes[broker].bootstrap_servers) as client:
                found = client.request(10, 4, FindCoordinatorRequest(
                    key_type=i16(1), coordinator_keys=(txn_id,))).coordinators[0]
            if found.error_code == ErrorCode.none:
                return int(found.node_id)
        assert time.monotonic() < deadline, "no coordinator found"
        time.sleep(0.2)


def offsets(admin: AdminClient, topic: str, isolation: IsolationLevel) -> list[int]:
    wanted = {TopicPartition(topic, index): OffsetSpec.latest() for index in range(PARTITIONS)}
    found = admin.list_offsets(wanted, isolation_level=isolation, request_timeout=10)
    return [found[TopicPartition(topic, index)].result(15).offset
            for index in range(PARTITIONS)]


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, index, 0) for index in range(PARTITIONS)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "the read_committed consumer reached every end"
    return values


def test_killing_the_coordinator_mid_commit_never_leaves_a_transaction_half_visible(
        cluster: LocalCluster) -> None:
    rng = random.Random(3)
    topic = f"txn-failover-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                  config={"min.insync.replicas": "2"})])[topic].result(30)
    outcomes: list[tuple[str, int]] = []
    for round_index in range(4):
        txn_id = f"failover-{round_index}-{uuid.uuid4().hex[:6]}"
        producer = Producer({"bootstrap.servers": bootstrap_of(cluster),
                             "transactional.id": txn_id, "transaction.timeout.ms": 15000,
                             "linger.ms": 5})
        producer.init_transactions(60)
        producer.begin_transaction()
        for index in range(RECORDS):
            producer.produce(topic, b"r%d-%d" % (round_index, index),
                             partition=index % PARTITIONS)
        assert producer.flush(30) == 0
        victim = coordinator_of(cluster, txn_id)
        result: dict[str, Any] = {}

        def commit(p: Producer = producer, out: dict[str, Any] = result) -> None:
            try:
                p.commit_transaction(90)
                out["committed"] = True
            except KafkaException as failure:
                out["error"] = failure.args[0]

        committer = threading.Thread(target=commit)
        committer.start()
        time.sleep(rng.uniform(0, 0.03))
        cluster.kill_node(victim)
        committer.join(120)
        assert not committer.is_alive(), "commit_transaction returned"
        if not result.get("committed"):
            error = result["error"]
            assert not error.fatal(), error
            if error.txn_requires_abort():
                producer.abort_transaction(60)
        producer.flush(10)
        del producer
        outcomes.append(("committed" if result.get("committed") else "not committed",
                         victim))
        cluster.restart_node(victim)
        deadline = time.monotonic() + 90
        while True:  # the coordinator finished the transaction: nothing unstable is left
            try:
                if offsets(admin, topic, IsolationLevel.READ_COMMITTED) == \
                        offsets(admin, topic, IsolationLevel.READ_UNCOMMITTED):
                    break
            except KafkaException:
                pass
            assert time.monotonic() < deadline, f"a transaction hangs after {outcomes}"
            time.sleep(0.5)
        visible = {v for v in committed_values(bootstrap_of(cluster), topic)
                   if v.startswith(b"r%d-" % round_index)}
        assert len(visible) in (0, RECORDS), (len(visible), outcomes)
        if result.get("committed"):
            assert len(visible) == RECORDS, outcomes
    assert len({victim for _, victim in outcomes}) >= 1
