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
