"""A cluster of 3 controllers and 2 brokers whose controller listener is SSL and whose
inter-broker listener is SASL_SSL (PLAIN), both with client certificates required (mTLS
between the nodes, each node its own certificate from one throwaway CA): the quorum forms over
TLS (controller.quorum.voters names the SSL controller listeners only), brokers register and
heartbeat over it, replication works through the inter-broker listener (acks=all with
min.insync.replicas=2 succeeds only when the follower fetches), and so do a transaction's
markers to the other broker. Each node keeps a PLAINTEXT listener, which is what
LocalCluster's readiness checks and this test's clients use."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykraft.testing import LocalCluster
from pykraft.testing.certs import CertificateAuthority
from pykraft.testing.ports import free_port
from tests.integration.tool_helpers import eventually

_PROTOCOLS = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CSSL:SSL,INTERNAL:SASL_SSL"
_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
         'username="broker" password="broker-secret" user_broker="broker-secret";')


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority.create()
    local = LocalCluster(controllers=3, brokers=2, configs={
        "listener.security.protocol.map": _PROTOCOLS,
        # brokers reach the controllers on CSSL, the first controller listener
        "controller.listener.names": "CSSL,CONTROLLER",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": _JAAS,
    })
    ssl_ports = {node_id: free_port() for node_id in local.nodes}
    voters = ",".join(f"{i}@127.0.0.1:{ssl_ports[i]}" for i in local.controller_ids)
    for node_id, node in local.nodes.items():
        files = ca.issue(f"node-{node_id}", hosts=("127.0.0.1",)).write_pem(
            certs / f"node-{node_id}", password=f"key-{node_id}")
        tls: dict[str, str] = {}
        for listener in ("cssl", "internal"):  # the same key and trust on both
            prefix = f"listener.name.{listener}.ssl"
            tls |= {f"{prefix}.keystore.type": "PEM",
                    f"{prefix}.keystore.location": str(files.keystore),
                    f"{prefix}.key.password": f"key-{node_id}",
                    f"{prefix}.truststore.type": "PEM",
                    f"{prefix}.truststore.location": str(files.ca),
                    f"{prefix}.client.auth": "required"}
        if node.roles == "controller":
            listeners = (f"CONTROLLER://127.0.0.1:{node.controller_port},"
                         f"CSSL://127.0.0.1:{ssl_ports[node_id]}")
            shape = {"listeners": listeners, "advertised.listeners": ""}
        else:
            listeners = (f"PLAINTEXT://127.0.0.1:{node.broker_port},"
                         f"INTERNAL://127.0.0.1:{ssl_ports[node_id]}")
            shape = {"listeners": listeners, "advertised.listeners": listeners,
                     "inter.broker.listener.name": "INTERNAL"}
        local.set_node_configs(node_id, {**shape, **tls, "controller.quorum.voters": voters})
    with local:
        yield local


def test_replication_through_the_ssl_inter_broker_listener(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    created = admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2,
                                            config={"min.insync.replicas": "2"})])
    created[topic].result(timeout=30)

    def in_sync() -> None:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        assert len(partitions) == 2
        assert all(sorted(p.isrs) == sorted(cluster.broker_ids) for p in partitions.values())

    eventually(in_sync, timeout_s=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    delivered: list[Any] = []
    for index in range(20):
        producer.produce(topic, f"record-{index}".encode(), partition=index % 2,
                         on_delivery=lambda error, _: delivered.append(error))
    assert producer.flush(30) == 0
    assert delivered == [None] * 20  # both replicas of each partition have every record
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{topic}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < 20 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
        assert values == {f"record-{index}".encode() for index in range(20)}
    finally:
        consumer.close()


def test_a_transaction_across_both_brokers(cluster: LocalCluster) -> None:
    """The coordinator's markers reach the other broker over the SASL_SSL listener."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic] \
        .result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers,
                         "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition in range(4):  # partitions led by both brokers
        producer.produce(topic, f"txn-{partition}".encode(), partition=partition)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                         "group.id": f"g-{topic}", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(4)])
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
        assert values == {f"txn-{p}".encode() for p in range(4)}
    finally:
        consumer.close()


def test_the_nodes_reach_each_other_only_over_tls(cluster: LocalCluster) -> None:
    """Every node's log shows its TLS listener, no node refused another's certificate (each
    checks the others' against the CA, host name included), and nothing failed."""
    for node in cluster.nodes.values():
        log = node.log_path.read_text(errors="replace")
        assert "listener CSSL on" in log or "listener INTERNAL on" in log, node.node_id
        assert "CERTIFICATE_VERIFY_FAILED" not in log, node.tail_log()
        assert "Traceback" not in log and " ERROR " not in log, node.tail_log(200)
