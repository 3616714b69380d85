"""`pykraft topics --describe` on partitions whose leader and ISR the test controls:
Leader/Replicas/Isr columns and Kafka's partition reports (under-replicated, under and at
min ISR, unavailable), with stand-in brokers registered over the controller listener."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from pykraft.testing import LocalCluster
from tests.integration.test_alter_partition import CONFIGS, StandIns, partition_state, wait_for
from tests.integration.tool_helpers import pykraft


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONFIGS) as running:
        yield running


def described(node: LocalCluster, *report: str) -> list[tuple[str, ...]]:
    done = pykraft("topics", "--bootstrap-server", node.bootstrap_servers, "--describe",
                   "--topic", "isr-.*", *report)
    assert done.returncode == 0, done
    return [tuple(field.split(": ", 1)[1] for field in line.strip().split("\t")[:5])
            for line in done.stdout.splitlines() if line.startswith("\tTopic:")]


def test_describe_shows_leader_replicas_isr_and_the_reports(node: LocalCluster) -> None:
    stand_ins = StandIns(node)
    try:
        stand_ins.start()
        full = stand_ins.create_topic("isr-full", {0: (101, 102, 103)},
                                      {"min.insync.replicas": "2"})
        shrunk = stand_ins.create_topic("isr-shrunk", {0: (101, 102, 103), 1: (102, 103, 101)},
                                        {"min.insync.replicas": "2"})
        assert full
        for index, leader in ((0, 101), (1, 102)):
            answer = stand_ins.alter(leader, shrunk, (leader,), partition=index)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none
        answer = stand_ins.alter(101, shrunk, (101, 103), partition=0, partition_epoch=1)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.none
        wait_for(lambda: ("isr-shrunk", "0", "101", "101,102,103", "101,103")
                 in described(node), "the ISR changes in Metadata")
        assert ("isr-full", "0", "101", "101,102,103", "101,102,103") in described(node)
        assert stand_ins.heartbeat(102, want_fence=True).is_fenced  # p1 loses its leader
        wait_for(lambda: partition_state(node, "isr-shrunk", 1)[0] == -1, "p1 leaderless")
        wait_for(lambda: partition_state(node, "isr-full")[3] == (101, 103), "102 out")
        rows = described(node)
        assert ("isr-full", "0", "101", "101,102,103", "101,103") in rows
        assert ("isr-shrunk", "0", "101", "101,102,103", "101,103") in rows
        assert ("isr-shrunk", "1", "none", "102,103,101", "102") in rows
        under = described(node, "--under-replicated-partitions")
        assert [(r[0], r[1]) for r in under] == [
            ("isr-full", "0"), ("isr-shrunk", "0"), ("isr-shrunk", "1")]
        assert [(r[0], r[1]) for r in described(node, "--unavailable-partitions")] == [
            ("isr-shrunk", "1")]
        assert [(r[0], r[1]) for r in described(node, "--under-min-isr-partitions")] == [
            ("isr-shrunk", "1")]
        assert [(r[0], r[1]) for r in described(node, "--at-min-isr-partitions")] == [
            ("isr-full", "0"), ("isr-shrunk", "0")]
    finally:
        stand_ins.close()
