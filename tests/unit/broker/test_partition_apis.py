"""The partition APIs' handlers, one layer: real logs in temp log dirs under a ReplicaManager
placed by hand, metadata images made by the controller's own code, kio requests in and kio
responses out (no sockets)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_replica_log_dirs.v2 import request as alter_v2
from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.describe_topic_partitions.v0 import request as dtp
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v2 import request as epoch_v2
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4

from pykraft.broker.metadata_cache import MetadataCache
from pykraft.broker.partition_apis import (
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_TOPIC_PARTITIONS,
    OFFSET_FOR_LEADER_EPOCH,
    PARTITION_APIS,
    TOPIC_AUTHORIZED_OPERATIONS,
    PartitionApis,
)
from pykraft.broker.replica_manager import Partition, ReplicaManager
from pykraft.metadata.registrations import LeaderRecoveryState, PartitionRegistration
from pykraft.net.server import RequestContext
from pykraft.protocol.entities import make
from pykraft.protocol.framing import RequestHeader, encode_response, request_type
from pykraft.records.record import build_batch
from pykraft.storage.log_config import LogConfig
from pykraft.storage.log_manager import LogManager
from pykraft.testing.fuzz import build_entity, case_rng
from tests.unit.controller.controller_harness import Harness

ME = 0
TOPIC_ID = uuid.UUID(int=7)


class Node:
    """A ReplicaManager over three log dirs, its metadata cache and the API group."""

    def __init__(self, root: Path, harness: Harness) -> None:
        self.dirs = [root / "d0", root / "d1", root / "d2"]
        self.log_manager = LogManager(self.dirs, {})
        self.log_manager.load(0)
        self.replicas = ReplicaManager(ME, self.log_manager, {}, lambda: 1_000_000)
        self.cache = MetadataCache(ME, "cluster")
        self.harness = harness
        self.cache.image = harness.controller.image
        self.apis = PartitionApis(self.cache, self.replicas, {})

    def place(self, topic: str, index: int, *, leader: int, epoch: int,
              partition_epoch: int = 0) -> Partition:
        registration = PartitionRegistration(
            replicas=(0, 1, 2), isr=(0, 1, 2), removing_replicas=(), adding_replicas=(),
            leader=leader, leader_recovery_state=LeaderRecoveryState.RECOVERED,
            leader_epoch=epoch, partition_epoch=partition_epoch, directories=())
        self.replicas._apply_partition(topic, TOPIC_ID, index, registration,
                                       LogConfig.from_configs({}, {}))
        partition = self.replicas.get_partition(topic, index)
        assert partition is not None
        return partition

    async def call(self, api_key: int, version: int, request: Any,
                   listener: str = "PLAINTEXT") -> Any:
        context = RequestContext(RequestHeader(api_key, version, 1, "test", 0), listener,
                                 "127.0.0.1", 5000)
        return await self.apis.handlers()[api_key](context, request)


@pytest.fixture
def harness() -> Harness:
    harness = Harness()
    harness.start_brokers(3)
    for name, count in (("b", 2), ("a", 3), ("c", 1), ("t", 1), ("elsewhere", 1)):
        harness.create(name, partitions=count, replication_factor=3)
    return harness


@pytest.fixture
def node(tmp_path: Path, harness: Harness) -> Iterator[Node]:
    node = Node(tmp_path, harness)
    yield node
    node.log_manager.close()


def records(count: int) -> bytes:
    return build_batch([(b"k", b"v" * 10, [], 1_000_000) for _ in range(count)])


# -- OffsetForLeaderEpoch ---------------------------------------------------------------------


def epoch_request(module: Any, topic: str, *partitions: tuple[int, int, int]) -> Any:
    """partitions: (index, current leader epoch, leader epoch)."""
    return make(module.OffsetForLeaderEpochRequest, replica_id=-1, topics=(
        module.OffsetForLeaderTopic(topic=topic, partitions=tuple(
            module.OffsetForLeaderPartition(partition=index, current_leader_epoch=current,
                                            leader_epoch=epoch)
            for index, current, epoch in partitions)),))


def answers(response: Any) -> list[tuple[int, int, int]]:
    return [(int(p.error_code), int(p.leader_epoch), int(p.end_offset))
            for topic in response.topics for p in topic.partitions]


@pytest.mark.parametrize("module", [epoch_v2, epoch_v4])
async def test_the_end_of_an_epoch_is_the_start_of_the_next_or_the_log_end(
        node: Node, module: Any) -> None:
    """Epochs 3 (offsets 0-3) and 6 (4-5): each epoch asked for gets the largest epoch at or
    below it and where that one ended; unknown newer epochs get (-1, -1)."""
    partition = node.place("t", 0, leader=ME, epoch=3)
    node.replicas.append(partition, records(4), acks=1)
    partition = node.place("t", 0, leader=ME, epoch=6, partition_epoch=1)
    node.replicas.append(partition, records(2), acks=1)
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4 if module is epoch_v4 else 2,
                               epoch_request(module, "t", (0, -1, 3), (0, -1, 5), (0, 6, 6),
                                             (0, -1, 7), (0, -1, -1), (0, -1, 1)))
    assert answers(response) == [(0, 3, 4), (0, 3, 4), (0, 6, 6), (0, -1, -1), (0, -1, -1),
                                 (0, 1, 0)]


async def test_the_current_leader_epoch_fences_before_leadership_is_checked(node: Node) -> None:
    """Older current epoch: FENCED_LEADER_EPOCH; newer: UNKNOWN_LEADER_EPOCH; and on a
    follower a matching epoch still gets NOT_LEADER_OR_FOLLOWER (leaders answer, even
    followers' requests), a stale one FENCED_LEADER_EPOCH (the epoch is checked first)."""
    node.place("t", 0, leader=ME, epoch=5)
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(
        epoch_v4, "t", (0, 4, 5), (0, 6, 5), (0, 5, 5)))
    assert answers(response) == [(int(ErrorCode.fenced_leader_epoch), -1, -1),
                                 (int(ErrorCode.unknown_leader_epoch), -1, -1), (0, 5, 0)]
    node.place("t", 0, leader=1, epoch=8, partition_epoch=1)
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(
        epoch_v4, "t", (0, 8, 5), (0, 7, 5)))
    assert answers(response) == [(int(ErrorCode.not_leader_or_follower), -1, -1),
                                 (int(ErrorCode.fenced_leader_epoch), -1, -1)]


