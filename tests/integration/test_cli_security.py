"""The tools with --command-config against a real node whose client listeners are
SASL_SSL (PLAIN users from its JAAS config, SCRAM-SHA-512 users made with the configs tool
itself) and SSL with ssl.client.auth=required, and whose controller listener is SSL:
configs, topics, metadata-quorum (through a broker, and finding the active controller),
console-producer/-consumer and broker-api-versions each work with a Kafka client properties
file (PEM and PKCS12 stores, mutual TLS); a wrong password and an untrusted node certificate
are one readable line and exit code 1 from ProtocolClient and confluent-kafka tools alike,
at once (not after the 30 s timeout).

One node for the module; the tools run as a user runs them (subprocesses)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykraft.testing import LocalCluster
from pykraft.testing.certs import CertificateAuthority
from pykraft.testing.ports import free_port
from tests.integration.tool_helpers import eventually, pykraft

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
REFUSED_WITHIN_S = 10.0  # far below the tools' 30 s default.api.timeout.ms
SCRAM_REFUSAL = ("Authentication failed during authentication due to invalid credentials "
                 "with SASL mechanism SCRAM-SHA-512")


@dataclass
class Node:
    cluster: LocalCluster
    sasl: str  # host:port of the SASL_SSL listener
    controller: str  # host:port of the controller listener (SSL)
    mtls: str  # host:port of the SSL listener that requires a client certificate
    files: Path
    trust: Path  # a PEM trust store holding the node's CA

    def properties(self, name: str, mechanism: str, user: str, password: str,
                   trust: Path | None = None) -> str:
        """A Kafka client properties file for the SASL_SSL listener (continuation lines
        and all)."""
        module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        path = self.files / f"{name}.properties"
        path.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism={mechanism}\n"
                        f"sasl.jaas.config={module} required \\\n"
                        f'    username="{user}" \\\n    password="{password}";\n'
                        f"ssl.truststore.type=PEM\n"
                        f"ssl.truststore.location={trust or self.trust}\n")
        return str(path)


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("cli-security test CA")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, ca: CertificateAuthority) -> Iterator[Node]:
    files = tmp_path_factory.mktemp("tls")
    server = ca.issue("node-1").write_pem(files / "node-1")
    sasl_port, mtls_port = free_port(), free_port()
    cluster = LocalCluster()
    broker, controller = cluster.broker_port, cluster.controller_port
    cluster.extra_configs.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller},"
                     f"SECURE://127.0.0.1:{sasl_port},MTLS://127.0.0.1:{mtls_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker},"
                                f"SECURE://127.0.0.1:{sasl_port},MTLS://127.0.0.1:{mtls_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL,"
                                          "SECURE:SASL_SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(server.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.secure.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.secure.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required user_admin="admin-secret";',
        "listener.name.secure.oauthbearer.sasl.jaas.config": f"{OAUTH_MODULE} required;",
    })
    cluster._write_config()
    with cluster:
        yield Node(cluster, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{controller}",
                   f"127.0.0.1:{mtls_port}",
                   tmp_path_factory.mktemp("client"), server.ca)


@pytest.fixture(scope="module")
def scram(node: Node) -> str:
    """alice's SCRAM-SHA-512 properties; the configs tool made her credential, logged in
    with PLAIN over TLS (a ProtocolClient tool)."""
    admin = node.properties("admin", "PLAIN", "admin", "admin-secret")
    made = pykraft("configs", "--bootstrap-server", node.sasl, "--command-config", admin,
                   "--alter", "--entity-type", "users", "--entity-name", "alice",
                   "--add-config", "SCRAM-SHA-512=[iterations=4096,password=alice-secret]")
    assert made.returncode == 0, made.stderr
    assert made.stdout == "Completed updating config for user alice.\n"
    return node.properties("alice", "SCRAM-SHA-512", "alice", "alice-secret")


@pytest.fixture(scope="module")
def mtls(node: Node, ca: CertificateAuthority) -> str:
    """Mutual TLS from PKCS12 stores: a trust store (converted for librdkafka) and a key
    store, under Kafka's default type JKS, as Java reads a PKCS12 file so too."""
    tool = ca.issue("tool-user")
    keystore = tool.write_pkcs12(node.files / "tool.p12", "key-secret")
    truststore = ca.write_pkcs12_truststore(node.files / "trust.p12", "trust-secret")
    path = node.files / "mtls.properties"
    path.write_text(f"security.protocol=SSL\nssl.truststore.location={truststore}\n"
                    f"ssl.truststore.password=trust-secret\nssl.keystore.location={keystore}\n"
                    f"ssl.keystore.password=key-secret\n")
    return str(path)


