"""`pykraft server start` and `pykraft storage ...` as a user runs them: real processes
(`./scripts/start`, `python -m pykraft ...`) served to a real client (confluent-kafka)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, suppress
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kio.schema.metadata.v12.request import MetadataRequest

from pykraft.testing import LocalCluster, free_port
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import pykraft

REPO = Path(__file__).resolve().parents[2]
CLUSTER_ID_FORMAT = re.compile(r"[A-Za-z0-9_-]{22}")


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exit code 1 and exactly one line on stderr, no traceback."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def write_config(path: Path, log_dirs: str, *, node_id: int = 1, extra: str = "") -> str:
    """A combined node on free loopback ports; returns its bootstrap address."""
    broker, controller = free_port(), free_port()
    path.write_text(
        f"node.id={node_id}\n"
        "process.roles=broker,controller\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
        "controller.listener.names=CONTROLLER\n"
        f"controller.quorum.voters={node_id}@127.0.0.1:{controller}\n"
        f"log.dirs={log_dirs}\n" + extra,
        encoding="utf-8",
    )
    return f"127.0.0.1:{broker}"


def format_storage(config: Path, cluster_id: str | None = None) -> str:
    cluster_id = cluster_id or pykraft("storage", "random-uuid").stdout.strip()
    result = pykraft("storage", "format", "--config", str(config), "--cluster-id", cluster_id)
    assert result.returncode == 0, result.stderr
    return cluster_id


class Server:
    """A node process whose output goes to a log file (a pipe could fill up and stall it)."""

    def __init__(self, argv: list[str], log_path: Path, bootstrap: str,
                 env: Mapping[str, str] | None = None) -> None:
        self.log_path = log_path
        self.bootstrap = bootstrap
        with log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO,
                env={**(env or os.environ), "PYTHONUNBUFFERED": "1"},
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self, timeout_s: float = 20) -> None:
        """Until the broker answers Metadata listing itself, as LocalCluster waits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"exited with {self.process.returncode}:\n{self.log()}")
            with suppress(OSError):
                request = MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False)
                with WireClient(self.bootstrap, timeout_s=2) as client:
                    if client.request(3, 12, request).brokers:
                        return
            time.sleep(0.05)
        raise AssertionError(f"not serving after {timeout_s}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=20)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Servers a test starts; any left running are killed when it ends."""
    started: list[Server] = []
    yield started
    for server in started:
        server.kill()


def read_meta(directory: Path) -> dict[str, str]:
    text = (directory / "meta.properties").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def produce(bootstrap: str, topic: str, values: list[bytes],
            **extra: str | int) -> list[KafkaError | None]:
    errors: list[KafkaError | None] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        errors.append(error)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **extra})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(10) == 0
    return errors


def consume_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "server-commands-test",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 10
    while len(values) < count and time.monotonic() < deadline:
        values += [m.value() or b"" for m in consumer.consume(count, timeout=0.5)
                   if not m.error()]
    consumer.close()
    return values


