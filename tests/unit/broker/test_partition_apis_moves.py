"""Moving replicas between log dirs (AlterReplicaLogDirs), one layer: real logs in temp log
dirs, the copy's passes and the swap driven as the broker drives them, the result compared
byte for byte and record by record with the log that was moved."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.errors import ErrorCode

from pykraft.broker.partition_apis import (
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    FutureLog,
    PartitionApis,
    ReplicaMover,
)
from pykraft.broker.replica_manager import Partition
from pykraft.records.record import build_batch
from pykraft.storage.log import Log
from pykraft.storage.log_config import LogConfig
from tests.unit.broker.test_partition_apis import (
    ME,
    Node,
    alter_codes,
    alter_request,
    harness,  # noqa: F401 - a fixture
    records,
)

__all__ = ["harness"]


@pytest.fixture
def node(tmp_path: Path, harness: Any) -> Iterator[Node]:  # noqa: F811
    node = Node(tmp_path, harness)
    yield node
    node.log_manager.close()


def read_all(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30, max_offset=None).records


def snapshot(log: Log) -> tuple[Any, ...]:
    return (log.log_start_offset, log.log_end_offset, log.high_watermark,
            log.leader_epoch_cache.entries, log.segment_base_offsets, read_all(log),
            log.topic_id)


def fill(node: Node, partition: Partition, batches: int) -> None:
    """Batches of 3 records, a new segment every 4 batches."""
    for count in range(batches):
        node.replicas.append(partition, records(3), acks=1)
        if count % 4 == 3:
            partition.log.roll(node.replicas.now_ms())


def other_dir(node: Node, topic: str, index: int) -> Path:
    home = node.log_manager.log_dir_of(topic, index)
    return next(d for d in node.dirs if d != home)


async def wait_moved(node: Node, topic: str, index: int, destination: Path) -> None:
    async with asyncio.timeout(20):
        while node.apis.mover.moves or node.log_manager.log_dir_of(topic, index) != destination:
            await asyncio.sleep(0.01)


async def test_a_moved_replica_is_the_same_log_in_the_other_dir(node: Node) -> None:
    """Several segments, two leader epochs, a moved log start and high watermark: after the
    move the log in the new dir reads the same, the old dir is gone, appends go on."""
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 6)
    partition = node.place("a", 0, leader=ME, epoch=3, partition_epoch=1)
    fill(node, partition, 6)
    partition.log.maybe_increment_high_watermark(20)
    partition.log.delete_records(5, node.replicas.now_ms())
    before = snapshot(partition.log)
    source = partition.log.dir
    destination = other_dir(node, "a", 0)
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2,
                               alter_request((str(destination), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    await wait_moved(node, "a", 0, destination)
    moved = partition.log
    assert moved.dir == destination / "a-0"
    assert node.log_manager.get_log("a", 0) is moved
    assert snapshot(moved) == before
    assert not source.exists()
    assert [p.name for p in destination.iterdir() if p.name.endswith("-future")] == []
    node.replicas.append(partition, records(1), acks=1)
    assert moved.log_end_offset == before[1] + 1
    response = await node.call(DESCRIBE_LOG_DIRS, 4, log_dirs_v4.DescribeLogDirsRequest(
        topics=None))
    homes = {result.log_dir: [(t.name, int(p.partition_index), p.is_future_key)
                              for t in result.topics for p in t.partitions]
             for result in response.results}
    assert homes[str(destination.absolute())] == [("a", 0, False)]


async def test_appends_during_the_move_are_in_the_moved_log(node: Node) -> None:
    """A producer appends all along the copy's passes: every batch is in the new log."""
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 20)
    destination = other_dir(node, "a", 0)
    appended = 0

    async def produce() -> None:
        nonlocal appended
        while node.log_manager.log_dir_of("a", 0) != destination:
            node.replicas.append(partition, records(2), acks=1)
            appended += 1
            await asyncio.sleep(0)

    producing = asyncio.ensure_future(produce())
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2,
                               alter_request((str(destination), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    await wait_moved(node, "a", 0, destination)
    await producing
    assert appended > 0
    assert partition.log.log_end_offset == 20 * 3 + appended * 2
    assert len(read_all(partition.log)) > 0
    partition.log.check_invariants()


async def test_asking_for_the_home_dir_again_cancels_a_move(node: Node) -> None:
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 8)
    home = node.log_manager.log_dir_of("a", 0)
    assert home is not None
    destination = other_dir(node, "a", 0)
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(destination), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    assert node.apis.mover.moves  # on its way
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(home), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    assert not node.apis.mover.moves
    async with asyncio.timeout(10):  # the cancelled copy removes its future dir
        while any(p.name.endswith("-future") for p in destination.iterdir()):
            await asyncio.sleep(0.01)
    assert node.log_manager.log_dir_of("a", 0) == home
    assert partition.log.dir.parent == home


def test_a_truncated_and_rewritten_tail_is_copied_again(tmp_path: Path) -> None:
    """A follower's log is copied, then truncated and written past its old end by another
    epoch: the next pass sees that the last batch it copied changed and copies the segment
    again whole; the final copy is the source, file for file."""
    config = LogConfig.from_configs({}, {})
    source = Log.open(tmp_path / "d0" / "f-0", config, recovery_point=0, log_start_offset=None,
                      now_ms=0)
    for offset in range(0, 6, 2):
        source.append_as_follower(build_batch([(b"k", b"old", [], 1)] * 2, base_offset=offset,
                                              partition_leader_epoch=1))
    future = FutureLog(source.dir, tmp_path / "d1" / f"f-0.{uuid.uuid4().hex}-future")
    assert future.copy_pass() > 0
    assert future.end_offset == 6
    source.truncate_to(2)
    for offset in range(2, 10, 2):
        source.append_as_follower(build_batch([(b"k", b"new!", [], 1)] * 2, base_offset=offset,
                                              partition_leader_epoch=2))
    future.copy_pass()
    assert future.end_offset == 10
    source.close()
    future.copy_pass(final=True)
    copied = {p.name: p.read_bytes() for p in future.directory.iterdir()}
    assert copied == {p.name: p.read_bytes() for p in source.dir.iterdir()
                      if not p.name.endswith(".tmp")}


def test_a_move_a_stop_interrupted_is_removed_at_start(node: Node) -> None:
    leftover = node.dirs[1] / f"a-0.{uuid.uuid4().hex}-future"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"x")
    PartitionApis(node.cache, node.replicas, {})
    assert not leftover.exists()


