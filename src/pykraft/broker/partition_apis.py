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
(size in bytes, offset lag max(high watermark - log end, 0), which is 0 for a current log)
and the future logs of moves into it (is_future_key; the bytes copied so far, and how far
the copy is behind the replica's log end), and since v4 the total and usable bytes of its
volume. Topics null means every log; otherwise only the named partitions, and a topic with
none of them in a dir is left out of that dir. A dir whose volume cannot be read is
KAFKA_STORAGE_ERROR.

AlterReplicaLogDirs. Per partition, as Kafka's ReplicaManager.alterReplicaLogDirs: a path
that is not a configured log dir is LOG_DIR_NOT_FOUND (checked first), one that cannot be
read KAFKA_STORAGE_ERROR, a partition without a replica here REPLICA_NOT_AVAILABLE, a
replica already in that dir is left alone; otherwise the answer is NONE at once and the
replica moves in the background (ReplicaMover): DescribeLogDirs shows it arrive.

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

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.broker.apis import error_of
from pykraft.broker.authorization import (
    TOPIC_SUPPORTED,
    Authorized,
    allowed_names,
    allows_cluster,
    authorized_operations,
)
from pykraft.broker.metadata_cache import MetadataCache, legal_topic_name
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.errors import KafkaStorageError
from pykraft.metadata.image import MetadataImage, TopicImage
from pykraft.metadata.registrations import PartitionRegistration
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.entities import NO_THROTTLE, field, make, response_module
from pykraft.storage.checkpoint import fsync_directory, fsync_file
from pykraft.storage.log import Log
from pykraft.storage.log_manager import DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX
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
OPERATIONS_UNKNOWN: Final = -(2**31)  # the field's default: not computed
PARTITION_LIMIT_KEY: Final = "max.request.partition.size.limit"
PARTITION_LIMIT_DEFAULT: Final = 2000
# KIP-858 directory ids with a meaning of their own (Kafka's DirectoryId)
UNASSIGNED_DIRECTORY: Final = uuid.UUID(int=0)
LOST_DIRECTORY: Final = uuid.UUID(int=1)
MIGRATING_DIRECTORY: Final = uuid.UUID(int=2)
LONG_MAX: Final = 2**63 - 1
FILE_NAME_BYTES_MAX: Final = 255

log = logging.getLogger(__name__)


class PartitionApis(Authorized):
    """The API group of this module (see broker.apis.ApiGroup).

    Authorization, as Kafka's KafkaApis: OffsetForLeaderEpoch needs CLUSTER_ACTION (a
    follower) or DESCRIBE on each topic; DescribeTopicPartitions DESCRIBE on each topic (all
    topics: those it may describe; a topic named without it: TOPIC_AUTHORIZATION_FAILED, its
    existence not told); DescribeLogDirs DESCRIBE and AlterReplicaLogDirs ALTER on the cluster
    (CLUSTER_AUTHORIZATION_FAILED, nothing moved)."""

    def __init__(self, cache: MetadataCache, replicas: ReplicaManager,
                 server_configs: Mapping[str, str]) -> None:
        self.cache = cache
        self.replicas = replicas
        self.partition_limit = _positive_int(server_configs.get(PARTITION_LIMIT_KEY),
                                             PARTITION_LIMIT_DEFAULT)
        self.mover = ReplicaMover(replicas)

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
        allowed = {t.topic for t in request.topics} if allows_cluster(
            self.authorizer, context, AclOperation.CLUSTER_ACTION) else allowed_names(
            self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC,
            (t.topic for t in request.topics))
        for topic in request.topics:
            partitions = []
            for wanted in topic.partitions:
                code, epoch, end_offset = self.end_offset_for_epoch(
                    topic.topic, wanted.partition,
                    int(field(wanted, "current_leader_epoch", -1)), wanted.leader_epoch, image,
                ) if topic.topic in allowed else (ErrorCode.topic_authorization_failed, -1, -1)
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
        if not allows_cluster(self.authorizer, context, AclOperation.DESCRIBE):
            return make(module.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.cluster_authorization_failed, results=())
        wanted = None if request.topics is None else {
            (topic.topic, int(index)) for topic in request.topics for index in topic.partitions}
        log_manager = self.replicas.log_manager
        by_dir: dict[Path, list[Log]] = {}
        for log_ in log_manager.logs():
            home = log_manager.log_dir_of(log_.topic, log_.partition)
            if home is not None and (wanted is None or (log_.topic, log_.partition) in wanted):
                by_dir.setdefault(home, []).append(log_)
        futures: dict[Path, list[Move]] = {}
        for key, move in self.mover.moves.items():
            if wanted is None or key in wanted:
                futures.setdefault(move.destination, []).append(move)
        results = [self._log_dir_result(module, log_dir, by_dir.get(log_dir, []),
                                        futures.get(log_dir, []))
                   for log_dir in log_manager.log_dirs]
        return make(module.DescribeLogDirsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.none, results=tuple(results))

    def _log_dir_result(self, module: Any, log_dir: Path, logs: list[Log],
                        futures: list[Move]) -> Any:
        path = str(log_dir.absolute())
        try:
            volume = os.statvfs(log_dir)
        except OSError:  # gone, or its disk failed: Kafka's offline dir
            return make(module.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                        log_dir=path, topics=(), total_bytes=-1, usable_bytes=-1)
        entries = [(log_.topic, log_.partition, False, log_.size_bytes,
                    max(log_.high_watermark - log_.log_end_offset, 0)) for log_ in logs]
        for move in futures:  # a future log's lag: behind the replica's log end
            copied_end = move.future.end_offset if move.future.end_offset >= 0 \
                else move.log.log_start_offset
            entries.append((move.topic, move.index, True, move.future.copied_bytes,
                            max(move.log.log_end_offset - copied_end, 0)))
        by_topic: dict[str, list[Any]] = {}
        for topic, index, future, size, lag in sorted(entries):
            by_topic.setdefault(topic, []).append(make(
                module.DescribeLogDirsPartition, partition_index=index, partition_size=size,
                offset_lag=lag, is_future_key=future))
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
        allowed = allows_cluster(self.authorizer, context, AclOperation.ALTER)
        for (topic_name, index), path in destinations.items():
            code = (self._alter_log_dir(topic_name, index, path) if allowed
                    else ErrorCode.cluster_authorization_failed)
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
        return self.mover.request(topic, index, destination)

    # -- DescribeTopicPartitions ------------------------------------------------------

    async def describe_topic_partitions(self, context: RequestContext, request: Any) -> Any:
        module = response_module(DESCRIBE_TOPIC_PARTITIONS, context.header.api_version)
        image = self.cache.image
        cursor = request.cursor
        cursor_topic = "" if cursor is None else cursor.topic_name
        every_topic = not request.topics
        if every_topic:
            names = {name for name in image.topics.by_name.keys() if name >= cursor_topic}
            # all topics: those the principal may describe, the others not even named
            names = allowed_names(self.authorizer, context, AclOperation.DESCRIBE,
                                  ResourceType.TOPIC, names)
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
        allowed = allowed_names(self.authorizer, context, AclOperation.DESCRIBE,
                                ResourceType.TOPIC, names)

        def operations(name: str) -> int | None:
            """KIP-430 bits of a topic; None: it may not be described."""
            if name not in allowed:
                return None
            return authorized_operations(self.authorizer, context, ResourceType.TOPIC, name,
                                         TOPIC_SUPPORTED)

        topics, next_cursor = self._describe_topics(
            module, image, context.listener_name, sorted(names), cursor_topic, first_index,
            limit, every_topic, operations)
        return make(module.DescribeTopicPartitionsResponse, throttle_time=NO_THROTTLE,
                    topics=tuple(topics), next_cursor=next_cursor)

    def _describe_topics(self, module: Any, image: MetadataImage, listener_name: str,
                         names: Iterable[str], cursor_topic: str, first_index: int,
                         limit: int, every_topic: bool,
                         operations: Callable[[str], int | None] = lambda _: (
                             TOPIC_AUTHORIZED_OPERATIONS),
                         ) -> tuple[list[Any], Any]:
        """The topics' entries and the next cursor (None when everything was given), as
        Kafka's KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse pages them."""
        remaining = limit
        topics: list[Any] = []
        for name in names:
            if remaining <= 0:  # the previous topics used the whole limit: resume here
                if remaining == 0:
                    return topics, make(module.Cursor, topic_name=name, partition_index=0)
                continue
            ops = operations(name)
            if ops is None:  # not described: whether it exists is not told
                topics.append(self._topic_error(module, name,
                                                ErrorCode.topic_authorization_failed))
                continue
            topic = image.topics.by_name.get(name)
            if topic is None:
                if not every_topic:
                    code = (ErrorCode.unknown_topic_or_partition if legal_topic_name(name)
                            else ErrorCode.invalid_topic_exception)
                    # Kafka sets the operations of every topic it answered, these too
                    topics.append(self._topic_error(module, name, code, ops))
                continue
            start = first_index if name == cursor_topic else 0
            upper = min(len(topic.partitions), start + remaining)
            partitions = [self._partition(module, image, listener_name, index, registration)
                          for index in range(start, upper)
                          if (registration := topic.partitions.get(index)) is not None]
            topics.append(self._topic(module, topic, partitions, ops))
            if upper < len(topic.partitions):
                return topics, make(module.Cursor, topic_name=name, partition_index=upper)
            remaining -= len(partitions)
        return topics, None

    def _topic(self, module: Any, topic: TopicImage, partitions: list[Any],
               operations: int = TOPIC_AUTHORIZED_OPERATIONS) -> Any:
        return make(module.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none,
                    name=topic.name, topic_id=topic.topic_id,
                    is_internal=topic.name in INTERNAL_TOPICS, partitions=tuple(partitions),
                    topic_authorized_operations=operations)

    @staticmethod
    def _topic_error(module: Any, name: str, code: ErrorCode,
                     operations: int = OPERATIONS_UNKNOWN) -> Any:
        return make(module.DescribeTopicPartitionsResponseTopic, error_code=code, name=name,
                    topic_id=uuid.UUID(int=0),
                    is_internal=name in INTERNAL_TOPICS and code != (
                        ErrorCode.topic_authorization_failed),
                    partitions=(), topic_authorized_operations=operations)

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


# -- moving a replica to another log dir ------------------------------------------------------

SWAP_BYTES_MAX: Final = 8 * 1024 * 1024  # left to copy when the swap may close the log
COPY_PASSES_MAX: Final = 200  # a replica written faster than it is copied: given up
COPY_CHUNK_BYTES: Final = 1 << 20
PENDING_BATCH_BYTES_MAX: Final = 64 * 1024 * 1024  # a batch longer than this: not walked
BATCH_HEADER_BYTES: Final = 61  # RecordBatch v2, up to and with the records count
BATCH_LENGTH_AT: Final = 8
LAST_OFFSET_DELTA_AT: Final = 23
LOG_OVERHEAD_BYTES: Final = 12  # base offset and batch length, before what the length counts
SEGMENT_SUFFIX: Final = ".log"
INDEX_SUFFIXES: Final = (".index", ".timeindex", ".txnindex")
TEMPORARY_SUFFIXES: Final = (".deleted", ".cleaned", ".swap", ".tmp")


@dataclass(slots=True)
class CopiedFile:
    """One file of the future log, as copied from the replica's directory."""

    identity: tuple[int, int, int]  # (inode, size, mtime_ns) of the source when copied
    size: int  # bytes copied: of a segment, up to the end of its last whole batch
    last_batch_at: int = -1  # of a segment: where the last copied batch starts
    end_offset: int = -1  # of a segment: the offset after the last copied batch
    passes: int = 0  # copies made of it; more than one: it was written during the move


class FutureLog:
    """The copy of a replica's directory made in another log dir, under a `-future` name
    (which a node's start skips: see ReplicaMover).

    Copy passes run on a worker thread while the replica is in use, reading only: a segment
    that grew is copied from where the last pass ended, whole batches only (an append may
    be half written), after checking that the last batch copied is still there unchanged (a
    follower's truncation rewrites the tail: then the segment is copied again whole); any
    other file is copied again whenever its inode, size or modification time changed. The
    final pass runs with the replica's log closed: it copies what is left as it is, and the
    index files of every segment written during the move whatever their times say (index
    entries are written in place, and a file time is too coarse to see each write)."""

    def __init__(self, source: Path, directory: Path) -> None:
        self.source = source
        self.directory = directory
        self.copied: dict[str, CopiedFile] = {}
        self.copied_bytes = 0  # of segments (DescribeLogDirs' size of the future log)
        self.end_offset = -1  # after the last batch copied of the newest segment
        self.stopped = False  # set from the event loop: the pass in progress ends early
        self._unsynced: set[str] = set()  # written, not yet fsynced

    def copy_pass(self, *, final: bool = False) -> int:
        """Copy what changed since the last pass; return the bytes written."""
        self.directory.mkdir(parents=True, exist_ok=True)
        listing = self._listing()
        for stale in set(self.copied) - set(listing):  # retention, cleaning, truncation
            (self.directory / stale).unlink(missing_ok=True)
            del self.copied[stale]
        written = 0
        newest = self._newest_segment()
        for name, identity in listing.items():
            if self.stopped:
                raise MoveAbandoned("stopped")
            if name.endswith(SEGMENT_SUFFIX):
                written += self._copy_segment(name, identity, final=final)
            elif self._must_copy(name, identity, final=final, newest=newest):
                written += self._copy_whole(name, identity)
        self._summarize()
        if not final:  # on the worker thread: the swap fsyncs only what it copies itself
            self.sync()
        return written

    def pending_bytes(self) -> int:
        """About what the next pass would copy (what the swap would copy on the loop)."""
        pending = 0
        newest = self._newest_segment()
        for name, identity in self._listing().items():
            known = self.copied.get(name)
            if name.endswith(SEGMENT_SUFFIX):
                if _copied_whole(known, identity):
                    continue
                if known is None or not self._tail_valid(name, identity, known):
                    pending += identity[1]
                else:
                    pending += identity[1] - known.size
            elif self._must_copy(name, identity, final=True, newest=newest):
                pending += identity[1]
        return pending

    def sync(self) -> None:
        """Make what was copied durable."""
        while self._unsynced:
            fsync_file(self.directory / self._unsynced.pop())
        fsync_directory(self.directory)

    def _listing(self) -> dict[str, tuple[int, int, int]]:
        listing = {}
        with os.scandir(self.source) as entries:
            for entry in entries:
                if entry.name.endswith(TEMPORARY_SUFFIXES) or not entry.is_file():
                    continue
                try:
                    stat = entry.stat()
                except FileNotFoundError:  # deleted since it was listed
                    continue
                listing[entry.name] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        return listing

    def _newest_segment(self) -> str:
        """The name of the newest segment copied (the active one, as far as copied)."""
        return max((n for n in self.copied if n.endswith(SEGMENT_SUFFIX)), default="")

    def _must_copy(self, name: str, identity: tuple[int, int, int], *, final: bool,
                   newest: str) -> bool:
        known = self.copied.get(name)
        if known is None or known.identity != identity:
            return True
        if not final:
            return False
        if not name.endswith(INDEX_SUFFIXES):
            return True  # checkpoints, snapshots, partition.metadata: small, once more
        base = name.rsplit(".", 1)[0]
        segment = self.copied.get(base + SEGMENT_SUFFIX)
        return segment is None or segment.passes > 1 or base + SEGMENT_SUFFIX == newest

    def _copy_whole(self, name: str, identity: tuple[int, int, int]) -> int:
        source, target = self.source / name, self.directory / name
        try:
            shutil.copyfile(source, target)
        except FileNotFoundError:
            if not source.exists():
                return 0  # gone meanwhile: the next pass forgets it
            raise
        known = self.copied.get(name)
        self.copied[name] = CopiedFile(identity, identity[1],
                                       passes=1 if known is None else known.passes + 1)
        self._unsynced.add(name)
        return identity[1]

    def _tail_valid(self, name: str, identity: tuple[int, int, int], known: CopiedFile) -> bool:
        """Whether the source still begins with what was copied: the same file, no shorter,
        and its last copied batch's header (offsets, leader epoch, CRC) unchanged."""
        if identity[0] != known.identity[0] or identity[1] < known.size:
            return False
        if known.last_batch_at < 0:
            return known.size == 0
        length = min(BATCH_HEADER_BYTES, known.size - known.last_batch_at)
        try:
            with open(self.source / name, "rb") as source, \
                    open(self.directory / name, "rb") as copy:
                return (os.pread(source.fileno(), length, known.last_batch_at)
                        == os.pread(copy.fileno(), length, known.last_batch_at))
        except FileNotFoundError:
            return False

    def _copy_segment(self, name: str, identity: tuple[int, int, int], *, final: bool) -> int:
        known = self.copied.get(name)
        if _copied_whole(known, identity):
            return 0
        start = known.size if known is not None and self._tail_valid(name, identity, known) \
            else 0
        last_batch_at = known.last_batch_at if start and known is not None else -1
        end_offset = known.end_offset if start and known is not None else -1
        try:
            source = open(self.source / name, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return 0
        with source, open(self.directory / name, "r+b" if start else "wb") as target:
            target.truncate(start)
            position, pending, written = start, b"", start
            while position < identity[1] and not self.stopped:
                chunk = os.pread(source.fileno(), min(COPY_CHUNK_BYTES, identity[1] - position),
                                 position)
                if not chunk:
                    break
                position += len(chunk)
                data = pending + chunk
                used = len(data) if final else 0
                while not final and len(data) - used >= LOG_OVERHEAD_BYTES:
                    length = int.from_bytes(data[used + BATCH_LENGTH_AT:used + 12], "big")
                    if not BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES <= length \
                            <= PENDING_BATCH_BYTES_MAX or len(data) - used < 12 + length:
                        break  # not whole yet (or not a batch: the final pass copies it)
                    last_batch_at = written + used
                    end_offset = (int.from_bytes(data[used:used + 8], "big", signed=True)
                                  + int.from_bytes(data[used + LAST_OFFSET_DELTA_AT:
                                                        used + LAST_OFFSET_DELTA_AT + 4],
                                                   "big", signed=True) + 1)
                    used += LOG_OVERHEAD_BYTES + length
                os.pwrite(target.fileno(), data[:used], written)
                written += used
                pending = data[used:]
                if len(pending) > PENDING_BATCH_BYTES_MAX:
                    break
        self.copied[name] = CopiedFile(identity, written, last_batch_at, end_offset,
                                       passes=1 if known is None else known.passes + 1)
        self._unsynced.add(name)
        return written - start

    def _summarize(self) -> None:
        segments = [(name, known) for name, known in self.copied.items()
                     if name.endswith(SEGMENT_SUFFIX)]
        self.copied_bytes = sum(known.size for _, known in segments)
        # an empty segment (just rolled) ends where it begins: at its base offset
        self.end_offset = max((known.end_offset if known.end_offset >= 0
                               else _base_offset(name) for name, known in segments),
                              default=-1)


def _remove_soon(directory: Path) -> None:
    """Remove a copy or an old replica's directory on a worker thread: a large one takes a
    while. Whatever is left (the node stopping meanwhile) goes at the next start."""
    try:
        asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, directory, True)
    except RuntimeError:  # no running loop, or its executor is shut down
        shutil.rmtree(directory, ignore_errors=True)


def _base_offset(segment_name: str) -> int:
    """`00000000000000000024.log` -> 24; -1 for a name that is not a segment's."""
    stem = segment_name.removesuffix(SEGMENT_SUFFIX)
    return int(stem) if stem.isdigit() else -1


def _copied_whole(known: CopiedFile | None, identity: tuple[int, int, int]) -> bool:
    """Whether a segment was copied whole as it is now (not up to a batch half written, or
    up to bytes that did not parse as a batch)."""
    return known is not None and known.identity == identity and known.size == identity[1]


class MoveAbandoned(Exception):
    """The replica a move copies went away (deleted, recreated) or the move was replaced."""


@dataclass(slots=True, eq=False)
class Move:
    topic: str
    index: int
    log: Log  # the replica's log when the move began; another one: the replica was recreated
    destination: Path
    future: FutureLog
    cancelled: bool = False  # replaced by a move elsewhere (or back home)
    swapped: bool = False


class ReplicaMover:
    """Moves replicas between this broker's log dirs (AlterReplicaLogDirs, JBOD).

    A move copies the replica's directory into the destination under a future name
    (FutureLog) on a worker thread, pass after pass, while the replica goes on serving from
    its dir. Once what is left to copy is small (SWAP_BYTES_MAX), the swap runs on the
    event loop, in one go: the replica's log is closed, the rest copied and fsynced (every
    file of the copy is then durable: its recovery point is its log end), the copy renamed
    to the partition's name and opened, the old directory renamed for deletion; every
    request sees the old log or the new one, never neither. A swap that fails reopens the
    old log and the replica stays where it was. (The old log is not flushed first: its
    dirty pages would be fsynced on the event loop, 0.2 s for 65 MB, for files dropped.)

    Readers. The swap is safe because it awaits nothing and nothing on the event loop
    holds a `Log` across an await: every holder looks the log up again through its
    `Partition` (or the replica manager) after each await. Parked fetches and a
    coordinator's wait for its write's high watermark keep the Partition and read
    `partition.log` when woken; the follower fetcher compares the log end it sent with
    `partition.log`'s when the answer comes; DeleteRecords, DescribeProducers and the
    producer-state snapshot (written by `Log.close`) run in one go. The group and
    transaction coordinators load their partition a chunk at a time, each chunk from the
    partition's log as it is then, from the offset after the last batch read (their shells'
    docstrings). The cleaner's worker thread reads and writes files of its own by path: a
    swap renames the directory under it (FileNotFoundError: the cleaning is dropped) or
    closes its log first (`Log.replace_segments` of a closed log changes nothing: dropped),
    and the next round cleans the new log.

    Crashes. Before the rename, the future dir is left behind: removed at the next start
    (the replica stays where it was; Kafka would resume the move, docs/deviations.md).
    Between the two renames both dirs hold the whole log, and the next start refuses
    ("duplicate log directories") until one is removed by hand: the other order could
    lose the replica's only copy.
    """

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.moves: dict[tuple[str, int], Move] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._remove_interrupted_moves()

    def _remove_interrupted_moves(self) -> None:
        for log_dir in self.replicas.log_manager.log_dirs:
            try:
                entries = [entry for entry in log_dir.iterdir()
                           if entry.name.endswith(FUTURE_DIR_SUFFIX) and entry.is_dir()]
            except OSError:
                continue
            for entry in entries:
                log.warning("removing %s, the copy of a move between log dirs that a stop "
                            "interrupted (ask for the move again)", entry)
                shutil.rmtree(entry, ignore_errors=True)

    def request(self, topic: str, index: int, destination: Path) -> ErrorCode:
        """Start moving the replica to `destination` (a configured log dir), unless it is
        there or on its way there."""
        partition = self.replicas.get_partition(topic, index)
        current = self.replicas.log_manager.log_dir_of(topic, index)
        if partition is None or current is None:
            return ErrorCode.replica_not_available
        name = f"{partition.log.dir.name}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"
        if len(name) > FILE_NAME_BYTES_MAX:  # Kafka's limit too (KAFKA-4893)
            return ErrorCode.invalid_topic_exception
        ongoing = self.moves.get((topic, index))
        if ongoing is not None:
            if _same_dir(ongoing.destination, destination):
                return ErrorCode.none
            ongoing.cancelled = True
            ongoing.future.stopped = True
            del self.moves[(topic, index)]
        if _same_dir(current, destination):
            return ErrorCode.none
        move = Move(topic, index, partition.log, destination,
                    FutureLog(partition.log.dir, destination / name))
        self.moves[(topic, index)] = move
        task = asyncio.get_running_loop().create_task(self._run(move),
                                                      name=f"move-{topic}-{index}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        log.info("moving %s-%d from %s to %s", topic, index, current, destination)
        return ErrorCode.none

    async def _run(self, move: Move) -> None:
        try:
            for _ in range(COPY_PASSES_MAX):
                try:
                    await asyncio.to_thread(move.future.copy_pass)
                except OSError:
                    self._check_current(move)  # its directory went with the replica
                    raise
                self._check_current(move)
                if self._try_swap(move):
                    log.info("moved %s-%d to %s", move.topic, move.index, move.destination)
                    return
            log.error("gave up moving %s-%d to %s: it is written faster than it is copied",
                      move.topic, move.index, move.destination)
        except asyncio.CancelledError:
            move.future.stopped = True
            raise
        except MoveAbandoned as reason:
            log.info("moving %s-%d to %s stopped: %s", move.topic, move.index,
                     move.destination, reason)
        except Exception:
            log.exception("moving %s-%d to %s failed; the replica stays where it is",
                          move.topic, move.index, move.destination)
        finally:
            if self.moves.get((move.topic, move.index)) is move:
                del self.moves[(move.topic, move.index)]
            if not move.swapped:
                _remove_soon(move.future.directory)

    def _check_current(self, move: Move) -> Partition:
        partition = self.replicas.get_partition(move.topic, move.index)
        if move.cancelled:
            raise MoveAbandoned("another move of the replica was asked for")
        if (partition is None or partition.log is not move.log
                or self.replicas.log_manager.get_log(move.topic, move.index) is not move.log):
            raise MoveAbandoned("the replica was deleted or recreated")
        return partition

    def _try_swap(self, move: Move) -> bool:
        """On the event loop, nothing awaited: swap the copy in if little is left to copy."""
        partition = self._check_current(move)
        if move.future.pending_bytes() > SWAP_BYTES_MAX:
            return False
        old = move.log
        source, home = old.dir, old.dir.parent
        target = move.destination / source.name
        if target.exists():
            raise KafkaStorageError(f"{target} exists already")
        try:
            old.close()  # not flushed: the copy is fsynced, and the old files are dropped
            move.future.copy_pass(final=True)
            move.future.sync()
            os.replace(move.future.directory, target)
            fsync_directory(move.destination)
            try:
                new = self._reopen(target, old, recovery_point=old.log_end_offset)
            except BaseException:
                os.replace(target, move.future.directory)  # removed as a future dir
                raise
        except BaseException:
            self._install(partition, self._reopen(source, old, old.recovery_point), home)
            raise
        doomed = home / f"{source.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
        try:
            os.replace(source, doomed)
            fsync_directory(home)
        except OSError as error:  # served from its new dir; the old one is found at start
            log.error("cannot remove %s after moving it to %s (remove it by hand before the "
                      "next start): %s", source, target, error)
        move.swapped = True
        self._install(partition, new, move.destination)
        self.replicas.log_manager.checkpoint()  # the new dir's checkpoints name the replica
        _remove_soon(doomed)
        return True

    def _reopen(self, directory: Path, old: Log, recovery_point: int) -> Log:
        """The log in `directory`, as the closed `old` was (closed cleanly: nothing to
        recover; `recovery_point`: up to where its files are known durable)."""
        new = Log.open(directory, old.config, recovery_point=recovery_point,
                       log_start_offset=old.log_start_offset, now_ms=self.replicas.now_ms(),
                       had_clean_shutdown=True)
        new.update_high_watermark(old.high_watermark)
        if old.topic_id is not None:
            new.assign_topic_id(old.topic_id)
        return new

    def _install(self, partition: Partition, new: Log, log_dir: Path) -> None:
        self.replicas.log_manager.rehome_log(new, log_dir)
        partition.log = new
        partition.wake_waiters()  # parked fetches read again, from the new log
