"""The asyncio shell of the transaction coordinator: clock, log, loading, markers, futures.

The shell owns the core and does its I/O. A request handler calls `call(operation)`: the
shell gives the operation a reply token, runs it with the current time, then drains the
core's `Ready` -- replies resolve their handlers' futures; each append goes to its
`__transaction_state` partition through the replica manager (acks=all) and the core hears
`append_done` once the high watermark passed it (or the write failed); each marker request
goes to the `MarkerSender` in a task of its own and the core hears `markers_done`. One task
waits for the earliest deadline (`wake_at_ms`) and for partitions to load.

Leadership follows the metadata image (`on_metadata`, a loader publisher), as the group
coordinator's: a `__transaction_state` partition this broker is elected to lead is loaded by
replaying its log; one it stops leading is unloaded at once. Memory changes only when a
record is committed (the core's pending transits), so a failed write needs no reload.

Loading reads the log by offset, a chunk of batches at a time from the partition's log as
it is at that moment, and holds no `Log` nor segment across its awaits: a replica move's
swap, retention and compaction may run between two chunks (broker.coordinator_loading, shared
with the group coordinator's shell, says why that is safe).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from pykraft.broker.coordinator_loading import leading_partition, load_partition
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.broker.transaction_coordinator.core import (
    Append,
    MarkerRequest,
    Reply,
    TransactionCoordinator,
)
from pykraft.broker.transaction_coordinator.producer_ids import ProducerIdManager
from pykraft.broker.transaction_coordinator.records import decode_record, encode_record
from pykraft.controller.producer_ids import ProducerIdsBlock
from pykraft.errors import CorruptRecord, KafkaError, KafkaStorageError, NotLeaderOrFollower
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.records.record import build_batch, iter_records

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinatorShell", "ProducerIdBlocks"]

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
PRODUCER_IDS_BACKOFF_MS: Final = 50
PRODUCER_IDS_BACKOFF_MAX_MS: Final = 1000

SendMarkers = Callable[[MarkerRequest], Awaitable[dict[tuple[str, int], ErrorCode]]]


class TransactionCoordinatorShell:
    def __init__(
        self,
        core: TransactionCoordinator,
        node_id: int,
        replicas: ReplicaManager,
        cache: MetadataCache,
        now_ms: Callable[[], int],
        send_markers: SendMarkers,
        *,
        commit_timeout_ms: int = 5000,
    ) -> None:
        self.core = core
        self.node_id = node_id
        self.replicas = replicas
        self.cache = cache
        self.now_ms = now_ms
        self.send_markers = send_markers
        self.commit_timeout_ms = commit_timeout_ms
        self._tokens = itertools.count(1)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._pending_loads: dict[int, int] = {}  # partition -> leader epoch to load at
        self._wake = asyncio.Event()
        replicas.on_created.append(self.on_partition_created)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- requests -----------------------------------------------------------------------

    async def call(self, operation: Callable[[int, int], None]) -> Any:
        """Run `operation(token, now_ms)` on the core and wait for its reply."""
        token = next(self._tokens)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        try:
            operation(token, self.now_ms())
            self._drain()
            return await future
        finally:
            self._futures.pop(token, None)

    def _drain(self) -> None:
        while True:
            ready = self.core.ready()
            for reply in ready.replies:
                self._resolve(reply)
            for request in ready.markers:
                self._spawn(self._markers(request))
            appended = [self._write(append) for append in ready.appends]
            if not any(appended):
                break  # nothing completed synchronously: no new decisions to drain
        self._wake.set()  # the deadline may have moved earlier

    def _resolve(self, reply: Reply) -> None:
        future = self._futures.get(reply.token)
        if future is not None and not future.done():
            future.set_result(reply.result)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _write(self, append: Append) -> bool:
        """Append one record; True when the core was told the outcome already."""
        try:
            partition = self.replicas.leader_partition(TRANSACTION_STATE_TOPIC,
                                                       append.partition, self.cache.image)
            if partition.leader_epoch != self.core.leader_epoch(append.partition):
                raise NotLeaderOrFollower(f"{TRANSACTION_STATE_TOPIC}-{append.partition} moved")
            batch = build_batch([(*encode_record(append.record), (), self.now_ms())])
            info = self.replicas.append(partition, batch, acks=-1, from_coordinator=True)
        except KafkaError as error:
            # a storage error was logged by the replica manager, once per interval
            log.log(logging.DEBUG if isinstance(error, KafkaStorageError) else logging.WARNING,
                    "cannot write transaction state to %s-%d: %s",
                    TRANSACTION_STATE_TOPIC, append.partition, error)
            self.core.append_done(append.append_id, error.code, self.now_ms())
            return True
        end = info.last_offset + 1
        if partition.log.high_watermark >= end:
            self.core.append_done(append.append_id, ErrorCode.none, self.now_ms())
            return True
        epoch = partition.leader_epoch

        async def commit() -> None:
            await self.replicas.wait_for_high_watermark([(partition, end)],
                                                        self.commit_timeout_ms)
            try:
                self.replicas.check_acks_all(partition, epoch, end)
                error = ErrorCode.none
            except KafkaError as failure:
                error = failure.code
            self.core.append_done(append.append_id, error, self.now_ms())
            self._drain()
        self._spawn(commit())
        return False

    async def _markers(self, request: MarkerRequest) -> None:
        try:
            results = await self.send_markers(request)
        except Exception:  # noqa: BLE001 - every partition is retried
            log.exception("sending the markers of %r failed", request.transactional_id)
            results = dict.fromkeys(request.partitions, ErrorCode.unknown_server_error)
        # partitions not answered are retried with the failed ones
        for each in request.partitions:
            results.setdefault(each, ErrorCode.request_timed_out)
        self.core.markers_done(request.transactional_id, request.coordinator_epoch, results,
                               self.now_ms())
        self._drain()

    # -- leadership ---------------------------------------------------------------------

    def on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Loader publisher (after the replica manager's): load what we now lead, unload
        what we no longer do."""
        changes = delta.local_changes(self.node_id, TRANSACTION_STATE_TOPIC)
        changed = False
        for key, registration in changes.elected_leaders.items():
            self._pending_loads[key.partition] = registration.leader_epoch
            changed = True
        for key in (*changes.followers, *changes.deletes):
            self._pending_loads.pop(key.partition, None)
            self.core.unload(key.partition)
            changed = True
        if changed:
            self._drain()

    def on_partition_created(self, partition: Partition) -> None:
        """A log created late (its creation failed on a full disk when the metadata placed
        it here, and the replica manager made it since): load it if we lead it."""
        if partition.topic == TRANSACTION_STATE_TOPIC and partition.leader_id == self.node_id:
            self._pending_loads[partition.index] = partition.leader_epoch
            self._wake.set()

    def is_loading(self, index: int) -> bool:
        return index in self._pending_loads or self.core.is_loading(index)

    async def _load(self, index: int, epoch: int) -> None:
        started = self.now_ms()
        records = await load_partition(
            self.core, lambda: self._leading(index, epoch), index, epoch,
            replay=lambda header, batch: (0 if header.is_control
                                          else self._load_batch(index, batch)),
            pending_loads=self._pending_loads, now_ms=self.now_ms)
        if records is None:
            return
        self._drain()
        log.info("loaded %d transaction record(s) of %s-%d in %d ms", records,
                 TRANSACTION_STATE_TOPIC, index, self.now_ms() - started)

    def _leading(self, index: int, epoch: int) -> Partition | None:
        return leading_partition(self.replicas, self.node_id, TRANSACTION_STATE_TOPIC, index,
                                 epoch)

    def _load_batch(self, index: int, batch: bytes) -> int:
        """Replay one data batch into the core; the number of records it held."""
        records = 0
        for record in iter_records(batch):
            try:
                decoded = decode_record(record.key, record.value)
            except CorruptRecord as error:
                log.error("skipping a corrupt record at %s-%d offset %d: %s",
                          TRANSACTION_STATE_TOPIC, index, record.offset, error)
                continue
            if decoded is not None:
                self.core.load(index, decoded)
                records += 1
        return records

    # -- the task -----------------------------------------------------------------------

    async def run(self) -> None:
        """Load partitions and fire deadlines until cancelled."""
        try:
            while True:
                while self._pending_loads:
                    index, epoch = self._pending_loads.popitem()
                    try:
                        await self._load(index, epoch)
                    except (KafkaError, OSError) as error:  # an I/O error must not end the task
                        log.error("cannot load %s-%d: %s", TRANSACTION_STATE_TOPIC, index,
                                  error)
                        self.core.unload(index)
                now = self.now_ms()
                self.core.tick(now)
                self._drain()
                self._wake.clear()
                wake_at = self.core.wake_at_ms()
                timeout = None if wake_at is None else max(0.0, (wake_at - now) / 1000)
                if self._pending_loads:
                    continue
                try:  # not wait_for: on 3.11 it can swallow a cancellation that races a wake
                    async with asyncio.timeout(timeout):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            for task in list(self._tasks):
                task.cancel()