async def test_a_path_that_is_not_a_directory_is_a_storage_error(node: Node) -> None:
    node.place("a", 0, leader=ME, epoch=1)
    target = other_dir(node, "a", 0)
    shutil.rmtree(target)
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(target), "a", (0,))))
    assert alter_codes(response) == {("a", 0): int(ErrorCode.kafka_storage_error)}


async def test_a_replica_deleted_during_its_move_stops_it_quietly(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 40)
    destination = other_dir(node, "a", 0)
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(destination), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    node.replicas._remove("a", 0)  # what a topic deletion's metadata does
    async with asyncio.timeout(10):
        while node.apis.mover.moves or any(p.name.endswith("-future")
                                           for p in destination.iterdir()):
            await asyncio.sleep(0.01)
    assert node.log_manager.get_log("a", 0) is None
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


async def test_a_swap_that_cannot_open_the_copy_leaves_the_replica_where_it_was(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy fails to open at the swap: the old log is opened again in its dir and goes
    on serving, the copy is removed, and nothing was lost."""
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 9)
    before = snapshot(partition.log)
    home = partition.log.dir.parent
    destination = other_dir(node, "a", 0)
    real_open = Log.open

    def failing_open(directory: Path, *args: Any, **kwargs: Any) -> Log:
        if directory.parent == destination:
            raise OSError(5, "Input/output error")
        return real_open(directory, *args, **kwargs)

    monkeypatch.setattr(Log, "open", staticmethod(failing_open))
    response = await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request(
        (str(destination), "a", (0,))))
    assert alter_codes(response) == {("a", 0): 0}
    async with asyncio.timeout(10):
        while node.apis.mover.moves or any(p.name.startswith("a-0")
                                           for p in destination.iterdir()):
            await asyncio.sleep(0.01)
    assert node.log_manager.log_dir_of("a", 0) == home
    assert partition.log.dir == home / "a-0"
    assert node.log_manager.get_log("a", 0) is partition.log
    assert snapshot(partition.log) == before
    node.replicas.append(partition, records(1), acks=1)  # the reopened log takes appends
    assert partition.log.log_end_offset == before[1] + 1


async def test_describe_log_dirs_shows_a_move_in_flight_as_a_future_log(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """Until the swap the replica is listed in its dir and, as a future log, in the
    destination: its bytes copied so far and how far the copy is behind the log end.
    The move's own task is held at its start (a log this small is copied and swapped in
    its first pass) while the test runs that pass itself."""
    released = asyncio.Event()
    run = ReplicaMover._run

    async def held_run(self: ReplicaMover, move: Any) -> None:
        await released.wait()
        await run(self, move)

    monkeypatch.setattr(ReplicaMover, "_run", held_run)
    partition = node.place("a", 0, leader=ME, epoch=1)
    fill(node, partition, 8)
    home = node.log_manager.log_dir_of("a", 0)
    assert home is not None
    destination = other_dir(node, "a", 0)
    await node.call(ALTER_REPLICA_LOG_DIRS, 2, alter_request((str(destination), "a", (0,))))
    move = node.apis.mover.moves[("a", 0)]
    request = log_dirs_v4.DescribeLogDirsRequest(topics=None)

    def listed(response: Any) -> dict[str, list[tuple[int, bool, int, int]]]:
        return {result.log_dir: [(int(p.partition_index), p.is_future_key,
                                  int(p.partition_size), int(p.offset_lag))
                                 for t in result.topics for p in t.partitions]
                for result in response.results}

    before = listed(await node.call(DESCRIBE_LOG_DIRS, 4, request))
    assert before[str(home.absolute())] == [(0, False, partition.log.size_bytes, 0)]
    assert before[str(destination.absolute())] == [(0, True, 0, 24)]  # nothing copied yet
    await asyncio.to_thread(move.future.copy_pass)  # what the move's first pass does
    during = listed(await node.call(DESCRIBE_LOG_DIRS, 4, request))
    assert during[str(destination.absolute())] == [(0, True, partition.log.size_bytes, 0)]
    released.set()
    await wait_moved(node, "a", 0, destination)
