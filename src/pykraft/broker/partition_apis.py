"""OffsetForLeaderEpoch (API 23), AlterReplicaLogDirs (34), DescribeLogDirs (35) and
DescribeTopicPartitions (75): what a broker tells about its replicas and partitions.

OffsetForLeaderEpoch (KIP-101, KIP-320). A follower, or a consumer after a leader change,
asks the leader where a leader epoch ended, to find where its own log left the leader's.
Per partition, as Kafka's ReplicaManager.lastOffsetForLeaderEpoch: a replica hosted here is
first checked against the request's current_leader_epoch (older: FENCED_LEADER_EPOCH,
newer: UNKNOWN_LEADER_EPOCH, -1: not checked), then must be the leader whoever asks (Kafka
answers only from leaders, followers' requests included: NOT_LEADER_OR_FOLLOWER); a
partition not hosted here is NOT_LEADER_OR_FOLLOWER if it exists, else
UNKNOWN_TOPIC_OR_PARTITION. The answer comes from the leader-epoch cache
(storage.leader_epoch): the largest epoch at or below the requested one and where it ended
(the start of the next epoch, or the log end offset for the latest); (-1, -1) when the
cache knows nothing of it.

DescribeLogDirs. Every configured log dir, in configuration order, with the logs it holds
(size in bytes, offset lag max(high watermark - log end, 0), which is 0 for a current log;
pykraft makes no future logs), and since v4 the total and usable bytes of its volume. Topics
null means every log; otherwise only the named partitions, and a topic with none of them in
a dir is left out of that dir. A dir whose volume cannot be read is KAFKA_STORAGE_ERROR.

AlterReplicaLogDirs. Per partition, as Kafka's ReplicaManager.alterReplicaLogDirs: a path
that is not a configured log dir is LOG_DIR_NOT_FOUND (checked first, for every partition),
a partition without a replica here is REPLICA_NOT_AVAILABLE, a replica already in that dir
is left alone (NONE). Moving a replica to another dir of this broker is not done: it is
answered KAFKA_STORAGE_ERROR, and the replica stays where it is (docs/deviations.md).

DescribeTopicPartitions (KIP-966). Topics by name (all of them when the list is empty), in
name order, from the cursor's topic (at the cursor's partition) on, at most
min(response_partition_limit, max.request.partition.size.limit) partitions; next_cursor
names the first partition left out. Named topics that do not exist are listed with
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name); a cursor whose
topic is not among the named ones makes the whole request INVALID_REQUEST. Leader -1 when
the leader has no endpoint on this listener; offline replicas are those not registered,
fenced, without this listener, or in a log dir their broker does not have online. With no
authorizer every topic operation is allowed, and the authorized-operations bit field says
so (Kafka's AclEntry.supportedOperations for TOPIC).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.apis import error_of
from pykraft.broker.metadata_cache import MetadataCache, legal_topic_name
from pykraft.broker.replica_manager import ReplicaManager
from pykraft.metadata.image import MetadataImage, TopicImage
from pykraft.metadata.registrations import PartitionRegistration
from pykraft.net.server import RequestContext
from pykraft.protocol.entities import NO_THROTTLE, field, make, response_module
from pykraft.storage.log import Log
from pykraft.topic_names import INTERNAL_TOPICS

__all__ = [
    "ALTER_REPLICA_LOG_DIRS",
    "DESCRIBE_LOG_DIRS",
    "DESCRIBE_TOPIC_PARTITIONS",
    "OFFSET_FOR_LEADER_EPOCH",
    "PARTITION_APIS",
    "PartitionApis",
    "TOPIC_AUTHORIZED_OPERATIONS",
]

OFFSET_FOR_LEADER_EPOCH: Final = 23
ALTER_REPLICA_LOG_DIRS: Final = 34
DESCRIBE_LOG_DIRS: Final = 35
DESCRIBE_TOPIC_PARTITIONS: Final = 75
# Kafka 4.0's versions (those below its KIP-896 baseline are not offered)
PARTITION_APIS: Final[dict[int, tuple[int, int]]] = {
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ALTER_REPLICA_LOG_DIRS: (1, 2),
    DESCRIBE_LOG_DIRS: (1, 4),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}

NO_LEADER: Final = -1
# AclOperation codes of what a topic supports: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
# DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11; one bit each (Utils.to32BitField)
TOPIC_OPERATION_CODES: Final = (3, 4, 5, 6, 7, 8, 10, 11)
TOPIC_AUTHORIZED_OPERATIONS: Final = sum(1 << code for code in TOPIC_OPERATION_CODES)
PARTITION_LIMIT_KEY: Final = "max.request.partition.size.limit"
PARTITION_LIMIT_DEFAULT: Final = 2000
# KIP-858 directory ids with a meaning of their own (Kafka's DirectoryId)
UNASSIGNED_DIRECTORY: Final = uuid.UUID(int=0)
LOST_DIRECTORY: Final = uuid.UUID(int=1)
MIGRATING_DIRECTORY: Final = uuid.UUID(int=2)
LONG_MAX: Final = 2**63 - 1


class PartitionApis:
    """The API group of this module (see broker.apis.ApiGroup)."""

    def __init__(self, cache: MetadataCache, replicas: ReplicaManager,
                 server_configs: Mapping[str, str]) -> None:
        self.cache = cache
        self.replicas = replicas
        self.partition_limit = _positive_int(server_configs.get(PARTITION_LIMIT_KEY),
                                             PARTITION_LIMIT_DEFAULT)

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return PARTITION_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
                ALTER_REPLICA_LOG_DIRS: self.alter_replica_log_dirs,
                DESCRIBE_LOG_DIRS: self.describe_log_dirs,
                DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions}

    # -- OffsetForLeaderEpoch ---------------------------------------------------------

    async def offset_for_leader_epoch(self, context: RequestContext, request: Any) -> Any:
        module = response_module(OFFSET_FOR_LEADER_EPOCH, context.header.api_version)
        image = self.cache.image
        topics = []
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                code, epoch, end_offset = self.end_offset_for_epoch(
                    topic.topic, wanted.partition,
                    int(field(wanted, "current_leader_epoch", -1)), wanted.leader_epoch, image)
                partitions.append(make(module.EpochEndOffset, error_code=code,
                                       partition=wanted.partition, leader_epoch=epoch,
                                       end_offset=end_offset))
            topics.append(make(module.OffsetForLeaderTopicResult, topic=topic.topic,
                               partitions=tuple(partitions)))
        return make(module.OffsetForLeaderEpochResponse, throttle_time=NO_THROTTLE,
                    topics=tuple(topics))

    def end_offset_for_epoch(self, topic: str, index: int, current_leader_epoch: int,
                             leader_epoch: int, image: MetadataImage
                             ) -> tuple[ErrorCode, int, int]:
        """(error code, epoch, end offset) of one partition; (-1, -1) with an error."""
        try:
            hosted = self.replicas.get_partition(topic, index)
            if hosted is not None:  # the epoch first, then the leadership, as Kafka does
                hosted.check_epoch(current_leader_epoch)
            partition = self.replicas.leader_partition(topic, index, image)
            epoch, end_offset = partition.log.end_offset_for_epoch(leader_epoch)
        except Exception as error:  # noqa: BLE001 - mapped to the partition's error code
            code, _ = error_of(error)
            return code, -1, -1
        return ErrorCode.none, epoch, end_offset

    # -- DescribeLogDirs --------------------------------------------------------------

    async def describe_log_dirs(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DESCRIBE_LOG_DIRS, context.header.api_version)
        wanted = None if request.topics is None else {
            (topic.topic, int(index)) for topic in request.topics for index in topic.partitions}
        log_manager = self.replicas.log_manager
        by_dir: dict[Path, list[Log]] = {}
        for log in log_manager.logs():
            home = log_manager.log_dir_of(log.topic, log.partition)
            if home is not None and (wanted is None or (log.topic, log.partition) in wanted):
                by_dir.setdefault(home, []).append(log)
        results = [self._log_dir_result(module, log_dir, by_dir.get(log_dir, []))
                   for log_dir in log_manager.log_dirs]
        return make(module.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, results=tuple(results))

    def _log_dir_result(self, module: Any, log_dir: Path, logs: list[Log]) -> Any:
        path = str(log_dir.absolute())
        try:
            volume = os.statvfs(log_dir)
        except OSError:  # gone, or its disk failed: Kafka's offline dir
            return make(module.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                        log_dir=path, topics=(), total_bytes=-1, usable_bytes=-1)
        by_topic: dict[str, list[Any]] = {}
        for log in sorted(logs, key=lambda log: (log.topic, log.partition)):
            by_topic.setdefault(log.topic, []).append(make(
                module.DescribeLogDirsPartition, partition_index=log.partition,
                partition_size=log.size_bytes,
                offset_lag=max(log.high_watermark - log.log_end_offset, 0),
                is_future_key=False))
        topics = tuple(make(module.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                       for name, parts in by_topic.items())
        return make(module.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=path,
                    topics=topics,
                    total_bytes=min(volume.f_blocks * volume.f_frsize, LONG_MAX),
                    usable_bytes=min(volume.f_bavail * volume.f_frsize, LONG_MAX))

    # -- AlterReplicaLogDirs ----------------------------------------------------------

    async def alter_replica_log_dirs(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ALTER_REPLICA_LOG_DIRS, context.header.api_version)
        # a partition named under several paths: the last one counts, as in Kafka's map
        destinations: dict[tuple[str, int], str] = {}
        for wanted_dir in request.dirs:
            for topic in wanted_dir.topics:
                for index in topic.partitions:
                    destinations[(topic.name, int(index))] = wanted_dir.path
        by_topic: dict[str, list[Any]] = {}
        for (topic_name, index), path in destinations.items():
            code = self._alter_log_dir(topic_name, index, path)
            by_topic.setdefault(topic_name, []).append(make(
                module.AlterReplicaLogDirPartitionResult, partition_index=index,
                error_code=code))
        results = tuple(make(module.AlterReplicaLogDirTopicResult, topic_name=name,
                             partitions=tuple(parts)) for name, parts in by_topic.items())
        return make(module.AlterReplicaLogDirsResponse, throttle_time=NO_THROTTLE,
                    results=results)

    def _alter_log_dir(self, topic: str, index: int, path: str) -> ErrorCode:
        log_manager = self.replicas.log_manager
        destination = _configured_dir(log_manager.log_dirs, path)
        if destination is None:
            return ErrorCode.log_dir_not_found
        if not destination.is_dir():
            return ErrorCode.kafka_storage_error  # Kafka: the dir is offline
        if self.replicas.get_partition(topic, index) is None:
            return ErrorCode.replica_not_available
        current = log_manager.log_dir_of(topic, index)
        if current is not None and _same_dir(current, destination):
            return ErrorCode.none
        return ErrorCode.kafka_storage_error  # moves between log dirs: docs/deviations.md

    # -- DescribeTopicPartitions ------------------------------------------------------

    async def describe_topic_partitions(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DESCRIBE_TOPIC_PARTITIONS, context.header.api_version)
        image = self.cache.image
        cursor = request.cursor
        cursor_topic = "" if cursor is None else cursor.topic_name
        every_topic = not request.topics
        if every_topic:
            names = {name for name in image.topics.by_name.keys() if name >= cursor_topic}
        else:
            names = {topic.name for topic in request.topics if topic.name >= cursor_topic}
            if cursor is not None and cursor.topic_name not in names:
                # Kafka throws; its error response names every requested topic
                return make(module.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE,
                            topics=tuple(self._topic_error(module, topic.name,
                                                           ErrorCode.invalid_request)
                                         for topic in request.topics),
                            next_cursor=None)
        first_index = 0 if cursor is None else int(cursor.partition_index)
        limit = min(self.partition_limit, int(request.response_partition_limit))
        topics, next_cursor = self._describe_topics(
            module, image, context.listener_name, sorted(names), cursor_topic, first_index,
            limit, every_topic)
        return make(module.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE,
                    topics=tuple(topics), next_cursor=next_cursor)

    def _describe_topics(self, module: Any, image: MetadataImage, listener_name: str,
                         names: Iterable[str], cursor_topic: str, first_index: int,
                         limit: int, every_topic: bool) -> tuple[list[Any], Any]:
        """The topics' entries and the next cursor (None when everything was given), as
        Kafka's KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse pages them."""
        remaining = limit
        topics: list[Any] = []
        for name in names:
            if remaining <= 0:  # the previous topics used the whole limit: resume here
                if remaining == 0:
                    return topics, make(module.Cursor, topic_name=name, partition_index=0)
                continue
            topic = image.topics.by_name.get(name)
            if topic is None:
                if not every_topic:
                    code = (ErrorCode.unknown_topic_or_partition if legal_topic_name(name)
                            else ErrorCode.invalid_topic_exception)
                    topics.append(self._topic_error(module, name, code))
                continue
            start = first_index if name == cursor_topic else 0
            upper = min(len(topic.partitions), start + remaining)
            partitions = [self._partition(module, image, listener_name, index, registration)
                          for index in range(start, upper)
                          if (registration := topic.partitions.get(index)) is not None]
            topics.append(self._topic(module, topic, partitions))
            if upper < len(topic.partitions):
                return topics, make(module.Cursor, topic_name=name, partition_index=upper)
            remaining -= len(partitions)
        return topics, None

    def _topic(self, module: Any, topic: TopicImage, partitions: list[Any]) -> Any:
        return make(module.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none,
                    name=topic.name, topic_id=topic.topic_id,
                    is_internal=topic.name in INTERNAL_TOPICS, partitions=tuple(partitions),
                    topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS)

    @staticmethod
    def _topic_error(module: Any, name: str, code: ErrorCode) -> Any:
        return make(module.DescribeTopicPartitionsResponseTopic, error_code=code, name=name,
                    topic_id=uuid.UUID(int=0), is_internal=name in INTERNAL_TOPICS,
                    partitions=(), topic_authorized_operations=-(2**31))

    def _partition(self, module: Any, image: MetadataImage, listener_name: str, index: int,
                   registration: PartitionRegistration) -> Any:
        brokers = image.cluster.brokers
        leader = brokers.get(registration.leader)
        leader_id = (registration.leader
                     if leader is not None and listener_name in leader.listeners else NO_LEADER)
        return make(module.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none,
                    partition_index=index, leader_id=leader_id,
                    leader_epoch=registration.leader_epoch,
                    replica_nodes=tuple(registration.replicas),
                    isr_nodes=tuple(registration.isr),
                    eligible_leader_replicas=tuple(registration.elr),
                    last_known_elr=tuple(registration.last_known_elr),
                    offline_replicas=tuple(_offline_replicas(image, registration,
                                                             listener_name)))


