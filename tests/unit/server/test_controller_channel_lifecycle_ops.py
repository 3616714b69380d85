"""The controller channel's AllocateProducerIds, UnregisterBroker and UpdateFeatures: decided
in-process by the active controller, else sent to it (NOT_CONTROLLER retried; a lost answer
resent only where that is harmless); and the controller listener's AllocateProducerIds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.controller.features import FeatureUpdate, UpgradeType
from pykraft.controller.producer_ids import ProducerIdsBlock
from pykraft.protocol.entities import make, response_module
from pykraft.server.controller_channel import (
    ALLOCATE_PRODUCER_IDS,
    ControllerRefused,
    QuorumControllerChannel,
)
from pykraft.server.controller_client import ControllerUnavailable
from tests.unit.server.test_controller_channel import (
    ScriptedClient,
    activated,
    register,
    settle,
    standby,
)


def allocate_answer(code: ErrorCode, start: int = 0, length: int = 0) -> Any:
    module = response_module(ALLOCATE_PRODUCER_IDS, 0)
    return make(module.AllocateProducerIdsResponse, throttle_time=0, error_code=code,
                producer_id_start=start, producer_id_len=length)


def unregister_answer(code: ErrorCode, message: str | None = None) -> Any:
    module = response_module(64, 0)
    return make(module.UnregisterBrokerResponse, throttle_time=0, error_code=code,
                error_message=message)


def update_features_answer(code: ErrorCode, message: str | None = None) -> Any:
    module = response_module(57, 2)
    return make(module.UpdateFeaturesResponse, throttle_time=0, error_code=code,
                error_message=message)


def test_allocation_is_forwarded_retried_and_refusals_raised() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [allocate_answer(ErrorCode.not_controller),
                                    ControllerUnavailable("reset", sent=True),
                                    allocate_answer(ErrorCode.none, 3000, 1000),
                                    allocate_answer(ErrorCode.stale_broker_epoch)])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        block = await channel.allocate_producer_ids(4, 17)
        assert block == ProducerIdsBlock(4, 3000, 1000)
        assert len(client.requests) == 3  # a lost answer is resent: a block is never reused
        sent = client.requests[-1][1]
        assert (sent.broker_id, sent.broker_epoch) == (4, 17)
        with pytest.raises(ControllerRefused) as refused:
            await channel.allocate_producer_ids(4, 16)
        assert refused.value.code == ErrorCode.stale_broker_epoch
    asyncio.run(go())


def test_unregistration_is_not_resent_after_a_lost_answer() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [ControllerUnavailable("timed out", sent=True),
                                    unregister_answer(ErrorCode.broker_id_not_registered,
                                                      "Broker ID 9 is not currently registered")])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        code, _ = await channel.unregister_broker(9)
        assert code == ErrorCode.request_timed_out and len(client.requests) == 1
        code, message = await channel.unregister_broker(9)
        assert code == ErrorCode.broker_id_not_registered and "9" in (message or "")
    asyncio.run(go())


def test_update_features_is_forwarded() -> None:
    async def go() -> None:
        client = ScriptedClient(2, [update_features_answer(ErrorCode.not_controller),
                                    update_features_answer(ErrorCode.invalid_update_version,
                                                           "no")])
        channel = QuorumControllerChannel(standby(), client, timeout_ms=5_000)
        result = await channel.update_features(
            [FeatureUpdate("metadata.version", 20, UpgradeType.SAFE_DOWNGRADE)],
            validate_only=True)
        assert (result.error_code, result.error_message) == (
            ErrorCode.invalid_update_version, "no")
        sent = client.requests[-1][1]
        assert sent.validate_only
        assert [(u.feature, u.max_version_level, u.upgrade_type)
                for u in sent.feature_updates] == [("metadata.version", 20, 2)]
    asyncio.run(go())


def test_the_active_controller_allocates_unregisters_and_updates_in_process() -> None:
    async def go() -> None:
        server, raft = await activated()
        await register(server, raft, 1)
        epoch = server.core.image.cluster.brokers[1].epoch
        client = ScriptedClient(2, [])
        channel = QuorumControllerChannel(server, client, timeout_ms=1_000)

        async def committed(coroutine: Any) -> Any:
            task = asyncio.ensure_future(coroutine)
            await settle()
            raft.commit_all()
            return await task

        first = await committed(channel.allocate_producer_ids(1, epoch))
        second = await committed(channel.allocate_producer_ids(1, epoch))
        assert (first.first_producer_id, second.first_producer_id) == (0, 1000)
        with pytest.raises(ControllerRefused) as refused:
            await channel.allocate_producer_ids(1, epoch + 1)
        assert refused.value.code == ErrorCode.stale_broker_epoch
        upgrade = [FeatureUpdate("metadata.version", 22)]
        result = await channel.update_features(upgrade, validate_only=False)
        assert result.error_code == ErrorCode.invalid_update_version  # broker 1 has 1-21
        assert "Broker 1 only supports versions" in (result.error_message or "")
        assert await committed(channel.unregister_broker(1)) == (ErrorCode.none, None)
        code, _ = await channel.unregister_broker(1)
        assert code == ErrorCode.broker_id_not_registered
        result = await committed(channel.update_features(upgrade, validate_only=False))
        assert result.error_code == ErrorCode.none
        assert server.core.committed_image.features.metadata_version == 22
        assert client.requests == []
    asyncio.run(go())