def test_topics_create_and_list_over_sasl_ssl(node: Node, scram: str) -> None:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    created = pykraft("topics", "--bootstrap-server", node.sasl, "--command-config", scram,
                      "--create", "--topic", topic, "--partitions", "2")
    assert created.returncode == 0, created.stderr
    listed = pykraft("topics", "--bootstrap-server", node.sasl, "--command-config", scram,
                     "--list")
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()


def test_metadata_quorum_status_over_sasl_ssl(node: Node, scram: str) -> None:
    described = pykraft("metadata-quorum", "--bootstrap-server", node.sasl,
                        "--command-config", scram, "describe", "--status")
    assert described.returncode == 0, described.stderr
    assert f"ClusterId:              {node.cluster.cluster_id}" in described.stdout
    assert "LeaderId:               1" in described.stdout


def test_console_producer_and_consumer_over_sasl_ssl(node: Node, scram: str) -> None:
    topic = f"secured-console-{uuid.uuid4().hex[:8]}"
    produced = pykraft("console-producer", "--bootstrap-server", node.sasl,
                       "--producer.config", scram, "--topic", topic, stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = pykraft("console-consumer", "--bootstrap-server", node.sasl,
                       "--consumer.config", scram, "--topic", topic, "--from-beginning",
                       "--max-messages", "2", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two"]


def test_broker_api_versions_reaches_every_broker_over_sasl_ssl(node: Node, scram: str) -> None:
    """The tool connects again to each broker it finds: those connections log in too."""
    answered = pykraft("broker-api-versions", "--bootstrap-server", node.sasl,
                       "--command-config", scram)
    assert answered.returncode == 0, answered.stderr
    assert f"{node.sasl} (id: 1 rack: null isFenced: false) -> (" in answered.stdout
    assert "SaslAuthenticate(36): 0 to 2 [usable: 2]" in answered.stdout
    assert "ERROR" not in answered.stdout


def test_metadata_quorum_finds_the_active_controller_over_tls(node: Node) -> None:
    """--bootstrap-controller: every connection active_controller makes is TLS."""
    path = node.files / "controller.properties"
    path.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={node.trust}\n")
    described = pykraft("metadata-quorum", "--bootstrap-controller", node.controller,
                        "--command-config", str(path), "describe", "--status")
    assert described.returncode == 0, described.stderr
    assert f"ClusterId:              {node.cluster.cluster_id}" in described.stdout


def test_unsecured_oauthbearer_tokens_from_the_jaas_options(node: Node) -> None:
    """OAuthBearerLoginModule's unsecuredLogin* options become librdkafka's unsecured JWT
    settings (topics) and the protocol client's own token (metadata-quorum); the node's
    unsecured validator takes both."""
    path = node.files / "oauth.properties"
    path.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                    f"sasl.jaas.config={OAUTH_MODULE} required \\\n"
                    f'    unsecuredLoginStringClaim_sub="dave" \\\n'
                    f'    unsecuredLoginLifetimeSeconds="300";\n'
                    f"ssl.truststore.type=PEM\nssl.truststore.location={node.trust}\n")
    listed = pykraft("topics", "--bootstrap-server", node.sasl, "--command-config", str(path),
                     "--list")
    assert listed.returncode == 0, listed.stderr
    described = pykraft("metadata-quorum", "--bootstrap-server", node.sasl,
                        "--command-config", str(path), "describe", "--status")
    assert described.returncode == 0, described.stderr
    assert f"ClusterId:              {node.cluster.cluster_id}" in described.stdout


def test_mutual_tls_from_pkcs12_stores(node: Node, mtls: str) -> None:
    """The confluent-kafka path (topics) and the protocol path (metadata-quorum) both
    present the tool's certificate to a listener that requires one."""
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    created = pykraft("topics", "--bootstrap-server", node.mtls, "--command-config", mtls,
                      "--create", "--topic", topic)
    assert created.returncode == 0, created.stderr
    listed = pykraft("topics", "--bootstrap-server", node.mtls, "--command-config", mtls,
                     "--list")
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.split()
    described = pykraft("metadata-quorum", "--bootstrap-server", node.mtls,
                        "--command-config", mtls, "describe", "--status")
    assert described.returncode == 0, described.stderr
    assert f"ClusterId:              {node.cluster.cluster_id}" in described.stdout


@pytest.mark.parametrize(("tool", "message"), [
    (("metadata-quorum", "--bootstrap-server", "{sasl}", "--command-config", "{file}",
      "describe", "--status"), f"Error: {SCRAM_REFUSAL}"),
    (("topics", "--bootstrap-server", "{sasl}", "--command-config", "{file}", "--list"),
     f"Error while executing topic command : {SCRAM_REFUSAL}"),
    (("console-consumer", "--bootstrap-server", "{sasl}", "--consumer.config", "{file}",
      "--topic", "anything", "--max-messages", "1"), f"Error: {SCRAM_REFUSAL}"),
])
def test_a_wrong_password_is_one_line_at_once(node: Node, scram: str, tool: tuple[str, ...],
                                              message: str) -> None:
    wrong = node.properties("alice-wrong", "SCRAM-SHA-512", "alice", "not-her-password")
    argv = [part.format(sasl=node.sasl, file=wrong) for part in tool]
    started = time.monotonic()
    refused = pykraft(*argv)
    assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", message + "\n")
    assert time.monotonic() - started < REFUSED_WITHIN_S


def test_an_unknown_plain_user_is_kafkas_plain_message(node: Node) -> None:
    stranger = node.properties("stranger", "PLAIN", "mallory", "guess")
    refused = pykraft("broker-api-versions", "--bootstrap-server", node.sasl,
                      "--command-config", stranger)
    assert (refused.returncode, refused.stderr) == (
        1, "Error: Authentication failed: Invalid username or password\n")


@pytest.mark.parametrize("tool", ["metadata-quorum", "topics"])
def test_an_untrusted_node_certificate_is_one_line_at_once(node: Node, tool: str) -> None:
    """The node sends its chain up to its CA, which the tool does not trust."""
    other = CertificateAuthority.create("someone else's CA").write_pem(node.files / "other.pem")
    properties = node.properties(f"untrusting-{tool}", "PLAIN", "admin", "admin-secret",
                                 trust=other)
    argv = ([tool, "--bootstrap-server", node.sasl, "--command-config", properties]
            + (["describe", "--status"] if tool == "metadata-quorum" else ["--list"]))
    started = time.monotonic()
    refused = pykraft(*argv)
    prefix = "Error: " if tool == "metadata-quorum" else "Error while executing topic command : "
    assert refused.returncode == 1
    assert refused.stderr == (f"{prefix}SSL handshake with {node.sasl} failed: self-signed "
                              "certificate in certificate chain\n")
    assert time.monotonic() - started < REFUSED_WITHIN_S


def test_the_wrong_security_protocol_for_a_listener_is_one_line(node: Node) -> None:
    """SASL or TLS settings pointed at the node's PLAINTEXT listener: one line each, at once
    (the listener answers SaslHandshake with ILLEGAL_SASL_STATE; it closes on a TLS
    ClientHello)."""
    plaintext = node.cluster.bootstrap_servers
    sasl = node.properties("sasl-at-plaintext", "PLAIN", "admin", "admin-secret")
    path = Path(sasl)
    path.write_text(path.read_text().replace("SASL_SSL", "SASL_PLAINTEXT"))
    refused = pykraft("metadata-quorum", "--bootstrap-server", plaintext, "--command-config",
                      sasl, "describe", "--status")
    assert (refused.returncode, refused.stderr) == (
        1, f"Error: Authentication failed: {plaintext} does not take SASL (ILLEGAL_SASL_STATE): "
           "is security.protocol right for this listener?\n")
    tls = node.files / "tls-at-plaintext.properties"
    tls.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\n"
                   f"ssl.truststore.location={node.trust}\n")
    refused = pykraft("topics", "--bootstrap-server", plaintext, "--command-config", str(tls),
                      "--list")
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"Error while executing topic command : SSL handshake "
                                     f"with {plaintext} failed: ")
    assert refused.stderr.count("\n") == 1


def test_the_node_keeps_serving_after_refused_logins(node: Node, scram: str) -> None:
    def listed() -> None:
        answered = pykraft("topics", "--bootstrap-server", node.sasl, "--command-config",
                           scram, "--list")
        assert answered.returncode == 0, answered.stderr
    eventually(listed)
