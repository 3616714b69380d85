"""ACLs against a real node: confluent-kafka's AdminClient creates, describes and deletes
bindings (CreateAcls/DescribeAcls/DeleteAcls, committed as metadata records), Kafka's
refusals come back per creation, and the bindings survive a metadata snapshot and a restart.

One combined node per module, with the StandardAuthorizer and the PLAINTEXT principal
(User:ANONYMOUS) a super user, so the admin client may change ACLs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.create_acls.v3 import request as create_v3
from kio.schema.delete_acls.v3 import request as delete_v3
from kio.schema.describe_acls.v3 import request as describe_v3
from kio.schema.errors import ErrorCode

from pykraft.cli.protocol_client import ProtocolClient
from pykraft.protocol.api import ApiKey
from pykraft.testing.local_cluster import LocalCluster
from pykraft.testing.ports import free_port
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import pykraft

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
CONFIGS = {
    "authorizer.class.name": STANDARD,
    "super.users": "User:ANONYMOUS",
    # a snapshot after a few records, so the bindings are read back from one on restart
    "metadata.log.max.record.bytes.between.snapshots": "1000",
    "metadata.log.max.snapshot.interval.ms": "0",
}
TIMEOUT_S = 15.0


SASL_PORTS: dict[str, int] = {}  # the module node's SASL_PLAINTEXT listener, for alice


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    sasl_port = free_port()
    cluster = LocalCluster(combined=1)
    member = cluster.nodes[1]
    cluster.set_node_configs(1, {
        **CONFIGS,
        "listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                     f"SASL://127.0.0.1:{sasl_port},"
                     f"CONTROLLER://127.0.0.1:{member.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{member.broker_port},"
                                f"SASL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";',
    })
    SASL_PORTS["alice"] = sasl_port
    with cluster:
        yield cluster.nodes[1]


def admin(node: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.bootstrap_servers})


def binding(name: str, principal: str = "User:alice", *,
            kind: ResourceType = ResourceType.TOPIC,
            pattern: ResourcePatternType = ResourcePatternType.LITERAL,
            operation: AclOperation = AclOperation.READ,
            permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, "*", operation, permission)


def any_filter(name: str | None = None,
               pattern: ResourcePatternType = ResourcePatternType.ANY) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.ANY, name, pattern, None, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def create(client: AdminClient, bindings: list[AclBinding]) -> None:
    for future in client.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        future.result()


def describe(client: AdminClient, acl_filter: AclBindingFilter) -> set[AclBinding]:
    return set(client.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result())


def test_admin_client_creates_describes_and_deletes(node: LocalCluster) -> None:
    """confluent-kafka's create_acls/describe_acls/delete_acls: the bindings are listed
    back by ANY and MATCH filters, a deletion lists what it removed, and the rest stay."""
    client = admin(node)
    made = [binding("rt-orders"), binding("rt-ord", "User:bob",
                                          pattern=ResourcePatternType.PREFIXED,
                                          operation=AclOperation.WRITE),
            binding("rt-app", kind=ResourceType.GROUP, operation=AclOperation.ALL,
                    permission=AclPermissionType.DENY)]
    create(client, made)
    create(client, made[:1])  # an existing binding again: no second record, success
    assert set(made) <= describe(client, any_filter())
    listed = client.describe_acls(any_filter("rt-orders"), request_timeout=TIMEOUT_S).result()
    assert listed == [made[0]]  # created twice, stored once
    match = describe(client, any_filter("rt-orders", ResourcePatternType.MATCH))
    assert set(made[:2]) <= match and made[2] not in match
    assert describe(client, any_filter("rt-ord", ResourcePatternType.LITERAL)) == set()

    deleted = client.delete_acls([any_filter("rt-ord", ResourcePatternType.PREFIXED)],
                                 request_timeout=TIMEOUT_S)
    assert [set(f.result()) for f in deleted.values()] == [{made[1]}]
    remaining = describe(client, any_filter())
    assert made[0] in remaining and made[2] in remaining and made[1] not in remaining


def test_invalid_creations_are_refused_with_kafkas_messages(node: LocalCluster) -> None:
    """Raw CreateAcls: a MATCH pattern, an empty name, a principal without a type and a
    cluster with another name are each INVALID_REQUEST with Kafka's message; the valid
    creation beside them is made."""
    def creation(name: str, *, pattern: int = 3, principal: str = "User:carol",
                 kind: int = 2) -> create_v3.AclCreation:
        return create_v3.AclCreation(resource_type=kind, resource_name=name,
                                     resource_pattern_type=pattern, principal=principal,
                                     host="*", operation=3, permission_type=3)

    with WireClient(node.bootstrap_servers) as wire:
        answer = wire.request(ApiKey.CREATE_ACLS, 3, create_v3.CreateAclsRequest(creations=(
            creation("x", pattern=2), creation(""), creation("x", principal="carol"),
            creation("other", kind=4), creation("rt-valid"))))
    assert [(r.error_code, r.error_message) for r in answer.results] == [
        (ErrorCode.invalid_request, "Invalid patternType MATCH"),
        (ErrorCode.invalid_request, "Resource name should not be empty"),
        (ErrorCode.invalid_request, "Could not parse principal from `carol` (no colon is "
         "present separating the principal type from the principal name)"),
        (ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is "
         "kafka-cluster"),
        (ErrorCode.none, None)]
    assert binding("rt-valid", "User:carol") in describe(admin(node), any_filter("rt-valid"))


def _snapshots(node: LocalCluster) -> list[Path]:
    return sorted((node.data_dir).rglob("__cluster_metadata-0/*.checkpoint"))


def test_bindings_survive_a_snapshot_and_a_restart(node: LocalCluster) -> None:
    """Bindings written before the latest metadata snapshot and after it are all back after
    a kill -9 and restart (the node loads the snapshot, then the log after it)."""
    client = admin(node)
    before = [binding(f"rs-{i}", f"User:u{i}") for i in range(20)]
    create(client, before)
    first = {p.name for p in _snapshots(node)}
    deadline = time.monotonic() + TIMEOUT_S
    while not {p.name for p in _snapshots(node)} - first or not _snapshots(node):
        assert time.monotonic() < deadline, "no metadata snapshot after the bindings"
        create(client, [binding(f"rs-pad-{time.monotonic_ns()}")])
        time.sleep(0.1)
    after = binding("rs-after", "User:late", operation=AclOperation.DESCRIBE)
    create(client, [after])
    position = node.log_path.stat().st_size
    node.kill()
    node.start()
    with node.log_path.open(errors="replace") as log:
        log.seek(position)
        assert "loaded metadata snapshot" in log.read()
    found = describe(admin(node), any_filter())
    assert set(before) | {after} <= found
    with pytest.raises(KafkaException):  # still a secured node: a bad creation is refused
        create(admin(node), [binding("", "User:x")])


def test_the_acls_tool_adds_lists_and_removes(node: LocalCluster) -> None:
    """`pykraft acls` in kafka-acls.sh's shape: --add prints AclCommand's lines, a second
    --add reports the binding exists, --list shows the resource's entries, --producer with
    --idempotent makes the topic and cluster bindings, --remove asks (no: nothing removed)
    and --force removes."""
    bootstrap = ("--bootstrap-server", node.bootstrap_servers)
    added = pykraft("acls", *bootstrap, "--add", "--allow-principal", "User:alice",
                    "--operation", "Read", "--operation", "describe", "--topic", "cli-t")
    assert added.returncode == 0, added.stderr
    pattern = "ResourcePattern(resourceType=TOPIC, name=cli-t, patternType=LITERAL)"
    assert added.stdout == (
        f"Adding ACLs for resource `{pattern}`: \n"
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n")
    again = pykraft("acls", *bootstrap, "--add", "--allow-principal", "User:alice",
                    "--operation", "Read", "--topic", "cli-t")
    assert again.stdout == (f"Acl (pattern={pattern}, entry=(principal=User:alice, host=*, "
                            "operation=READ, permissionType=ALLOW)) already exists.\n")
    listed = pykraft("acls", *bootstrap, "--list", "--topic", "cli-t")
    assert listed.stdout == (
        f"Current ACLs for resource `{pattern}`:\n"
        "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n")

    producer = pykraft("acls", *bootstrap, "--add", "--allow-principal", "User:prod",
                       "--producer", "--topic", "cli-p", "--idempotent")
    assert producer.returncode == 0, producer.stderr
    cluster = describe(admin(node), AclBindingFilter(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:prod", None,
        AclOperation.ANY, AclPermissionType.ANY))
    assert {b.operation for b in cluster} == {AclOperation.IDEMPOTENT_WRITE}
    topic = describe(admin(node), any_filter("cli-p"))
    assert {b.operation for b in topic} == {AclOperation.WRITE, AclOperation.DESCRIBE,
                                           AclOperation.CREATE}

    declined = pykraft("acls", *bootstrap, "--remove", "--topic", "cli-t", stdin="n\n")
    assert declined.stdout.startswith("Are you sure you want to delete all ACLs for resource "
                                      f"filter `{pattern}`? (y/n)")
    assert len(describe(admin(node), any_filter("cli-t"))) == 2
    removed = pykraft("acls", *bootstrap, "--remove", "--topic", "cli-t", "--force")
    assert removed.returncode == 0, removed.stderr
    assert describe(admin(node), any_filter("cli-t")) == set()


def test_a_broker_forwards_acl_changes_to_the_controller_process() -> None:
    """A controller and a broker in separate processes: CreateAcls and DeleteAcls sent to
    the broker go to the controller over its listener (the broker's principal trusted
    there), and the broker's own authorizer and DescribeAcls follow the committed records."""
    with LocalCluster(controllers=1, brokers=1, configs=CONFIGS) as cluster:
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        made = [binding("fw-orders"), binding("fw-", "User:bob",
                                              pattern=ResourcePatternType.PREFIXED)]
        create(client, made)
        deadline = time.monotonic() + TIMEOUT_S
        while describe(client, any_filter()) != set(made):
            assert time.monotonic() < deadline, "the broker never saw the bindings"
            time.sleep(0.1)
        deleted = client.delete_acls([any_filter("fw-orders")], request_timeout=TIMEOUT_S)
        assert [set(f.result()) for f in deleted.values()] == [{made[0]}]
        with WireClient(cluster.bootstrap_servers) as wire:  # a refusal comes back as is
            answer = wire.request(ApiKey.CREATE_ACLS, 3, create_v3.CreateAclsRequest(
                creations=(create_v3.AclCreation(
                    resource_type=2, resource_name="", resource_pattern_type=3,
                    principal="User:x", host="*", operation=3, permission_type=3),)))
        assert [(r.error_code, r.error_message) for r in answer.results] == [
            (ErrorCode.invalid_request, "Resource name should not be empty")]


