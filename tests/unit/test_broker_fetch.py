"""A broker's Fetch handler, one layer: real logs and a ReplicaManager, the request as a kio
entity, no sockets. What is checked here is how a look at many partitions shares the loop."""

from __future__ import annotations

import asyncio
import datetime
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.fetch.v12 import request as fetch_request

from pykraft.broker import apis as apis_module
from pykraft.broker.apis import BrokerApis
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.metadata.registrations import LeaderRecoveryState, PartitionRegistration
from pykraft.protocol.entities import make
from pykraft.records.record import build_batch
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager

ME = 1
TOPIC_ID = uuid.UUID(int=11)
PARTITIONS = 50


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ReplicaManager]:
    log_manager = LogManager([tmp_path], {})
    log_manager.load(0)
    yield ReplicaManager(ME, log_manager, {}, lambda: 1_000_000)
    log_manager.close()


def lead(manager: ReplicaManager, index: int) -> Partition:
    registration = PartitionRegistration(
        replicas=(ME,), isr=(ME,), removing_replicas=(), adding_replicas=(), leader=ME,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0,
        partition_epoch=0, directories=())
    manager._apply_partition("t", TOPIC_ID, index,
                             registration, LogConfig.from_configs({}, manager.server_configs))
    partition = manager.get_partition("t", index)
    assert partition is not None
    return partition


def consumer_fetch(max_wait_ms: int) -> object:
    return make(
        fetch_request.FetchRequest, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(fetch_request.FetchTopic, topic="t", partitions=tuple(
            make(fetch_request.FetchPartition, partition=index, current_leader_epoch=-1,
                 fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                 partition_max_bytes=1 << 16)
            for index in range(PARTITIONS))),),
        forgotten_topics_data=(), rack_id="")


async def test_an_append_to_a_partition_looked_at_before_the_fetch_yielded_answers_it(
        manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """The look yields after every partition here; an append to partition 0 lands while
    the look is at the others. The fetch answers with it at once, not after max_wait: the
    wait that follows the look would not hear of an append made before it parked."""
    monkeypatch.setattr(apis_module, "FETCH_SLICE_S", 0.0)
    monkeypatch.setattr(apis_module, "FETCH_SLICE_CHECK", 1)
    partitions = [lead(manager, index) for index in range(PARTITIONS)]
    apis = BrokerApis(ME, MetadataCache(ME, "cluster"), manager, [],
                      auto_create_topics=None)
    context = types.SimpleNamespace(header=types.SimpleNamespace(api_version=12))
    fetching = asyncio.ensure_future(apis.fetch(context, consumer_fetch(10_000)))  # type: ignore[arg-type]
    for _ in range(5):  # the look is a few partitions in
        await asyncio.sleep(0)
    assert not fetching.done()
    manager.append(partitions[0], build_batch([(b"k", b"v", [], 1)]), acks=1)
    response = await asyncio.wait_for(fetching, 5)
    answered = {data.partition_index: data for topic in response.responses
                for data in topic.partitions}
    assert answered[0].records and answered[0].high_watermark == 1
    assert all(not answered[index].records for index in range(1, PARTITIONS))