async def test_partitions_not_hosted_here(node: Node) -> None:
    """Existing elsewhere: NOT_LEADER_OR_FOLLOWER; not existing: UNKNOWN_TOPIC_OR_PARTITION."""
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(
        epoch_v4, "elsewhere", (0, -1, 0), (9, -1, 0)))
    assert answers(response) == [(int(ErrorCode.not_leader_or_follower), -1, -1),
                                 (int(ErrorCode.unknown_topic_or_partition), -1, -1)]
    response = await node.call(OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(
        epoch_v4, "nope", (0, -1, 0)))
    assert answers(response) == [(int(ErrorCode.unknown_topic_or_partition), -1, -1)]


# -- DescribeLogDirs --------------------------------------------------------------------------


def log_dirs_request(module: Any, wanted: dict[str, tuple[int, ...]] | None) -> Any:
    return module.DescribeLogDirsRequest(topics=None if wanted is None else tuple(
        module.DescribableLogDirTopic(topic=name, partitions=indexes)
        for name, indexes in wanted.items()))


def dir_contents(response: Any) -> dict[str, dict[tuple[str, int], int]]:
    return {result.log_dir: {(topic.name, int(p.partition_index)): int(p.partition_size)
                             for topic in result.topics for p in topic.partitions}
            for result in response.results}


