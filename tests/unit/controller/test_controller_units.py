"""Small pieces: controller configuration, partition change building."""

from __future__ import annotations

import uuid

import pytest

from pykraft.controller.config import ControllerConfig
from pykraft.controller.partitions import Election, build_partition_change
from pykraft.errors import InvalidConfig
from pykraft.metadata.records import PartitionChangeRecord
from pykraft.metadata.registrations import (
    MIGRATING_DIRECTORY,
    LeaderRecoveryState,
    PartitionRegistration,
)

TOPIC_ID = uuid.UUID(int=42)


def test_controller_config_reads_kafkas_keys() -> None:
    config = ControllerConfig.from_properties(
        {
            "node.id": "3",
            "num.partitions": "4",
            "default.replication.factor": "2",
            "broker.session.timeout.ms": "1500",
            "delete.topic.enable": "false",
            "log.retention.ms": "7",
        },
        cluster_id="c",
    )
    assert (config.node_id, config.num_partitions, config.default_replication_factor) == (3, 4, 2)
    assert config.broker_session_timeout_ms == 1500 and not config.delete_topic_enable
    assert config.server_configs["log.retention.ms"] == "7" and config.cluster_id == "c"
    defaults = ControllerConfig.from_properties({})
    assert (defaults.num_partitions, defaults.broker_session_timeout_ms) == (1, 9000)
    with pytest.raises(InvalidConfig, match="num.partitions"):
        ControllerConfig.from_properties({"num.partitions": "0"})
    with pytest.raises(InvalidConfig, match="delete.topic.enable"):
        ControllerConfig.from_properties({"delete.topic.enable": "maybe"})


def partition(
    replicas: tuple[int, ...], isr: tuple[int, ...], leader: int
) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas,
        isr=isr,
        removing_replicas=(),
        adding_replicas=(),
        leader=leader,
        leader_recovery_state=LeaderRecoveryState.RECOVERED,
        leader_epoch=3,
        partition_epoch=5,
        directories=(MIGRATING_DIRECTORY,) * len(replicas),
    )


def change(
    current: PartitionRegistration,
    target_isr: tuple[int, ...],
    acceptable: set[int],
    *,
    election: Election = Election.ONLINE,
    metadata_version: int = 21,
) -> PartitionChangeRecord | None:
    return build_partition_change(
        current,
        TOPIC_ID,
        0,
        target_isr=target_isr,
        is_acceptable_leader=acceptable.__contains__,
        metadata_version=metadata_version,
        election=election,
    )


def test_nothing_to_change_gives_no_record() -> None:
    assert change(partition((1, 2), (1, 2), 1), (1, 2), {1, 2}) is None


def test_a_valid_leader_stays_even_if_not_preferred() -> None:
    """Only the ISR changes: no leader field, so the leader epoch is not bumped."""
    record = change(partition((1, 2, 3), (2, 3, 1), 2), (2, 3), {2, 3})
    assert record == PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=(2, 3))


def test_the_first_valid_replica_in_replica_order_takes_over() -> None:
    record = change(partition((1, 2, 3), (1, 3, 2), 1), (3, 2), {2, 3})
    assert record is not None and (record.leader, record.isr) == (2, (3, 2))


def test_no_valid_leader_keeps_the_last_isr() -> None:
    record = change(partition((1, 2), (1,), 1), (), {2})
    assert record == PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=-1)


def test_unclean_election_takes_any_acceptable_replica_and_marks_recovering() -> None:
    record = change(partition((1, 2), (1,), 1), (), {2}, election=Election.UNCLEAN)
    assert record is not None
    assert (record.leader, record.isr, record.leader_recovery_state) == (2, (2,), 1)


def test_isr_shrink_restates_the_leader_before_3_6() -> None:
    record = change(partition((1, 2), (1, 2), 1), (1,), {1}, metadata_version=11)
    assert record is not None and (record.leader, record.isr) == (1, (1,))
    expansion = change(partition((1, 2), (1,), 1), (1, 2), {1, 2}, metadata_version=11)
    assert expansion is not None and expansion.leader == -2  # growing never bumps
