"""`pykraft configs` (kafka-configs.sh) as a user runs it, against one real node of its own
(the tests alter broker-wide configs, which a shared node should not carry)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykraft.testing.local_cluster import LocalCluster
from tests.integration.tool_helpers import eventually, pykraft

_ENTRY = re.compile(r"  [a-z0-9._-]+=\S* sensitive=(true|false) synonyms=\{.*\}")


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
    """The one error line of a failing command (exit 1, nothing on stdout but headers)."""
    result = pykraft("configs", *argv)
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_topic_configs_add_describe_delete(node: LocalCluster, tmp_path: Path) -> None:
    """Kafka's --add-config syntax (brackets group a list), its describe lines with synonyms,
    --add-config-file, --delete-config and the check that a deleted key exists."""
    bootstrap = node.bootstrap_servers
    topic = f"cfg-{uuid.uuid4().hex[:8]}"
    created = pykraft("topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                      "--partitions", "1", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    server = ("--bootstrap-server", bootstrap)

    assert _ok(*server, "--alter", "--entity-type", "topics", "--entity-name", topic,
               "--add-config", "cleanup.policy=[compact,delete], retention.ms = 86400000") \
        == [f"Completed updating config for topic {topic}."]
    properties = tmp_path / "add.properties"
    properties.write_text("segment.ms=3600000\n")
    assert _ok(*server, "--alter", "--topic", topic, "--add-config-file", str(properties)) \
        == [f"Completed updating config for topic {topic}."]

    def described() -> None:
        assert _ok(*server, "--describe", "--entity-type", "topics", "--entity-name", topic) == [
            f"Dynamic configs for topic {topic} are:",
            "  cleanup.policy=compact,delete sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
            "DEFAULT_CONFIG:log.cleanup.policy=delete}",
            "  retention.ms=86400000 sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}",
            "  segment.ms=3600000 sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=3600000}",
        ]

    eventually(described)

    everything = _ok(*server, "--describe", "--entity-type", "topics", "--entity-name", topic,
                     "--all")
    assert everything[0] == f"All configs for topic {topic} are:"
    assert all(_ENTRY.fullmatch(line) for line in everything[1:]), everything
    assert any(line.startswith("  min.insync.replicas=1 ") for line in everything)

    assert _error(*server, "--alter", "--entity-type", "topics", "--entity-name", topic,
                  "--delete-config", "retention.ms,max.message.bytes") \
        == "Error: Invalid config(s): max.message.bytes"
    assert _ok(*server, "--alter", "--entity-type", "topics", "--entity-name", topic,
               "--delete-config", "retention.ms,segment.ms") \
        == [f"Completed updating config for topic {topic}."]

    def deleted() -> None:
        lines = _ok(*server, "--describe", "--topic", topic)
        assert [line.split("=")[0] for line in lines[1:]] == ["  cleanup.policy"]

    eventually(deleted)
    assert _error(*server, "--describe", "--entity-type", "topics", "--entity-name", "nosuch") \
        .startswith("Error: UNKNOWN_TOPIC_OR_PARTITION")


def test_broker_configs_through_brokers_and_controllers(node: LocalCluster) -> None:
    """Broker configs: the default entity and one broker, asked of that broker or of a
    controller; a describe without a name lists each broker then the defaults."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    assert _ok(*server, "--alter", "--entity-type", "brokers", "--entity-default",
               "--add-config", "log.cleaner.threads=2") \
        == ["Completed updating default config for brokers in the cluster."]
    assert _ok(*server, "--alter", "--broker", "1", "--add-config", "log.cleaner.threads=2") \
        == ["Completed updating config for broker 1."]
    listed = _ok(*server, "--describe", "--entity-type", "brokers")
    headers = [line for line in listed if not line.startswith("  ")]
    assert headers == ["Dynamic configs for broker 1 are:",
                       "Default configs for brokers in the cluster are:"]
    for connection in (server, ("--bootstrap-controller", f"127.0.0.1:{node.controller_port}")):
        everything = _ok(*connection, "--describe", "--entity-type", "brokers",
                         "--entity-name", "1", "--all")
        assert everything[0] == "All configs for broker 1 are:"
        assert all(_ENTRY.fullmatch(line) for line in everything[1:]), everything
        assert "  node.id=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:node.id=1}" \
            in everything
    assert _error(*server, "--describe", "--entity-type", "brokers", "--entity-name", "x") \
        == "Error: The entity name for brokers must be a valid integer broker id, but it is: x"