async def test_every_log_dir_with_its_logs_and_volume(node: Node) -> None:
    """Each configured dir, absolute, with its partitions' sizes; v4 adds the volume's total
    and usable bytes; a topic filter keeps only the partitions named."""
    first = node.place("a", 0, leader=ME, epoch=1)
    node.replicas.append(first, records(3), acks=1)
    node.place("a", 1, leader=1, epoch=1)
    node.place("b", 0, leader=ME, epoch=1)
    homes = {key: node.log_manager.log_dir_of(*key) for key in (("a", 0), ("a", 1), ("b", 0))}
    assert len(set(homes.values())) == 3  # one per dir: each new log goes to the emptiest
    response = await node.call(DESCRIBE_LOG_DIRS, 4, log_dirs_request(log_dirs_v4, None))
    assert int(response.error_code) == 0
    assert [result.log_dir for result in response.results] == [
        str(d.absolute()) for d in node.dirs]
    contents = dir_contents(response)
    for key, home in homes.items():
        assert home is not None
        log = node.log_manager.get_log(*key)
        assert log is not None
        assert contents[str(home.absolute())] == {key: log.size_bytes}
    assert contents[str(homes[("a", 0)])][("a", 0)] > 0  # the three records
    for result in response.results:
        assert int(result.error_code) == 0
        assert 0 < result.usable_bytes <= result.total_bytes
        assert all(p.offset_lag == 0 and not p.is_future_key
                   for topic in result.topics for p in topic.partitions)
    response = await node.call(DESCRIBE_LOG_DIRS, 1,
                               log_dirs_request(log_dirs_v1, {"a": (1, 7), "zz": (0,)}))
    assert {key for parts in dir_contents(response).values() for key in parts} == {("a", 1)}
    assert not hasattr(response.results[0], "total_bytes")  # v1 has no volume sizes
    assert sum(1 for result in response.results if result.topics) == 1  # empty dirs: no topic


async def test_a_log_dir_that_cannot_be_read_is_a_storage_error(node: Node) -> None:
    shutil.rmtree(node.dirs[2])
    response = await node.call(DESCRIBE_LOG_DIRS, 4, log_dirs_request(log_dirs_v4, None))
    assert [int(result.error_code) for result in response.results] == [
        0, 0, int(ErrorCode.kafka_storage_error)]


# -- AlterReplicaLogDirs ----------------------------------------------------------------------


def alter_request(*moves: tuple[str, str, tuple[int, ...]]) -> Any:
    return alter_v2.AlterReplicaLogDirsRequest(dirs=tuple(
        alter_v2.AlterReplicaLogDir(path=path, topics=(
            alter_v2.AlterReplicaLogDirTopic(name=topic, partitions=indexes),))
        for path, topic, indexes in moves))


def alter_codes(response: Any) -> dict[tuple[str, int], int]:
    return {(topic.topic_name, int(p.partition_index)): int(p.error_code)
            for topic in response.results for p in topic.partitions}


async def test_alter_replica_log_dirs_errors_and_the_no_op(node: Node) -> None:
    """A path that is no log dir: LOG_DIR_NOT_FOUND; no replica here: REPLICA_NOT_AVAILABLE;
    the replica's own dir: NONE, nothing moves."""
    node.place("a", 0, leader=ME, epoch=1)
    home = node.log_manager.log_dir_of("a", 0)
    assert home is not None
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(home.absolute()), "a", (0, 1)),
        ("/nonexistent/dir", "b", (0,)),
        (str(home / ".." / home.name), "elsewhere", (0,))))
    assert alter_codes(response) == {
        ("a", 0): 0, ("a", 1): int(ErrorCode.replica_not_available),
        ("b", 0): int(ErrorCode.log_dir_not_found),
        ("elsewhere", 0): int(ErrorCode.replica_not_available)}
    assert node.log_manager.log_dir_of("a", 0) == home


# -- DescribeTopicPartitions ------------------------------------------------------------------


def dtp_request(*names: str, limit: int = 2000,
                cursor: tuple[str, int] | None = None) -> Any:
    return dtp.DescribeTopicPartitionsRequest(
        topics=tuple(dtp.TopicRequest(name=name) for name in names),
        response_partition_limit=limit,
        cursor=None if cursor is None else dtp.Cursor(topic_name=cursor[0],
                                                      partition_index=cursor[1]))


def pages(response: Any) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(topic.name, int(topic.error_code), tuple(int(p.partition_index)
                                                      for p in topic.partitions))
            for topic in response.topics]


def cursor_of(response: Any) -> tuple[str, int] | None:
    cursor = response.next_cursor
    return None if cursor is None else (cursor.topic_name, int(cursor.partition_index))


