"""KIP-392 on the leader, one layer: which replica a consumer of a rack is pointed to
(Kafka's RackAwareReplicaSelector over the ISR), with real logs and a controller-made image
of four brokers in two racks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pykraft.broker.replica_manager import (
    RACK_AWARE_REPLICA_SELECTOR,
    Partition,
    ReplicaManager,
    rack_aware_selector,
)
from pykraft.errors import InvalidConfig
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager
from tests.unit.controller.controller_harness import Harness
from tests.unit.test_replica_manager import TOPIC_ID, batch, registration

ME = 1
RACKS = ["a", "a", "b", "b"]  # brokers 0-3; this leader (1) is in rack a


def _manager(tmp_path: Path, selector: str | None) -> Iterator[ReplicaManager]:
    configs = {"replica.lag.time.max.ms": "10000"}
    if selector is not None:
        configs["replica.selector.class"] = selector
    log_manager = LogManager([tmp_path], configs)
    log_manager.load(0)
    manager = ReplicaManager(ME, log_manager, configs, lambda: 1_000_000)
    harness = Harness()
    harness.start_brokers(4, racks=RACKS)
    manager._image = harness.controller.image
    yield manager
    log_manager.close()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ReplicaManager]:
    yield from _manager(tmp_path, RACK_AWARE_REPLICA_SELECTOR)


def _led(manager: ReplicaManager, isr: tuple[int, ...]) -> Partition:
    config = LogConfig.from_configs({}, manager.server_configs)
    manager._apply_partition("t", TOPIC_ID, 0, registration(ME, 0, isr, replicas=(1, 2, 3)),
                             config)
    partition = manager.get_partition("t", 0)
    assert partition is not None
    manager.append(partition, batch(6), acks=1)
    return partition


def test_the_most_caught_up_in_sync_follower_of_the_clients_rack(
        manager: ReplicaManager) -> None:
    partition = _led(manager, (1, 2, 3))
    manager.follower_fetch(partition, 2, 5, 0, 0)
    manager.follower_fetch(partition, 3, 3, 0, 0)
    assert manager.preferred_read_replica(partition, "b", 2, "PLAINTEXT") == 2
    assert manager.preferred_read_replica(partition, "b", 5, "PLAINTEXT") == 2
    assert manager.preferred_read_replica(partition, "b", 6, "PLAINTEXT") == -1  # none has 6
    manager.follower_fetch(partition, 3, 6, 0, 0)
    assert manager.preferred_read_replica(partition, "b", 2, "PLAINTEXT") == 3


def test_the_leader_serves_its_own_rack_no_rack_and_unknown_racks(
        manager: ReplicaManager) -> None:
    partition = _led(manager, (1, 2, 3))
    manager.follower_fetch(partition, 2, 6, 0, 0)
    for rack in ("a", "", "z"):
        assert manager.preferred_read_replica(partition, rack, 0, "PLAINTEXT") == -1
    # a listener the follower has no endpoint on: it cannot be told to the client
    assert manager.preferred_read_replica(partition, "b", 0, "OTHER") == -1


def test_out_of_sync_and_truncated_followers_are_not_preferred(
        manager: ReplicaManager) -> None:
    partition = _led(manager, (1, 2))
    manager.follower_fetch(partition, 3, 6, 0, 0)  # caught up, but not (yet) in the ISR
    assert 3 not in partition.isr
    assert manager.preferred_read_replica(partition, "b", 0, "PLAINTEXT") == -1
    manager.follower_fetch(partition, 2, 6, 0, 4)  # its log starts at 4
    assert manager.preferred_read_replica(partition, "b", 2, "PLAINTEXT") == -1
    assert manager.preferred_read_replica(partition, "b", 4, "PLAINTEXT") == 2


def test_without_a_selector_the_leader_serves_everyone(tmp_path: Path) -> None:
    for manager in _manager(tmp_path, None):
        partition = _led(manager, (1, 2, 3))
        manager.follower_fetch(partition, 2, 6, 0, 0)
        assert manager.preferred_read_replica(partition, "b", 0, "PLAINTEXT") == -1


def test_the_selector_class_is_checked() -> None:
    assert rack_aware_selector(None) is False
    assert rack_aware_selector("") is False
    assert rack_aware_selector(RACK_AWARE_REPLICA_SELECTOR) is True
    with pytest.raises(InvalidConfig, match="replica.selector.class"):
        rack_aware_selector("com.example.MySelector")
