"""A `__consumer_offsets` replica moved to another log dir (AlterReplicaLogDirs) while the
group coordinator loads it, against a real node with two log dirs.

The node (combined, one `__consumer_offsets` partition) holds a group with 3,000 offset
commits of 50 partitions each (3,000 batches: the load takes a while and yields many
times). It restarts, and the move is asked for as soon as the node knows the replica again,
so that the replica's swap lands while the coordinator replays the partition: the node's
log must show the move done before the load. The group's offsets are then all there
(kafka-python's list_group_offsets), and commits keep working.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient  # type: ignore[import-untyped]
from kafka.admin import NewTopic  # type: ignore[import-untyped]
from kafka.structs import TopicPartition  # type: ignore[import-untyped]
from kio.schema.alter_replica_log_dirs.v2 import request as alter_v2
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8 import request as commit_v8

from pykraft.testing import LocalCluster
from pykraft.testing.wire import WireClient
from tests.integration import waits

GROUP = "moved-while-loading"
TOPIC = "t"
PARTITIONS = 50
ROUNDS = 3000
PIPELINE = 50  # commits in flight on the connection at once
OFFSET_COMMIT = 8
ALTER_REPLICA_LOG_DIRS = 34


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("log-moves-coordinators")
    cluster = LocalCluster(data_dir=data_dir, configs={
        "log.dirs": f"{data_dir / 'logs'},{data_dir / 'logs-2'}",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "num.partitions": str(PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
    })
    with cluster as running:
        yield running


def commit_request(offset: int) -> Any:
    return commit_v8.OffsetCommitRequest(
        group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",  # type: ignore[arg-type]
        topics=(commit_v8.OffsetCommitRequestTopic(name=TOPIC, partitions=tuple(  # type: ignore[arg-type]
            commit_v8.OffsetCommitRequestPartition(
                partition_index=index, committed_offset=offset + index,  # type: ignore[arg-type]
                committed_metadata="")
            for index in range(PARTITIONS))),))


def commit_rounds(bootstrap: str, first: int, count: int) -> None:
    """`count` OffsetCommit requests (one batch each), pipelined; every one must succeed."""
    with WireClient(bootstrap, timeout_s=30) as client:
        for start in range(first, first + count, PIPELINE):
            sent = [client.send(OFFSET_COMMIT, 8, commit_request(offset))
                    for offset in range(start, min(start + PIPELINE, first + count))]
            for correlation_id in sent:
                answered, response = client.receive(OFFSET_COMMIT, 8)
                assert answered == correlation_id
                codes = {p.error_code for t in response.topics for p in t.partitions}
                assert codes == {ErrorCode.none}, codes


def expected_offsets(last_round: int) -> dict[TopicPartition, int]:
    return {TopicPartition(TOPIC, index): last_round + index for index in range(PARTITIONS)}


def group_offsets(admin: Any) -> dict[TopicPartition, int] | None:
    try:
        found = admin.list_group_offsets(GROUP)[GROUP]
    except Exception:  # noqa: BLE001 - loading (COORDINATOR_LOAD_IN_PROGRESS): asked again
        return None
    return {tp: meta.offset for tp, meta in found.items()}


def ask_to_move_at_once(bootstrap: str, destination: str) -> None:
    """AlterReplicaLogDirs as soon as the node listens and knows the replica (raw, over one
    connection: kafka-python's round trips would each wait on the busy loading node)."""
    request = alter_v2.AlterReplicaLogDirsRequest(dirs=(alter_v2.AlterReplicaLogDir(
        path=destination, topics=(alter_v2.AlterReplicaLogDirTopic(
            name="__consumer_offsets", partitions=(0,)),)),))  # type: ignore[arg-type]
    client = waits.wait_for(lambda: WireClient(bootstrap, timeout_s=30), "the node listening",
                            30, retry_on=(OSError,), interval_s=0.01)
    with client:
        deadline = time.monotonic() + 30
        while True:
            response = client.request(ALTER_REPLICA_LOG_DIRS, 2, request)
            code = response.results[0].partitions[0].error_code
            if code == ErrorCode.none:
                return
            assert code == ErrorCode.replica_not_available, code
            assert time.monotonic() < deadline, "the replica never came back"


def replica_dir(admin: Any) -> str | None:
    for answer in admin.describe_log_dirs():
        for result in answer["log_dirs"]:
            for topic in result["topics"]:
                if topic["name"] == "__consumer_offsets" and any(
                        not partition["is_future_key"] for partition in topic["partitions"]):
                    return str(result["log_dir"])
    return None


def test_offsets_survive_a_move_of_their_partition_during_its_load(
        node: LocalCluster) -> None:
    bootstrap = node.bootstrap_servers
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        # FindCoordinator creates __consumer_offsets; its partition then loads (empty)
        waits.wait_for(lambda: group_offsets(admin) is not None, "the coordinator", 30)
    finally:
        admin.close()
    commit_rounds(bootstrap, 0, ROUNDS)
    dirs = [str((node.data_dir / name).absolute()) for name in ("logs", "logs-2")]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    home = waits.wait_for(lambda: replica_dir(admin), "the replica's dir", 30)
    admin.close()
    other = next(d for d in dirs if d != home)

    node.stop()
    log_size = node.log_path.stat().st_size
    node._start_process()  # not start(): the move is asked for before the node is "ready"
    ask_to_move_at_once(bootstrap, other)
    node.wait_ready()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        found = waits.wait_for(lambda: group_offsets(admin) or None, "the group loaded", 60)
        assert found == expected_offsets(ROUNDS - 1)
        waits.wait_for(lambda: replica_dir(admin) == other or None, "the replica moved", 30)
        with node.log_path.open("rb") as log_file:
            log_file.seek(log_size)
            lines = log_file.read().decode(errors="replace").splitlines()
        moved = next(i for i, line in enumerate(lines)
                     if "moved __consumer_offsets-0 to" in line)
        loaded = next(i for i, line in enumerate(lines)
                      if "group record(s) of __consumer_offsets-0" in line)
        assert moved < loaded, "the swap did not land during the load"
        assert not any("Traceback" in line for line in lines)
        # commits keep working, written to the moved replica, and read back
        commit_rounds(bootstrap, ROUNDS, 3)
        assert group_offsets(admin) == expected_offsets(ROUNDS + 2)
    finally:
        admin.close()
    assert not (Path(home) / "__consumer_offsets-0").exists()
