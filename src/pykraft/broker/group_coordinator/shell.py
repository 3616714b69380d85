"""The asyncio shell of the group coordinator: clock, log, loading, futures.

The shell owns the core and does its I/O. A request handler calls `call(operation)`: the
shell gives the operation a reply token, runs it with the current time, then drains the
core's `Ready` — replies resolve their handlers' futures; appends go to the
`__consumer_offsets` partition through the replica manager's normal append path (acks=all),
and their replies are released once the high watermark passes the records. One task waits
for the earliest deadline (`wake_at_ms`) and for partitions to load.

Leadership follows the metadata image (`on_metadata`, a loader publisher): a partition this
broker is elected to lead is loaded by replaying its log through the record codec; one it
stops leading is unloaded at once. A failed append unloads the partition and, if this broker
still leads it, loads it again, so memory never drifts from the log.

Loading reads the log by offset, a chunk of batches at a time, holding no `Log` across an
await (broker.coordinator_loading, shared with the transaction coordinator's shell). An
I/O error fails the load (the partition is unloaded, as on a storage error), never the
task.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.coordinator_loading import leading_partition, load_partition
from pykraft.broker.group_coordinator.consumer import TopicInfo
from pykraft.broker.group_coordinator.core import Append, GroupCoordinator, Reply
from pykraft.broker.group_coordinator.records import decode_record, encode_record
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.errors import CorruptRecord, KafkaError, KafkaStorageError, NotLeaderOrFollower
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.registrations import ConfigResourceType
from pykraft.records.batch import BatchHeader
from pykraft.records.record import (
    ControlRecordType,
    build_batch,
    iter_records,
    marker_type,
)

__all__ = ["CONSUMER_OFFSETS_TOPIC", "GroupCoordinatorShell", "NotCoordinator"]

log = logging.getLogger(__name__)

CONSUMER_OFFSETS_TOPIC: Final = "__consumer_offsets"


class NotCoordinator(KafkaError):
    code = ErrorCode.not_coordinator


class CoordinatorNotAvailable(KafkaError):
    code = ErrorCode.coordinator_not_available


class GroupCoordinatorShell:
    def __init__(
        self,
        core: GroupCoordinator,
        node_id: int,
        replicas: ReplicaManager,
        cache: MetadataCache,
        now_ms: Callable[[], int],
        *,
        commit_timeout_ms: int = 5000,
    ) -> None:
        self.core = core
        self.node_id = node_id
        self.replicas = replicas
        self.cache = cache
        self.now_ms = now_ms
        self.commit_timeout_ms = commit_timeout_ms
        self._tokens = itertools.count(1)
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._pending_loads: dict[int, int] = {}  # partition -> leader epoch to load at
        self._wake = asyncio.Event()
        self._configs: object = None  # the last image.configs fed to the core
        replicas.on_created.append(self.on_partition_created)
        self._waits: set[asyncio.Task[None]] = set()

    # -- requests -----------------------------------------------------------------------

    async def call(self, operation: Callable[[int, int], None]) -> Any:
        """Run `operation(token, now_ms)` on the core and wait for its reply; a write
        failure raises NotCoordinator / CoordinatorNotAvailable."""
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
        ready = self.core.ready()
        for reply in ready.replies:
            self._resolve(reply)
        for append in ready.appends:
            self._write(append)
        self._wake.set()  # the deadline may have moved earlier

    def _resolve(self, reply: Reply, error: KafkaError | None = None) -> None:
        future = self._futures.get(reply.token)
        if future is None or future.done():
            return  # the client went away
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(reply.result)

    def _write(self, append: Append) -> None:
        try:
            partition = self.replicas.leader_partition(CONSUMER_OFFSETS_TOPIC, append.partition,
                                                       self.cache.image)
            if partition.leader_epoch != self.core.leader_epoch(append.partition):
                raise NotLeaderOrFollower(f"{CONSUMER_OFFSETS_TOPIC}-{append.partition} moved")
            now = self.now_ms()
            batch = build_batch([(*encode_record(record), (), now) for record in append.records],
                                producer_id=append.producer_id,
                                producer_epoch=append.producer_epoch,
                                is_transactional=append.producer_id >= 0)
            info = self.replicas.append(partition, batch, acks=-1, from_coordinator=True)
        except KafkaError as error:
            # a storage error was logged by the replica manager, once per interval: a full
            # disk fails every commit, and a line each would flood the log
            log.log(logging.DEBUG if isinstance(error, KafkaStorageError) else logging.WARNING,
                    "cannot write group state to %s-%d (%s); reloading it",
                    CONSUMER_OFFSETS_TOPIC, append.partition, error)
            for reply in append.replies:
                self._resolve(reply, NotCoordinator(str(error)))
            self._reload(append.partition)
            return
        end = info.last_offset + 1
        if partition.log.high_watermark >= end:
            for reply in append.replies:
                self._resolve(reply)
            return
        task = asyncio.get_running_loop().create_task(
            self._await_commit(partition, end, append.replies))
        self._waits.add(task)
        task.add_done_callback(self._waits.discard)

    async def _await_commit(self, partition: Partition, end: int,
                            replies: tuple[Reply, ...]) -> None:
        await self.replicas.wait_for_high_watermark([(partition, end)], self.commit_timeout_ms)
        committed = partition.log.high_watermark >= end
        for reply in replies:
            self._resolve(reply, None if committed else CoordinatorNotAvailable(
                "the group state write did not replicate in time"))

    def _reload(self, index: int) -> None:
        epoch = self.core.leader_epoch(index)
        self.core.unload(index)
        partition = self.replicas.get_partition(CONSUMER_OFFSETS_TOPIC, index)
        if epoch is not None and partition is not None and partition.leader_id == self.node_id:
            self._pending_loads[index] = partition.leader_epoch
        self._drain()

    # -- leadership ---------------------------------------------------------------------

    def on_metadata(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Loader publisher (after the replica manager's): load what we now lead, unload
        what we no longer do."""
        changes = delta.local_changes(self.node_id, CONSUMER_OFFSETS_TOPIC)
        if image.configs is not self._configs:  # images share unchanged parts: cheap test
            self._configs = image.configs
            self.core.update_group_configs({
                resource.resource_name: values
                for resource, values in image.configs.resources.items()
                if resource.resource_type == ConfigResourceType.GROUP})
        changed = self._topics_changed(delta)
        if changed:
            self.core.update_topics({
                name: TopicInfo(topic.topic_id, name, len(topic.partitions))
                for name, topic in image.topics.by_name.items()}, self.now_ms())
        for key, registration in changes.elected_leaders.items():
            self._pending_loads[key.partition] = registration.leader_epoch
            changed = True
        for key in (*changes.followers, *changes.deletes):
            self._pending_loads.pop(key.partition, None)
            self.core.unload(key.partition)
            changed = True
        if changed:
            self._drain()

    def _topics_changed(self, delta: MetadataDelta) -> bool:
        """A topic was created or deleted, or one changed its partition count: the consumer
        groups' assignments depend on it (partition leadership changes do not matter)."""
        if delta.created_topic_ids or delta.deleted_topic_ids:
            return True
        known = self.core.topics
        return any(known.get(topic.name) is None
                   or known[topic.name].partition_count != len(topic.partitions)
                   for topic in delta.changed_topics.values())

    def on_partition_created(self, partition: Partition) -> None:
        """A log created late (its creation failed on a full disk when the metadata placed
        it here, and the replica manager made it since): load it if we lead it."""
        if partition.topic == CONSUMER_OFFSETS_TOPIC and partition.leader_id == self.node_id:
            self._pending_loads[partition.index] = partition.leader_epoch
            self._wake.set()

    def is_loading(self, index: int) -> bool:
        return index in self._pending_loads

    def on_marker(self, partition: Partition, producer_id: int, commit: bool) -> None:
        """A transaction marker is committed on a partition (broker.txn_markers listener):
        on one of ours, the producer's pending TxnOffsetCommit offsets apply or go."""
        if partition.topic == CONSUMER_OFFSETS_TOPIC:
            self.core.complete_txn_offsets(partition.index, producer_id, commit)

    async def _load(self, index: int, epoch: int) -> None:
        started = self.now_ms()
        records = await load_partition(
            self.core, lambda: self._leading(index, epoch), index, epoch,
            replay=lambda header, batch: self._load_batch(index, header, batch),
            pending_loads=self._pending_loads, now_ms=self.now_ms)
        if records is None:
            return
        self._drain()
        log.info("loaded %d group record(s) of %s-%d in %d ms", records, CONSUMER_OFFSETS_TOPIC,
                 index, self.now_ms() - started)

    def _leading(self, index: int, epoch: int) -> Partition | None:
        return leading_partition(self.replicas, self.node_id, CONSUMER_OFFSETS_TOPIC, index,
                                 epoch)

    def _load_batch(self, index: int, header: BatchHeader, batch: bytes) -> int:
        """Replay one batch into the core; the number of group records it held."""
        records = 0
        producer_id = header.producer_id if header.is_transactional else -1
        if header.is_control:
            if producer_id >= 0:  # a transaction's end: its offsets apply or go
                kind = marker_type(batch)
                if kind is not None:
                    self.core.complete_txn_offsets(index, producer_id,
                                                   kind is ControlRecordType.COMMIT)
            return 0
        for record in iter_records(batch):
            try:
                decoded = decode_record(record.key, record.value)
            except CorruptRecord as error:
                log.error("skipping a corrupt record at %s-%d offset %d: %s",
                          CONSUMER_OFFSETS_TOPIC, index, record.offset, error)
                continue
            if decoded is not None:
                self.core.load(index, decoded, producer_id)
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
                        log.error("cannot load %s-%d: %s", CONSUMER_OFFSETS_TOPIC, index, error)
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
            for task in list(self._waits):
                task.cancel()
