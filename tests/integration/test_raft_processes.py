"""Three Raft voters as separate processes on loopback, the leader killed with SIGKILL again
and again while it proposes: each time another voter leads and commits within a bounded
time, no committed record is lost or changed, and every node applies the same log. And
DescribeQuorum across a cluster's processes: answered by the leader only.

Failover figures (kill -9 to the first commit of the next leader) are printed; run more
trials with RAFT_KILL_TRIALS=20 and the default timeouts with RAFT_KILL_DEFAULTS=1."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import pytest
from kio.schema.describe_quorum.v2.request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i32

from pykraft.testing import LocalCluster
from pykraft.testing.raft_processes import check_logs, kill_leader_trials, start_voters
from pykraft.testing.wire import WireClient
from tests.integration.tool_helpers import pykraft

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_kill_9_the_leader_again_and_again(tmp_path: Path) -> None:
    trials = int(os.environ.get("RAFT_KILL_TRIALS", "5"))
    if os.environ.get("RAFT_KILL_DEFAULTS"):
        options: list[str] = []
        election_ms, fetch_ms = 1000, 2000
    else:
        election_ms, fetch_ms = 150, 400
        options = ["--election-timeout-ms", str(election_ms), "--election-backoff-max-ms",
                   str(election_ms), "--fetch-timeout-ms", str(fetch_ms),
                   "--request-timeout-ms", "300"]
    voters = start_voters(tmp_path, options, cwd=ROOT)
    try:
        failovers = kill_leader_trials(voters, trials, settle=True)
    finally:
        for voter in voters:
            voter.stop()
    check_logs(voters)
    median = statistics.median(failovers)
    print(f"\nfailover after kill -9 (election {election_ms} ms, fetch {fetch_ms} ms), "
          f"{len(failovers)} trials: median {median * 1000:.0f} ms, "
          f"max {max(failovers) * 1000:.0f} ms")
    # the followers learn of the dead leader from its refused connections, not by waiting out
    # fetch.timeout.ms: most failovers are well below it
    assert median < fetch_ms / 1000
    # a split vote costs a few election rounds, with slack for a loaded machine
    assert max(failovers) < (fetch_ms + 4 * election_ms) / 1000 + 2.0


# -- DescribeQuorum across the quorum's processes -------------------------------------------


def _describe_quorum(address: str) -> Any:
    request = DescribeQuorumRequest(topics=(TopicData(
        topic_name=TopicName("__cluster_metadata"),
        partitions=(PartitionData(partition_index=i32(0)),)),))
    with WireClient(address, timeout_s=10) as client:
        return client.request(55, 2, request)


@pytest.mark.slow
def test_describe_quorum_is_answered_by_the_leader() -> None:
    """As Kafka: a controller that does not lead answers NOT_LEADER_OR_FOLLOWER (naming the
    leader it knows), a broker forwards the request to the active controller, and
    `pykraft metadata-quorum` finds the leader among several bootstrap controllers or
    through a broker."""
    with LocalCluster(controllers=3, brokers=1, startup_timeout_s=60) as cluster:
        leader = cluster.active_controller()
        follower = next(i for i in cluster.controller_ids if i != leader)
        refused = _describe_quorum(f"127.0.0.1:{cluster.node(follower).controller_port}")
        partition = refused.topics[0].partitions[0]
        assert refused.error_code == ErrorCode.none
        assert partition.error_code == ErrorCode.not_leader_or_follower
        assert partition.leader_id == leader and partition.current_voters == ()
        answered = _describe_quorum(f"127.0.0.1:{cluster.node(leader).controller_port}")
        partition = answered.topics[0].partitions[0]
        assert (partition.error_code, partition.leader_id) == (ErrorCode.none, leader)
        assert [v.replica_id for v in partition.current_voters] == [1, 2, 3]
        assert [n.node_id for n in answered.nodes] == [1, 2, 3]
        forwarded = _describe_quorum(cluster.bootstrap_servers).topics[0].partitions[0]
        assert (forwarded.error_code, forwarded.leader_id) == (ErrorCode.none, leader)
        assert [o.replica_id for o in forwarded.observers] == [4]  # the broker itself
        controllers = ",".join(f"127.0.0.1:{cluster.node(i).controller_port}"
                               for i in (follower, leader))
        for option, address in (("--bootstrap-controller", controllers),
                                ("--bootstrap-server", cluster.bootstrap_servers)):
            result = pykraft("metadata-quorum", option, address, "describe", "--status")
            assert result.returncode == 0, result.stderr
            fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
            assert fields["LeaderId"].strip() == str(leader)
