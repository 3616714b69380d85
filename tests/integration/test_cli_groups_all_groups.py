"""`pykraft consumer-groups` on several groups at once, as Kafka 4.0's tool takes them:
--reset-offsets, --describe and --delete with repeated --group options or --all-groups (one
reset table for every group, one CSV with the group column, a group with active members
reported and skipped), through the CLI against a node of this module's own (--all-groups
must not reach the session node's groups)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykraft.testing import LocalCluster
from tests.integration.group_helpers import poll_until
from tests.integration.tool_helpers import pykraft

TOPIC = "all-groups"
IDLE = ("idle-a", "idle-b")
BUSY = "busy"


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(configs={"group.initial.rebalance.delay.ms": "0",
                               "offsets.topic.num.partitions": "2"}) as node:
        created = tool(node, "topics", "--create", "--topic", TOPIC, "--partitions", "2",
                       "--replication-factor", "1")
        assert created.returncode == 0, created.stderr
        producer = Producer({"bootstrap.servers": node.bootstrap_servers})
        for i in range(10):
            producer.produce(TOPIC, value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        for group in IDLE:
            committer = Consumer({"bootstrap.servers": node.bootstrap_servers,
                                  "group.id": group})
            committer.commit(offsets=[TopicPartition(TOPIC, p, 2) for p in (0, 1)],
                             asynchronous=False)
            committer.close()
        yield node


def tool(node: LocalCluster, *argv: str) -> subprocess.CompletedProcess[str]:
    command = argv[0]
    result = pykraft(command, "--bootstrap-server", node.bootstrap_servers, *argv[1:],
                     timeout_s=90)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def test_reset_offsets_of_several_groups_prints_one_plan_and_executes_it(
        cluster: LocalCluster) -> None:
    """Two --group options: one GROUP/TOPIC/PARTITION/NEW-OFFSET table with both groups'
    rows; executed, both groups' offsets move; --describe of both prints a block each."""
    reset = tool(cluster, "consumer-groups", "--reset-offsets", "--group", IDLE[0], "--group",
                 IDLE[1], "--topic", TOPIC, "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    rows = table(reset.stdout)
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows[1:] == [[g, TOPIC, str(p), "0"] for g in IDLE for p in (0, 1)]
    described = tool(cluster, "consumer-groups", "--describe", "--group", IDLE[0], "--group",
                     IDLE[1])
    assert described.returncode == 0, described.stderr
    blocks = [b for b in described.stdout.split("\n\n") if b.strip()]
    assert len(blocks) == 2
    for group, block in zip(IDLE, blocks, strict=True):
        [header, *lines] = table(block)
        assert header[:4] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET"]
        assert sorted((r[0], r[2], r[3]) for r in lines) == [(group, "0", "0"), (group, "1", "0")]


def test_all_groups_resets_the_idle_ones_and_reports_the_busy_one(
        cluster: LocalCluster) -> None:
    """--all-groups with a group whose member is active: Kafka's error for it on stderr
    (exit 1), the idle groups' plan on stdout; --export adds the group column;
    --delete --all-groups deletes the idle groups and reports the busy one."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": BUSY,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        dry = tool(cluster, "consumer-groups", "--reset-offsets", "--all-groups",
                   "--all-topics", "--to-latest", "--dry-run")
        assert dry.returncode == 1, dry.stdout
        assert (f"Error: Assignments can only be reset if the group '{BUSY}' is inactive, "
                "but the current state is Stable.") in dry.stderr
        assert table(dry.stdout)[1:] == [[g, TOPIC, str(p), "5"] for g in IDLE for p in (0, 1)]
        export = tool(cluster, "consumer-groups", "--reset-offsets", "--all-groups",
                      "--all-topics", "--to-latest", "--dry-run", "--export")
        assert export.stdout.split() == [f"{g},{TOPIC},{p},5" for g in IDLE for p in (0, 1)]

        deleted = tool(cluster, "consumer-groups", "--delete", "--all-groups")
        assert deleted.returncode == 1
        assert (f"Deletion of requested consumer groups ('{IDLE[0]}', '{IDLE[1]}') was "
                "successful.") in deleted.stdout
        assert f"* Group '{BUSY}' could not be deleted due to: " in deleted.stdout
        listed = tool(cluster, "consumer-groups", "--list")
        assert listed.stdout.split() == [BUSY]
    finally:
        consumer.close()
