"""A cluster formatted with `storage format --release-version` starts at that
metadata.version (the controller bootstraps from bootstrap.checkpoint) and upgrades from it;
`cluster unregister --bootstrap-controller` reaches the active controller from any
controller. One cluster of three controllers and a broker, formatted at 3.7."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from pykraft.testing import LocalCluster
from tests.integration.tool_helpers import eventually, pykraft


@pytest.fixture(scope="module")
def cluster_at_3_7() -> Iterator[LocalCluster]:
    cluster = LocalCluster(controllers=3, brokers=1, startup_timeout_s=60)
    try:
        for node in cluster.nodes.values():  # formatted here, start() leaves it as it is
            result = subprocess.run(
                [sys.executable, "-m", "pykraft", "storage", "format", "--config",
                 str(node.config_path), "--cluster-id", cluster.cluster_id,
                 "--release-version", "3.7"],
                capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, result.stderr
            assert "with metadata.version 3.7-IV4." in result.stdout
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def finalized(bootstrap: str) -> str:
    result = pykraft("features", "--bootstrap-server", bootstrap, "describe")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines()
                if line.startswith("Feature: metadata.version\t"))
    return dict(field.split(": ", 1) for field in line.split("\t"))["FinalizedVersionLevel"]


def follower_controller(cluster: LocalCluster) -> str:
    leader = cluster.active_controller()
    follower = next(i for i in cluster.controller_ids if i != leader)
    return f"127.0.0.1:{cluster.node(follower).controller_port}"


def test_the_cluster_starts_at_the_formatted_level_and_upgrades(
    cluster_at_3_7: LocalCluster,
) -> None:
    bootstrap = cluster_at_3_7.bootstrap_servers
    assert finalized(bootstrap) == "3.7-IV4"
    upgrade = pykraft("features", "--bootstrap-server", bootstrap, "upgrade",
                      "--metadata", "4.0")
    assert upgrade.returncode == 0, upgrade.stderr
    assert "metadata.version was upgraded to 22." in upgrade.stdout

    def upgraded() -> None:
        assert finalized(bootstrap) == "4.0-IV0"

    eventually(upgraded)


def test_unregister_through_a_controller_that_is_not_active(
    cluster_at_3_7: LocalCluster,
) -> None:
    follower = follower_controller(cluster_at_3_7)
    missing = pykraft("cluster", "unregister", "--bootstrap-controller", follower, "--id", "99")
    assert missing.returncode == 1
    assert "BROKER_ID_NOT_REGISTERED" in missing.stderr, missing.stderr  # not NOT_CONTROLLER
    broker = cluster_at_3_7.broker_ids[0]
    done = pykraft("cluster", "unregister", "--bootstrap-controller", follower,
                   "--id", str(broker))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Broker {broker} is no longer registered.\n"
