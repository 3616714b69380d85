"""Real-world server.properties shapes format and start; the ones Kafka refuses are refused.

The table holds the shapes Kafka users bring, reconstructed key by key (not copied): Kafka
4.x's own config/server.properties, broker.properties and controller.properties (the dynamic
quorum, controller.quorum.bootstrap.servers), the Apache Kafka docker image's defaults, the
bitnami/kafka KRaft env-derived files (inter.broker.listener.name on every node, the
controllers included), Strimzi-like files (hyphenated listener names, config providers,
ssl.* keys left over from TLS listeners) and Confluent cp-kafka-like files (PLAINTEXT_HOST,
confluent.* keys). Every shape is formatted through the CLI's entry point (`main`, in this
process: format is cheap, an interpreter per shape is not) and must print a warning naming
each key pykraft ignores, and none for the keys it acts on (the shapes' SASL and TLS keys).

Starting costs seconds per node, so one node per role starts as a real `pykraft server start`
process and must answer Metadata (brokers) or ApiVersions (controllers): the Kafka 4 combined
file (a --standalone quorum), and three Kafka 4 controller-only files (`--initial-controllers`,
with inter.broker.listener.name added as templates add it: the key that used to stop a
controller) beside Kafka 4's broker-only file, which learns the voters from one bootstrap
controller. The other shapes are only formatted: they pass the same validation as start-up.
Every refusal is checked through `main` (exit code 1, one readable line); one also through
real `pykraft` processes, at format and start.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from pykraft.cli.main import main
from pykraft.testing import free_port
from pykraft.testing.wire import WireClient
from tests.integration.test_server_commands import Server
from tests.integration.tool_helpers import pykraft

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
IGNORED = "is a Kafka config that pykraft does not use; it is ignored"
UNKNOWN = "was supplied but isn't a known config; it is ignored"
PROTOCOL_MAP = ("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "SASL_SSL:SASL_SSL")


@dataclass(frozen=True)
class Ports:
    broker: int
    controller: int
    controller_id: int = 1  # the voter's id, for the broker-only shapes


Template = Callable[[Ports, Path], dict[str, str]]

# what Kafka's shipped files set on every role: threads, socket buffers, retention
KAFKA_SHIPPED_COMMON = {
    "num.network.threads": "3", "num.io.threads": "8", "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400", "socket.request.max.bytes": "104857600",
    "num.partitions": "1", "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168", "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
}
KAFKA_SHIPPED_IGNORED = ["num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
                         "socket.receive.buffer.bytes",
                         "share.coordinator.state.topic.replication.factor",
                         "share.coordinator.state.topic.min.isr"]


def kafka4_server(ports: Ports, logs: Path) -> dict[str, str]:
    return {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.bootstrap.servers": f"localhost:{ports.controller}",
        "listeners": f"PLAINTEXT://:{ports.broker},CONTROLLER://:{ports.controller}",
        "inter.broker.listener.name": "PLAINTEXT",
        "advertised.listeners": f"PLAINTEXT://localhost:{ports.broker},"
                                f"CONTROLLER://localhost:{ports.controller}",
        "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": PROTOCOL_MAP,
        "log.dirs": str(logs), **KAFKA_SHIPPED_COMMON,
    }


def kafka4_controller(ports: Ports, logs: Path) -> dict[str, str]:
    return {
        "process.roles": "controller", "node.id": str(ports.controller_id),
        "controller.quorum.bootstrap.servers": f"localhost:{ports.controller}",
        "listeners": f"CONTROLLER://:{ports.controller}",
        "advertised.listeners": f"CONTROLLER://localhost:{ports.controller}",
        "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": PROTOCOL_MAP,
        "log.dirs": str(logs), **KAFKA_SHIPPED_COMMON,
    }


def kafka4_broker(ports: Ports, logs: Path) -> dict[str, str]:
    return {
        "process.roles": "broker", "node.id": "2",
        "controller.quorum.bootstrap.servers": f"localhost:{ports.controller}",
        "listeners": f"PLAINTEXT://localhost:{ports.broker}",
        "inter.broker.listener.name": "PLAINTEXT",
        "advertised.listeners": f"PLAINTEXT://localhost:{ports.broker}",
        "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": PROTOCOL_MAP,
        "log.dirs": str(logs), **KAFKA_SHIPPED_COMMON,
    }


def apache_docker_image(ports: Ports, logs: Path) -> dict[str, str]:
    """apache/kafka's image: KAFKA_* env vars turned into keys, its defaults filled in."""
    return {
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://localhost:{ports.broker},"
                     f"CONTROLLER://localhost:{ports.controller}",
        "advertised.listeners": f"PLAINTEXT://localhost:{ports.broker}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "controller.quorum.voters": f"1@localhost:{ports.controller}",
        "listener.security.protocol.map": PROTOCOL_MAP, "log.dirs": str(logs),
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "3", "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
    }


