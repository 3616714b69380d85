"""The asyncio shell around the quorum controller core.

One event queue, as in Kafka's QuorumController: operations run one at a time against the
controller's current (pending-inclusive) state. An operation's records are appended to the
Raft log and replayed into the controller at once (so the next operation sees them); the
caller is answered only when the high watermark has passed the last record. Every
committed batch goes to the core's `handle_commit`, which replays what it has not folded
in yet (the log replayed at start-up) and only marks its own proposals committed.

Off the event loop. Kafka decides on a controller thread of its own, apart from its Raft
thread. Here the event loop also answers the quorum's fetches, and fencing a broker at
100,000 partitions decides, encodes and folds 100,000 records: seconds, past the followers'
fetch timeout. So an operation is decided, encoded and folded (`plan`) on a worker thread,
which gives the GIL back to the event loop every few milliseconds. While it runs, whatever
else would touch the core (committed batches, a leader change, a snapshot load, a closed
heartbeat connection) waits in `_deferred`, in order, and is done once the operation is
back, one action per turn of the loop; an operation whose leadership ended meanwhile did
nothing (NotController). The records are appended on the loop, APPENDS_PER_TURN batches per
turn of it, each waiting if need be until Raft has written enough of those before it to
take it (ROOM_WAIT_S), and then folded on the worker thread at the offsets Raft gave them,
commits waiting again from the first append until they are proposed. A non-atomic result is
appended as batches of at most RECORDS_PER_BATCH records, each applied on its own by every
node."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

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
from pykraft.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from pykraft.raft.driver import RaftNode

log = logging.getLogger(__name__)

T = TypeVar("T")

OffLoop = Callable[..., Awaitable[Any]]  # asyncio.to_thread's signature
Batches = list[tuple[Sequence[MetadataRecord], list[bytes]]]  # records, their encodings
Decision = tuple[OpResult[T], Batches, list[str]]  # ..., the broker changes to log

RECORDS_PER_BATCH = 1000  # a non-atomic result's records per batch (Kafka: 10,000)
APPENDS_PER_TURN = 8  # batches appended to Raft per turn of the event loop
# how long an append waits for the log to write what came before it (Raft holds at most
# 128 MiB of proposals unwritten and writes 1 MiB a turn; the 1,000,001 changes of a
# controlled shutdown at 1,000,000 partitions are 42 MB); the controller's queue waits too
ROOM_WAIT_S = 30.0


class OutcomeUnknown(RequestTimedOut):
    """Leadership was lost after the change was appended: it may or may not commit. Told
    apart from NotController (nothing was done, safe to send again) so that a change is not
    sent twice on the caller's behalf; the client sees REQUEST_TIMED_OUT and may retry."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """The controller's clock: broker sessions and its periodic checks measure intervals,
    which a wall clock that is set forward or back would stretch or cut (as Kafka's
    heartbeat manager, it uses a monotonic clock)."""
    return time.monotonic_ns() // 1_000_000


class ControllerServer:
    """Runs controller operations and is the in-process `ControllerChannel` of the broker."""

    def __init__(self, core: QuorumController, raft: RaftNode,
                 now_ms: Callable[[], int] = monotonic_ms,
                 off_loop: OffLoop = asyncio.to_thread) -> None:
        self.core = core
        self.raft = raft
        self.now_ms = now_ms
        self._off_loop = off_loop  # runs a decision (a worker thread; tests may run it inline)
        self._queue_lock = asyncio.Lock()
        self.activation: asyncio.Future[None] | None = None
        self.tick_wake = asyncio.Event()  # set when a tick is due sooner than planned
        self._deferred: list[Callable[[], None]] | None = None  # while a decision runs
        # broker id -> (broker epoch, ms) of the last heartbeat that arrived, written on the
        # loop as it arrives; a tick reads it, so that a heartbeat queued behind a decision
        # of 100,000 partition changes does not get its broker fenced meanwhile
        self._heartbeats: dict[int, tuple[int, int]] = {}
        # broker id -> heartbeats that arrived and are not answered yet: a broker sends its
        # next one only once answered, so while it waits on us its session runs to now
        self._unanswered: dict[int, int] = {}

    async def _flush_deferred(self) -> None:
        """Do what waited for the decision, in order, letting the loop run between actions
        (done at once, a backlog of commits to fold held it for 6 s at 100,000 partitions:
        the quorum's fetches went unanswered). What arrives meanwhile queues behind; if the
        flush is cancelled, the rest is done at once."""
        try:
            while self._deferred:
                self._deferred.pop(0)()
                if self._deferred:
                    await asyncio.sleep(0)
        finally:
            deferred, self._deferred = self._deferred, None
            for action in deferred or ():
                action()

    def _now_or_later(self, action: Callable[[], None]) -> None:
        """Do `action` to the core now, or after the decision running on a worker thread."""
        if self._deferred is None:
            action()
        else:
            self._deferred.append(action)

    # -- leadership and replay ------------------------------------------------------------

    def handle_committed(self, base_offset: int, epoch: int,
                         records: Sequence[MetadataRecord]) -> None:
        self._now_or_later(
            lambda: self.core.handle_commit(records, base_offset=base_offset, epoch=epoch))

    def replace_core(self, make: Callable[[QuorumController], QuorumController]) -> None:
        """A snapshot was loaded: the core becomes `make(core)`."""

        def replace() -> None:
            self.core = make(self.core)

        self._now_or_later(replace)

    def broker_connection_lost(self, broker_id: int) -> None:
        """A broker's heartbeat connection closed (BrokerSessions.connection_lost)."""
        now_ms = self.now_ms()
        self._now_or_later(lambda: self.core.broker_connection_lost(broker_id, now_ms))
        self.tick_wake.set()

    def _activate(self, epoch: int, high_watermark: int | None) -> None:
        """The log is replayed up to the leader's epoch start: from now on this node decides."""
        invariant(high_watermark is not None, "activated before the epoch start committed")
        assert high_watermark is not None
        self.core.activate(leader_epoch=epoch, next_write_offset=high_watermark,
                           now_ms=self.now_ms())

    def on_leader_change(self, leader_id: int, node_id: int) -> None:
        """The quorum's leader changed (RaftListener.handle_leader_change). The node that
        leads activates its controller and writes the bootstrap records if the log has none
        (`activation`, awaited by every operation); any other deactivates: its pending
        state is dropped and the callers waiting for it get OutcomeUnknown (the Raft driver
        fails their commit waits); callers that come later get NotController."""
        epoch, high_watermark = self.raft.leader_and_epoch.epoch, self.raft.high_watermark
        self._now_or_later(
            lambda: self._leader_changed(leader_id, node_id, epoch, high_watermark))

    def _leader_changed(self, leader_id: int, node_id: int, epoch: int,
                        high_watermark: int | None) -> None:
        if leader_id == node_id:
            if not self.core.is_active:
                self._activate(epoch, high_watermark)
                log.info("controller %d is now active (epoch %d)", node_id, epoch)
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

    async def run(self, operation: Callable[[QuorumController], OpResult[T]], *,
                  queue_timeout_s: float | None = None) -> T:
        """Decide, append and pre-apply one operation at a time; answer once committed.
        Raises NotController when this controller is not the active one (nothing done),
        OutcomeUnknown when it stopped being active after appending the records, and
        RequestTimedOut (nothing done) when the operation waited `queue_timeout_s` for
        the ones before it."""
        activation = self.activation
        if activation is not None and not activation.done():
            await asyncio.shield(activation)  # the bootstrap records go first
        return await self._run(operation, queue_timeout_s)

    async def _enter_queue(self, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):  # None: no limit
                await self._queue_lock.acquire()
        except TimeoutError:
            raise RequestTimedOut(f"waited {timeout_s:g} s for the controller's earlier "
                                  "operations") from None

    async def _run(self, operation: Callable[[QuorumController], OpResult[T]],
                   queue_timeout_s: float | None = None) -> T:
        await self._enter_queue(queue_timeout_s)
        try:
            core = self.core
            epoch = core.leader_epoch
            self._deferred = []
            try:
                decision: Decision[T] = await self._off_loop(_decide, core, operation)
            finally:
                await self._flush_deferred()
            result, batches, broker_changes = decision
            if not result.records:
                return result.response
            if self.core is not core or not core.is_active or core.leader_epoch != epoch:
                raise NotController("This controller stopped being active meanwhile.")
            if broker_changes:
                log.info("controller %d: %s", core.config.node_id, ", ".join(broker_changes))
            bases: list[int] = []
            failure: Exception | None = None
            # until what is appended is proposed, commits (and a leader change) wait, so
            # that the core sees its proposals first
            self._deferred = []
            try:
                for count, (_, encoded) in enumerate(batches, 1):
                    try:
                        await self.raft.wait_room(encoded, ROOM_WAIT_S)
                        last_offset = self.raft.append(encoded)
                    except (NotLeaderError, RequestTimedOut) as error:
                        if not bases:
                            if isinstance(error, NotLeaderError):
                                raise NotController(str(error)) from error
                            raise
                        failure = error
                        break
                    bases.append(last_offset - len(encoded) + 1)
                    if count % APPENDS_PER_TURN == 0 and count < len(batches):
                        # an append may seal the batch before it, encoding its records: 300
                        # in a row (a 300,000-partition fence) held the loop 2 s
                        await asyncio.sleep(0)
                appended = [records for records, _ in batches[:len(bases)]]
                # the fold of what was appended, off the loop too
                plan = await self._off_loop(core.plan, appended, bases)
                planned = plan.after if plan.holds_for(core) else (None,) * len(appended)
                for records, base, state in zip(appended, bases, planned, strict=True):
                    core.propose(records, base_offset=base, planned=state)
            finally:
                await self._flush_deferred()
            if failure is not None:
                log.warning("controller: %d of %d records appended (%s)",
                            sum(len(records) for records in appended), len(result.records),
                            failure)
                raise OutcomeUnknown(f"only part of the change was appended: {failure}") \
                    from failure
        finally:
            self._queue_lock.release()
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
        # the decision runs on a worker thread: dict.copy() takes the entries in one C call
        # before anything can run on the loop, so it never sees the dict change under it
        result = await self.run(lambda core: core.tick(*self._contacts()))
        if (rebalance := result.rebalance) is not None:
            node = self.core.config.node_id
            if rebalance.found:
                log.info("controller %d: leader rebalancing: %d partitions are not led by "
                         "their preferred replica", node, rebalance.found)
            if rebalance.elected_in_all and not rebalance.left:  # the check's last pass
                log.info("controller %d: leader rebalancing done: %d preferred elections",
                         node, rebalance.elected_in_all)
        return result.wake_at_ms

    def _contacts(self) -> tuple[int, list[tuple[int, tuple[int, int]]]]:
        """(now, broker id -> (epoch, last contact ms)) for a tick: a heartbeat still
        waiting for its answer is contact until now (at 1,000,000 partitions one waited
        behind a controlled shutdown's decision past the session timeout, and its broker,
        which could not send another, was fenced)."""
        now_ms = self.now_ms()
        unanswered = self._unanswered.copy()
        return now_ms, [(broker_id, (epoch, now_ms if broker_id in unanswered else at_ms))
                        for broker_id, (epoch, at_ms) in self._heartbeats.copy().items()]

    def heartbeat_arrived(self, broker_id: int, broker_epoch: int) -> None:
        """A BrokerHeartbeat arrived and is about to wait its turn (`run`); call
        `heartbeat_answered` once it has its answer (or failed)."""
        self._heartbeats[broker_id] = (broker_epoch, self.now_ms())
        self._unanswered[broker_id] = self._unanswered.get(broker_id, 0) + 1

    def heartbeat_answered(self, broker_id: int) -> None:
        """The heartbeat `heartbeat_arrived` told of is answered: the broker's session
        runs from now, the answer (its next heartbeat renews it)."""
        left = self._unanswered.pop(broker_id, 0) - 1
        if left > 0:
            self._unanswered[broker_id] = left
        self._heartbeats[broker_id] = (self._heartbeats[broker_id][0], self.now_ms())

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


def _decide(
    core: QuorumController, operation: Callable[[QuorumController], OpResult[T]]
) -> Decision[T]:
    """Worker thread: the operation's result and its batches (records, their encodings)."""
    result = operation(core)
    records = result.records
    step = len(records) if result.atomic else RECORDS_PER_BATCH
    chunks = [records[start:start + step] for start in range(0, len(records), max(step, 1))]
    level = core.image.features.metadata_version
    batches: Batches = [
        (chunk, [encode_metadata_record(record, record_version(record, level))
                 for record in chunk]) for chunk in chunks]
    return result, batches, _broker_changes(records)


def _broker_changes(records: Sequence[MetadataRecord]) -> list[str]:
    """What a change does to brokers, in words, with the partition changes it carries (as
    Kafka's controller logs fencing and controlled shutdown): rare events that decide
    where every partition is led."""
    changes = []
    partitions = 0
    for record in records:
        match record:
            case PartitionChangeRecord():
                partitions += 1
            case FenceBrokerRecord(id=broker) | BrokerRegistrationChangeRecord(
                    broker_id=broker, fenced=1):
                changes.append(f"broker {broker} fenced")
            case UnfenceBrokerRecord(id=broker) | BrokerRegistrationChangeRecord(
                    broker_id=broker, fenced=-1):
                changes.append(f"broker {broker} unfenced")
            case BrokerRegistrationChangeRecord(broker_id=broker, in_controlled_shutdown=1):
                changes.append(f"broker {broker} in controlled shutdown")
            case UnregisterBrokerRecord(broker_id=broker):
                changes.append(f"broker {broker} unregistered")
    if changes and partitions:
        changes.append(f"{partitions} partition changes")
    return changes
