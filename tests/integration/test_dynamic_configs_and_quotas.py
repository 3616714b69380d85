"""Dynamic broker configs and client quotas as Kafka users see them: through `pykraft
configs` (kafka-configs.sh), confluent-kafka's AdminClient and kafka-python, against one real
node of this module's own (the tests alter broker-wide configs and quotas)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kio.schema.alter_client_quotas.v1 import request as alter_v1
from kio.schema.errors import ErrorCode

from pykraft.testing.local_cluster import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import eventually, pykraft


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        yield cluster


def _ok(*argv: str) -> list[str]:
    result = pykraft("configs", *argv)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


def _error(*argv: str) -> str:
    result = pykraft("configs", *argv)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_broker_dynamic_configs_by_precedence_with_synonyms(node: LocalCluster) -> None:
    """A per-broker value over the cluster default over Kafka's default, each synonym with
    its source; the topic default follows; --delete-config removes the per-broker value."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    assert _ok(*server, "--alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.retention.ms=3600000") \
        == ["Completed updating default config for brokers in the cluster."]
    assert _ok(*server, "--alter", "--entity-type", "brokers", "--entity-name", "1",
               "--add-config", "log.retention.ms=7200000") \
        == ["Completed updating config for broker 1."]

    def described() -> None:
        lines = _ok(*server, "--describe", "--entity-type", "brokers")
        assert lines == [
            "Dynamic configs for broker 1 are:",
            "  log.retention.ms=7200000 sensitive=false synonyms={"
            "DYNAMIC_BROKER_CONFIG:log.retention.ms=7200000, "
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000, "
            "DEFAULT_CONFIG:log.retention.hours=168}",
            "Default configs for brokers in the cluster are:",
            "  log.retention.ms=3600000 sensitive=false synonyms={"
            "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=3600000}",
        ]

    eventually(described)
    everything = _ok(*server, "--describe", "--broker", "1", "--all")
    assert "  log.retention.hours=168 sensitive=false " \
           "synonyms={DEFAULT_CONFIG:log.retention.hours=168}" in everything

    assert _ok(*server, "--alter", "--broker", "1", "--delete-config", "log.retention.ms") \
        == ["Completed updating config for broker 1."]

    def deleted() -> None:
        lines = _ok(*server, "--describe", "--broker", "1")
        assert lines == ["Dynamic configs for broker 1 are:"]

    eventually(deleted)
    assert _ok(*server, "--alter", "--broker-defaults", "--delete-config", "log.retention.ms") \
        == ["Completed updating default config for brokers in the cluster."]


def _produce(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    errors: list[KafkaError | None] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "message.send.max.retries": 0})
    producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(10) == 0
    return errors[0]


def test_the_broker_runs_with_the_dynamic_default_it_reports(node: LocalCluster) -> None:
    """message.max.bytes set on the cluster default: the topic reports it as its
    max.message.bytes (DYNAMIC_DEFAULT_BROKER_CONFIG) and its log refuses a bigger batch;
    deleted, the default is back."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    topic = f"limit-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    assert _produce(node.bootstrap_servers, topic, b"x" * 3000) is None
    _ok(*server, "--alter", "--broker-defaults", "--add-config", "message.max.bytes=2000")
    try:
        def limited() -> None:
            resource = ConfigResource("TOPIC", topic)
            entry = admin.describe_configs([resource])[resource].result(timeout=30)[
                "max.message.bytes"]
            assert (entry.value, entry.source) == \
                ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            error = _produce(node.bootstrap_servers, topic, b"x" * 3000)
            assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE

        eventually(limited)
    finally:
        _ok(*server, "--alter", "--broker-defaults", "--delete-config", "message.max.bytes")

    def unlimited() -> None:
        assert _produce(node.bootstrap_servers, topic, b"x" * 3000) is None

    eventually(unlimited)


def test_read_only_broker_configs_are_refused(node: LocalCluster) -> None:
    """Kafka's list of dynamically updatable broker configs: a read-only key is refused
    with INVALID_REQUEST and Kafka's message, at either level."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    for key, value in (("log.dirs", "/tmp/elsewhere"), ("node.id", "7"),
                       ("process.roles", "broker"), ("log.retention.hours", "1")):
        assert _error(*server, "--alter", "--broker", "1", "--add-config", f"{key}={value}") \
            == f"Error: INVALID_REQUEST: Cannot update these configs dynamically: Set({key})"
    assert _error(*server, "--alter", "--broker-defaults", "--add-config",
                  "ssl.keystore.location=/k") \
        == "Error: INVALID_REQUEST: These security configs can be dynamically updated only " \
           "per-listener using the listener prefix: Set(ssl.keystore.location)"


