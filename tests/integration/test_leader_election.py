"""ElectLeaders (KIP-460) and `pykraft leader-election` against real nodes.

Stand-in brokers (registered over the controller listener, see test_alter_partition) own
the partitions, so the test decides who is fenced and who is in the ISR; the elections go
through the node's broker listener (forwarded to the controller) as a client sends them.
"""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.elect_leaders.v0 import request as el0
from kio.schema.elect_leaders.v2 import request as el2
from kio.schema.errors import ErrorCode

from pykraft.protocol.api import ApiKey
from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration.test_alter_partition import (
    CONFIGS,
    StandIns,
    partition_state,
    wait_for,
)
from tests.integration.tool_helpers import pykraft


@pytest.fixture(scope="module")
def node() -> Iterator[LocalCluster]:
    with LocalCluster(configs=CONFIGS) as running:
        yield running


@pytest.fixture(scope="module")
def stand_ins(node: LocalCluster) -> Iterator[StandIns]:
    brokers = StandIns(node)
    brokers.start()
    yield brokers
    brokers.close()


def elect(bootstrap: str, kind: int, partitions: dict[str, list[int]] | None,
          version: int = 2) -> tuple[Any, dict[tuple[str, int], tuple[int, str | None]]]:
    module = el2 if version == 2 else el0
    request = module.ElectLeadersRequest(
        **({"election_type": kind} if version >= 1 else {}),
        topic_partitions=None if partitions is None else tuple(
            module.TopicPartitions(topic=t, partitions=tuple(ids))
            for t, ids in partitions.items()),
        timeout=datetime.timedelta(seconds=10))
    with WireClient(bootstrap) as client:
        answer = client.request(ApiKey.ELECT_LEADERS, version, request)
    return answer, {(r.topic, p.partition_id): (p.error_code, p.error_message)
                    for r in answer.replica_election_results for p in r.partition_result}


def fence_and_return(stand_ins: StandIns, broker: int) -> None:
    assert stand_ins.heartbeat(broker, want_fence=True).is_fenced
    wait_for(lambda: not stand_ins.heartbeat(broker).is_fenced, f"{broker} unfenced")


def test_preferred_election_through_the_broker(node: LocalCluster,
                                               stand_ins: StandIns) -> None:
    topic_id = stand_ins.create_topic("el-pref", {0: (101, 102), 1: (102, 101)})
    fence_and_return(stand_ins, 101)  # 102 leads both, 101 out of both ISRs
    wait_for(lambda: partition_state(node, "el-pref", 0)[:2] == (102, 1), "102 leading p0")
    _, results = elect(node.bootstrap_servers, 0, {"el-pref": [0]})
    assert results[("el-pref", 0)][0] == ErrorCode.preferred_leader_not_available
    for index, leader_epoch in ((0, 1), (1, 0)):
        answer = stand_ins.alter(102, topic_id, (102, 101), leader_epoch=leader_epoch,
                                 partition_epoch=1, partition=index)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.none, answer
    answer, results = elect(node.bootstrap_servers, 0, {"el-pref": [0, 1, 9], "none": [0]})
    assert answer.error_code == ErrorCode.none
    assert results[("el-pref", 0)] == (ErrorCode.none, None)
    assert results[("el-pref", 1)][0] == ErrorCode.election_not_needed
    assert results[("el-pref", 9)][0] == ErrorCode.unknown_topic_or_partition
    assert results[("none", 0)][0] == ErrorCode.unknown_topic_or_partition
    wait_for(lambda: partition_state(node, "el-pref", 0)[:2] == (101, 2), "101 leading p0")
    # v0 (no election type: preferred), all partitions: nothing is left to elect here
    _, results = elect(node.bootstrap_servers, 0, None, version=0)
    assert not any(topic == "el-pref" for topic, _ in results)