async def test_every_topic_in_name_order_with_its_partitions(node: Node) -> None:
    response = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0, dtp_request())
    assert pages(response) == [("a", 0, (0, 1, 2)), ("b", 0, (0, 1)), ("c", 0, (0,)),
                               ("elsewhere", 0, (0,)), ("t", 0, (0,))]
    assert cursor_of(response) is None
    image = node.cache.image
    for topic in response.topics:
        assert topic.topic_id == image.topics.by_name[topic.name].topic_id
        assert not topic.is_internal
        assert topic.topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS == 3576
        for partition in topic.partitions:
            registration = image.topics.by_name[topic.name].partitions[partition.partition_index]
            assert partition.leader_id == registration.leader >= 0
            assert partition.leader_epoch == registration.leader_epoch
            assert partition.replica_nodes == registration.replicas
            assert partition.isr_nodes == registration.isr
            assert partition.eligible_leader_replicas == ()
            assert partition.last_known_elr == ()
            assert partition.offline_replicas == ()


async def test_paging_with_the_cursor(node: Node) -> None:
    """A limit of 4: a's three and b-0, then the cursor b-1; a page that ends exactly at a
    topic's end points at the next topic's partition 0."""
    first = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0, dtp_request(limit=4))
    assert pages(first) == [("a", 0, (0, 1, 2)), ("b", 0, (0,))]
    assert cursor_of(first) == ("b", 1)
    second = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0,
                             dtp_request(limit=4, cursor=("b", 1)))
    assert pages(second) == [("b", 0, (1,)), ("c", 0, (0,)), ("elsewhere", 0, (0,)),
                             ("t", 0, (0,))]
    assert cursor_of(second) is None
    exact = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0, dtp_request("b", "a", limit=3))
    assert pages(exact) == [("a", 0, (0, 1, 2))]
    assert cursor_of(exact) == ("b", 0)


async def test_the_broker_limit_caps_the_clients(node: Node) -> None:
    apis = PartitionApis(node.cache, node.replicas,
                         {"max.request.partition.size.limit": "2"})
    context = RequestContext(RequestHeader(DESCRIBE_TOPIC_PARTITIONS, 0, 1, "t", 0),
                             "PLAINTEXT", "127.0.0.1", 1)
    response = await apis.describe_topic_partitions(context, dtp_request(limit=100))
    assert pages(response) == [("a", 0, (0, 1))]
    assert cursor_of(response) == ("a", 2)


async def test_named_topics_that_do_not_exist_and_a_cursor_outside_the_names(
        node: Node) -> None:
    response = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0,
                               dtp_request("zz", "c", "bad/name", "c"))
    assert pages(response) == [
        ("bad/name", int(ErrorCode.invalid_topic_exception), ()), ("c", 0, (0,)),
        ("zz", int(ErrorCode.unknown_topic_or_partition), ())]
    assert response.topics[2].topic_id == uuid.UUID(int=0)
    assert response.topics[2].topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS
    response = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0,
                               dtp_request("c", "t", cursor=("b", 0)))
    assert pages(response) == [("c", int(ErrorCode.invalid_request), ()),
                               ("t", int(ErrorCode.invalid_request), ())]
    assert response.topics[0].topic_authorized_operations == -(2**31)


async def test_a_listener_the_brokers_lack_shows_no_leader_and_offline_replicas(
        node: Node) -> None:
    response = await node.call(DESCRIBE_TOPIC_PARTITIONS, 0, dtp_request("c"), "OTHER")
    (partition,) = response.topics[0].partitions
    assert partition.leader_id == -1
    assert sorted(partition.offline_replicas) == sorted(partition.replica_nodes)


# -- hostile requests -------------------------------------------------------------------------


@pytest.mark.parametrize("api_key", sorted(PARTITION_APIS))
async def test_random_requests_get_an_answer_that_encodes(node: Node, api_key: int) -> None:
    """Every field of every version drawn at random (fuzz.build_entity, names from a small
    pool that hits real topics): each request is answered, and the answer encodes."""
    partition = node.place("a", 0, leader=ME, epoch=2)
    node.replicas.append(partition, records(2), acks=1)
    node.place("b", 1, leader=1, epoch=1)
    low, high = PARTITION_APIS[api_key]
    for index in range(150):
        version = low + index % (high - low + 1)
        request = build_entity(request_type(api_key, version), case_rng(18, "partition", index))
        response = await node.call(api_key, version, request)
        encode_response(index, response)
    assert not node.apis.mover.moves or all(
        move.destination in node.dirs for move in node.apis.mover.moves.values())
