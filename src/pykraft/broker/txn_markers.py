"""Transaction markers: the COMMIT/ABORT control batches that end a transaction on each of
its partitions (Kafka's WriteTxnMarkers).

Two sides:

- `MarkerWriter`, on a partition leader: appends one control batch per (marker, partition)
  through the replica manager's normal path (acks=all: the answer waits until the batch is
  committed) and tells its listeners once it is. The batch carries the producer id and epoch,
  the transactional and control flags, and one record: key (version 0, type ABORT=0 or
  COMMIT=1), value (version 0, the coordinator epoch). Checks against the partition's producer
  state (a marker with an older epoch or coordinator epoch is refused, as Kafka's
  ProducerStateManager does) come in through `validators`; listeners see the committed
  marker (the group coordinator turns pending transactional offsets visible on COMMIT).
- `MarkerSender`, on the transaction coordinator: splits a MarkerRequest by partition leader
  (from the metadata image), writes the local ones through the writer and sends the others
  as WriteTxnMarkers v1 to their leaders, one request per broker. A partition whose topic no
  longer exists is done (NONE), as Kafka's marker channel drops it; one without a leader
  gets NOT_LEADER_OR_FOLLOWER, which the coordinator retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as markers_v1

from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_fetcher import BrokerConnection
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.broker.transaction_coordinator.core import MarkerRequest
from pykraft.errors import KafkaError
from pykraft.protocol.entities import make
from pykraft.records.record import (
    ControlRecordType,
    build_batch,
    control_record_key,
    end_txn_marker_value,
)

__all__ = [
    "WRITE_TXN_MARKERS",
    "Marker",
    "MarkerSender",
    "MarkerWriter",
    "marker_batch",
]

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS: Final = 27
WRITE_TXN_MARKERS_VERSION: Final = 1
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Marker:
    """One WritableTxnMarker: end a producer's transaction on these partitions."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


# validator(partition, marker) raises a KafkaError to refuse the marker on that partition;
# listener(partition, marker, offset) runs once the marker at `offset` is committed
Validator = Callable[[Partition, Marker], None]
Listener = Callable[[Partition, Marker, int], None]


def marker_batch(marker: Marker, timestamp_ms: int) -> bytes:
    """The control batch of a marker (offsets are assigned by the log)."""
    kind = ControlRecordType.COMMIT if marker.commit else ControlRecordType.ABORT
    return build_batch(
        [(control_record_key(kind), end_txn_marker_value(marker.coordinator_epoch), (),
          timestamp_ms)],
        producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
        is_transactional=True, is_control=True)


class MarkerWriter:
    def __init__(self, replicas: ReplicaManager, cache: MetadataCache,
                 now_ms: Callable[[], int], *, timeout_ms: int = 30_000) -> None:
        self.replicas = replicas
        self.cache = cache
        self.now_ms = now_ms
        self.timeout_ms = timeout_ms
        self.validators: list[Validator] = []
        self.listeners: list[Listener] = []

    async def write(self, markers: Iterable[Marker]
                    ) -> list[dict[TopicPartition, ErrorCode]]:
        """Each marker's per-partition outcome, once every appended batch is committed (or
        the timeout passed)."""
        image = self.cache.image
        results: list[dict[TopicPartition, ErrorCode]] = []
        written: list[tuple[Marker, dict[TopicPartition, ErrorCode], TopicPartition, Partition,
                            int, int]] = []
        for marker in markers:
            outcome: dict[TopicPartition, ErrorCode] = {}
            results.append(outcome)
            for topic, index in marker.partitions:
                try:
                    partition = self.replicas.leader_partition(topic, index, image)
                    for validate in self.validators:
                        validate(partition, marker)
                    info = self.replicas.append(partition, marker_batch(marker, self.now_ms()),
                                                acks=-1, from_coordinator=True)
                except KafkaError as error:
                    outcome[(topic, index)] = error.code
                    continue
                outcome[(topic, index)] = ErrorCode.none
                written.append((marker, outcome, (topic, index), partition,
                                partition.leader_epoch, info.first_offset))
        if written:
            await self.replicas.wait_for_high_watermark(
                [(entry[3], entry[5] + 1) for entry in written], self.timeout_ms)
        for marker, outcome, key, partition, epoch, offset in written:
            try:
                self.replicas.check_acks_all(partition, epoch, offset + 1)
            except KafkaError as error:
                outcome[key] = error.code
                continue
            for listener in self.listeners:
                try:
                    listener(partition, marker, offset)
                except Exception:  # a listener's failure must not undo a committed marker
                    log.exception("marker listener failed on %s", partition.name)
        return results