def test_unclean_election_and_the_cli(node: LocalCluster, stand_ins: StandIns,
                                      tmp_path: Path) -> None:
    topic_id = stand_ins.create_topic("el-unclean", {0: (101, 103)})
    answer = stand_ins.alter(101, topic_id, (101,))
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    assert stand_ins.heartbeat(101, want_fence=True).is_fenced  # stays fenced for now
    wait_for(lambda: partition_state(node, "el-unclean")[0] == -1, "leaderless")
    bootstrap = node.bootstrap_servers
    done = pykraft("leader-election", "--bootstrap-server", bootstrap,
                   "--election-type", "preferred", "--topic", "el-unclean", "--partition", "0")
    assert done.returncode == 1, done
    assert ("Error completing leader election (PREFERRED) for partition: el-unclean-0: "
            "PREFERRED_LEADER_NOT_AVAILABLE") in done.stdout
    assert "1 replica(s) could not be elected" in done.stderr
    spec = tmp_path / "partitions.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "el-unclean", "partition": 0}]}))
    done = pykraft("leader-election", "--bootstrap-server", bootstrap,
                   "--election-type", "UNCLEAN", "--path-to-json-file", str(spec))
    assert done.returncode == 0, done
    assert done.stdout.strip() == (
        "Successfully completed leader election (UNCLEAN) for partitions el-unclean-0")
    wait_for(lambda: partition_state(node, "el-unclean")[::3] == (103, (103,)),
             "103 leading after the unclean election")
    done = pykraft("leader-election", "--bootstrap-server", bootstrap,
                   "--election-type", "unclean", "--path-to-json-file", str(spec))
    assert done.returncode == 0, done
    assert done.stdout.strip() == "Valid replica already elected for partitions el-unclean-0"
    wait_for(lambda: not stand_ins.heartbeat(101).is_fenced, "101 back")


def test_cli_usage_errors(node: LocalCluster) -> None:
    bootstrap = node.bootstrap_servers
    for argv, message in [
        ((), "election-type"),
        (("--election-type", "fair", "--all-topic-partitions"), "Invalid election type"),
        (("--election-type", "preferred"), "One and only one"),
        (("--election-type", "preferred", "--topic", "t"), "partition"),
        (("--election-type", "preferred", "--all-topic-partitions", "--topic", "t"),
         "One and only one"),
    ]:
        done = pykraft("leader-election", "--bootstrap-server", bootstrap, *argv)
        assert done.returncode == 1 and message in done.stderr, (argv, done)


def test_all_partitions_with_the_cli(node: LocalCluster, stand_ins: StandIns) -> None:
    stand_ins.create_topic("el-all", {0: (102, 103)})
    fence_and_return(stand_ins, 102)  # 103 leads el-all-0, 102 out of its ISR
    wait_for(lambda: partition_state(node, "el-all")[0] == 103, "103 leading")
    done = pykraft("leader-election", "--bootstrap-server", node.bootstrap_servers,
                   "--election-type", "preferred", "--all-topic-partitions")
    assert "el-all-0: PREFERRED_LEADER_NOT_AVAILABLE" in done.stdout, done
    assert done.returncode == 1


@pytest.mark.slow
def test_a_dedicated_broker_forwards_elect_leaders_to_the_controller() -> None:
    with LocalCluster(controllers=1, brokers=1, configs=CONFIGS,
                      startup_timeout_s=60) as cluster:
        stand_ins = StandIns(cluster.node(1))
        try:
            stand_ins.start()
            topic_id = stand_ins.create_topic("fwd", {0: (101, 102)})
            fence_and_return(stand_ins, 101)
            answer = stand_ins.alter(102, topic_id, (102, 101), leader_epoch=1,
                                     partition_epoch=1)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none, answer
            broker = cluster.node(2).bootstrap_servers
            _, results = elect(broker, 0, {"fwd": [0]})
            assert results == {("fwd", 0): (ErrorCode.none, None)}
            wait_for(lambda: partition_state(cluster.node(2), "fwd")[:2] == (101, 2),
                     "101 leading again")
        finally:
            stand_ins.close()