def port_in_use(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


# -- 1. the quick start: ./scripts/start with no CONFIG ------------------------------------


def test_scripts_start_serves_stops_cleanly_and_keeps_its_data(
    tmp_path: Path, servers: list[Server]
) -> None:
    busy = [port for port in (9092, 9093) if port_in_use(port)]
    if busy:
        pytest.skip(f"the quick start binds 9092 and 9093; {busy} already in use here")
    data = tmp_path / "data"
    env = {**os.environ, "PYKRAFT_DATA": str(data)}

    def start() -> Server:
        server = Server([str(REPO / "scripts" / "start")], tmp_path / "start.log",
                        "127.0.0.1:9092", env)
        servers.append(server)
        server.wait_serving()
        return server

    first = start()
    meta = read_meta(data)  # formatted on first start
    assert meta["node.id"] == "1" and meta["version"] == "1"
    cluster_id = meta["cluster.id"]
    assert CLUSTER_ID_FORMAT.fullmatch(cluster_id)
    with closing(socket.create_connection(("127.0.0.1", 9093), timeout=5)):
        pass  # the controller listener
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
    assert admin.list_topics(timeout=10).cluster_id == cluster_id
    admin.create_topics([NewTopic("quick", num_partitions=1,
                                  replication_factor=1)])["quick"].result(10)
    values = [b"record-%d" % i for i in range(5)]
    assert produce("127.0.0.1:9092", "quick", values) == [None] * 5
    assert consume_all("127.0.0.1:9092", "quick", 5) == values
    assert first.stop(signal.SIGTERM) == 0
    assert (data / ".kafka_cleanshutdown").exists()

    second = start()
    assert not (data / ".kafka_cleanshutdown").exists()  # consumed by the clean start
    assert read_meta(data)["cluster.id"] == cluster_id
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
    assert admin.list_topics(timeout=10).cluster_id == cluster_id
    assert consume_all("127.0.0.1:9092", "quick", 5) == values
    assert second.stop(signal.SIGINT) == 0
    assert (data / ".kafka_cleanshutdown").exists()
    assert "Traceback" not in second.log()


# -- 2. a CONFIG file: Kafka keys, overrides, unknown keys, invalid values ------------------


def test_config_keys_are_honoured_and_overrides_win(
    tmp_path: Path, servers: list[Server]
) -> None:
    config = tmp_path / "server.properties"
    bootstrap = write_config(config, str(tmp_path / "logs"), extra=(
        "num.partitions=3\n"
        "log.segment.bytes=2097152\n"
        "log.retention.hours=5\n"
        "log.retention.bytes=123456789\n"
        "message.max.bytes=2000\n"
        "some.unknown.key=1\n"
    ))
    format_storage(config)
    server = Server([sys.executable, "-m", "pykraft", "server", "start", str(config),
                     "--override", "num.partitions=2"], tmp_path / "server.log", bootstrap)
    servers.append(server)
    server.wait_serving()
    [warning] = [line for line in server.log().splitlines() if "some.unknown.key" in line]
    assert "WARN" in warning

    # an auto-created topic gets num.partitions, the override's 2 rather than the file's 3
    assert produce(bootstrap, "auto", [b"small"]) == [None]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert len(admin.list_topics("auto", timeout=10).topics["auto"].partitions) == 2

    resource = ConfigResource(ConfigResource.Type.TOPIC, "auto")
    entries = admin.describe_configs([resource])[resource].result(10)
    expected = {"segment.bytes": "2097152", "retention.ms": str(5 * 3600 * 1000),
                "retention.bytes": "123456789", "max.message.bytes": "2000"}
    for name, value in expected.items():
        assert entries[name].value == value, name
        # as Kafka's ConfigHelper: log.retention.hours alone is no synonym retention.ms names
        source = ConfigSource.DEFAULT_CONFIG if name == "retention.ms" \
            else ConfigSource.STATIC_BROKER_CONFIG
        assert entries[name].source == source.value, name

    [error] = produce(bootstrap, "auto", [b"x" * 3000])
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert produce(bootstrap, "auto", [b"y" * 1000]) == [None]
    assert server.stop() == 0


@pytest.mark.parametrize(
    "override",
    ["num.partitions=abc", "node.id=-5", "listeners=garbage", "process.roles=foo",
     "log.segment.bytes=abc", "log.retention.hours=x", "message.max.bytes=-1",
     "advertised.listeners=PLAINTEXT://0.0.0.0:1"],
)
def test_an_invalid_value_stops_start_up_naming_the_key(tmp_path: Path, override: str) -> None:
    config = tmp_path / "server.properties"
    write_config(config, str(tmp_path / "logs"))  # unformatted: the key is checked first
    key = override.split("=")[0]
    line = one_line_error(pykraft("server", "start", str(config), "--override", override))
    assert key in line


def test_an_invalid_value_in_the_file_stops_start_up(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    write_config(config, str(tmp_path / "logs"), extra="num.partitions=abc\n")
    line = one_line_error(pykraft("server", "start", str(config)))
    assert "num.partitions" in line and "abc" in line


def test_an_invalid_override_stops_the_quick_start_before_it_formats(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "PYKRAFT_DATA": str(data)}
    result = pykraft("server", "start", "--override", "node.id=-5", env=env)
    assert "node.id" in one_line_error(result)
    assert not data.exists()


# -- 3. storage: random-uuid, format, and the start-up checks ------------------------------


def test_storage_random_uuid_prints_a_cluster_id() -> None:
    first, second = pykraft("storage", "random-uuid"), pykraft("storage", "random-uuid")
    assert first.returncode == second.returncode == 0
    assert CLUSTER_ID_FORMAT.fullmatch(first.stdout.strip())
    assert first.stdout.endswith("\n") and first.stdout.count("\n") == 1
    assert first.stdout != second.stdout


def test_storage_format_formats_every_dir_once(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "metadata"]
    write_config(config, f"{dirs[0]},{dirs[1]}", node_id=7,
                 extra=f"metadata.log.dir={dirs[2]}\n")
    cluster_id = format_storage(config)
    directory_ids = set()
    for directory in dirs:
        meta = read_meta(directory)
        assert meta["version"] == "1"
        assert meta["cluster.id"] == cluster_id
        assert meta["node.id"] == "7"
        assert CLUSTER_ID_FORMAT.fullmatch(meta["directory.id"])
        directory_ids.add(meta["directory.id"])
    assert len(directory_ids) == 3

    again = pykraft("storage", "format", "--config", str(config), "--cluster-id", cluster_id)
    line = one_line_error(again)
    assert "already formatted" in line and str(dirs[0]) in line
    ignored = pykraft("storage", "format", "--config", str(config), "--cluster-id", cluster_id,
                      "--ignore-formatted")
    assert ignored.returncode == 0, ignored.stderr
    assert all(read_meta(d)["cluster.id"] == cluster_id for d in dirs)


def test_storage_format_refuses_an_invalid_cluster_id(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    write_config(config, str(tmp_path / "logs"))
    result = pykraft("storage", "format", "--config", str(config), "--cluster-id", "not-an-id")
    line = one_line_error(result)
    assert "not-an-id" in line and "valid UUID" in line
    assert not (tmp_path / "logs").exists()


def test_start_refuses_an_unformatted_dir(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    write_config(config, str(tmp_path / "logs"))
    line = one_line_error(pykraft("server", "start", str(config)))
    assert "storage format" in line and str(tmp_path / "logs") in line


def test_start_refuses_a_dir_of_another_cluster(tmp_path: Path) -> None:
    config_a, config_b, config = (tmp_path / n for n in ("a.properties", "b.properties",
                                                         "server.properties"))
    write_config(config_a, str(tmp_path / "a"))
    write_config(config_b, str(tmp_path / "b"))
    format_storage(config_a)
    format_storage(config_b)  # another random cluster id
    write_config(config, f"{tmp_path / 'a'},{tmp_path / 'b'}")
    line = one_line_error(pykraft("server", "start", str(config)))
    assert "cluster.id" in line and str(tmp_path / "b") in line


def test_start_refuses_a_dir_of_another_node(tmp_path: Path) -> None:
    config_2, config_1 = tmp_path / "node2.properties", tmp_path / "node1.properties"
    write_config(config_2, str(tmp_path / "logs"), node_id=2)
    format_storage(config_2)
    write_config(config_1, str(tmp_path / "logs"), node_id=1)
    line = one_line_error(pykraft("server", "start", str(config_1)))
    assert "node id 2" in line and str(tmp_path / "logs") in line


def test_a_second_node_on_a_dir_in_use_fails_clearly(tmp_path: Path) -> None:
    with LocalCluster() as cluster:
        other = tmp_path / "other.properties"
        write_config(other, str(cluster.log_dir))
        result = pykraft("server", "start", str(other))
        assert result.returncode == 1 and "Traceback" not in result.stderr
        # the refusal names the lock and the dir (a GC-pause INFO line may follow it)
        assert [line for line in result.stderr.splitlines()
                if "lock" in line and str(cluster.log_dir) in line], result.stderr
        assert "unexpected" not in result.stderr


# -- signals ------------------------------------------------------------------------------


def test_a_signal_during_start_up_stops_the_node_cleanly(
    tmp_path: Path, servers: list[Server]
) -> None:
    config = tmp_path / "server.properties"
    bootstrap = write_config(config, str(tmp_path / "logs"))
    format_storage(config)
    server = Server([sys.executable, "-m", "pykraft", "server", "start", str(config)],
                    tmp_path / "server.log", bootstrap)
    servers.append(server)
    deadline = time.monotonic() + 15
    while "metadata quorum leader" not in server.log():  # start-up is under way
        assert time.monotonic() < deadline and server.process.poll() is None, server.log()
        time.sleep(0.005)
    assert server.stop(signal.SIGTERM) == 0, server.log()
    assert "unexpected" not in server.log() and "Traceback" not in server.log()
    assert (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
