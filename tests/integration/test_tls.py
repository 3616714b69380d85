"""SSL listeners on one real node of this module's own (certificates from a throwaway CA,
testing/certs.py): confluent-kafka, kafka-python and aiokafka each produce and consume over
SSL without a client certificate (ssl.client.auth=none) and with one (a listener with
ssl.client.auth=required); a client that does not trust the node's certificate fails with its
SSL error; a client whose certificate the node does not trust is refused, the reason is in
the node's log, and the node keeps serving the others. The node's PLAINTEXT listener stays
for LocalCluster's readiness checks."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pykraft.testing import LocalCluster
from pykraft.testing.certs import CertificateAuthority, PemFiles
from pykraft.testing.ports import free_port
from tests.integration.tool_helpers import confluent_round_trip as shared_round_trip
from tests.integration.tool_helpers import eventually


@dataclass
class TlsNode:
    cluster: LocalCluster
    ssl: str  # host:port of the SSL listener (no client certificate asked)
    mtls: str  # host:port of the one with ssl.client.auth=required
    sasl_ssl: str  # host:port of a SASL_SSL listener (PLAIN)
    node: PemFiles  # the node's files; .ca is the CA clients trust
    alice: PemFiles  # a client certificate the node trusts
    mallory: PemFiles  # one from another CA
    stranger_ca: Path  # a CA that did not sign the node's certificate


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsNode]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority.create()
    node_files = ca.issue("node-1").write_pem(certs / "node", password="node-key-secret")
    p12 = ca.issue("node-1").write_pkcs12(certs / "node.p12", "store-secret")
    alice = ca.issue("alice", organizational_unit="eng").write_pem(certs / "alice")
    other = CertificateAuthority.create("another CA")
    mallory = other.issue("mallory").write_pem(certs / "mallory")
    stranger_ca = other.write_pem(certs / "other-ca.pem")
    ssl_port, mtls_port, sasl_port = free_port(), free_port(), free_port()
    cluster = LocalCluster()
    broker, controller = cluster.broker_port, cluster.controller_port
    cluster.extra_configs.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},"
                     f"SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls_port},"
                     f"SASLSSL://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker},SSL://127.0.0.1:{ssl_port},"
                                f"MTLS://127.0.0.1:{mtls_port},SASLSSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                          "MTLS:SSL,SASLSSL:SASL_SSL",
        # SASL_SSL: TLS with the un-prefixed keys (the SSL listener's prefixed ones win there)
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(node_files.keystore),
        "ssl.key.password": "node-key-secret",
        "listener.name.saslssl.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.saslssl.plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'user_alice="alice-secret";',
        # the SSL listener: a PEM key store with an encrypted key
        "listener.name.ssl.ssl.keystore.type": "PEM",
        "listener.name.ssl.ssl.keystore.location": str(node_files.keystore),
        "listener.name.ssl.ssl.key.password": "node-key-secret",
        # the mTLS listener: a PKCS12 key store, a PEM trust store, client certificates asked
        "listener.name.mtls.ssl.keystore.type": "PKCS12",
        "listener.name.mtls.ssl.keystore.location": str(p12),
        "listener.name.mtls.ssl.keystore.password": "store-secret",
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.location": str(node_files.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        # the user a certificate speaks for: CN=alice,OU=eng,... is User:alice
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/L,"
                                                          "DEFAULT",
        # ACLs decide for the topics that have some; every other resource is open
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "group.initial.rebalance.delay.ms": "0",
    })
    cluster._write_config()
    try:
        cluster.start()
        yield TlsNode(cluster, f"127.0.0.1:{ssl_port}", f"127.0.0.1:{mtls_port}",
                      f"127.0.0.1:{sasl_port}", node_files, alice, mallory, stranger_ca)
    finally:
        cluster.close()


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def _client_files(node: TlsNode, mtls: bool) -> tuple[str, PemFiles | None]:
    return (node.mtls, node.alice) if mtls else (node.ssl, None)


# -- confluent-kafka ---------------------------------------------------------------------


def confluent_config(address: str, ca: Path, identity: PemFiles | None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap.servers": address, "security.protocol": "SSL",
                              "ssl.ca.location": str(ca)}
    if identity is not None:
        config.update({"ssl.certificate.location": str(identity.certificate),
                       "ssl.key.location": str(identity.key)})
    return config


def confluent_round_trip(config: dict[str, Any]) -> None:
    shared_round_trip(config, _topic(), b"over tls")


@pytest.mark.parametrize("mtls", [False, True], ids=["server-auth", "mtls"])
def test_confluent_kafka_produces_and_consumes(node: TlsNode, mtls: bool) -> None:
    address, identity = _client_files(node, mtls)
    confluent_round_trip(confluent_config(address, node.node.ca, identity))


def test_confluent_kafka_over_sasl_ssl(node: TlsNode) -> None:
    config = confluent_config(node.sasl_ssl, node.node.ca, None)
    confluent_round_trip({**config, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                          "sasl.username": "alice", "sasl.password": "alice-secret"})


def test_the_certificate_principal_is_the_user_acls_name(node: TlsNode) -> None:
    """alice's certificate maps to User:alice (ssl.principal.mapping.rules), whom an ACL
    lets write a topic; a client without a certificate is User:ANONYMOUS and is refused."""
    admin = AdminClient({"bootstrap.servers": node.cluster.bootstrap_servers})
    topic = f"secret-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW)], request_timeout=15).values():
        future.result()

    def delivered(config: dict[str, Any]) -> Any:
        outcome: list[Any] = []
        producer = Producer({**config, "message.timeout.ms": 5000})
        producer.produce(topic, b"for alice", on_delivery=lambda error, _: outcome.append(error))
        producer.flush(15)
        return outcome[0] if outcome else "not delivered"

    def alice_writes() -> None:  # once the broker's image has the ACL
        assert delivered(confluent_config(node.mtls, node.node.ca, node.alice)) is None

    eventually(alice_writes)
    refused = delivered(confluent_config(node.ssl, node.node.ca, None))
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def confluent_errors(config: dict[str, Any], until: int) -> list[KafkaError]:
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(e.code() == until for e in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.2)
    return errors


def test_a_client_that_does_not_trust_the_node_fails_with_its_ssl_error(node: TlsNode) -> None:
    errors = confluent_errors(confluent_config(node.ssl, node.stranger_ca, None),
                              KafkaError._SSL)
    ssl_error = next(e for e in errors if e.code() == KafkaError._SSL)
    assert "certificate verify failed" in ssl_error.str()


def test_an_untrusted_client_certificate_is_refused_and_logged(node: TlsNode) -> None:
    """librdkafka sees the connection refused; the node's log has the peer and OpenSSL's
    reason; the node keeps serving a trusted client on the same listener."""
    def refusals() -> list[str]:
        return [line for line in node.cluster.log_path.read_text(errors="replace").splitlines()
                if "TLS handshake with 127.0.0.1:" in line and "listener MTLS failed" in line]

    before = len(refusals())
    errors = confluent_errors(confluent_config(node.mtls, node.node.ca, node.mallory),
                              KafkaError._ALL_BROKERS_DOWN)
    assert errors

    def logged() -> list[str]:
        lines = refusals()
        assert len(lines) > before, lines
        assert "CERTIFICATE_VERIFY_FAILED: self-signed certificate in certificate chain" \
            in lines[-1], lines
        return lines

    eventually(logged)
    confluent_round_trip(confluent_config(node.mtls, node.node.ca, node.alice))


# -- kafka-python --------------------------------------------------------------------------


def kafka_python_config(address: str, ca: Path, identity: PemFiles | None) -> dict[str, Any]:
    config: dict[str, Any] = {"bootstrap_servers": address, "security_protocol": "SSL",
                              "ssl_cafile": str(ca)}
    if identity is not None:
        config.update(ssl_certfile=str(identity.certificate), ssl_keyfile=str(identity.key))
    return config


@pytest.mark.parametrize("mtls", [False, True], ids=["server-auth", "mtls"])
def test_kafka_python_produces_and_consumes(node: TlsNode, mtls: bool) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition

    address, identity = _client_files(node, mtls)
    config = kafka_python_config(address, node.node.ca, identity)
    topic = _topic()
    producer = KafkaProducer(**config)
    try:
        producer.send(topic, b"over tls").get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(**config)
    try:
        consumer.assign([KafkaTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 15
        values: list[bytes] = []
        while not values and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(record.value for record in records)
        assert values == [b"over tls"]
    finally:
        consumer.close()


def test_kafka_python_that_does_not_trust_the_node_cannot_bootstrap(
        node: TlsNode, caplog: pytest.LogCaptureFixture) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    with caplog.at_level(logging.WARNING, logger="kafka"), \
            pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(**kafka_python_config(node.ssl, node.stranger_ca, None),
                      bootstrap_timeout_ms=2000)
    assert any("CERTIFICATE_VERIFY_FAILED" in r.getMessage()
               or "certificate verify failed" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]


# -- aiokafka --------------------------------------------------------------------------------


def aiokafka_config(address: str, ca: Path, identity: PemFiles | None) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    context = create_ssl_context(
        cafile=str(ca), certfile=str(identity.certificate) if identity else None,
        keyfile=str(identity.key) if identity else None)
    return {"bootstrap_servers": address, "security_protocol": "SSL", "ssl_context": context}


@pytest.mark.parametrize("mtls", [False, True], ids=["server-auth", "mtls"])
def test_aiokafka_produces_and_consumes(node: TlsNode, mtls: bool) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    address, identity = _client_files(node, mtls)
    topic = _topic()

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**aiokafka_config(address, node.node.ca, identity))
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"over tls")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**aiokafka_config(address, node.node.ca, identity))
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            batches = await consumer.getmany(timeout_ms=10_000)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == [b"over tls"]


def test_aiokafka_with_an_untrusted_certificate_fails(node: TlsNode) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError

    async def run() -> None:
        producer = AIOKafkaProducer(
            **aiokafka_config(node.mtls, node.node.ca, node.mallory), request_timeout_ms=3000)
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaConnectionError):
        asyncio.run(asyncio.wait_for(run(), 60))


# -- refusals at start -----------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "message"), [
    ({}, "listener SSL uses TLS but has no key store: set "
         "listener.name.ssl.ssl.keystore.location (or ssl.keystore.location)"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "{keystore}",
      "ssl.key.password": "wrong"},
     "(ssl.keystore.location): the key cannot be read: wrong ssl.key.password"),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent/keystore.pem"},
     "cannot read /nonexistent/keystore.pem (ssl.keystore.location): No such file"),
], ids=["no-key-store", "wrong-password", "unreadable"])
def test_a_node_with_an_unusable_key_store_stops_at_start_naming_the_key(
        node: TlsNode, settings: dict[str, str], message: str) -> None:
    values = {key: value.format(keystore=node.node.keystore) for key, value in settings.items()}
    cluster = LocalCluster(configs={
        "listeners": "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{},SSL://127.0.0.1:{}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL",
        **values})
    try:
        cluster.extra_configs["listeners"] = cluster.extra_configs["listeners"].format(
            cluster.broker_port, cluster.controller_port, free_port())
        cluster._write_config()
        cluster.format()
        cluster._start_process()
        assert cluster.process is not None
        assert cluster.process.wait(timeout=60) != 0
        log = cluster.log_path.read_text(errors="replace")
        assert message in log, log
        assert "Traceback" not in log, log
    finally:
        cluster.close()


def test_the_node_logged_no_error_or_traceback(node: TlsNode) -> None:
    """After every client above (refused ones included): refusals are INFO lines, nothing
    escaped as an error or a traceback."""
    log = node.cluster.log_path.read_text(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log and " WARNING " not in log, \
        "\n".join(line for line in log.splitlines()
                  if "ERROR" in line or "WARNING" in line or "Traceback" in line)