def test_the_controller_moves_leadership_back_to_the_preferred_replica() -> None:
    """auto.leader.rebalance.enable with a 1 s check interval and no tolerated imbalance."""
    configs = {**CONFIGS, "leader.imbalance.check.interval.seconds": "1",
               "leader.imbalance.per.broker.percentage": "0"}
    with LocalCluster(configs=configs) as node:
        stand_ins = StandIns(node)
        try:
            stand_ins.start()
            topic_id = stand_ins.create_topic("auto", {0: (101, 102)})
            fence_and_return(stand_ins, 101)
            wait_for(lambda: partition_state(node, "auto")[:2] == (102, 1), "102 leading")
            answer = stand_ins.alter(102, topic_id, (102, 101), leader_epoch=1,
                                     partition_epoch=1)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none, answer
            wait_for(lambda: partition_state(node, "auto")[:2] == (101, 2),
                     "101 leading again without being asked", timeout_s=10)
        finally:
            stand_ins.close()


# -- with real brokers replicating -----------------------------------------------------------

REAL = {
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "100",
    "replica.fetch.wait.max.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


def leadership(bootstrap: str, topic: str) -> dict[int, tuple[int, int, frozenset[int]]]:
    """partition -> (leader, preferred replica, ISR), from the cluster's metadata."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p.id: (p.leader, p.replicas[0], frozenset(p.isrs))
            for p in found.topics[topic].partitions.values()}


def balanced_after_a_broker_returns(cluster: LocalCluster, topic: str) -> str:
    """Create `topic` (6 partitions, RF=3), produce, kill -9 broker 2 and restart it; wait
    until it is back in every ISR and leads nothing. Returns the bootstrap servers."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap = ",".join(cluster.node(i).bootstrap_servers for i in cluster.broker_ids)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(30)
    wait_for(lambda: all(lead == p for lead, p, _ in leadership(bootstrap, topic).values()),
             "preferred leaders at creation", timeout_s=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(60):
        producer.produce(topic, str(i).encode(), partition=i % 6)
    assert producer.flush(30) == 0
    cluster.kill_node(2)
    survivors = ",".join(cluster.node(i).bootstrap_servers for i in (3, 4))
    wait_for(lambda: all(lead != 2 and 2 not in isr
                         for lead, _, isr in leadership(survivors, topic).values()),
             "broker 2 out of every ISR", timeout_s=30)
    cluster.restart_node(2)
    wait_for(lambda: all(2 in isr for _, _, isr in leadership(bootstrap, topic).values()),
             "broker 2 back in every ISR", timeout_s=60)
    return bootstrap


def count_records(bootstrap: str, topic: str, expected: int) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    try:
        while seen < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_preferred_election_restores_balanced_leadership_with_real_brokers() -> None:
    """Issue 5, done-when 5: after a broker returns, `pykraft leader-election` moves every
    partition's leadership back to its preferred replica; no record is lost."""
    configs = {**REAL, "auto.leader.rebalance.enable": "false"}
    with LocalCluster(controllers=1, brokers=3, configs=configs,
                      startup_timeout_s=60) as cluster:
        bootstrap = balanced_after_a_broker_returns(cluster, "balance")
        state = leadership(bootstrap, "balance")
        assert not any(lead == 2 for lead, _, _ in state.values())
        assert any(p == 2 for _, p, _ in state.values())  # 2 prefers some: imbalanced
        done = pykraft("leader-election", "--bootstrap-server", bootstrap,
                       "--election-type", "preferred", "--all-topic-partitions")
        assert done.returncode == 0, done
        assert done.stdout.startswith("Successfully completed leader election (PREFERRED)")
        wait_for(lambda: all(lead == p for lead, p, _ in leadership(bootstrap, "balance").values()),
                 "preferred leaders again")
        assert count_records(bootstrap, "balance", 60) == 60


@pytest.mark.slow
def test_auto_leader_rebalance_with_real_brokers() -> None:
    configs = {**REAL, "leader.imbalance.check.interval.seconds": "2"}
    with LocalCluster(controllers=1, brokers=3, configs=configs,
                      startup_timeout_s=60) as cluster:
        bootstrap = balanced_after_a_broker_returns(cluster, "auto-balance")
        wait_for(lambda: all(lead == p for lead, p, _ in
                             leadership(bootstrap, "auto-balance").values()),
                 "preferred leaders again without being asked", timeout_s=20)
        assert count_records(bootstrap, "auto-balance", 60) == 60
