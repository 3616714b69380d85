"""Authorization end to end: real confluent-kafka clients authenticated with SASL/PLAIN as
different principals, against a real node running the StandardAuthorizer, with ACLs made by
CreateAcls. A principal without an ACL gets Kafka's authorization error (and sees no topic it
may not describe); with the ACL it succeeds; DENY wins over ALLOW; a PREFIXED binding covers
every topic of its prefix.

One combined node for the module: a PLAINTEXT listener whose principal (User:ANONYMOUS) is a
super user, for the admin and the controller, and a SASL_PLAINTEXT listener for the users.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pykraft.testing.local_cluster import LocalCluster
from pykraft.testing.ports import free_port

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ORDERS = "e2e-orders"  # alice writes and reads it; bob is denied reading it
OTHER = "e2e-other"  # bob reads it through his PREFIXED binding
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def node() -> Iterator[tuple[LocalCluster, str]]:
    sasl_port = free_port()
    cluster = LocalCluster(combined=1)
    member = cluster.nodes[1]
    users = " ".join(f'user_{name}="{password}"' for name, password in PASSWORDS.items())
    cluster.set_node_configs(1, {
        "listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                     f"SASL://127.0.0.1:{sasl_port},"
                     f"CONTROLLER://127.0.0.1:{member.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                                f"SASL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        "authorizer.class.name": STANDARD,
        "super.users": "User:ANONYMOUS",
    })
    with cluster:
        _prepare(cluster.bootstrap_servers)
        yield cluster, f"127.0.0.1:{sasl_port}"


def _allow(name: str, principal: str, operation: AclOperation, *,
           kind: ResourceType = ResourceType.TOPIC,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL,
           permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(kind, name, pattern, f"User:{principal}", "*", operation, permission)


def _prepare(admin_bootstrap: str) -> None:
    """As the super user: the topics, a record in each, and the ACLs."""
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    for future in admin.create_topics([NewTopic(ORDERS, 1, 1), NewTopic(OTHER, 1, 1)],
                                      request_timeout=TIMEOUT_S).values():
        future.result()
    producer = Producer({"bootstrap.servers": admin_bootstrap})
    for topic in (ORDERS, OTHER):
        producer.produce(topic, b"seeded")
    assert producer.flush(TIMEOUT_S) == 0
    group = ResourceType.GROUP
    prefixed = ResourcePatternType.PREFIXED
    bindings = [
        _allow(ORDERS, "alice", AclOperation.WRITE),
        _allow(ORDERS, "alice", AclOperation.READ),
        _allow("e2e-", "alice", AclOperation.READ, kind=group, pattern=prefixed),
        # bob: every e2e- topic and group by prefix, but DENY on the orders topic
        _allow("e2e-", "bob", AclOperation.READ, pattern=prefixed),
        _allow("e2e-", "bob", AclOperation.READ, kind=group, pattern=prefixed),
        _allow(ORDERS, "bob", AclOperation.READ, permission=AclPermissionType.DENY),
    ]
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result()


def _client(bootstrap: str, user: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": PASSWORDS[user], **extra}


def _produce(bootstrap: str, user: str, topic: str) -> KafkaError | None:
    """The delivery error of one record (None: delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer(_client(bootstrap, user, **{"message.timeout.ms": 10_000}))
    producer.produce(topic, b"by " + user.encode(),
                     on_delivery=lambda error, _message: outcome.append(error))
    producer.flush(TIMEOUT_S)
    assert outcome, "the delivery report came"
    return outcome[0]


def _consume(bootstrap: str, user: str, topic: str, group: str) -> tuple[list[bytes],
                                                                        KafkaError | None]:
    """What `user` reads of `topic` from the start, or the error the consumer reports."""
    consumer = Consumer(_client(bootstrap, user, **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not values:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                return values, message.error()
            values.append(message.value())
    finally:
        consumer.close()
    return values, None


def test_a_principal_with_the_acl_produces_and_consumes(node: tuple[LocalCluster, str]) -> None:
    """alice: WRITE and READ on the topic, READ on her group by prefix."""
    _, bootstrap = node
    assert _produce(bootstrap, "alice", ORDERS) is None
    values, error = _consume(bootstrap, "alice", ORDERS, "e2e-alice")
    assert error is None and values and values[0] == b"seeded"


def test_a_principal_without_the_acl_is_refused_and_sees_nothing(
        node: tuple[LocalCluster, str]) -> None:
    """carol has no ACL: her produce fails with TOPIC_AUTHORIZATION_FAILED and her metadata
    names none of the topics."""
    _, bootstrap = node
    error = _produce(bootstrap, "carol", ORDERS)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    admin = AdminClient(_client(bootstrap, "carol"))
    listed = admin.list_topics(timeout=TIMEOUT_S).topics
    assert ORDERS not in listed and OTHER not in listed


def test_deny_wins_over_allow_and_prefixed_covers_the_prefix(
        node: tuple[LocalCluster, str]) -> None:
    """bob's PREFIXED ALLOW READ on e2e- lets him read e2e-other; the LITERAL DENY on
    e2e-orders wins over it there; and he may not write anywhere."""
    _, bootstrap = node
    values, error = _consume(bootstrap, "bob", OTHER, "e2e-bob")
    assert error is None and values == [b"seeded"]
    values, error = _consume(bootstrap, "bob", ORDERS, "e2e-bob-orders")
    assert values == [] and error is not None
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    error = _produce(bootstrap, "bob", OTHER)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_group_without_the_acl_is_refused(node: tuple[LocalCluster, str]) -> None:
    """alice's group ACL is PREFIXED on e2e-: a group outside it is refused with
    GROUP_AUTHORIZATION_FAILED."""
    _, bootstrap = node
    with pytest.raises(KafkaException) as refused:
        consumer = Consumer(_client(bootstrap, "alice", **{
            "group.id": "other-group", "auto.offset.reset": "earliest"}))
        try:
            consumer.subscribe([ORDERS])
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is not None:
                    raise KafkaException(message.error())
        finally:
            consumer.close()
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
