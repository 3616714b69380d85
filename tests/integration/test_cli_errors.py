"""Every `pykraft` tool, run as a user runs it against a real node, on empty results and on
names that do not exist: Kafka's tools' messages and exit codes, and never a traceback.

The node is this module's own (not the session's shared one), so "nothing there yet" is
true of it: the first test runs before any group, transaction or user topic exists.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from pykraft.records.record import build_batch
from pykraft.testing import LocalCluster
from pykraft.testing.ports import free_port
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import eventually, pykraft

TOPIC_ERROR = "Error while executing topic command : "


class Node:
    def __init__(self, cluster: LocalCluster, metrics: str, tmp: Path) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        self.controller = f"127.0.0.1:{cluster.controller_port}"
        self.metrics = metrics
        self.tmp = tmp

    def file(self, name: str, content: object) -> str:
        path = self.tmp / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return str(path)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    metrics = f"127.0.0.1:{free_port()}"
    with LocalCluster(configs={"pykraft.metrics.listener": metrics}) as cluster:
        yield Node(cluster, metrics, tmp_path_factory.mktemp("cli-errors"))


def tool(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `pykraft ARGV`; whatever it answers, it is not a Python traceback nor the
    catch-all for a bug (which names PYKRAFT_DEBUG)."""
    result = pykraft(*argv, stdin=stdin, timeout_s=90)
    assert "Traceback" not in result.stderr, result.stderr
    assert "PYKRAFT_DEBUG" not in result.stderr, result.stderr
    return result


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(node: Node, name: str) -> None:
    created = tool("topics", "--bootstrap-server", node.bootstrap, "--create", "--topic", name,
                   "--partitions", "1", "--replication-factor", "1")
    assert created.returncode == 0, created.stderr


# -- empty results ---------------------------------------------------------------------------


def test_an_empty_cluster_lists_nothing_and_exits_0(node: Node) -> None:
    """No user topics, groups, transactions, reassignments or compacted partitions: the
    listings are empty (or Kafka's header alone), with exit code 0."""
    b = node.bootstrap
    expected = {
        ("topics", "--bootstrap-server", b, "--list", "--exclude-internal"): "",
        ("topics", "--bootstrap-server", b, "--describe", "--exclude-internal"): "",
        ("consumer-groups", "--bootstrap-server", b, "--list"): "",
        ("consumer-groups", "--bootstrap-server", b, "--list", "--state"): "GROUP STATE\n",
        ("consumer-groups", "--bootstrap-server", b, "--describe", "--all-groups"): "",
        ("transactions", "--bootstrap-server", b, "list"):
            "TransactionalId Coordinator ProducerId TransactionState\n",
        ("reassign-partitions", "--bootstrap-server", b, "--list"):
            "No partition reassignments found.\n",
        ("log-cleaner", "--describe", "--metrics-url", node.metrics):
            "TOPIC  PARTITION  DIRTY-RATIO  FIRST-DIRTY-OFFSET  CLEANABLE-BYTES  LAST-CLEAN"
            "  STATE\n",
        ("delete-records", "--bootstrap-server", b, "--offset-json-file",
         node.file("no-partitions.json", {"partitions": [], "version": 1})):
            "Executing records delete operation\nRecords delete operation completed:\n",
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(zip(expected, pool.map(lambda argv: tool(*argv), expected), strict=True))
    for argv, stdout in expected.items():
        result = results[argv]
        assert (result.returncode, result.stdout) == (0, stdout), (argv, result.stderr)


def test_a_topic_without_producers_describes_an_empty_table(node: Node) -> None:
    name = unique("no-producers")
    create_topic(node, name)
    result = tool("transactions", "--bootstrap-server", node.bootstrap, "describe-producers",
                  "--topic", name, "--partition", "0")
    assert (result.returncode, result.stdout.split()) == (0, [
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
        "LastTimestamp", "CurrentTransactionStartOffset"]), result.stderr


def test_a_group_without_members_is_described_with_kafkas_note(node: Node) -> None:
    """Committed offsets and no member: state Empty. The offsets table still prints;
    --members has no rows, so only the note; --state shows the group."""
    name, group = unique("empty-group-topic"), unique("empty-group")
    create_topic(node, name)
    committer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    committer.close()
    note = f"\nConsumer group '{group}' has no active members.\n"
    base = ("consumer-groups", "--bootstrap-server", node.bootstrap, "--describe", "--group",
            group)

    offsets = tool(*base)
    assert (offsets.returncode, offsets.stderr) == (0, note)
    header, row = offsets.stdout.strip().splitlines()
    assert header.split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                  "LOG-END-OFFSET", "LAG"]
    assert row.split() == [group, name, "0", "0", "0", "0", "-", "-", "-"]

    members = tool(*base, "--members")
    assert (members.returncode, members.stdout, members.stderr) == (0, "", note)

    state = tool(*base, "--state")
    assert (state.returncode, state.stderr) == (0, note)
    assert state.stdout.strip().splitlines()[1].split()[-2:] == ["Empty", "0"]


