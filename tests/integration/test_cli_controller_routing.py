"""Tools given --bootstrap-controller find the active controller themselves, as Kafka's admin
client does (KIP-919), from any controller, through an election, and fail with Kafka's
timeout message when the quorum has no leader. Three controller processes and a broker."""

from __future__ import annotations

import time
from pathlib import Path

from pykraft.testing import LocalCluster
from tests.integration.test_quorum_tools import status_fields
from tests.integration.tool_helpers import eventually, pykraft


def controller_address(cluster: LocalCluster, node_id: int) -> str:
    return f"127.0.0.1:{cluster.node(node_id).controller_port}"


def test_a_follower_controller_routes_to_the_leader_through_elections(tmp_path: Path) -> None:
    with LocalCluster(controllers=3, brokers=1, startup_timeout_s=60) as cluster:
        leader = cluster.active_controller()
        follower = next(i for i in cluster.controller_ids if i != leader)

        status = pykraft("metadata-quorum", "--bootstrap-controller",
                         controller_address(cluster, follower), "describe", "--status")
        assert status.returncode == 0, status.stderr
        fields = status_fields(status.stdout)
        assert fields["LeaderId"] == str(leader)
        assert [f'"id": {i}' in fields["CurrentVoters"] for i in cluster.controller_ids] == [
            True] * 3

        replication = pykraft("metadata-quorum", "--bootstrap-controller",
                              controller_address(cluster, follower), "describe",
                              "--replication")
        assert replication.returncode == 0, replication.stderr
        assert replication.stdout.splitlines()[1].split()[0] == str(leader)

        # a feature change through a controller that is not active reaches the active one
        dry_run = pykraft("features", "--bootstrap-controller",
                          controller_address(cluster, follower), "upgrade", "--metadata",
                          "3.9", "--dry-run")
        assert dry_run.returncode == 0, dry_run.stderr
        assert dry_run.stdout.strip().endswith("can be upgraded to 21.")

        # the leader dies: a survivor names the new leader once the election is over
        cluster.kill_node(leader)
        survivors = [i for i in cluster.controller_ids if i != leader]
        after = pykraft("metadata-quorum", "--bootstrap-controller",
                        controller_address(cluster, survivors[0]), "describe", "--status")
        assert after.returncode == 0, after.stderr
        assert status_fields(after.stdout)["LeaderId"] in {str(i) for i in survivors}

        # one controller of three left: no quorum, so no leader; Kafka's timeout message
        new_leader = int(status_fields(after.stdout)["LeaderId"])
        cluster.kill_node(new_leader)
        alone = next(i for i in survivors if i != new_leader)
        config = tmp_path / "admin.properties"
        config.write_text("default.api.timeout.ms=3000\n")

        def leaderless() -> None:  # the survivor notices its leader is gone within a timeout
            started = time.monotonic()
            result = pykraft("metadata-quorum", "--bootstrap-controller",
                             controller_address(cluster, alone), "--command-config",
                             str(config), "describe", "--status")
            assert result.returncode == 1, result.stdout
            assert result.stderr.startswith(
                "Error: Timed out waiting for a node assignment. Call: describeMetadataQuorum")
            assert time.monotonic() - started < 20

        eventually(leaderless, timeout_s=30)
