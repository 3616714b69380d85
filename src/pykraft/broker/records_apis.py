"""DeleteRecords (API 21) and DescribeProducers (API 61): the partition leader's APIs about
the records themselves.

DeleteRecords moves partitions' log start offsets (low watermarks) forward.

Per partition, as Kafka's leader does: the broker must lead it (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION otherwise); the topic's cleanup.policy must include `delete`
(POLICY_VIOLATION for compact-only topics, whose records only the cleaner removes); offset
-1 means the high watermark, any other negative offset or one above the high watermark is
OFFSET_OUT_OF_RANGE. The log start moves, segments wholly below it are deleted at once, and
the log-start-offset checkpoint is written before the answer, so the new low watermark
survives a crash. The answer carries each partition's low watermark: the leader's log start
offset, without waiting for the followers (docs/deviations.md).

DescribeProducers lists a led partition's active idempotent producers (storage.producer_state):
epoch, last sequence, last timestamp, coordinator epoch and the first offset of an open
transaction (-1 if none). NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION as above.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.apis import error_of
from pykraft.broker.authorization import Authorized, allowed_names
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.replica_manager import ReplicaManager
from pykraft.errors import OffsetOutOfRange, PolicyViolation
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.entities import NO_THROTTLE, make, response_module

__all__ = ["DELETE_RECORDS", "DESCRIBE_PRODUCERS", "RECORDS_APIS", "RecordsApis"]

DELETE_RECORDS: Final = 21
DESCRIBE_PRODUCERS: Final = 61
RECORDS_APIS: Final[dict[int, tuple[int, int]]] = {DELETE_RECORDS: (0, 2),
                                                   DESCRIBE_PRODUCERS: (0, 0)}
HIGH_WATERMARK: Final = -1  # the offset that means "up to the high watermark"


class RecordsApis(Authorized):
    """The DeleteRecords and DescribeProducers API group (see broker.apis.ApiGroup).

    Authorization, as Kafka's KafkaApis: DeleteRecords needs DELETE on each topic,
    DescribeProducers READ; the partitions of a topic without it answer
    TOPIC_AUTHORIZATION_FAILED and are not touched."""

    def __init__(
        self, cache: MetadataCache, replicas: ReplicaManager,
        checkpoint: Callable[[], Awaitable[None]],
    ) -> None:
        self.cache = cache
        self.replicas = replicas
        self.checkpoint = checkpoint  # writes the log-start-offset checkpoint files

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return RECORDS_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {DELETE_RECORDS: self.delete_records,
                DESCRIBE_PRODUCERS: self.describe_producers}

    async def delete_records(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DELETE_RECORDS, context.header.api_version)
        image = self.cache.image
        moved = False
        topics = []
        allowed = allowed_names(self.authorizer, context, AclOperation.DELETE,
                                ResourceType.TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                code, low_watermark, changed = self._delete_partition(
                    topic.name, wanted.partition_index, wanted.offset, image,
                ) if topic.name in allowed else (ErrorCode.topic_authorization_failed, -1, False)
                moved = moved or changed
                partitions.append(make(module.DeleteRecordsPartitionResult,
                                       partition_index=wanted.partition_index,
                                       low_watermark=low_watermark, error_code=code))
            topics.append(make(module.DeleteRecordsTopicResult, name=topic.name,
                               partitions=tuple(partitions)))
        if moved:
            await self.checkpoint()
        return make(module.DeleteRecordsResponse, throttle_time=NO_THROTTLE,
                    topics=tuple(topics))

    def _delete_partition(
        self, topic: str, index: int, offset: int, image: Any
    ) -> tuple[ErrorCode, int, bool]:
        """(error code, low watermark or -1, whether the log start moved)."""
        try:
            partition = self.replicas.leader_partition(topic, index, image)
            log = partition.log
            if not log.config.delete:
                raise PolicyViolation(
                    f"Records of partition {topic}-{index} can not be deleted due to the "
                    "configured policy")
            if offset == HIGH_WATERMARK:
                offset = log.high_watermark
            if offset < 0:
                raise OffsetOutOfRange(f"cannot delete records of {topic}-{index} before "
                                       f"negative offset {offset}")
            before = log.log_start_offset
            after = log.delete_records(offset, self.replicas.now_ms())
            if after != before:  # parked fetches tell the new log start at once
                partition.wake_waiters()
        except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
            code, _ = error_of(error)
            return code, -1, False
        return ErrorCode.none, after, after != before


    async def describe_producers(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DESCRIBE_PRODUCERS, context.header.api_version)
        image = self.cache.image
        topics = []
        allowed = allowed_names(self.authorizer, context, AclOperation.READ,
                                ResourceType.TOPIC, (t.name for t in request.topics))
        for topic in request.topics:
            partitions = []
            for index in topic.partition_indexes:
                if topic.name not in allowed:
                    partitions.append(make(module.PartitionResponse, partition_index=index,
                                           error_code=ErrorCode.topic_authorization_failed,
                                           error_message=None, active_producers=()))
                    continue
                try:
                    log = self.replicas.leader_partition(topic.name, index, image).log
                    producers = tuple(
                        make(module.ProducerState, producer_id=entry.producer_id,
                             producer_epoch=entry.producer_epoch,
                             last_sequence=entry.last_sequence,
                             last_timestamp=entry.last_timestamp,
                             coordinator_epoch=entry.coordinator_epoch,
                             current_txn_start_offset=entry.current_txn_first_offset)
                        for entry in log.producer_state.producers.values())
                except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
                    code, message = error_of(error)
                    partitions.append(make(module.PartitionResponse, partition_index=index,
                                           error_code=code, error_message=message,
                                           active_producers=()))
                    continue
                partitions.append(make(module.PartitionResponse, partition_index=index,
                                       error_code=ErrorCode.none, error_message=None,
                                       active_producers=producers))
            topics.append(make(module.TopicResponse, name=topic.name,
                               partitions=tuple(partitions)))
        return make(module.DescribeProducersResponse, throttle_time=NO_THROTTLE,
                    topics=tuple(topics))
