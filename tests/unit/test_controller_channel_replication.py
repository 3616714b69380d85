"""QuorumControllerChannel's AlterPartition, ElectLeaders and reassignment requests when the
active controller is elsewhere: what goes on the wire and how answers come back (the
in-process path is covered by the integration tests)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.controller.requests import (
    AlterPartitionItem,
    AlterPartitionTopic,
    ElectionType,
    IsrMember,
    ReassignablePartition,
    ReassignableTopic,
)
from pykraft.protocol.entities import make, response_module
from pykraft.server.controller_channel import ControllerRefused, QuorumControllerChannel
from tests.unit.server.test_controller_channel import ScriptedClient, standby

TOPIC = uuid.UUID(int=5)


def alter_answer(code: ErrorCode, partition_code: ErrorCode = ErrorCode.none) -> Any:
    module = response_module(56, 3)
    return make(module.AlterPartitionResponse, throttle_time=0, error_code=code, topics=(
        make(module.TopicData, topic_id=TOPIC, partitions=(make(
            module.PartitionData, partition_index=0, error_code=partition_code, leader_id=1,
            leader_epoch=4, isr=(1, 2), leader_recovery_state=0, partition_epoch=9),)),))


def test_alter_partition_goes_to_the_active_controller() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [alter_answer(ErrorCode.none, ErrorCode.not_controller),
                                    alter_answer(ErrorCode.none),
                                    alter_answer(ErrorCode.stale_broker_epoch)])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        topics = [AlterPartitionTopic(TOPIC, (AlterPartitionItem(
            0, 4, (IsrMember(1, 10), IsrMember(2, 20)), 8),))]
        (result,) = await channel.alter_partition(1, 10, topics)
        assert result.topic_id == TOPIC
        (partition,) = result.partitions
        assert (partition.error_code, partition.isr, partition.partition_epoch) == (
            ErrorCode.none, (1, 2), 9)
        assert len(client.requests) == 2  # NOT_CONTROLLER for a partition: asked again
        api_key, sent = client.requests[-1]
        assert api_key == 56 and (sent.broker_id, sent.broker_epoch) == (1, 10)
        item = sent.topics[0].partitions[0]
        assert [(m.broker_id, m.broker_epoch) for m in item.new_isr_with_epochs] == [
            (1, 10), (2, 20)]
        assert (item.leader_epoch, item.partition_epoch) == (4, 8)
        with pytest.raises(ControllerRefused) as refused:
            await channel.alter_partition(1, 10, topics)
        assert refused.value.code == ErrorCode.stale_broker_epoch
    asyncio.run(go())


def test_elect_leaders_and_reassignments_go_to_the_active_controller() -> None:
    async def go() -> None:
        elect = response_module(43, 2)
        alter = response_module(45, 1)
        listed = response_module(46, 0)
        client = ScriptedClient(2, [
            make(elect.ElectLeadersResponse, throttle_time=0, error_code=ErrorCode.none,
                 replica_election_results=(make(elect.ReplicaElectionResult, topic="t",
                                                partition_result=(make(
                                                    elect.PartitionResult, partition_id=0,
                                                    error_code=ErrorCode.election_not_needed,
                                                    error_message="m"),)),)),
            make(alter.AlterPartitionReassignmentsResponse, throttle_time=0,
                 allow_replication_factor_change=True, error_code=ErrorCode.none,
                 error_message=None, responses=(make(
                     alter.ReassignableTopicResponse, name="t", partitions=(make(
                         alter.ReassignablePartitionResponse, partition_index=0,
                         error_code=ErrorCode.none, error_message=None),)),)),
            make(listed.ListPartitionReassignmentsResponse, throttle_time=0,
                 error_code=ErrorCode.none, error_message=None, topics=(make(
                     listed.OngoingTopicReassignment, name="t", partitions=(make(
                         listed.OngoingPartitionReassignment, partition_index=0,
                         replicas=(2, 3, 1), adding_replicas=(3,),
                         removing_replicas=(1,)),)),)),
        ])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        error, (topic,) = await channel.elect_leaders(ElectionType.UNCLEAN, {"t": [0]})
        assert error == ErrorCode.none
        assert [(p.partition_id, p.error_code) for p in topic.partitions] == [
            (0, ErrorCode.election_not_needed)]
        assert client.requests[0][1].election_type == 1
        (moved,) = await channel.alter_partition_reassignments(
            [ReassignableTopic("t", (ReassignablePartition(0, (2, 3)),))],
            allow_replication_factor_change=False)
        assert moved.partitions[0].error_code == ErrorCode.none
        sent = client.requests[1][1]
        assert sent.allow_replication_factor_change is False
        assert tuple(sent.topics[0].partitions[0].replicas) == (2, 3)
        error, (ongoing,) = await channel.list_partition_reassignments(None)
        assert client.requests[2][1].topics is None
        assert (ongoing.name, ongoing.partitions[0].adding_replicas) == ("t", (3,))
    asyncio.run(go())


def test_no_active_controller_answers_every_partition_not_controller() -> None:
    async def go() -> None:
        channel = QuorumControllerChannel(standby(), ScriptedClient(-1, []), timeout_ms=100)
        error, (topic,) = await channel.elect_leaders(ElectionType.PREFERRED, {"t": [0, 1]})
        assert error == ErrorCode.not_controller
        assert [p.error_code for p in topic.partitions] == [ErrorCode.not_controller] * 2
        (moved,) = await channel.alter_partition_reassignments(
            [ReassignableTopic("t", (ReassignablePartition(0, None),))],
            allow_replication_factor_change=True)
        assert moved.partitions[0].error_code == ErrorCode.not_controller
        with pytest.raises(ControllerRefused):
            await channel.alter_partition(1, 1, [])
    asyncio.run(go())