def test_broker_default_set_described_deleted(node: LocalCluster) -> None:
    """A cluster-wide broker default set by the tool is described as Kafka's dynamic default
    (with its synonym) and can be deleted again."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    _ok(*server, "--alter", "--entity-type", "brokers", "--entity-default",
        "--add-config", "log.cleaner.backoff.ms=16000")

    def described() -> None:
        assert ("  log.cleaner.backoff.ms=16000 sensitive=false synonyms="
                "{DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.backoff.ms=16000}") in _ok(
            *server, "--describe", "--entity-type", "brokers", "--entity-default")

    eventually(described)
    _ok(*server, "--alter", "--broker-defaults", "--delete-config", "log.cleaner.backoff.ms")

    def deleted() -> None:
        assert not any("log.cleaner.backoff.ms" in line for line in _ok(
            *server, "--describe", "--entity-type", "brokers", "--entity-default"))

    eventually(deleted)


def test_quota_configs(node: LocalCluster) -> None:
    """users and clients are quota entities (DescribeClientQuotas / AlterClientQuotas):
    Kafka's lines for a user, a user's client, the default client-id, and its checks."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    user = f"user-{uuid.uuid4().hex[:6]}"
    assert _ok(*server, "--alter", "--entity-type", "users", "--entity-name", user,
               "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2e7") \
        == [f"Completed updating config for user {user}."]
    assert _ok(*server, "--alter", "--user", user, "--client", "app",
               "--add-config", "request_percentage=50") \
        == ["Completed updating config for client app."]  # Kafka names the flags' first type
    assert _ok(*server, "--alter", "--entity-type", "clients", "--entity-default",
               "--add-config", "producer_byte_rate=100") \
        == ["Completed updating default config for clients in the cluster."]

    def described() -> None:
        assert _ok(*server, "--describe", "--entity-type", "users", "--entity-name", user) \
            == [f"Quota configs for user-principal '{user}' are consumer_byte_rate=2.0E7, "
                "producer_byte_rate=1024.0"]
        assert _ok(*server, "--describe", "--entity-type", "users", "--entity-name", user,
                   "--entity-type", "clients", "--entity-name", "app") \
            == [f"Quota configs for user-principal '{user}', client-id 'app' are "
                "request_percentage=50.0"]
        assert _ok(*server, "--describe", "--client-defaults") \
            == ["Quota configs for the default client-id are producer_byte_rate=100.0"]

    eventually(described)
    assert _error(*server, "--alter", "--user", user, "--delete-config",
                  "request_percentage") == "Error: Invalid config(s): request_percentage"
    assert _error(*server, "--alter", "--client", "c", "--add-config", "retention.ms=1") \
        == ("Error: Only quota configs can be added for 'clients' using --bootstrap-server. "
            "Unexpected config names: retention.ms")
    assert _error(*server, "--alter", "--client", "c", "--add-config",
                  "producer_byte_rate=fast") \
        == "Error: Cannot parse quota configuration value for producer_byte_rate: fast"
    _ok(*server, "--alter", "--user", user, "--delete-config", "producer_byte_rate")

    def deleted() -> None:
        assert _ok(*server, "--describe", "--user", user) \
            == [f"Quota configs for user-principal '{user}' are consumer_byte_rate=2.0E7"]

    eventually(deleted)


def test_group_configs(node: LocalCluster) -> None:
    """groups are config resources of type GROUP (KIP-848 group configs)."""
    server = ("--bootstrap-server", node.bootstrap_servers)
    group = f"group-{uuid.uuid4().hex[:6]}"
    assert _ok(*server, "--alter", "--group", group,
               "--add-config", "consumer.session.timeout.ms=50000") \
        == [f"Completed updating config for group {group}."]

    def described() -> None:
        assert _ok(*server, "--describe", "--entity-type", "groups", "--entity-name", group) \
            == [f"Dynamic configs for group {group} are:",
                "  consumer.session.timeout.ms=50000 sensitive=false "
                "synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}"]

    eventually(described)


@pytest.mark.parametrize(("argv", "message"), [
    (("--entity-type", "topics"), "Command must include exactly one action: --describe, --alter"),
    (("--describe", "--entity-type", "topix"), "Invalid entity type topix"),
    (("--alter", "--entity-type", "topics", "--entity-name", "t"),
     "At least one of --add-config, --add-config-file, or --delete-config must be specified"),
    (("--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a"),
     "Invalid entity config: all configs to be added must be in the format \"key=val\"."),
    (("--alter", "--entity-type", "topics", "--entity-name", "t", "--add-config", "a b=1"),
     "Invalid character found for config key: a b"),
    (("--describe", "--entity-type", "topics", "--entity-type", "brokers"),
     "Only 'users' and 'clients' entity types may be specified together"),
])
def test_usage_errors(node: LocalCluster, argv: tuple[str, ...], message: str) -> None:
    """Kafka's argument checks, as one readable line before anything is sent."""
    assert message in _error("--bootstrap-server", node.bootstrap_servers, *argv)