def _bitnami_common(logs: Path) -> dict[str, str]:
    """What bitnami/kafka's KRaft setup writes on every node, whatever its role."""
    return {
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.listener.names": "CONTROLLER", "log.dirs": str(logs),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "num.network.threads": "3",
        "num.io.threads": "8", "socket.send.buffer.bytes": "102400",
        "socket.receive.buffer.bytes": "102400", "socket.request.max.bytes": "104857600",
        "num.partitions": "1", "num.recovery.threads.per.data.dir": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "log.flush.interval.messages": "10000",
        "log.flush.interval.ms": "1000", "log.retention.hours": "168",
        "log.retention.bytes": "1073741824", "log.segment.bytes": "1073741824",
        "log.retention.check.interval.ms": "300000", "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0", "max.partition.fetch.bytes": "1048576",
        "max.request.size": "1048576",
    }


BITNAMI_IGNORED = ["num.network.threads", "num.io.threads", "socket.send.buffer.bytes",
                   "socket.receive.buffer.bytes"]
BITNAMI_UNKNOWN = ["max.partition.fetch.bytes", "max.request.size"]  # client keys
BITNAMI_USED = ["sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol"]  # SASL's


def bitnami_combined(ports: Ports, logs: Path) -> dict[str, str]:
    return {**_bitnami_common(logs), "node.id": "0", "process.roles": "controller,broker",
            "listeners": f"PLAINTEXT://:{ports.broker},CONTROLLER://:{ports.controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports.broker}",
            "controller.quorum.voters": f"0@127.0.0.1:{ports.controller}"}


def bitnami_controller(ports: Ports, logs: Path) -> dict[str, str]:
    return {**_bitnami_common(logs), "node.id": str(ports.controller_id),
            "process.roles": "controller",
            "listeners": f"CONTROLLER://127.0.0.1:{ports.controller}",
            "controller.quorum.voters": f"{ports.controller_id}@127.0.0.1:{ports.controller}"}


def bitnami_broker(ports: Ports, logs: Path) -> dict[str, str]:
    return {**_bitnami_common(logs), "node.id": "2", "process.roles": "broker",
            "listeners": f"PLAINTEXT://127.0.0.1:{ports.broker}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports.broker}",
            "controller.quorum.voters": f"{ports.controller_id}@127.0.0.1:{ports.controller}"}