def test_offsets_of_a_deleted_topic_are_described_without_an_end(node: Node) -> None:
    """A group keeps its committed offsets when their topic is deleted: describe shows "-"
    for the log end offset and lag there (the whole describe failed), and a reset that
    would need the missing partition's offsets is an error naming it."""
    name, group = unique("deleted-topic"), unique("orphan-group")
    create_topic(node, name)
    committer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(name, 0, 0)], asynchronous=False)
    committer.close()
    deleted = tool("topics", "--bootstrap-server", node.bootstrap, "--delete", "--topic", name)
    assert deleted.returncode == 0, deleted.stderr
    base = ("consumer-groups", "--bootstrap-server", node.bootstrap)

    def described() -> list[str]:
        result = tool(*base, "--describe", "--group", group)
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[1].split()

    assert eventually(described) == [group, name, "0", "0", "-", "-", "-", "-", "-"]
    reset = tool(*base, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest")
    assert reset.returncode == 1
    # the reason is librdkafka's, which depends on its metadata cache (unknown topic, or
    # no leader found)
    assert reset.stderr.splitlines()[-1].startswith(
        f"Error: cannot read the offsets of {name}-0: ")


def test_console_tools_take_bytes_that_are_not_utf8(node: Node) -> None:
    """A record whose header key is not UTF-8 (librdkafka and the wire allow it) is printed
    with UNDECODABLE_HEADERS, where confluent-kafka's headers() raised and ended the
    consumer; a separator given as a non-UTF-8 byte is that byte, in and out."""
    name = unique("raw-bytes")
    create_topic(node, name)
    batch = build_batch([(b"key", b"value", (("\udcffk", b"v"),), 0)])  # key bytes ff 6b
    request = ProduceRequest(acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        TopicProduceData(name=name, partition_data=(
            PartitionProduceData(index=0, records=batch),)),))
    with WireClient(node.bootstrap) as client:
        answer = client.request(0, 9, request).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none
    separator = "\udcff"  # the byte 0xff on the command line
    produced = subprocess.run(
        [sys.executable, "-m", "pykraft", "console-producer", "--bootstrap-server",
         node.bootstrap, "--topic", name, "--property", "parse.key=true", "--property",
         f"key.separator={separator}"], input=b"k2\xffv2\n", capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [sys.executable, "-m", "pykraft", "console-consumer", "--bootstrap-server",
         node.bootstrap, "--topic", name, "--from-beginning", "--max-messages", "2",
         "--timeout-ms", "10000", "--property", "print.headers=true", "--property",
         "print.key=true", "--property", f"key.separator={separator}"],
        capture_output=True, timeout=60)
    assert consumed.returncode == 0, consumed.stderr
    assert b"Traceback" not in consumed.stderr
    assert consumed.stdout.splitlines() == [b"UNDECODABLE_HEADERS\xffkey\xffvalue",
                                            b"NO_HEADERS\xffk2\xffv2"]


# -- unknown names ---------------------------------------------------------------------------