# -- producer id blocks (KIP-730) ------------------------------------------------------


class ControllerAllocator(Protocol):
    async def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> ProducerIdsBlock: ...


class ProducerIdBlocks:
    """The asyncio side: asks the active controller for each block the manager wants."""

    def __init__(self, manager: ProducerIdManager, controller: ControllerAllocator,
                 broker_id: int, broker_epoch: Callable[[], int]) -> None:
        self.manager = manager
        self.controller = controller
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self._wake = asyncio.Event()
        manager.on_want = self._wake.set

    async def run(self) -> None:
        self.manager.want_block()  # the first block, before the first producer asks
        backoff_ms = PRODUCER_IDS_BACKOFF_MS
        while True:
            if not self.manager.block_wanted:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                block = await self.controller.allocate_producer_ids(
                    self.broker_id, self.broker_epoch())
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - any failure: ask again later
                log.warning("AllocateProducerIds failed: %s; retrying", error)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, PRODUCER_IDS_BACKOFF_MAX_MS)
                continue
            if self.manager.block_received(block):
                backoff_ms = PRODUCER_IDS_BACKOFF_MS
                log.info("broker %d got producer ids %d to %d", self.broker_id,
                         block.first_producer_id, block.last_producer_id)
            else:
                await asyncio.sleep(backoff_ms / 1000)