def test_changing_acls_needs_alter_on_the_cluster(node: LocalCluster, tmp_path: Path) -> None:
    """User:alice over SASL/PLAIN: without ACLs her CreateAcls and DescribeAcls are refused
    CLUSTER_AUTHORIZATION_FAILED (`pykraft acls --list --command-config` says so and exits
    1); once granted ALTER on the cluster she creates bindings and, ALTER implying DESCRIBE,
    lists them, with the tool too."""
    alice = AdminClient({"bootstrap.servers": f"127.0.0.1:{SASL_PORTS['alice']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": "alice-secret"})
    wanted = binding("al-topic", "User:dave")
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED|[Aa]uthoriz"):
        create(alice, [wanted])
    # librdkafka drops DescribeAcls' top-level error (its result is an empty list): ask raw
    raw = ProtocolClient(f"127.0.0.1:{SASL_PORTS['alice']}", timeout_s=TIMEOUT_S, properties={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                            'required username="alice" password="alice-secret";'})
    _, described = raw.request(ApiKey.DESCRIBE_ACLS, "DescribeAcls", (3, 3), lambda m, _: (
        m.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                              pattern_type_filter=1, principal_filter=None, host_filter=None,
                              operation=1, permission_type=1)))
    assert (described.error_code, described.resources) == (
        ErrorCode.cluster_authorization_failed, ())
    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule"
                      ' required username="alice" password="alice-secret";\n')
    tool = ("acls", "--bootstrap-server", f"127.0.0.1:{SASL_PORTS['alice']}",
            "--command-config", str(config))
    refused = pykraft(*tool, "--list")
    assert refused.returncode == 1 and refused.stderr.strip().endswith(
        "Error while executing ACL command: Cluster authorization failed."), refused.stderr
    create(admin(node), [binding("kafka-cluster", "User:alice", kind=ResourceType.BROKER,
                                 operation=AclOperation.ALTER)])
    deadline = time.monotonic() + TIMEOUT_S
    while True:  # the grant is committed; the broker's authorizer has it a moment later
        try:
            create(alice, [wanted])
            break
        except KafkaException:
            assert time.monotonic() < deadline, "alice never got ALTER on the cluster"
            time.sleep(0.1)
    assert wanted in describe(alice, any_filter("al-topic"))
    listed = pykraft(*tool, "--list", "--topic", "al-topic")
    assert listed.returncode == 0 and "(principal=User:dave, host=*, operation=READ, " \
        "permissionType=ALLOW)" in listed.stdout, listed.stderr