def test_admin_client_alters_and_describes_broker_and_topic_configs(node: LocalCluster) -> None:
    """confluent-kafka: incremental_alter_configs and alter_configs, describe_configs with
    synonyms (the topic's default follows the broker's dynamic value)."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap_servers})
    topic = f"dyn-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    broker = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry("log.segment.bytes", "2097152",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([broker])[broker].result(timeout=30)

    def broker_described() -> None:
        resource = ConfigResource("BROKER", "1")
        configs = admin.describe_configs([resource])[resource] \
            .result(timeout=30)
        entry = configs["log.segment.bytes"]
        assert (entry.value, entry.source) == \
            ("2097152", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # the client keys synonyms by name: the dynamic one and the default share one
        assert list(entry.synonyms) == ["log.segment.bytes"]
        assert configs["log.dirs"].is_read_only and not entry.is_read_only

        resource = ConfigResource("TOPIC", topic)
        configs = admin.describe_configs([resource])[resource] \
            .result(timeout=30)
        entry = configs["segment.bytes"]
        assert (entry.value, entry.source) == \
            ("2097152", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    eventually(broker_described)

    legacy = ConfigResource("TOPIC", topic, set_config={"retention.ms": "60000"})
    admin.alter_configs([legacy])[legacy].result(timeout=30)

    def topic_described() -> None:
        resource = ConfigResource("TOPIC", topic)
        configs = admin.describe_configs([resource])[resource] \
            .result(timeout=30)
        entry = configs["retention.ms"]
        assert (entry.value, entry.source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        assert list(entry.synonyms) == ["retention.ms"]

    eventually(topic_described)

    refused = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry("log.dirs", "/x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as caught:
        admin.incremental_alter_configs([refused])[refused].result(timeout=30)
    assert "Cannot update these configs dynamically: Set(log.dirs)" in str(caught.value)

    cleanup = ConfigResource("BROKER", "1", incremental_configs=[
        ConfigEntry("log.segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([cleanup])[cleanup].result(timeout=30)


def test_kafka_python_alters_and_describes_broker_configs(node: LocalCluster) -> None:
    """kafka-python: a per-broker change seen with its synonyms in Kafka's order, the
    static node.id read-only with its STATIC synonym."""
    from kafka.admin import ConfigResource as KafkaPythonResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=node.bootstrap_servers)
    try:
        admin.alter_configs([KafkaPythonResource(ConfigResourceType.BROKER, "1",
                                                 configs={"log.roll.ms": "3600000"})],
                            raise_on_unknown=False)

        def described() -> None:
            found = admin.describe_configs(
                [KafkaPythonResource(ConfigResourceType.BROKER, "1")], include_synonyms=True,
                config_filter="all")["broker"]["1"]
            roll = found["log.roll.ms"]
            assert (roll["value"], roll["config_source"], roll["read_only"]) == \
                ("3600000", "DYNAMIC_BROKER_CONFIG", False)
            assert [(s["name"], s["value"], s["source"]) for s in roll["synonyms"]] == [
                ("log.roll.ms", "3600000", "DYNAMIC_BROKER_CONFIG"),
                ("log.roll.hours", "168", "DEFAULT_CONFIG")]
            node_id = found["node.id"]
            assert (node_id["value"], node_id["config_source"], node_id["read_only"]) == \
                ("1", "STATIC_BROKER_CONFIG", True)
            assert node_id["synonyms"] == [
                {"name": "node.id", "value": "1", "source": "STATIC_BROKER_CONFIG"}]

        eventually(described)
        admin.alter_configs([KafkaPythonResource(ConfigResourceType.BROKER, "1",
                                                 configs={"log.roll.ms": ("DELETE", None)})],
                            raise_on_unknown=False)
    finally:
        admin.close()


def test_client_quotas_through_the_tool(node: LocalCluster) -> None:
    """users, clients and ips: alter, describe (exact, default, user+client), delete, and
    Kafka's refusals."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "alice",
               "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048") \
        == ["Completed updating config for user alice."]
    assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "alice",
               "--entity-type", "clients", "--entity-name", "app",
               "--add-config", "request_percentage=50.5") \
        == ["Completed updating config for user alice."]
    assert _ok(*server, "--alter", "--entity-type", "clients", "--entity-default",
               "--add-config", "controller_mutation_rate=10") \
        == ["Completed updating default config for clients in the cluster."]
    assert _ok(*server, "--alter", "--entity-type", "ips", "--entity-name", "10.0.0.1",
               "--add-config", "connection_creation_rate=5") \
        == ["Completed updating config for ip 10.0.0.1."]

    def described() -> None:
        assert _ok(*server, "--describe", "--entity-type", "users", "--entity-name", "alice") \
            == ["Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, "
                "producer_byte_rate=1024.0"]
        assert _ok(*server, "--describe", "--entity-type", "users", "--entity-name", "alice",
                   "--entity-type", "clients", "--entity-name", "app") \
            == ["Quota configs for user-principal 'alice', client-id 'app' are "
                "request_percentage=50.5"]
        assert _ok(*server, "--describe", "--entity-type", "clients", "--entity-default") \
            == ["Quota configs for the default client-id are controller_mutation_rate=10.0"]
        assert _ok(*server, "--describe", "--entity-type", "ips") \
            == ["Quota configs for ip '10.0.0.1' are connection_creation_rate=5.0"]

    eventually(described)

    assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "alice",
               "--delete-config", "producer_byte_rate") \
        == ["Completed updating config for user alice."]

    def deleted() -> None:
        assert _ok(*server, "--describe", "--entity-type", "users", "--entity-name", "alice") \
            == ["Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0"]

    eventually(deleted)
    assert _error(*server, "--alter", "--entity-type", "clients", "--entity-name", "c",
                  "--add-config", "producer_byte_rate=0") \
        == "Error: INVALID_REQUEST: Quota producer_byte_rate must be greater than 0"
    assert _error(*server, "--alter", "--entity-type", "clients", "--entity-name", "c",
                  "--add-config", "producer_byte_rate=1.5") \
        == "Error: INVALID_REQUEST: producer_byte_rate cannot be a fractional value."
    assert _error(*server, "--alter", "--entity-type", "ips", "--entity-name", "not-an-ip!",
                  "--add-config", "connection_creation_rate=5") \
        == "Error: INVALID_REQUEST: not-an-ip! is not a valid IP or resolvable host."
    assert _error(*server, "--alter", "--entity-type", "clients", "--entity-name", "c",
                  "--add-config", "producer_byte_rate=fast") \
        == "Error: Cannot parse quota configuration value for producer_byte_rate: fast"


