"""A cluster whose own connections authenticate: one controller and two brokers, the
controller listener SASL_PLAINTEXT with PLAIN (the quorum and the brokers' registrations,
heartbeats and forwarded requests log in to it), the inter-broker listener SASL_PLAINTEXT with
SCRAM-SHA-512 (credentials from `storage format --add-scram`, checked by each broker against
its own metadata image). Replication works through it: a topic with two replicas keeps both
in sync under acks=all, and a client reads what it wrote."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykraft.testing import LocalCluster
from pykraft.testing.ports import free_port
from tests.integration.tool_helpers import eventually

COMMON = {
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,"
                                      "INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.mechanism.controller.protocol": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
    "listener.name.controller.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="node" password="node-secret" user_node="node-secret";',
    "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "listener.name.internal.scram-sha-512.sasl.jaas.config":
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="broker" password="broker-secret";',
    "offsets.topic.replication.factor": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    cluster = LocalCluster(controllers=1, brokers=2, configs=COMMON)
    try:
        for node_id in cluster.broker_ids:
            node = cluster.nodes[node_id]
            internal = free_port()
            listeners = (f"PLAINTEXT://127.0.0.1:{node.broker_port},"
                         f"INTERNAL://127.0.0.1:{internal}")
            cluster.set_node_configs(node_id, {"listeners": listeners,
                                               "advertised.listeners": listeners})
        controller = cluster.nodes[cluster.controller_ids[0]]
        result = subprocess.run(  # the controller bootstraps the brokers' SCRAM credential
            [sys.executable, "-m", "pykraft", "storage", "format", "--config",
             str(controller.config_path), "--cluster-id", cluster.cluster_id,
             "--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-secret]"],
            capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def test_replication_through_sasl_listeners(cluster: LocalCluster) -> None:
    """Both brokers registered through the SASL controller listener (the cluster is ready),
    and the follower replicates over the SCRAM inter-broker listener: acks=all succeeds with
    both replicas in sync, and the records read back."""
    topic = f"sasl-replicated-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for index in range(20):
        producer.produce(topic, b"%d" % index)
    assert producer.flush(30) == 0

    def both_in_sync() -> None:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        assert sorted(partition.isrs) == sorted(cluster.broker_ids), partition

    eventually(both_in_sync, timeout_s=30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []

        def read_all() -> None:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
            assert len(values) == 20

        eventually(read_all, timeout_s=30, interval_s=0)
        assert values == [b"%d" % index for index in range(20)]
    finally:
        consumer.close()
    for node in cluster.nodes.values():
        log = node.log_path.read_text(errors="replace")
        assert "SASL authentication" not in log, node.tail_log()