def test_an_unknown_topic_is_kafkas_error_in_every_tool(node: Node) -> None:
    missing = unique("missing")
    b = node.bootstrap
    for verb in (("--describe",), ("--delete",), ("--alter", "--partitions", "3")):
        result = tool("topics", "--bootstrap-server", b, *verb, "--topic", missing)
        assert (result.returncode, result.stderr) == (
            1, f"{TOPIC_ERROR}Topic '{missing}' does not exist as expected\n"), verb

    for where in ((), ("--partition", "0")):
        consumed = tool("console-consumer", "--bootstrap-server", b, "--topic", missing,
                        *where, "--timeout-ms", "1000")
        assert consumed.returncode == 1, where
        assert consumed.stderr.endswith(f"Error: Topic {missing} not present in metadata\n")

    perf = tool("perf", "consume", "--bootstrap-server", b, "--topic", missing,
                "--messages", "1", "--timeout-ms", "1000")
    assert perf.returncode == 1
    assert perf.stderr.endswith(f"Error: Topic {missing} not present in metadata\n")

    produced = tool("console-producer", "--bootstrap-server", b, "--topic", missing,
                    "--producer-property", "allow.auto.create.topics=false",
                    "--producer-property", "topic.metadata.propagation.max.ms=1000",
                    stdin="x\n")
    assert produced.returncode == 1
    assert (f"Error when sending message to topic {missing} with key: null, value: 1 bytes "
            "with error: Broker: Unknown topic or partition") in produced.stderr

    deleted = tool("delete-records", "--bootstrap-server", b, "--offset-json-file", node.file(
        "delete.json", {"partitions": [{"topic": missing, "partition": 0, "offset": 1}]}))
    assert deleted.returncode == 1
    assert deleted.stdout.splitlines()[-1] == (
        f"partition: {missing}-0\terror: UNKNOWN_TOPIC_OR_PARTITION: "
        "This server does not host this topic-partition.")

    elected = tool("leader-election", "--bootstrap-server", b, "--election-type", "preferred",
                   "--topic", missing, "--partition", "0")
    assert elected.returncode == 1
    assert elected.stdout.startswith(
        f"Error completing leader election (PREFERRED) for partition: {missing}-0: ")
    assert elected.stderr == "Error: 1 replica(s) could not be elected\n"

    reassignment = node.file("reassign.json", {
        "version": 1, "partitions": [{"topic": missing, "partition": 0, "replicas": [1]}]})
    executed = tool("reassign-partitions", "--bootstrap-server", b, "--execute",
                    "--reassignment-json-file", reassignment)
    assert (executed.returncode, executed.stderr) == (
        1, f"Error: Topic {missing}: This server does not host this topic-partition.\n")
    generated = tool("reassign-partitions", "--bootstrap-server", b, "--generate",
                     "--broker-list", "1", "--topics-to-move-json-file",
                     node.file("move.json", {"version": 1, "topics": [{"topic": missing}]}))
    assert generated.returncode == 1
    assert "This server does not host this topic-partition." in generated.stderr

    described = tool("transactions", "--bootstrap-server", b, "describe-producers",
                     "--topic", missing, "--partition", "0")
    assert (described.returncode, described.stderr) == (
        1, f"Error: Failed to describe producers for partition {missing}-0 on leader: "
        "This server does not host this topic-partition.\n")
    aborted = tool("transactions", "--bootstrap-server", b, "abort", "--topic", missing,
                   "--partition", "0", "--start-offset", "0")
    assert (aborted.returncode, aborted.stderr) == (
        1, f"Error: Failed to validate producer state for partition {missing}-0: "
        "This server does not host this topic-partition.\n")

    reset = tool("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group",
                 unique("group"), "--topic", missing, "--to-earliest", "--execute")
    assert (reset.returncode, reset.stderr) == (1, f"Error: Topic '{missing}' does not exist\n")

    cleaned = tool("log-cleaner", "--describe", "--metrics-url", node.metrics,
                   "--topic", missing)
    assert (cleaned.returncode, cleaned.stderr) == (
        1, f"Error: no compacted partition of topic '{missing}' on this node\n")