def test_quotas_go_from_a_broker_to_the_controller_and_back() -> None:
    """A broker that is not a controller forwards AlterClientQuotas (validate_only too) to
    the active controller, describes the result from its own image, and says once that it
    does not enforce quotas."""
    with LocalCluster(controllers=1, brokers=1) as cluster:
        server = ("--bootstrap-server", cluster.bootstrap_servers)
        def entry(kind: str, name: str) -> alter_v1.EntryData:
            return alter_v1.EntryData(
                entity=(alter_v1.EntityData(entity_type=kind, entity_name=name),),
                ops=(alter_v1.OpData(key="producer_byte_rate", value=5.0, remove=False),))

        with WireClient(cluster.bootstrap_servers) as wire:  # validate_only: checked, not set
            answer = wire.request(49, 1, alter_v1.AlterClientQuotasRequest(
                entries=(entry("user", "eve"), entry("ip", "10.1.1.1")), validate_only=True))
        assert [(e.error_code, e.error_message) for e in answer.entries] == [
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "Invalid configuration key producer_byte_rate")]
        assert _error(*server, "--alter", "--entity-type", "users", "--entity-name", "eve",
                      "--add-config", "producer_byte_rate=0.5") \
            == "Error: INVALID_REQUEST: producer_byte_rate cannot be a fractional value."
        for rate in ("100", "200"):
            assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "eve",
                       "--add-config", f"producer_byte_rate={rate}") \
                == ["Completed updating config for user eve."]

        def set_twice() -> None:
            assert _ok(*server, "--describe", "--entity-type", "users") \
                == ["Quota configs for user-principal 'eve' are producer_byte_rate=200.0"]

        eventually(set_twice)  # validate_only wrote nothing: 200 is the only quota
        assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "eve",
                   "--delete-config", "producer_byte_rate") \
            == ["Completed updating config for user eve."]
        assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", "eve",
                   "--add-config", "consumer_byte_rate=300") \
            == ["Completed updating config for user eve."]

        def described() -> None:
            assert _ok(*server, "--describe", "--entity-type", "users") \
                == ["Quota configs for user-principal 'eve' are consumer_byte_rate=300.0"]

        eventually(described)
        broker = cluster.node(cluster.broker_ids[0])
        notices = [line for line in broker.log_path.read_text().splitlines()
                   if "client quotas are set" in line]
        assert len(notices) == 1 and "INFO" in notices[0] and "not enforced" in notices[0]
        controller = cluster.node(cluster.controller_ids[0])
        assert _error("--bootstrap-controller", f"127.0.0.1:{controller.controller_port}",
                      "--describe", "--entity-type", "users").startswith(
            "Error: UNSUPPORTED_VERSION: The node does not support DESCRIBE_CLIENT_QUOTAS")