def _offline_replicas(image: MetadataImage, registration: PartitionRegistration,
                      listener_name: str) -> list[int]:
    """Replicas not registered, fenced, without this listener, or in a log dir their broker
    does not report online (Kafka's KRaftMetadataCache.getOfflineReplicas)."""
    brokers = image.cluster.brokers
    directories = registration.directories
    offline = []
    for position, replica in enumerate(registration.replicas):
        broker = brokers.get(replica)
        directory = directories[position] if position < len(directories) else \
            UNASSIGNED_DIRECTORY
        if (broker is None or broker.fenced or listener_name not in broker.listeners
                or not _directory_online(directory, broker.log_dirs)):
            offline.append(replica)
    return offline


def _directory_online(directory: uuid.UUID, online: tuple[uuid.UUID, ...]) -> bool:
    """Kafka's DirectoryId.isOnline."""
    if directory in (UNASSIGNED_DIRECTORY, MIGRATING_DIRECTORY):
        return True
    if directory == LOST_DIRECTORY:
        return False
    return directory in online


def _configured_dir(log_dirs: Iterable[Path], path: str) -> Path | None:
    """The configured log dir `path` names (as an absolute path), if any."""
    if not path or "\x00" in path:
        return None
    for log_dir in log_dirs:
        if _same_dir(log_dir, Path(path)):
            return log_dir
    return None


def _same_dir(one: Path, other: Path) -> bool:
    return os.path.abspath(one) == os.path.abspath(other)


def _positive_int(text: str | None, default: int) -> int:
    try:
        value = int(text) if text is not None else default
    except ValueError:
        return default
    return value if value > 0 else default
