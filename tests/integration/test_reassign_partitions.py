"""`pykraft reassign-partitions` and the KIP-455 RPCs against a real node.

Stand-in brokers (registered over the controller listener, see test_alter_partition) own
the partitions, so the test plays the leader that adds the new replicas to the ISR and
completes the move; the tool talks to the node's broker listener, which forwards to the
controller.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from pykraft.testing import LocalCluster
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


def write(path: Path, moves: dict[tuple[str, int], list[int]]) -> str:
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in moves.items()]}))
    return str(path)


def tool(node: LocalCluster, *argv: str) -> tuple[int, str, str]:
    done = pykraft("reassign-partitions", "--bootstrap-server", node.bootstrap_servers, *argv)
    return done.returncode, done.stdout, done.stderr


def test_generate_proposes_a_placement_on_the_given_brokers(
    node: LocalCluster, stand_ins: StandIns, tmp_path: Path
) -> None:
    stand_ins.create_topic("ra-gen", {0: (101, 102), 1: (102, 103), 2: (103, 101)})
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"topics": [{"topic": "ra-gen"}], "version": 1}))
    code, out, err = tool(node, "--generate", "--topics-to-move-json-file", str(topics),
                          "--broker-list", "101,102")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    current, proposed = json.loads(lines[1]), json.loads(lines[4])
    assert [p["replicas"] for p in current["partitions"]] == [[101, 102], [102, 103],
                                                               [103, 101]]
    for entry in proposed["partitions"]:
        assert sorted(entry["replicas"]) == [101, 102]
        assert entry["log_dirs"] == ["any", "any"]
    code, _, err = tool(node, "--generate", "--topics-to-move-json-file", str(topics),
                        "--broker-list", "101,999")
    assert code == 1 and "not present: [999]" in err


def test_execute_verify_and_completion_by_the_leader(
    node: LocalCluster, stand_ins: StandIns, tmp_path: Path
) -> None:
    topic_id = stand_ins.create_topic("ra-move", {0: (101, 102)})
    plan = write(tmp_path / "plan.json", {("ra-move", 0): [102, 103]})
    code, out, err = tool(node, "--execute", "--reassignment-json-file", plan)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[2])["partitions"][0]["replicas"] == [101, 102]
    assert lines[4] == "Save this to use as the --reassignment-json-file option during rollback"
    assert lines[5] == "Successfully started partition reassignment for ra-move-0"
    code, out, _ = tool(node, "--list")
    assert out.splitlines() == ["Current partition reassignments:",
                                "ra-move-0: replicas: 102,103,101. adding: 103. removing: 101."]
    code, out, _ = tool(node, "--verify", "--reassignment-json-file", plan)
    assert out.splitlines() == ["Status of partition reassignment:",
                                "Reassignment of partition ra-move-0 is still in progress."]
    assert partition_state(node, "ra-move")[2] == (102, 103, 101)
    described = pykraft("topics", "--bootstrap-server", node.bootstrap_servers, "--describe",
                        "--topic", "ra-move")
    summary, line = described.stdout.splitlines()
    assert "\tReplicationFactor: 2\t" in summary  # the adding replica does not count
    assert line.endswith("\tReplicas: 102,103,101\tIsr: 101,102"
                         "\tAdding Replicas: 103\tRemoving Replicas: 101"), line
    under = pykraft("topics", "--bootstrap-server", node.bootstrap_servers, "--describe",
                    "--topic", "ra-move", "--under-replicated-partitions")
    assert under.returncode == 0 and under.stdout == ""
    # the leader (101, leaving) sees 103 caught up: the move completes and 102 leads
    answer = stand_ins.alter(101, topic_id, (101, 102, 103), partition_epoch=1)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.new_leader_elected
    wait_for(lambda: partition_state(node, "ra-move") == (102, 1, (102, 103), (102, 103)),
             "the move completed")
    code, out, _ = tool(node, "--verify", "--reassignment-json-file", plan)
    assert out.splitlines()[1] == "Reassignment of partition ra-move-0 is completed."
    code, out, _ = tool(node, "--list")
    assert out.strip() == "No partition reassignments found."


def test_cancel_and_refusals(node: LocalCluster, stand_ins: StandIns, tmp_path: Path) -> None:
    stand_ins.create_topic("ra-cancel", {0: (102, 103), 1: (101, 102)})
    plan = write(tmp_path / "plan.json", {("ra-cancel", 0): [101, 102]})
    assert tool(node, "--execute", "--reassignment-json-file", plan)[0] == 0
    assert partition_state(node, "ra-cancel")[2] == (101, 102, 103)
    code, out, err = tool(node, "--cancel", "--reassignment-json-file", plan)
    assert code == 0, err
    assert out.strip() == "Successfully cancelled partition reassignment for: ra-cancel-0"
    wait_for(lambda: partition_state(node, "ra-cancel")[2:] == ((102, 103), (102, 103)),
             "the original replicas back")
    code, out, err = tool(node, "--cancel", "--reassignment-json-file", plan)
    assert code == 1 and "ra-cancel-0: NO_REASSIGNMENT_IN_PROGRESS" in out, (out, err)
    bad = write(tmp_path / "bad.json", {("ra-cancel", 1): [101, 999]})
    code, out, err = tool(node, "--execute", "--reassignment-json-file", bad)
    assert code == 1
    assert "ra-cancel-1: INVALID_REPLICA_ASSIGNMENT" in out and "broker 999" in out
    code, _, err = tool(node, "--verify")
    assert code == 1 and "--verify needs --reassignment-json-file" in err
    code, _, err = tool(node, "--execute", "--list")
    assert code == 1 and "exactly one action" in err


@pytest.mark.slow
def test_a_loaded_partition_moves_to_other_brokers_while_producing(tmp_path: Path) -> None:
    """Issue 5, done-when 4: {2,3,4} -> {3,4,5} with real brokers under acks=all load: the
    new replica catches up, joins the ISR, the move completes, broker 2's files are
    removed, and every acknowledged record is there."""
    import threading
    import time

    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    configs = {"replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "100",
               "replica.fetch.wait.max.ms": "200", "broker.session.timeout.ms": "6000",
               "broker.heartbeat.interval.ms": "500"}
    with LocalCluster(controllers=1, brokers=4, configs=configs,
                      startup_timeout_s=90) as cluster:
        bootstrap = ",".join(cluster.node(i).bootstrap_servers for i in cluster.broker_ids)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("moving", num_partitions=1,
                                      replica_assignment=[[2, 3, 4]])])["moving"].result(30)
        def in_sync() -> bool:
            found = admin.list_topics("moving", timeout=10).topics["moving"].partitions
            return 0 in found and len(found[0].isrs) == 3

        wait_for(in_sync, "the topic in sync")
        acked: list[int] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                 "enable.idempotence": False, "linger.ms": 5})
            sent = 0
            while not stop.is_set():
                producer.produce("moving", str(sent).encode(), on_delivery=lambda error, m: (
                    acked.append(int(m.value())) if error is None else None))
                producer.poll(0)
                sent += 1
                time.sleep(0.002)
            producer.flush(30)

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            wait_for(lambda: len(acked) > 300, "records acknowledged before the move")
            plan = write(tmp_path / "plan.json", {("moving", 0): [3, 4, 5]})
            code, out, err = tool(cluster.node(2), "--execute", "--reassignment-json-file",
                                  plan)
            assert code == 0, (out, err)
            wait_for(lambda: "is completed" in tool(cluster.node(3), "--verify",
                                                    "--reassignment-json-file", plan)[1],
                     "the move completed", timeout_s=60)
            moved_at = len(acked)
            wait_for(lambda: len(acked) > moved_at + 300, "records acknowledged after")
        finally:
            stop.set()
            thread.join(60)
        partition = admin.list_topics("moving", timeout=10).topics["moving"].partitions[0]
        assert sorted(partition.replicas) == [3, 4, 5] and sorted(partition.isrs) == [3, 4, 5]
        wait_for(lambda: not list(cluster.node(2).log_dir.glob("moving-*")),
                 "broker 2's replica removed")
        assert all(list(cluster.node(b).log_dir.glob("moving-0")) for b in (3, 4, 5))
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "moving-check",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["moving"])
        seen: set[int] = set()
        deadline = time.monotonic() + 30
        try:
            while not set(acked) <= seen and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen.add(int(message.value()))
        finally:
            consumer.close()
        assert set(acked) <= seen, f"{len(set(acked) - seen)} acknowledged records lost"