def test_an_unknown_partition_of_a_known_topic(node: Node) -> None:
    name = unique("one-partition")
    create_topic(node, name)
    consumed = tool("console-consumer", "--bootstrap-server", node.bootstrap, "--topic", name,
                    "--partition", "5", "--timeout-ms", "1000")
    assert consumed.returncode == 1
    assert consumed.stderr.endswith(
        f"Error: Partition {name}-5 does not exist (topic {name} has partitions 0-0)\n")
    deleted = tool("delete-records", "--bootstrap-server", node.bootstrap, "--offset-json-file",
                   node.file("p5.json", {"partitions": [
                       {"topic": name, "partition": 5, "offset": 0}]}))
    assert deleted.returncode == 1
    assert deleted.stdout.splitlines()[-1] == (
        f"partition: {name}-5\terror: UNKNOWN_TOPIC_OR_PARTITION: "
        "This server does not host this topic-partition.")
    producers = tool("transactions", "--bootstrap-server", node.bootstrap,
                     "describe-producers", "--topic", name, "--partition", "5")
    assert producers.returncode == 1
    assert "This server does not host this topic-partition." in producers.stderr
    aborted = tool("transactions", "--bootstrap-server", node.bootstrap, "abort", "--topic",
                   name, "--partition", "0", "--start-offset", "0")
    assert (aborted.returncode, aborted.stderr) == (
        1, "Error: Could not find any open transactions starting at offset 0 on partition "
        f"{name}-0\n")


def test_an_unknown_group_does_not_exist(node: Node) -> None:
    """Kafka's "Consumer group 'G' does not exist." for every describe view (exit 1 here:
    see docs/deviations.md); delete fails with the broker's reason; a reset of a group that
    does not exist is allowed, as in Kafka, and has nothing to reset on --all-topics."""
    group = unique("no-such-group")
    base = ("consumer-groups", "--bootstrap-server", node.bootstrap)
    for view in ((), ("--members",), ("--state",), ("--offsets",)):
        described = tool(*base, "--describe", "--group", group, *view)
        assert (described.returncode, described.stdout, described.stderr) == (
            1, "", f"\nError: Consumer group '{group}' does not exist.\n"), view

    deleted = tool(*base, "--delete", "--group", group)
    assert deleted.returncode == 1
    assert deleted.stdout.splitlines() == [
        "Deletion of some consumer groups failed:",
        f"* Group '{group}' could not be deleted due to: Broker: The group id does not exist"]

    reset = tool(*base, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                 "--execute")
    assert (reset.returncode, reset.stdout) == (0, "GROUP TOPIC PARTITION NEW-OFFSET\n")


def test_an_unknown_group_state_is_a_usage_error(node: Node) -> None:
    result = tool("consumer-groups", "--bootstrap-server", node.bootstrap, "--list", "--state",
                  "Stable,Sleeping")
    assert (result.returncode, result.stderr) == (
        1, "Error: Invalid state list 'Stable,Sleeping'. Valid states are: PreparingRebalance, "
        "CompletingRebalance, Stable, Dead, Empty, Assigning, Reconciling\n")


def test_an_unknown_transactional_id(node: Node) -> None:
    txn_id = unique("no-such-txn")
    result = tool("transactions", "--bootstrap-server", node.bootstrap, "describe",
                  "--transactional-id", txn_id)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", f"Error: Failed to describe transaction state of transactional-id `{txn_id}`: "
        "The transactionalId could not be found.\n")


def test_cluster_tools_on_unknown_ids(node: Node) -> None:
    unregistered = tool("cluster", "unregister", "--bootstrap-server", node.bootstrap,
                        "--id", "77")
    assert unregistered.returncode == 1
    assert unregistered.stderr.startswith("Error: BROKER_ID_NOT_REGISTERED")
    upgraded = tool("features", "--bootstrap-server", node.bootstrap, "upgrade", "--feature",
                    "no.such.feature=1")
    assert upgraded.returncode == 1
    assert upgraded.stdout.startswith("Could not upgrade no.such.feature to 1.")


# -- missing files ---------------------------------------------------------------------------