Connect = Callable[[int], BrokerConnection | None]


class MarkerSender:
    """The coordinator's side: `send(request)` -> each partition's outcome."""

    def __init__(self, node_id: int, cache: MetadataCache, writer: MarkerWriter,
                 connect: Connect) -> None:
        self.node_id = node_id
        self.cache = cache
        self.writer = writer
        self.connect = connect
        self._locks: dict[int, asyncio.Lock] = {}

    async def send(self, request: MarkerRequest) -> dict[TopicPartition, ErrorCode]:
        image = self.cache.image
        results: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, index in sorted(request.partitions):
            topic_image = image.topics.by_name.get(topic)
            registration = None if topic_image is None else topic_image.partitions.get(index)
            if registration is None:
                results[(topic, index)] = ErrorCode.none  # deleted: nothing to end
            elif registration.leader < 0:
                results[(topic, index)] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(registration.leader, []).append((topic, index))
        sends: list[Awaitable[dict[TopicPartition, ErrorCode]]] = []
        for leader, partitions in by_leader.items():
            marker = Marker(request.producer_id, request.epoch, request.commit,
                            request.coordinator_epoch, tuple(partitions))
            sends.append(self._local(marker) if leader == self.node_id
                         else self._remote(leader, marker))
        for outcome in await asyncio.gather(*sends):
            results.update(outcome)
        return results

    async def _local(self, marker: Marker) -> dict[TopicPartition, ErrorCode]:
        (outcome,) = await self.writer.write([marker])
        return outcome

    async def _remote(self, leader: int, marker: Marker) -> dict[TopicPartition, ErrorCode]:
        failed = dict.fromkeys(marker.partitions, ErrorCode.not_leader_or_follower)
        connection = self.connect(leader)
        if connection is None:
            return failed
        lock = self._locks.setdefault(leader, asyncio.Lock())
        try:
            async with lock:  # one request at a time on a connection
                answer = await connection.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION,
                                                  write_txn_markers_request([marker]))
        except (OSError, TimeoutError, KafkaError, EOFError,
                asyncio.IncompleteReadError) as error:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, error)
            return failed
        return parse_write_txn_markers_response(answer)[0] if answer.markers else failed


def write_txn_markers_request(markers: Iterable[Marker]) -> Any:
    module = markers_v1
    return make(module.WriteTxnMarkersRequest, markers=tuple(
        make(module.WritableTxnMarker, producer_id=marker.producer_id,
             producer_epoch=marker.producer_epoch, transaction_result=marker.commit,
             coordinator_epoch=marker.coordinator_epoch,
             topics=tuple(make(module.WritableTxnMarkerTopic, name=topic,
                               partition_indexes=tuple(indexes))
                          for topic, indexes in _by_topic(marker.partitions).items()))
        for marker in markers))


def parse_write_txn_markers_response(answer: Any) -> list[dict[TopicPartition, ErrorCode]]:
    return [{(topic.name, partition.partition_index): ErrorCode(partition.error_code)
             for topic in each.topics for partition in topic.partitions}
            for each in answer.markers]


def _by_topic(partitions: Iterable[TopicPartition]) -> Mapping[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, index in partitions:
        grouped.setdefault(topic, []).append(index)
    return grouped
