"""A coordinator load against what may change its partition's log while it yields: a
replica move's swap (AlterReplicaLogDirs), the cleaner's swap of compacted segments, and
retention deleting the segment being read.

One layer: a real ReplicaManager and LogManager over temp log dirs, the group coordinator's
shell over a real core. The load is stepped by hand (each `send` runs it to its next
yield), so the swap lands between two chunks of the load, every time, without sleeps.
"""

from __future__ import annotations

import random
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykraft.broker.coordinator_loading import LOAD_BATCHES_PER_YIELD
from pykraft.broker.group_coordinator.core import GroupConfig, GroupCoordinator
from pykraft.broker.group_coordinator.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_record,
)
from pykraft.broker.group_coordinator.shell import CONSUMER_OFFSETS_TOPIC, GroupCoordinatorShell
from pykraft.broker.partition_apis import FutureLog, Move
from pykraft.broker.replica_manager import Partition
from pykraft.broker.transaction_coordinator.core import TransactionCoordinator, TxnConfig
from pykraft.broker.transaction_coordinator.records import (
    TransactionLogKey,
    TransactionLogValue,
    TransactionRecord,
    TxnStatus,
)
from pykraft.broker.transaction_coordinator.records import encode_record as encode_txn_record
from pykraft.broker.transaction_coordinator.shell import (
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinatorShell,
)
from pykraft.records.record import build_batch
from pykraft.storage.cleaner import CleanerConfig, LogCleaner
from pykraft.storage.log_config import LogConfig
from tests.unit.broker.test_partition_apis import (
    ME,
    Node,
    harness,  # noqa: F401 - a fixture
)

__all__ = ["harness"]

EPOCH = 1
NOW_MS = 1_000_000
GROUPS = 3
TOPIC_PARTITIONS = 4
ROUNDS = 60  # offset commits per (group, partition): 720 batches, many chunks of a load


@pytest.fixture
def node(tmp_path: Path, harness: Any) -> Iterator[Node]:  # noqa: F811
    node = Node(tmp_path, harness)
    yield node
    node.log_manager.close()


def commit_batch(group: str, partition: int, offset: int) -> bytes:
    record = CoordinatorRecord(OffsetCommitKey(group=group, topic="t", partition=partition),
                               OffsetCommitValue(offset=offset, commit_timestamp=NOW_MS))
    return build_batch([(*encode_record(record), (), NOW_MS)])


def fill_offsets(node: Node, partition: Partition) -> dict[tuple[str, str, int], int]:
    """One batch per offset commit, a segment every 40 batches, all committed (high
    watermark at the log end); the last offset of each (group, topic, partition)."""
    last = {}
    count = 0
    for offset in range(ROUNDS):
        for group in (f"g{n}" for n in range(GROUPS)):
            for index in range(TOPIC_PARTITIONS):
                node.replicas.append(partition, commit_batch(group, index, offset), acks=1)
                last[(group, "t", index)] = offset
                count += 1
                if count % 40 == 0:
                    partition.log.roll(NOW_MS)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    return last


def loaded_offsets(shell: GroupCoordinatorShell) -> dict[tuple[str, str, int], int]:
    state = shell.core.partitions[0]
    return {(group_id, topic, index): value.offset
            for group_id, group in state.groups.items()
            for (topic, index), value in group.offsets.items()}


def make_shell(node: Node) -> GroupCoordinatorShell:
    core = GroupCoordinator(GroupConfig(partition_count=1), random.Random(0))
    return GroupCoordinatorShell(core, ME, node.replicas, node.cache, lambda: NOW_MS)


def step(load: Coroutine[Any, Any, None]) -> bool:
    """Run the load to its next yield; False once it has finished."""
    try:
        load.send(None)
    except StopIteration:
        return False
    return True


def move_now(node: Node, partition: Partition, topic: str = CONSUMER_OFFSETS_TOPIC) -> Path:
    """Move the partition's replica to another log dir, copy and swap in one go (what
    ReplicaMover does across its passes); the new dir."""
    home = node.log_manager.log_dir_of(topic, 0)
    destination = next(d for d in node.dirs if d != home)
    future = FutureLog(partition.log.dir, destination / f"{partition.log.dir.name}.x-future")
    move = Move(topic, 0, partition.log, destination, future)
    future.copy_pass()
    assert node.apis.mover._try_swap(move)
    return destination


async def test_a_group_load_survives_a_move_of_its_partition_between_two_chunks(
        node: Node) -> None:
    partition = node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME, epoch=EPOCH)
    expected = fill_offsets(node, partition)
    old_log = partition.log
    shell = make_shell(node)
    load = shell._load(0, EPOCH)
    assert step(load)  # one chunk read: the load yields
    destination = move_now(node, partition)
    assert partition.log is not old_log and node.log_manager.log_dir_of(
        CONSUMER_OFFSETS_TOPIC, 0) == destination
    while step(load):
        pass
    assert shell.core.leader_epoch(0) == EPOCH
    assert shell.core.partitions[0].status.name == "ACTIVE"
    assert loaded_offsets(shell) == expected
    # and the moved log is the one written to: a commit after the load lands there
    node.replicas.append(partition, commit_batch("g0", 0, 999), acks=1)
    assert partition.log.log_end_offset == old_log.log_end_offset + 1


