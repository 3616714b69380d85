"""ACLs and SCRAM credentials are metadata records: they survive a metadata snapshot, a
failover of the active controller, a broker that was down while they changed, and a restart
of every node (issue 19, done-when 3).

Three controllers and three brokers, each broker with a SASL_PLAINTEXT listener for the
clients (SCRAM-SHA-512 and PLAIN), the StandardAuthorizer, and User:admin (PLAIN, from the
listener's JAAS config) a super user. The PLAINTEXT listeners are the cluster's own (the
controller quorum, inter-broker replication, LocalCluster's readiness probe and its
DescribeQuorum); their principal, User:ANONYMOUS, is a super user so that they need no ACLs.
alice is a SCRAM user made by AlterUserScramCredentials; every check of what she may do goes
through one broker's SASL listener only, so it is that broker's own image which answers.

The whole story (six nodes, about a minute) is slow-marked, for ./scripts/test-long; CI runs
its down-broker part on one controller and two brokers.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from pykraft.cli.protocol_client import AuthenticationFailed, ProtocolClient
from pykraft.metadata.codec import decode_metadata_record
from pykraft.metadata.records import AccessControlEntryRecord, UserScramCredentialRecord
from pykraft.protocol.api import ApiKey
from pykraft.raft.snapshot import parse_snapshot_file_name, snapshot_values
from pykraft.testing import LocalCluster
from pykraft.testing.ports import free_port

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN_PASSWORD = "admin-secret"
TIMEOUT_S = 30.0
FIND_COORDINATOR = 10  # not in pykraft.protocol.api.ApiKey, which lists the node's own
CONFIGS = {
    "listener.security.protocol.map":
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.name.sasl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
    "listener.name.sasl.plain.sasl.jaas.config":
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'user_admin="{ADMIN_PASSWORD}";',
    "authorizer.class.name": STANDARD,
    "super.users": "User:admin;User:ANONYMOUS",
    # a snapshot after a few records, so that alice's records are read back from one
    "metadata.log.max.record.bytes.between.snapshots": "1000",
    "metadata.log.max.snapshot.interval.ms": "0",
    "offsets.topic.replication.factor": "3",
    "group.initial.rebalance.delay.ms": "0",
}

# alice may write and read every dur- topic and use every dur-g group (PREFIXED), and may
# write `side` (LITERAL); `secret` is nobody's but the admin's
OPEN, DENIED, SIDE, SECRET = "dur-open", "dur-denied", "side", "secret"
TOPICS = (OPEN, DENIED, SIDE, SECRET)
ALICE = "User:alice"
PREFIXED, LITERAL = ResourcePatternType.PREFIXED, ResourcePatternType.LITERAL
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
WRITE_SIDE = AclBinding(ResourceType.TOPIC, SIDE, LITERAL, ALICE, "*", AclOperation.WRITE,
                        ALLOW)
INITIAL_ACLS = [
    AclBinding(ResourceType.TOPIC, "dur-", PREFIXED, ALICE, "*", AclOperation.WRITE, ALLOW),
    AclBinding(ResourceType.TOPIC, "dur-", PREFIXED, ALICE, "*", AclOperation.READ, ALLOW),
    AclBinding(ResourceType.GROUP, "dur-g", PREFIXED, ALICE, "*", AclOperation.READ, ALLOW),
    WRITE_SIDE,
]
# made while a broker is down: DENY wins over the PREFIXED ALLOW on dur-denied
DENY_DENIED = AclBinding(ResourceType.TOPIC, DENIED, LITERAL, ALICE, "*", AclOperation.ALL,
                         DENY)


@dataclass
class Expected:
    """What alice may do: her password, and the Metadata error of each topic for her."""

    password: str
    old_password: str | None = None
    topics: dict[str, int] = field(default_factory=dict)


BEFORE = Expected("alice-1", topics={
    OPEN: ErrorCode.none, DENIED: ErrorCode.none, SIDE: ErrorCode.none,
    SECRET: ErrorCode.topic_authorization_failed})
AFTER = Expected("alice-2", "alice-1", topics={
    OPEN: ErrorCode.none, DENIED: ErrorCode.topic_authorization_failed,
    SIDE: ErrorCode.topic_authorization_failed, SECRET: ErrorCode.topic_authorization_failed})


@dataclass
class Secured:
    cluster: LocalCluster
    sasl_ports: dict[int, int]  # broker id -> its SASL listener's port

    def address(self, broker: int) -> str:
        return f"127.0.0.1:{self.sasl_ports[broker]}"

    def admin(self, broker: int | None = None) -> AdminClient:
        """The super user over SASL/PLAIN, through one broker or any running one."""
        brokers = [broker] if broker is not None else [
            b for b in self.cluster.broker_ids if self.cluster.running(b)]
        return AdminClient({"bootstrap.servers": ",".join(self.address(b) for b in brokers),
                            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                            "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD})


@contextmanager
def _secured_cluster(controllers: int, brokers: int,
                     configs: dict[str, str]) -> Iterator[Secured]:
    """A LocalCluster whose brokers each have a SASL listener besides the PLAINTEXT one."""
    cluster = LocalCluster(controllers=controllers, brokers=brokers, configs=configs,
                           startup_timeout_s=60)
    try:
        ports: dict[int, int] = {}
        for broker in cluster.broker_ids:
            node = cluster.nodes[broker]
            ports[broker] = free_port()
            listeners = (f"PLAINTEXT://127.0.0.1:{node.broker_port},"
                         f"SASL://127.0.0.1:{ports[broker]}")
            cluster.set_node_configs(broker, {"listeners": listeners,
                                              "advertised.listeners": listeners})
        cluster.start()
        yield Secured(cluster, ports)
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    with _secured_cluster(3, 3, CONFIGS) as made:
        yield made


def _until(check: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _alice_client(address: str, password: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": password, **extra}


def _raw(address: str, password: str) -> ProtocolClient:
    """A connection to exactly `address`, logged in as alice with SCRAM-SHA-512."""
    return ProtocolClient(address, timeout_s=10, properties={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                            f'required username="alice" password="{password}";'})


def _topic_errors(client: ProtocolClient) -> dict[str, int]:
    _, answer = client.request(ApiKey.METADATA, "Metadata", (12, 12), lambda m, _: (
        m.MetadataRequest(topics=tuple(m.MetadataRequestTopic(topic_id=None, name=name)
                                       for name in TOPICS),
                          allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)))
    return {str(topic.name): int(topic.error_code) for topic in answer.topics}


def _group_error(client: ProtocolClient, group: str) -> int:
    _, answer = client.request(FIND_COORDINATOR, "FindCoordinator", (4, 4), lambda m, _: (
        m.FindCoordinatorRequest(key_type=0, coordinator_keys=(group,))))
    return int(answer.coordinators[0].error_code)


def _check_broker(address: str, expected: Expected) -> None:
    """The broker at `address`, and it alone, answers alice as `expected` says: her old
    password is refused, her password accepted, each topic's Metadata error is the ACLs',
    a group outside dur-g is refused; and she produces to dur-open and reads it back through
    a dur-g group (the bootstrap, and so the login and the metadata, at `address`)."""
    if expected.old_password is not None:
        with pytest.raises(AuthenticationFailed):
            _raw(address, expected.old_password).close()
    client = _raw(address, expected.password)
    try:
        assert _topic_errors(client) == expected.topics
        assert _group_error(client, "elsewhere") == ErrorCode.group_authorization_failed
        # authorized: found, or (__consumer_offsets not made yet) not available
        assert _group_error(client, "dur-g-probe") in (
            ErrorCode.none, ErrorCode.coordinator_not_available)
    finally:
        client.close()

    value = uuid.uuid4().hex.encode()
    outcome: list[KafkaError | None] = []
    producer = Producer(_alice_client(address, expected.password, **{
        "message.timeout.ms": 20_000, "acks": "all"}))
    producer.produce(OPEN, value, on_delivery=lambda error, _message: outcome.append(error))
    producer.flush(TIMEOUT_S)
    assert outcome == [None]
    consumer = Consumer(_alice_client(address, expected.password, **{
        "group.id": f"dur-g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False}))
    try:
        consumer.subscribe([OPEN])
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            assert time.monotonic() < deadline, "alice never read her record back"
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            if message.value() == value:
                break
    finally:
        consumer.close()


def _check_every_broker(secured: Secured, expected: Expected, *, wait: bool = True) -> None:
    """_check_broker on each broker; with `wait`, once it has the latest changes (they reach
    a broker a moment after the controller commits them)."""
    for broker in secured.cluster.broker_ids:
        if wait:
            _until(lambda: _settled(secured.address(broker), expected),  # noqa: B023
                   f"broker {broker} to have alice's credential and ACLs")
        _check_broker(secured.address(broker), expected)


def _settled(address: str, expected: Expected) -> bool:
    """Whether the broker's image has caught up with `expected` (after which _check_broker
    asserts everything of it)."""
    try:
        client = _raw(address, expected.password)
    except AuthenticationFailed:
        return False
    try:
        return _topic_errors(client) == expected.topics
    finally:
        client.close()


def _snapshot_records(node: LocalCluster) -> list[Any]:
    directory = node.log_dir / "__cluster_metadata-0"
    snapshots = sorted((found.end_offset, path) for path in directory.glob("*.checkpoint")
                       if (found := parse_snapshot_file_name(path.name)) is not None)
    if not snapshots:
        return []
    data = Path(snapshots[-1][1]).read_bytes()
    return [decode_metadata_record(value) for value in snapshot_values([data])]


def _alice_in_snapshot(node: LocalCluster) -> bool:
    records = _snapshot_records(node)
    users = {r.name for r in records if isinstance(r, UserScramCredentialRecord)}
    acls = [r for r in records if isinstance(r, AccessControlEntryRecord)
            and r.principal == ALICE]
    return "alice" in users and len(acls) == len(INITIAL_ACLS)


def _set_password(admin: AdminClient, password: str) -> None:
    upsert = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for future in admin.alter_user_scram_credentials([upsert],
                                                     request_timeout=TIMEOUT_S).values():
        future.result()


def _create_acls(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result()


def _metadata_offset(cluster: LocalCluster, node_id: int) -> int:
    return int(cluster.metadata_image(node_id)[0])


def _change_while_a_broker_is_down(secured: Secured, down: int) -> None:
    """Stop broker `down`; change alice's password, delete her WRITE on `side` and DENY her
    dur-denied through the others; start it again and, as soon as its metadata offset has
    reached theirs, find it refusing the old password and enforcing the new ACLs."""
    cluster = secured.cluster
    others = [b for b in cluster.broker_ids if b != down]
    cluster.kill_node(down, signal.SIGTERM)
    admin = secured.admin()
    _set_password(admin, AFTER.password)
    deleted = admin.delete_acls([AclBindingFilter(
        WRITE_SIDE.restype, WRITE_SIDE.name, WRITE_SIDE.resource_pattern_type,
        WRITE_SIDE.principal, WRITE_SIDE.host, WRITE_SIDE.operation,
        WRITE_SIDE.permission_type)], request_timeout=TIMEOUT_S)
    assert [f.result() for f in deleted.values()] == [[WRITE_SIDE]]
    _create_acls(admin, [DENY_DENIED])
    for broker in others:
        _until(lambda: _settled(secured.address(broker), AFTER),  # noqa: B023
               f"running broker {broker} to have the changes")
    target = max(_metadata_offset(cluster, b) for b in others)
    cluster.restart_node(down)
    _until(lambda: _metadata_offset(cluster, down) >= target,
           f"broker {down} to catch up to metadata offset {target}")
    _check_broker(secured.address(down), AFTER)  # at once: no waiting for it to settle


def _prepare(secured: Secured, replicas: int) -> None:
    """As the admin: the topics, alice's first password and her ACLs."""
    admin = secured.admin()
    for future in admin.create_topics([NewTopic(t, 1, replicas) for t in TOPICS],
                                      request_timeout=TIMEOUT_S).values():
        future.result()
    _set_password(admin, BEFORE.password)
    _create_acls(admin, INITIAL_ACLS)


