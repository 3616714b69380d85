"""The broker's partitions: which logs it hosts, which it leads, produce and fetch on them.

The replica manager follows the metadata image: a delta saying "partition P has replicas R,
leader L at epoch E" makes this broker create P's log if it is in R and become its leader or
a follower. Produce appends through the leader's log; the high watermark is the smallest log
end offset over the ISR (with the ISR {self} of a one-replica partition, every append moves it).
Fetches read below the high watermark; a fetch that finds less than it asked for waits in the
fetch purgatory: each partition keeps the futures of fetches parked on it, and an append or a
high watermark move completes them all, after which each fetch reads again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pykraft.errors import (
    FencedLeaderEpoch,
    InvalidRequiredAcks,
    KafkaStorageError,
    NotLeaderOrFollower,
    UnknownLeaderEpoch,
    UnknownTopicOrPartition,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.registrations import ConfigResourceType, PartitionRegistration
from pykraft.storage.log import AppendInfo, Log, ReadInfo
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Partition:
    topic: str
    topic_id: uuid.UUID
    index: int
    log: Log
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    waiters: list[asyncio.Future[None]] = field(default_factory=list)

    def wake_waiters(self) -> None:
        waiters, self.waiters = self.waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def check_epoch(self, current_leader_epoch: int) -> None:
        """Reject a request whose idea of the leader epoch differs from ours (KIP-320)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(
                f"epoch {current_leader_epoch} is older than the leader's {self.leader_epoch}"
            )
        raise UnknownLeaderEpoch(
            f"epoch {current_leader_epoch} is newer than the leader's {self.leader_epoch}"
        )


class ReplicaManager:
    def __init__(
        self,
        node_id: int,
        log_manager: LogManager,
        server_configs: Mapping[str, str],
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.log_manager = log_manager
        self.server_configs = server_configs
        self.now_ms = now_ms
        self._partitions: dict[tuple[str, int], Partition] = {}

    # -- following the metadata image --------------------------------------------------

    def apply_delta(self, delta: MetadataDelta, image: MetadataImage) -> None:
        """Publisher: act on what changed for this broker, never on a diff of whole images."""
        changes = delta.local_changes(self.node_id)
        for deleted in changes.deletes:
            self._remove(deleted.topic, deleted.partition)
        for placed in (changes.leaders, changes.followers):
            for key, registration in placed.items():
                self._apply_partition(key.topic, key.topic_id, key.partition, registration,
                                      self._log_config(image, key.topic))
        for resource in delta.changed_configs:
            if resource.resource_type != ConfigResourceType.TOPIC:
                continue
            config = self._log_config(image, resource.resource_name)
            for partition in self._partitions.values():
                if partition.topic == resource.resource_name:
                    partition.log.update_config(config)

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        overrides = image.configs.get(ConfigResourceType.TOPIC, topic)
        return LogConfig.from_configs(overrides, self.server_configs)

    def _apply_partition(
        self, topic: str, topic_id: uuid.UUID, index: int,
        registration: PartitionRegistration, config: LogConfig,
    ) -> None:
        key = (topic, index)
        partition = self._partitions.get(key)
        if partition is None:
            partition_log = self.log_manager.get_or_create_log(
                topic, index, topic_id=topic_id, config=config, now_ms=self.now_ms()
            )
            partition = Partition(topic, topic_id, index, partition_log, -1, -1, (), ())
            self._partitions[key] = partition
        partition.leader_id = registration.leader
        partition.leader_epoch = registration.leader_epoch
        partition.replicas = registration.replicas
        partition.isr = registration.isr
        if partition.leader_id == self.node_id:
            self._maybe_advance_high_watermark(partition)
        partition.wake_waiters()

    def _remove(self, topic: str, index: int) -> None:
        partition = self._partitions.pop((topic, index), None)
        if partition is not None:
            partition.wake_waiters()
        self.log_manager.delete_log(topic, index)

    # -- lookups ----------------------------------------------------------------------

    def partitions(self) -> Iterable[Partition]:
        return self._partitions.values()

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def leader_partition(self, topic: str, index: int, image: MetadataImage) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            topic_image = image.topics.by_name.get(topic)
            if topic_image is None or index not in topic_image.partitions:
                raise UnknownTopicOrPartition(f"{topic}-{index} does not exist")
            raise NotLeaderOrFollower(f"broker {self.node_id} is not a replica of {topic}-{index}")
        if partition.leader_id != self.node_id:
            raise NotLeaderOrFollower(
                f"broker {self.node_id} is not the leader of {topic}-{index} "
                f"(leader is {partition.leader_id})"
            )
        return partition

    # -- produce ----------------------------------------------------------------------

    def append(self, partition: Partition, records: bytes, acks: int) -> AppendInfo:
        if acks not in (-1, 0, 1):
            raise InvalidRequiredAcks(f"acks={acks}; use -1, 0 or 1")
        try:
            info = partition.log.append_as_leader(
                bytearray(records), leader_epoch=partition.leader_epoch, now_ms=self.now_ms()
            )
        except OSError as error:
            raise KafkaStorageError(f"cannot append to {partition.topic}-{partition.index}: "
                                    f"{error}") from error
        self._maybe_advance_high_watermark(partition)
        partition.wake_waiters()
        return info

    def _maybe_advance_high_watermark(self, partition: Partition) -> None:
        """HW = min log end offset over the ISR; this broker's is the only one known yet."""
        if tuple(partition.isr) == (self.node_id,) or not partition.isr:
            partition.log.update_high_watermark(partition.log.log_end_offset)

    async def wait_for_high_watermark(
        self, pending: list[tuple[Partition, int]], timeout_ms: int
    ) -> None:
        """Park an acks=all produce until each partition's HW passes its last offset."""
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while True:
            waiting = [(p, end) for p, end in pending if p.log.high_watermark < end]
            remaining = deadline - asyncio.get_running_loop().time()
            if not waiting or remaining <= 0:
                return
            await _park([p for p, _ in waiting], remaining)

    # -- fetch ------------------------------------------------------------------------

    def read(
        self,
        partition: Partition,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_message: bool,
        up_to_high_watermark: bool = True,
    ) -> ReadInfo:
        max_offset = partition.log.high_watermark if up_to_high_watermark else None
        return partition.log.read(
            fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
        )

    async def wait_for_data(self, partitions: Iterable[Partition], timeout_ms: int) -> None:
        """The fetch purgatory: return when any partition changes or the wait times out."""
        if timeout_ms > 0:
            await _park(list(partitions), timeout_ms / 1000)


async def _park(partitions: list[Partition], timeout_s: float) -> None:
    """Wait until one of `partitions` wakes its waiters; always unregister afterwards."""
    future = asyncio.get_running_loop().create_future()
    for partition in partitions:
        partition.waiters.append(future)
    try:  # not wait_for: on 3.11 it can swallow a cancellation that races the wake-up
        async with asyncio.timeout(timeout_s):
            await future
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            try:
                partition.waiters.remove(future)
            except ValueError:
                pass  # already woken: wake_waiters swapped the list out