async def test_a_move_after_every_chunk_still_loads_every_offset(node: Node) -> None:
    """The replica goes back and forth between dirs after each chunk of the load."""
    partition = node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME, epoch=EPOCH)
    expected = fill_offsets(node, partition)
    shell = make_shell(node)
    load = shell._load(0, EPOCH)
    moves = 0
    while step(load):
        move_now(node, partition)
        moves += 1
    assert moves >= GROUPS * TOPIC_PARTITIONS * ROUNDS // LOAD_BATCHES_PER_YIELD
    assert loaded_offsets(shell) == expected


async def test_a_group_load_survives_compaction_of_its_partition_between_two_chunks(
        node: Node) -> None:
    """The cleaner swaps compacted segments in under a load that has read part of them
    (Log.replace_segments closes and renames the old segment files): the load goes on from
    its offset in the compacted log and ends with every group's last offsets."""
    partition = node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME, epoch=EPOCH)
    partition.log.update_config(LogConfig.from_configs(
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}, {}))
    expected = fill_offsets(node, partition)
    partition.log.roll(NOW_MS)  # the last commits' segment becomes cleanable too
    before = partition.log.segment_base_offsets
    cleaner = LogCleaner(CleanerConfig(), lambda: [
        (partition.log, node.log_manager.log_dir_of(CONSUMER_OFFSETS_TOPIC, 0) or Path())])
    shell = make_shell(node)
    load = shell._load(0, EPOCH)
    assert step(load) and step(load)  # two chunks read, in the log's first segments
    job = cleaner.clean_once(NOW_MS)
    assert job is not None and job.stats.records_kept < job.stats.records_read
    assert partition.log.segment_base_offsets != before  # segments were swapped
    while step(load):
        pass
    assert loaded_offsets(shell) == expected
    # nothing stray was made in the partition's directory by a read of a replaced segment
    names = sorted(path.name for path in partition.log.dir.iterdir()
                   if path.suffix == ".log")
    assert len(names) == len(partition.log.segment_base_offsets)


async def test_a_load_whose_partition_goes_away_between_chunks_unloads_it(
        node: Node) -> None:
    partition = node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME, epoch=EPOCH)
    fill_offsets(node, partition)
    shell = make_shell(node)
    load = shell._load(0, EPOCH)
    assert step(load)
    node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME + 1, epoch=EPOCH + 1)  # led elsewhere
    assert not step(load)
    assert shell.core.leader_epoch(0) is None


async def test_a_transaction_state_load_survives_a_move_between_two_chunks(
        node: Node) -> None:
    partition = node.place(TRANSACTION_STATE_TOPIC, 0, leader=ME, epoch=EPOCH)
    expected = {}
    for count in range(300):  # 300 batches: five chunks
        txn_id = f"tx{count % 7}"
        value = TransactionLogValue(producer_id=count % 7, producer_epoch=count,
                                    transaction_timeout_ms=60_000,
                                    transaction_status=TxnStatus.EMPTY)
        node.replicas.append(partition, build_batch([(*encode_txn_record(TransactionRecord(
            TransactionLogKey(transactional_id=txn_id), value)), (), NOW_MS)]), acks=1)
        expected[txn_id] = count
        if count % 40 == 39:
            partition.log.roll(NOW_MS)
    partition.log.update_high_watermark(partition.log.log_end_offset)

    async def no_markers(_: Any) -> dict[tuple[str, int], Any]:
        return {}

    shell = TransactionCoordinatorShell(
        TransactionCoordinator(TxnConfig(partition_count=1), lambda: None), ME, node.replicas,
        node.cache, lambda: NOW_MS, no_markers)
    load = shell._load(0, EPOCH)
    assert step(load)
    move_now(node, partition, TRANSACTION_STATE_TOPIC)
    while step(load):
        pass
    state = shell.core.partitions[0]
    assert not state.loading
    assert {txn_id: txn.epoch for txn_id, txn in state.txns.items()} == expected


async def test_a_group_load_goes_on_from_the_log_start_when_retention_passed_it(
        node: Node) -> None:
    """Retention (here: the log start moved by DeleteRecords, `compact,delete`) deletes the
    segment the load was reading and the next ones: the load goes on from the new log
    start, and every group's last offsets (rewritten in each round) are there."""
    partition = node.place(CONSUMER_OFFSETS_TOPIC, 0, leader=ME, epoch=EPOCH)
    partition.log.update_config(LogConfig.from_configs({"cleanup.policy": "compact,delete"},
                                                       {}))
    expected = fill_offsets(node, partition)
    shell = make_shell(node)
    load = shell._load(0, EPOCH)
    assert step(load)  # one chunk read, in the log's second segment
    start = partition.log.segment_base_offsets[5]
    partition.log.delete_records(start, NOW_MS)
    assert partition.log.log_start_offset == start > LOAD_BATCHES_PER_YIELD
    while step(load):
        pass
    assert loaded_offsets(shell) == expected
    names = [path.name for path in partition.log.dir.iterdir() if path.suffix == ".log"]
    assert len(names) == len(partition.log.segment_base_offsets)  # no stray file made