def test_a_missing_file_is_named_with_its_reason(node: Node, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.json")
    b = node.bootstrap
    cases = {
        ("delete-records", "--bootstrap-server", b, "--offset-json-file", missing):
            f"Error: cannot read {missing}: No such file or directory\n",
        ("leader-election", "--bootstrap-server", b, "--election-type", "preferred",
         "--path-to-json-file", missing):
            f"Error: cannot read {missing}: No such file or directory\n",
        ("reassign-partitions", "--bootstrap-server", b, "--execute",
         "--reassignment-json-file", missing):
            f"Error: cannot read {missing}: No such file or directory\n",
        ("consumer-groups", "--bootstrap-server", b, "--list", "--command-config", missing):
            f"Error: cannot read properties file {missing}: No such file or directory\n",
        ("dump-log", "--files", str(tmp_path / "missing.log")):
            f"Error: cannot read {tmp_path / 'missing.log'}: No such file or directory\n",
        ("dump-log", "--files", str(tmp_path / "00000000000000000000.log")):
            f"Error: cannot read {tmp_path / '00000000000000000000.log'}: "
            "No such file or directory\n",
    }
    for argv, stderr in cases.items():
        result = tool(*argv)
        assert (result.returncode, result.stderr) == (1, stderr), argv
    for argv in (("storage", "format", "--config", missing, "--cluster-id", "x"),
                 ("server", "start", missing)):
        result = tool(*argv)
        assert result.returncode == 1, argv
        assert f"{missing}: No such file or directory" in result.stderr, argv


# -- an unreachable bootstrap server -----------------------------------------------------------


def test_an_unreachable_server_is_one_readable_error(node: Node) -> None:
    """Nothing listens on the port: every tool ends with exit code 1 and says so, within its
    (here shortened) timeout, instead of hanging or tracing back."""
    dead = f"127.0.0.1:{free_port()}"
    fast = node.file("fast.properties", "default.api.timeout.ms=3000\n")
    refused = f"Error: cannot connect to {dead} (Connection refused)\n"
    protocol_tools = [
        ("transactions", "--bootstrap-server", dead, "list"),
        ("features", "--bootstrap-server", dead, "describe"),
        ("metadata-quorum", "--bootstrap-controller", dead, "describe", "--status"),
        ("reassign-partitions", "--bootstrap-server", dead, "--list"),
        ("cluster", "cluster-id", "--bootstrap-server", dead),
    ]
    client_tools = [
        ("topics", "--bootstrap-server", dead, "--list", "--command-config", fast),
        ("consumer-groups", "--bootstrap-server", dead, "--list", "--command-config", fast),
        ("delete-records", "--bootstrap-server", dead, "--command-config", fast,
         "--offset-json-file", node.file("one.json", {"partitions": [
             {"topic": "t", "partition": 0, "offset": 0}]})),
        ("leader-election", "--bootstrap-server", dead, "--admin.config", fast,
         "--election-type", "preferred", "--all-topic-partitions"),
        ("console-consumer", "--bootstrap-server", dead, "--topic", "t", "--timeout-ms", "1000",
         "--consumer-property", "default.api.timeout.ms=3000"),
        ("perf", "consume", "--bootstrap-server", dead, "--topic", "t", "--messages", "1",
         "--timeout-ms", "1000", "--consumer-props", "default.api.timeout.ms=3000"),
        ("perf", "produce", "--bootstrap-server", dead, "--topic", "t", "--num-records", "1",
         "--record-size", "1", "--throughput", "-1", "--producer-props",
         "delivery.timeout.ms=2000"),
        ("log-cleaner", "--describe", "--metrics-url", dead),
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        produced = pool.submit(tool, "console-producer", "--bootstrap-server", dead, "--topic",
                               "t", "--producer-property", "delivery.timeout.ms=2000",
                               stdin="x\n")
        protocol_results = list(pool.map(lambda argv: tool(*argv), protocol_tools))
        client_results = list(pool.map(lambda argv: tool(*argv), client_tools))
    for argv, result in zip(protocol_tools, protocol_results, strict=True):
        assert (result.returncode, result.stderr) == (1, refused), argv
    for argv, result in zip(client_tools, client_results, strict=True):
        assert result.returncode == 1, (argv, result.stderr)
        last_line = result.stderr.splitlines()[-1]
        assert last_line.startswith(("Error", "ERROR")), (argv, result.stderr)
    topics, groups = client_results[0], client_results[1]
    assert topics.stderr.startswith(TOPIC_ERROR)
    assert groups.stderr.splitlines()[-1].startswith(
        "Error: Executing consumer group command failed due to ")
    assert "Connection refused" in groups.stderr
    assert "Connection refused" in client_results[3].stderr  # leader-election
    assert client_results[-1].stderr == (
        f"Error: cannot read metrics from http://{dead}/metrics: Connection refused\n")
    assert produced.result().returncode == 1
    assert "Error when sending message to topic t" in produced.result().stderr
