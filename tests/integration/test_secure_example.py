"""examples/secure run as its README says: run.sh (certificates, formatting with the admin's
SCRAM credential, three combined nodes with SASL_SSL on the client/inter-broker and controller
listeners, the StandardAuthorizer), then the tools with the example's client.properties and
confluent-kafka over SASL_SSL. One cluster for the module, stopped (and checked gone) at the
end; the cluster works through its secured listeners or these tests fail (issue 19, done-when
4): replication, a consumer group and a transaction."""

from __future__ import annotations

import os
import queue
import random
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.integration.tool_helpers import eventually

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "secure"
CLIENT_PROPERTIES = str(EXAMPLE / "client.properties")
ALICE_PROPERTIES = str(EXAMPLE / "alice.properties")


@dataclass(frozen=True, slots=True)
class SecureExample:
    sandbox: Path  # run.sh's working directory: data/ (and so data/secure-certs/) is here
    bootstrap: str
    brokers: int

    def client(self, user: str, password: str, **extra: Any) -> dict[str, Any]:
        """confluent-kafka's settings for `user` as the README gives them."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": password,
                "ssl.ca.location": str(self.sandbox / "data" / "secure-certs" / "ca.pem"),
                **extra}

    def tool(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A pykraft tool run from the sandbox, where client.properties' relative trust store
        path (data/secure-certs/ca.pem) points, as from the checkout's root in the README."""
        return subprocess.run([str(REPO / ".venv" / "bin" / "pykraft"), *argv],
                              cwd=self.sandbox, capture_output=True, text=True, timeout=120)


def _bindable(port: int) -> bool:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port_base() -> int:
    """A PORT_BASE whose ports (base, +100, +200, +10001..+10003) are all free, below the
    kernel's ephemeral range (as tests/integration/test_readme.py picks one for
    examples/cluster/run.sh)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randrange(10_000, min(low, 55_532) - 10_003)
        if all(_bindable(base + offset) for offset in (0, 100, 200, 10001, 10002, 10003)):
            return base
    raise AssertionError("no free port base for run.sh")


def _node_processes(cwd: Path) -> list[int]:
    """Pids of the live `pykraft server start` processes running in directory `cwd`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                where = Path(os.readlink(entry / "cwd"))
            except (OSError, IndexError, UnicodeDecodeError):
                continue
            if "server start" in cmdline and state != "Z" and where == cwd.resolve():
                found.append(int(entry.name))
    return found


def _stop(process: subprocess.Popen[str], sandbox: Path) -> None:
    """Ctrl-C as a user would; run.sh stops its nodes. Whatever is left is killed, and the
    test fails if anything had to be."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    left = _node_processes(sandbox)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"run.sh left nodes running: {left}"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureExample]:
    sandbox = tmp_path_factory.mktemp("secure-example")
    base = _free_port_base()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYKRAFT_")}
    process = subprocess.Popen([str(EXAMPLE / "run.sh"), str(base)], cwd=sandbox, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    output: list[str] = []
    try:
        deadline = time.monotonic() + 90  # three certificates, three formats, three starts
        bootstrap = ""
        while not output or not output[-1].startswith("controllers:"):
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "run.sh ended:\n" + "".join(output)
            output.append(line)
            if line.startswith("bootstrap.servers="):
                bootstrap = line.strip().split("=", 1)[1]
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 100},127.0.0.1:{base + 200}"
        example = SecureExample(sandbox, bootstrap, brokers=3)
        admin = AdminClient(example.client("admin", "admin-secret"))

        def all_brokers_registered() -> None:
            try:  # the nodes bind their listeners a moment after run.sh prints this
                brokers = admin.list_topics(timeout=10).brokers
            except KafkaException as error:
                raise AssertionError(error) from error
            assert len(brokers) == 3
        eventually(all_brokers_registered, timeout_s=60, interval_s=0.5)
        yield example
    except BaseException as failure:
        for log in sorted(sandbox.glob("data/secure-*.log")):
            failure.add_note(f"{log.name}:\n{log.read_text()[-3000:]}")
        raise
    finally:
        _stop(process, sandbox)


@pytest.fixture(scope="module")
def alice(example: SecureExample) -> str:
    """alice, made as the README does: `pykraft configs --entity-type users` as admin."""
    made = example.tool("configs", "--bootstrap-server", example.bootstrap, "--command-config",
                        CLIENT_PROPERTIES, "--alter", "--entity-type", "users",
                        "--entity-name", "alice",
                        "--add-config", "SCRAM-SHA-512=[password=alice-secret]")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "Completed updating config for user alice."
    return "alice-secret"


def _create_topic(example: SecureExample, topic: str, partitions: int = 1) -> None:
    admin = AdminClient(example.client("admin", "admin-secret"))
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(timeout=30)


def _acls(example: SecureExample, *argv: str) -> None:
    added = example.tool("acls", "--bootstrap-server", example.bootstrap, "--command-config",
                         CLIENT_PROPERTIES, "--add", "--allow-principal", "User:alice", *argv)
    assert added.returncode == 0, added.stderr


def _produce(config: dict[str, Any], topic: str, values: list[bytes]) -> list[KafkaError]:
    """Each record's delivery error (None-free list: only the failures)."""
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error)
    producer = Producer({**config, "acks": "all", "retries": 0})
    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return failures


