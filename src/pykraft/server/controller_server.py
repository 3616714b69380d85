"""The asyncio shell around the quorum controller core.

One event queue, as in Kafka's QuorumController: operations run one at a time against the
controller's current (pending-inclusive) state. An operation's records are appended to the
Raft log and replayed into the controller at once (so the next operation sees them); the
caller is answered only when the high watermark has passed the last record. Committed
batches the controller did not write itself (the log replayed at start-up) are replayed
when they commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import (
    AlterConfigsResource,
    AlterConfigsResult,
    CreatableTopic,
    CreatePartitionsResult,
    CreatePartitionsTopic,
    CreateTopicResult,
    DeleteTopicResult,
    LegacyAlterConfigsResource,
    OpResult,
)
from pykraft.errors import NotController
from pykraft.metadata.codec import encode_metadata_record
from pykraft.metadata.records import MetadataRecord
from pykraft.raft.driver import RaftNode

log = logging.getLogger(__name__)

T = TypeVar("T")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ControllerServer:
    """Runs controller operations and is the in-process `ControllerChannel` of the broker."""

    def __init__(self, core: QuorumController, raft: RaftNode,
                 now_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.core = core
        self.raft = raft
        self.now_ms = now_ms
        self._queue_lock = asyncio.Lock()
        self._own_last_offset = -1  # records up to here were replayed when proposed

    # -- replay of committed records --------------------------------------------------

    def handle_committed(self, last_offset: int, records: Sequence[MetadataRecord]) -> None:
        """Replay committed records this controller did not propose itself."""
        if last_offset <= self._own_last_offset:
            return
        for record in records:
            self.core.replay(record)

    # -- running operations -----------------------------------------------------------

    async def run(self, operation: Callable[[QuorumController], OpResult[T]]) -> T:
        async with self._queue_lock:
            if not self.raft.is_leader:
                raise NotController("this node is not the active controller")
            result = operation(self.core)
            if not result.records:
                return result.response
            last_offset = self.raft.append(
                [encode_metadata_record(record) for record in result.records]
            )
            self._own_last_offset = last_offset
            for record in result.records:
                self.core.replay(record)
        await self.raft.wait_committed(last_offset)
        return result.response

    async def append_records(self, records: Sequence[MetadataRecord]) -> None:
        """Append records decided outside an operation (bootstrap records)."""
        await self.run(lambda core: OpResult(tuple(records), None))

    # -- ControllerChannel ------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool
    ) -> Sequence[CreateTopicResult]:
        return await self.run(
            lambda core: core.create_topics(topics, validate_only=validate_only,
                                            now_ms=self.now_ms()))

    async def delete_topics(
        self, names: Sequence[str], topic_ids: Sequence[uuid.UUID]
    ) -> Sequence[DeleteTopicResult]:
        return await self.run(lambda core: core.delete_topics(names, topic_ids))

    async def create_partitions(
        self, topics: Sequence[CreatePartitionsTopic], *, validate_only: bool
    ) -> Sequence[CreatePartitionsResult]:
        return await self.run(
            lambda core: core.create_partitions(topics, validate_only=validate_only))

    async def incremental_alter_configs(
        self, resources: Sequence[AlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]:
        return await self.run(
            lambda core: core.incremental_alter_configs(resources, validate_only=validate_only))

    async def alter_configs(
        self, resources: Sequence[LegacyAlterConfigsResource], *, validate_only: bool
    ) -> Sequence[AlterConfigsResult]:
        return await self.run(
            lambda core: core.alter_configs(resources, validate_only=validate_only))

    async def auto_create_topics(self, names: list[str]) -> None:
        """Metadata-triggered topic creation with the cluster defaults (auto.create.topics)."""
        topics = [CreatableTopic(name=name) for name in names]
        results = await self.create_topics(topics, validate_only=False)
        for result in results:
            if result.error_code not in (0, 36):  # none, TOPIC_ALREADY_EXISTS
                log.info("auto-creating topic %s failed: %s", result.name, result.error_message)

    def describe(self) -> dict[str, Any]:
        return {"leader": self.raft.leader_and_epoch}