LEAN_CONFIGS = {**CONFIGS, "offsets.topic.replication.factor": "2"}


def test_a_broker_that_was_down_enforces_the_changes_made_meanwhile() -> None:
    """CI's lean variant (one controller, two brokers) of the down broker part of the slow
    test below."""
    with _secured_cluster(1, 2, LEAN_CONFIGS) as secured:
        _prepare(secured, 2)
        for broker in secured.cluster.broker_ids:
            _until(lambda: _settled(secured.address(broker), BEFORE),  # noqa: B023
                   f"broker {broker} to have alice's credential and ACLs")
        _change_while_a_broker_is_down(secured, secured.cluster.broker_ids[0])


@pytest.mark.slow  # six processes restarted three ways (about a minute): ./scripts/test-long
def test_acls_and_credentials_survive_snapshot_failover_a_down_broker_and_a_full_restart(
        secured: Secured) -> None:
    started = time.monotonic()
    cluster = secured.cluster
    _prepare(secured, 3)
    _check_every_broker(secured, BEFORE)
    admin = secured.admin()

    # -- a snapshot holds them; the active controller dies; the next one serves them --
    leader = cluster.active_controller()
    assert leader in cluster.controller_ids
    padding = 0
    while not _alice_in_snapshot(cluster.nodes[leader]):
        assert padding < 200, "no metadata snapshot holds alice's credential and ACLs"
        padding += 1  # more records (someone else's bindings) until a snapshot is taken
        _create_acls(admin, [AclBinding(ResourceType.TOPIC, f"pad-{padding}", LITERAL,
                                        "User:padding", "*", AclOperation.READ, ALLOW)])
    cluster.kill_node(leader)  # kill -9
    _until(lambda: cluster.active_controller() not in (-1, leader), "a new active controller")
    _check_every_broker(secured, BEFORE)
    admin = secured.admin()  # held: librdkafka ends a collected client's pending calls
    alices = AclBindingFilter(ResourceType.ANY, None,  # type: ignore[arg-type]
                              ResourcePatternType.ANY, ALICE, None,  # type: ignore[arg-type]
                              AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(alices, request_timeout=TIMEOUT_S).result()
    assert set(described) == set(INITIAL_ACLS)
    position = cluster.nodes[leader].log_path.stat().st_size
    cluster.restart_node(leader)  # from its snapshot and log, a follower now
    with cluster.nodes[leader].log_path.open(errors="replace") as log:
        log.seek(position)
        assert "loaded metadata snapshot" in log.read()

    # -- a broker is down while alice's password and ACLs change --
    _change_while_a_broker_is_down(secured, cluster.broker_ids[0])

    # -- every node restarts --
    positions = {i: node.log_path.stat().st_size for i, node in cluster.nodes.items()}
    cluster.stop()
    cluster.start()  # ready: every broker registered and unfenced, so caught up
    for node_id, position in positions.items():
        with cluster.nodes[node_id].log_path.open(errors="replace") as log:
            log.seek(position)
            assert "loaded metadata snapshot" in log.read(), f"node {node_id}"
    _check_every_broker(secured, AFTER, wait=False)
    print(f"security durability module: {time.monotonic() - started:.1f} s")  # noqa: T201