def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _names_on(address: str) -> set[str]:
    """The resource names of the bindings one node's DescribeAcls lists (its own image)."""
    with WireClient(address) as wire:
        answer = wire.request(ApiKey.DESCRIBE_ACLS, 3, describe_v3.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1))
    assert answer.error_code == ErrorCode.none, answer
    return {resource.resource_name for resource in answer.resources}


@pytest.mark.slow  # a fault test; in ./scripts/test-long to keep CI under 30 minutes
def test_bindings_survive_controller_failover_and_reach_a_broker_that_was_down() -> None:
    """Three controllers and a broker: a binding made before the active controller is
    killed is kept by the next one, which takes new ones; bindings changed on a controller
    while the broker is down are what the broker lists once it is back and caught up, and
    the killed controller, restarted, has them all too."""
    with LocalCluster(controllers=3, brokers=1, configs=CONFIGS,
                      startup_timeout_s=60) as cluster:
        client = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        create(client, [binding("fo-before")])
        leader = cluster.active_controller()
        cluster.kill_node(leader)
        _until(lambda: cluster.active_controller() not in (-1, leader), "a new leader")
        create(client, [binding("fo-after")])
        assert {"fo-before", "fo-after"} <= {b.name for b in describe(client, any_filter())}

        broker = cluster.broker_ids[0]
        cluster.kill_node(broker)
        active = cluster.nodes[cluster.active_controller()]
        with WireClient(f"127.0.0.1:{active.controller_port}") as wire:  # KIP-919's way
            created = wire.request(ApiKey.CREATE_ACLS, 3, create_v3.CreateAclsRequest(
                creations=(create_v3.AclCreation(
                    resource_type=2, resource_name="fo-while-down", resource_pattern_type=3,
                    principal="User:alice", host="*", operation=3, permission_type=3),)))
            deleted = wire.request(ApiKey.DELETE_ACLS, 3, delete_v3.DeleteAclsRequest(
                filters=(delete_v3.DeleteAclsFilter(
                    resource_type_filter=2, resource_name_filter="fo-before",
                    pattern_type_filter=3, principal_filter=None, host_filter=None,
                    operation=1, permission_type=1),)))
        assert [r.error_code for r in created.results] == [ErrorCode.none]
        assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
        cluster.restart_node(broker)
        broker_address = cluster.nodes[broker].bootstrap_servers
        _until(lambda: {"fo-after", "fo-while-down"} <= _names_on(broker_address)
               and "fo-before" not in _names_on(broker_address), "the broker's bindings")
        cluster.restart_node(leader)
        old_leader = f"127.0.0.1:{cluster.nodes[leader].controller_port}"
        _until(lambda: {"fo-after", "fo-while-down"} <= _names_on(old_leader)
               and "fo-before" not in _names_on(old_leader), "the old leader's bindings")