def _strimzi_common(logs: Path) -> dict[str, str]:
    return {
        "controller.listener.names": "CONTROLPLANE-9090",
        "listener.security.protocol.map": "CONTROLPLANE-9090:PLAINTEXT,"
                                          "REPLICATION-9091:PLAINTEXT,PLAIN-9092:PLAINTEXT",
        "log.dirs": str(logs),
        "config.providers": "strimzienv,strimzifile,strimzidir",
        "config.providers.strimzienv.class":
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "config.providers.strimzifile.class":
            "org.apache.kafka.common.config.provider.FileConfigProvider",
        "config.providers.strimzifile.param.allowed.paths": "/opt/kafka",
        "listener.name.replication-9091.ssl.keystore.type": "PKCS12",
        "listener.name.replication-9091.ssl.client.auth": "required",
        "ssl.endpoint.identification.algorithm": "HTTPS",
        "ssl.secure.random.implementation": "SHA1PRNG",
        "default.replication.factor": "1", "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }


def strimzi_controller(ports: Ports, logs: Path) -> dict[str, str]:
    return {**_strimzi_common(logs), "node.id": "3", "process.roles": "controller",
            "listeners": f"CONTROLPLANE-9090://0.0.0.0:{ports.controller}",
            "advertised.listeners": f"CONTROLPLANE-9090://127.0.0.1:{ports.controller}",
            "controller.quorum.voters": f"3@127.0.0.1:{ports.controller}"}


def strimzi_broker(ports: Ports, logs: Path) -> dict[str, str]:
    replication = free_port()
    return {**_strimzi_common(logs), "node.id": "0", "process.roles": "broker",
            "listeners": f"REPLICATION-9091://0.0.0.0:{replication},"
                         f"PLAIN-9092://0.0.0.0:{ports.broker}",
            "advertised.listeners": f"REPLICATION-9091://127.0.0.1:{replication},"
                                    f"PLAIN-9092://127.0.0.1:{ports.broker}",
            "inter.broker.listener.name": "REPLICATION-9091", "broker.rack": "zone-a",
            "controller.quorum.voters": f"3@127.0.0.1:{ports.controller}"}


def confluent_cp_kafka(ports: Ports, logs: Path) -> dict[str, str]:
    """cp-kafka's KAFKA_* env vars as its entrypoint writes them, KRaft combined."""
    host_port = free_port()
    return {
        "node.id": "1", "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{ports.broker},"
                     f"CONTROLLER://127.0.0.1:{ports.controller},"
                     f"PLAINTEXT_HOST://0.0.0.0:{host_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports.broker},"
                                f"PLAINTEXT_HOST://localhost:{host_port}",
        "listener.security.protocol.map":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PLAINTEXT_HOST:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT", "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{ports.controller}",
        "offsets.topic.replication.factor": "1", "group.initial.rebalance.delay.ms": "0",
        "transaction.state.log.min.isr": "1", "transaction.state.log.replication.factor": "1",
        "log.dirs": str(logs), "confluent.support.metrics.enable": "false",
        "confluent.balancer.enable": "false", "jmx.port": "9101",
    }


@dataclass(frozen=True)
class Shape:
    template: Template
    ignored: tuple[str, ...]  # keys that must each get the "ignored" warning
    unknown: tuple[str, ...] = ()  # keys that must each get the "unknown" warning
    format_options: tuple[str, ...] = ()
    used: tuple[str, ...] = ()  # keys pykraft acts on: no warning


SHAPES = {
    "kafka4-server.properties": Shape(kafka4_server, tuple(KAFKA_SHIPPED_IGNORED),
                                      format_options=("--standalone",)),
    "kafka4-controller.properties": Shape(kafka4_controller, tuple(KAFKA_SHIPPED_IGNORED),
                                          format_options=("--standalone",)),
    "kafka4-broker.properties": Shape(kafka4_broker, tuple(KAFKA_SHIPPED_IGNORED),
                                      format_options=("--no-initial-controllers",)),
    "apache-docker-image": Shape(apache_docker_image,
                                 ("share.coordinator.state.topic.replication.factor",
                                  "share.coordinator.state.topic.min.isr")),
    "bitnami-combined": Shape(bitnami_combined, tuple(BITNAMI_IGNORED), tuple(BITNAMI_UNKNOWN),
                              used=tuple(BITNAMI_USED)),
    "bitnami-controller": Shape(bitnami_controller, tuple(BITNAMI_IGNORED),
                                tuple(BITNAMI_UNKNOWN), used=tuple(BITNAMI_USED)),
    "bitnami-broker": Shape(bitnami_broker, tuple(BITNAMI_IGNORED), tuple(BITNAMI_UNKNOWN),
                            used=tuple(BITNAMI_USED)),
    "strimzi-controller": Shape(strimzi_controller, (
        "config.providers", "config.providers.strimzienv.class",
        "ssl.secure.random.implementation"), used=(
        "listener.name.replication-9091.ssl.keystore.type",
        "listener.name.replication-9091.ssl.client.auth",
        "ssl.endpoint.identification.algorithm")),
    "strimzi-broker": Shape(strimzi_broker, ("config.providers.strimzifile.class",),
                            used=("ssl.endpoint.identification.algorithm",)),
    "confluent-cp-kafka": Shape(confluent_cp_kafka, (), (
        "confluent.support.metrics.enable", "confluent.balancer.enable", "jmx.port")),
}


def write_properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("# reconstructed shape\n" + "".join(f"{k}={v}\n" for k, v in values.items()),
                    encoding="utf-8")
    return path


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_formats_and_names_every_key_it_ignores(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shape = SHAPES[name]
    ports = Ports(free_port(), free_port())
    config = write_properties(tmp_path / "server.properties",
                              shape.template(ports, tmp_path / "logs"))
    code, out, err = cli(["storage", "format", "-c", str(config), "-t", CLUSTER,
                          *shape.format_options], capsys)
    assert code == 0, err
    assert "Formatting" in out and (tmp_path / "logs" / "meta.properties").exists()
    warnings = err.splitlines()
    for key in shape.ignored:
        assert f"WARN The configuration '{key}' {IGNORED}" in warnings, (key, err)
    for key in shape.unknown:
        assert f"WARN The configuration '{key}' {UNKNOWN}" in warnings, (key, err)
    for key in shape.used:
        assert not [line for line in warnings if f"'{key}'" in line], (key, err)
    assert all(line.startswith("WARN ") for line in warnings), err


# -- starting: one node per role -------------------------------------------------------


def start(config: Path, bootstrap: str, log: Path, servers: list[Server]) -> Server:
    server = Server([sys.executable, "-m", "pykraft", "server", "start", str(config)], log,
                    bootstrap)
    servers.append(server)
    return server


def wait_api_versions(address: str, server: Server, timeout_s: float = 30) -> int:
    """Until the node answers ApiVersions (a controller-only node has no Metadata)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"exited with {server.process.returncode}:\n{server.log()}")
        with suppress(OSError), WireClient(address, timeout_s=2) as client:
            response = client.request(18, 3, ApiVersionsRequest(
                client_software_name="pykraft-test", client_software_version="1"))
            return len(response.api_keys)
        time.sleep(0.1)
    raise AssertionError(f"no ApiVersions after {timeout_s}s:\n{server.log()}")


def broker_ids(bootstrap: str) -> list[int]:
    request = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False)
    with WireClient(bootstrap, timeout_s=5) as client:
        return sorted(b.node_id for b in client.request(3, 12, request).brokers)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


def formatted(name: str, ports: Ports, directory: Path) -> Path:
    """The shape's file under `directory`, formatted (in this process: the formatting is
    what the table above tests; an interpreter start costs seconds on a loaded machine)."""
    directory.mkdir()
    shape = SHAPES[name]
    config = write_properties(directory / "server.properties",
                              shape.template(ports, directory / "logs"))
    assert main(["storage", "format", "-c", str(config), "-t", CLUSTER,
                 *shape.format_options]) == 0
    return config


def test_kafka4_combined_file_starts_as_a_standalone_quorum(
    tmp_path: Path, servers: list[Server]
) -> None:
    ports = Ports(free_port(), free_port())
    config = formatted("kafka4-server.properties", ports, tmp_path / "combined")
    server = start(config, f"localhost:{ports.broker}", tmp_path / "combined.log", servers)
    server.wait_serving(timeout_s=60)
    assert broker_ids(f"localhost:{ports.broker}") == [1]
    assert wait_api_versions(f"localhost:{ports.controller}", server) > 0
    assert f"The configuration 'num.io.threads' {IGNORED}" in server.log()
    assert server.stop() == 0


def test_three_controllers_from_initial_controllers_and_a_broker_started_first(
    tmp_path: Path, servers: list[Server]
) -> None:
    """KIP-853's bootstrap on three Kafka 4 controller files (`--initial-controllers`, the
    same list on each) makes one quorum; a Kafka 4 broker started before them, bootstrapped
    from the last controller only, learns all three and registers. The controllers carry
    inter.broker.listener.name, as templates set it on every node (the key that used to stop
    a controller-only node): accepted without a word, as Kafka does."""
    controller_ports = [free_port() for _ in range(3)]
    directory_ids = ["JEXY6aqzQY-32P5TStzaFg", "MvDxzVmcRsaTz33bUuRU6A", "07R5amHmR32VDA6jHkGbTA"]
    listed = ",".join(f"{node}@127.0.0.1:{port}:{directory}" for node, port, directory
                      in zip((1, 2, 3), controller_ports, directory_ids, strict=True))
    configs = []
    for node, port in zip((1, 2, 3), controller_ports, strict=True):
        values = {**kafka4_controller(Ports(0, port, node), tmp_path / f"logs-{node}"),
                  "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_ports[0]}",
                  "inter.broker.listener.name": "PLAINTEXT"}
        config = write_properties(tmp_path / f"controller-{node}.properties", values)
        assert main(["storage", "format", "-c", str(config), "-t", CLUSTER, "-I", listed]) == 0
        configs.append(config)
    broker_port = free_port()
    broker = write_properties(tmp_path / "broker.properties", {
        **kafka4_broker(Ports(broker_port, controller_ports[2]), tmp_path / "broker-logs"),
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_ports[2]}",
        "node.id": "5"})  # 2 is a voter here: a broker with a voter's id is refused
    assert main(["storage", "format", "-c", str(broker), "-t", CLUSTER, "-N"]) == 0
    bootstrap = f"localhost:{broker_port}"
    broker_node = start(broker, bootstrap, tmp_path / "broker.log", servers)
    controllers = [start(config, f"127.0.0.1:{port}", tmp_path / f"controller-{n}.log", servers)
                   for n, (config, port) in enumerate(zip(configs, controller_ports, strict=True))]
    broker_node.wait_serving(timeout_s=60)
    assert broker_ids(bootstrap) == [5]
    status = pykraft("metadata-quorum", "--bootstrap-controller",
                     f"127.0.0.1:{controller_ports[1]}", "describe", "--status")
    assert status.returncode == 0, status.stderr
    assert '"id": 1' in status.stdout and '"id": 3' in status.stdout
    assert 'CurrentObservers:       [{"id": 5}]' in status.stdout
    assert wait_api_versions(f"127.0.0.1:{controller_ports[0]}", controllers[0]) > 0
    assert "inter.broker.listener.name" not in controllers[0].log()
    assert broker_node.stop() == 0
    assert all(controller.stop() == 0 for controller in controllers)


# -- what Kafka refuses is refused, readably, at format and at start -----------------------


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("WARN ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


REFUSED: dict[str, tuple[Template, str]] = {
    "broker-without-the-inter-broker-listener": (
        lambda ports, logs: {**bitnami_broker(ports, logs), "inter.broker.listener.name":
                             "INTERNAL", "listener.security.protocol.map":
                             "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"},
        "inter.broker.listener.name must be a listener name defined in advertised.listeners. "
        "The valid options based on currently configured listeners are PLAINTEXT"),
    "controller-only-with-a-broker-listener": (
        lambda ports, logs: {**bitnami_controller(ports, logs), "listeners":
                             f"CONTROLLER://127.0.0.1:{ports.controller},"
                             f"PLAINTEXT://127.0.0.1:{ports.broker}"},
        "The listeners config must only contain KRaft controller listeners from "
        "controller.listener.names when process.roles=controller"),
    "wrong-type": (
        lambda ports, logs: {**apache_docker_image(ports, logs), "num.io.threads": "eight"},
        "Invalid value eight for configuration num.io.threads: Not a number of type INT"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_kafka_refuses_is_refused_at_format(name: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    template, message = REFUSED[name]
    config = write_properties(tmp_path / "server.properties",
                              template(Ports(free_port(), free_port()), tmp_path / "logs"))
    code, out, err = cli(["storage", "format", "-c", str(config), "-t", CLUSTER], capsys)
    assert code == 1 and out == ""
    assert [line for line in err.splitlines() if not line.startswith("WARN ")] == [
        f"Error: {message}"]
    assert not (tmp_path / "logs").exists()  # refused before touching the disk


def test_a_broker_without_its_inter_broker_listener_is_refused_by_real_processes(
    tmp_path: Path,
) -> None:
    template, message = REFUSED["broker-without-the-inter-broker-listener"]
    config = write_properties(tmp_path / "server.properties",
                              template(Ports(free_port(), free_port()), tmp_path / "logs"))
    at_format = one_line_error(pykraft("storage", "format", "-c", str(config), "-t", CLUSTER))
    assert at_format == f"Error: {message}"
    at_start = one_line_error(pykraft("server", "start", str(config)))
    assert at_start.endswith(message)
    assert not (tmp_path / "logs").exists()
