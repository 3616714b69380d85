"""The asyncio shell around the quorum controller core.

One event queue, as in Kafka's QuorumController: operations run one at a time against the
controller's current (pending-inclusive) state. An operation's records are appended to the
Raft log and replayed into the controller at once (so the next operation sees them); the
caller is answered only when the high watermark has passed the last record. Every
committed batch goes to the core's `handle_commit`, which replays what it has not folded
in yet (the log replayed at start-up) and only marks its own proposals committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from kio.schema.errors import ErrorCode

from pykraft.controller.features import record_version
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
from pykraft.errors import NotController, NotLeaderError, RequestTimedOut, invariant
from pykraft.metadata.codec import encode_metadata_record
from pykraft.metadata.records import MetadataRecord
from pykraft.raft.driver import RaftNode

log = logging.getLogger(__name__)

T = TypeVar("T")


class OutcomeUnknown(RequestTimedOut):
    """Leadership was lost after the change was appended: it may or may not commit. Told
    apart from NotController (nothing was done, safe to send again) so that a change is not
    sent twice on the caller's behalf; the client sees REQUEST_TIMED_OUT and may retry."""


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
        self.activation: asyncio.Future[None] | None = None
        self.tick_wake = asyncio.Event()  # set when a tick is due sooner than planned

    # -- leadership and replay ------------------------------------------------------------

    def handle_committed(self, base_offset: int, epoch: int,
                         records: Sequence[MetadataRecord]) -> None:
        self.core.handle_commit(records, base_offset=base_offset, epoch=epoch)

    def activate(self) -> None:
        """The log is replayed up to the leader's epoch start: from now on this node decides."""
        leader = self.raft.leader_and_epoch
        high_watermark = self.raft.high_watermark
        invariant(high_watermark is not None, "activated before the epoch start committed")
        assert high_watermark is not None
        self.core.activate(leader_epoch=leader.epoch, next_write_offset=high_watermark,
                           now_ms=self.now_ms())

    def on_leader_change(self, leader_id: int, node_id: int) -> None:
        """The quorum's leader changed (RaftListener.handle_leader_change). The node that
        leads activates its controller and writes the bootstrap records if the log has none
        (`activation`, awaited by every operation); any other deactivates: its pending
        state is dropped and the callers waiting for it get OutcomeUnknown (the Raft driver
        fails their commit waits); callers that come later get NotController."""
        if leader_id == node_id:
            if not self.core.is_active:
                self.activate()
                log.info("controller %d is now active (epoch %d)", node_id,
                         self.raft.leader_and_epoch.epoch)
                self.activation = asyncio.ensure_future(self._bootstrap_once())
            return
        if self.core.is_active:
            log.info("controller %d is no longer active (leader now %d)", node_id, leader_id)
            self.core.deactivate()
            self.activation = None

    async def _bootstrap_once(self) -> None:
        try:
            await self._run(lambda core: core.bootstrap())
        except (NotController, OutcomeUnknown):
            pass  # leadership lost at once: the next leader bootstraps if need be
        except Exception:
            log.exception("writing the bootstrap records failed")

    # -- running operations -----------------------------------------------------------

    async def run(self, operation: Callable[[QuorumController], OpResult[T]]) -> T:
        """Decide, append and pre-apply one operation at a time; answer once committed.
        Raises NotController when this controller is not the active one (nothing done), and
        OutcomeUnknown when it stopped being active after appending the records."""
        activation = self.activation
        if activation is not None and not activation.done():
            await asyncio.shield(activation)  # the bootstrap records go first
        return await self._run(operation)

    async def _run(self, operation: Callable[[QuorumController], OpResult[T]]) -> T:
        async with self._queue_lock:
            result = operation(self.core)
            if not result.records:
                return result.response
            level = self.core.image.features.metadata_version
            encoded = [encode_metadata_record(record, record_version(record, level))
                       for record in result.records]
            try:
                last_offset = self.raft.append(encoded)
            except NotLeaderError as error:
                raise NotController(str(error)) from error
            self.core.propose(result.records, base_offset=last_offset - len(encoded) + 1)
        try:
            await self.raft.wait_committed(last_offset)
        except NotLeaderError as error:
            raise OutcomeUnknown(
                "the controller lost its leadership before the change committed; the next "
                "leader may still commit it") from error
        return result.response

    async def bootstrap(self) -> None:
        """An empty log gets the bootstrap records (metadata.version)."""
        await self.run(lambda core: core.bootstrap())

    async def wait_active(self) -> None:
        """Wait until the activation of this controller (its bootstrap) has finished."""
        if self.activation is not None:
            await asyncio.shield(self.activation)

    async def tick(self) -> int:
        """Fence brokers whose sessions expired; return when to tick again (ms)."""
        result = await self.run(lambda core: core.tick(self.now_ms()))
        return result.wake_at_ms

    # -- ControllerChannel ------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[CreatableTopic], *, validate_only: bool
    ) -> Sequence[CreateTopicResult]:
        return await self.run(
            lambda core: core.create_topics(topics, validate_only=validate_only,
                                            now_ms=self.now_ms()))

    async def delete_topics(
        self, names: Sequence[str], topic_ids: Sequence[uuid.UUID]
    ) -> tuple[DeleteTopicResult, ...]:
        wanted: list[str | uuid.UUID] = [*names, *topic_ids]
        return await self.run(lambda core: core.delete_topics(wanted))

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
            if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
                log.info("auto-creating topic %s failed: %s", result.name, result.error_message)