def _consume(config: dict[str, Any], topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaException(message.error())
            value = message.value()
            assert value is not None
            values.append(value)
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


def test_alice_is_refused_without_acls_and_served_with_them(
        example: SecureExample, alice: str) -> None:
    """alice authenticates (SCRAM-SHA-512 over TLS) but may do nothing until `pykraft acls
    --producer/--consumer` grants it: TOPIC_AUTHORIZATION_FAILED first, then she produces and
    consumes as a group member."""
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"readers-{uuid.uuid4().hex[:6]}"
    _create_topic(example, topic)
    config = example.client("alice", alice)
    refused = _produce(config, topic, [b"not allowed"])
    assert [error.code() for error in refused] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    _acls(example, "--producer", "--topic", topic)
    _acls(example, "--consumer", "--topic", topic, "--group", group)

    def produces() -> None:  # every broker authorizes from its own image: a moment's lag
        assert _produce(config, topic, [b"one", b"two", b"three"]) == []
    eventually(produces, timeout_s=30)
    assert _consume(config, topic, group, 3) == [b"one", b"two", b"three"]
    read = example.tool("console-consumer", "--bootstrap-server", example.bootstrap,
                        "--consumer.config", ALICE_PROPERTIES, "--topic", topic,
                        "--partition", "0", "--offset", "earliest", "--max-messages", "3")
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["one", "two", "three"]


def test_a_replicated_topic_is_fully_in_sync_through_the_inter_broker_listener(
        example: SecureExample) -> None:
    """Three replicas, acks=all: the followers fetch over SASL_SSL as admin and the ISR
    holds all three brokers."""
    topic = f"replicated-{uuid.uuid4().hex[:6]}"
    _create_topic(example, topic)
    config = example.client("admin", "admin-secret")
    assert _produce(config, topic, [b"%d" % i for i in range(20)]) == []
    admin = AdminClient(config)

    def all_in_sync() -> None:
        partition = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        assert sorted(partition.isrs) == [1, 2, 3], partition
    eventually(all_in_sync, timeout_s=30)


def test_a_group_commits_offsets_and_a_transaction_commits(
        example: SecureExample, alice: str) -> None:
    """With --producer --consumer --transactional-id ACLs, alice's transactional producer
    commits (InitProducerId, AddPartitionsToTxn, EndTxn and the markers through the secured
    cluster), and her group reads the committed records and commits its offsets."""
    topic, group = f"payments-{uuid.uuid4().hex[:6]}", f"payers-{uuid.uuid4().hex[:6]}"
    transactional_id = f"payments-tx-{uuid.uuid4().hex[:6]}"
    _create_topic(example, topic, partitions=3)
    _acls(example, "--producer", "--consumer", "--topic", topic, "--group", group,
          "--transactional-id", transactional_id)
    config = example.client("alice", alice)

    def transaction_commits() -> None:
        producer = Producer({**config, "transactional.id": transactional_id})
        try:
            producer.init_transactions(30)
        except KafkaException as error:  # the ACLs not yet on the coordinator's broker
            raise AssertionError(error) from error
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, b"paid-%d" % i, key=b"%d" % i)
        producer.commit_transaction(30)
    eventually(transaction_commits, timeout_s=30)

    values = _consume(config, topic, group, 6)
    assert sorted(values) == [b"paid-%d" % i for i in range(6)]
    consumer = Consumer({**config, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=15)
    finally:
        consumer.close()
    assert sum(max(tp.offset, 0) for tp in committed) >= 6  # records plus commit markers


def test_a_wrong_password_fails_with_the_clients_authentication_error(
        example: SecureExample) -> None:
    """librdkafka reports _AUTHENTICATION with Kafka's SCRAM message; the cluster keeps
    serving the admin."""
    errors: list[KafkaError] = []
    producer = Producer({**example.client("admin", "wrong"), "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not any(error.code() == KafkaError._AUTHENTICATION for error in errors):
        assert time.monotonic() < deadline, errors
        producer.poll(0.2)
    error = next(error for error in errors if error.code() == KafkaError._AUTHENTICATION)
    assert ("Authentication failed during authentication due to invalid credentials with "
            "SASL mechanism SCRAM-SHA-512") in error.str()
    admin = AdminClient(example.client("admin", "admin-secret"))
    assert len(admin.list_topics(timeout=10).brokers) == 3


def test_the_tools_use_client_properties(example: SecureExample) -> None:
    """The README's tool commands with client.properties: topics lists over SASL_SSL, configs
    describes the admin's credential that run.sh bootstrapped with storage format
    --add-scram."""
    listed = example.tool("topics", "--bootstrap-server", example.bootstrap,
                          "--command-config", CLIENT_PROPERTIES, "--list")
    assert listed.returncode == 0, listed.stderr
    described = example.tool("configs", "--bootstrap-server", example.bootstrap,
                             "--command-config", CLIENT_PROPERTIES, "--describe",
                             "--entity-type", "users", "--entity-name", "admin")
    assert described.returncode == 0, described.stderr
    assert described.stdout.strip() == ("SCRAM credential configs for user-principal 'admin' "
                                        "are SCRAM-SHA-512=iterations=4096")
