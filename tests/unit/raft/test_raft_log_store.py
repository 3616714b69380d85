"""The metadata log stores: one contract for memory and disk; recovery of a torn tail."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykraft.errors import InvariantViolation, OffsetOutOfRange
from pykraft.raft.driver import RaftNode
from pykraft.raft.log_store import DiskLogStore, LogStore, MemoryLogStore
from pykraft.raft.state import LeaderAndEpoch, QuorumStateStore
from pykraft.records.batch import iter_headers
from pykraft.records.record import build_batch
from tests.unit.raft.raft_shell import Recorder

PARTITION_DIR = "__cluster_metadata-0"


def batch(base_offset: int, epoch: int, *values: bytes) -> bytes:
    return build_batch(
        [(None, value, (), 1_000) for value in values],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogStore]:
    if request.param == "memory":
        yield MemoryLogStore()
        return
    disk = DiskLogStore.open(tmp_path / PARTITION_DIR, now_ms=0)
    yield disk
    disk.close()


def test_append_read_flush_truncate(store: LogStore) -> None:
    """Batches keep their offsets; reads start at the batch holding the offset and return
    at least one batch; truncation at a batch boundary moves the end and the last epoch."""
    assert (store.log_end_offset, store.last_epoch, store.read(0, 100)) == (0, 0, b"")
    first, second, third = batch(0, 1, b"a", b"b"), batch(2, 1, b"c"), batch(3, 2, b"d", b"e")
    store.append(first + second)
    store.append(third)
    assert (store.log_end_offset, store.last_epoch) == (5, 2)
    assert store.read(1, 1) == first  # the batch holding offset 1, although over max_bytes
    assert store.read(2, 10_000) == second + third
    assert store.flush() == 5 and store.flushed_offset == 5
    with pytest.raises(OffsetOutOfRange):
        store.read(6, 100)
    store.truncate_to(3)
    assert (store.log_end_offset, store.last_epoch) == (3, 1)
    assert store.read(0, 10_000) == first + second
    store.append(batch(3, 3, b"f"))
    assert store.last_epoch == 3


def test_appends_that_break_the_log_are_bugs(store: LogStore) -> None:
    """A gap, an overlap, a falling epoch or a corrupt batch never reaches the log."""
    store.append(batch(0, 2, b"a"))
    for bad in (batch(5, 2, b"gap"), batch(0, 2, b"overlap"), batch(1, 1, b"older epoch")):
        with pytest.raises(InvariantViolation):
            store.append(bad)
    corrupt = bytearray(batch(1, 2, b"x"))
    corrupt[-1] ^= 0xFF
    with pytest.raises(Exception, match="CRC"):
        store.append(bytes(corrupt))
    assert store.log_end_offset == 1


def test_memory_store_crash_keeps_only_the_flushed_prefix() -> None:
    store = MemoryLogStore()
    store.append(batch(0, 1, b"a"))
    store.flush()
    store.append(batch(1, 1, b"b"))
    store.crash()
    assert (store.log_end_offset, store.read(0, 100)) == (1, batch(0, 1, b"a"))


async def run_node(directory: Path, values: list[bytes]) -> tuple[Recorder, LeaderAndEpoch]:
    """Open the node on disk, let it replay and lead, append `values` one by one, stop."""
    recorder = Recorder()
    node = RaftNode.open(node_id=1, voters=frozenset({1}), log_dir=directory, listener=recorder)
    await node.start()
    leader = await asyncio.wait_for(node.wait_leader(), 5)
    for value in values:
        await asyncio.wait_for(node.wait_committed(node.append([value])), 5)
    await node.stop()
    return recorder, leader


async def test_a_torn_tail_is_cut_on_restart_and_the_rest_replays(tmp_path: Path) -> None:
    """After a crash mid-write of the last batch, the node restarts, drops that batch only,
    replays every earlier one, and leads a newer epoch."""
    directory = tmp_path / PARTITION_DIR
    first, leader = await run_node(directory, [b"one", b"two", b"three"])
    assert leader == LeaderAndEpoch(1, 1)
    segment = directory / "00000000000000000000.log"
    size = segment.stat().st_size
    os.truncate(segment, size - 5)  # the batch holding "three" is torn

    second, leader = await run_node(directory, [b"four"])
    assert leader == LeaderAndEpoch(1, 2)
    assert second.values == [b"one", b"two", b"four"]
    replayed = [b for b in second.batches if b.epoch == 1]
    assert replayed == [b for b in first.batches if b.records != (b"three",)]
    assert QuorumStateStore(directory / "quorum-state").read() is not None

    third, leader = await run_node(directory, [])
    assert leader == LeaderAndEpoch(1, 3)
    assert third.values == [b"one", b"two", b"four"]
    offsets = [b.base_offset for b in third.batches]
    assert offsets == sorted(offsets) and offsets[0] == 0
    data = (directory / "00000000000000000000.log").read_bytes()
    epochs = [header.partition_leader_epoch for _, header in iter_headers(data, check=True)]
    assert epochs == sorted(epochs) and epochs[-1] == 3


async def test_garbage_after_the_last_batch_is_cut_too(tmp_path: Path) -> None:
    """Bytes that do not frame a valid batch (a half-written header) are recovered away."""
    directory = tmp_path / PARTITION_DIR
    await run_node(directory, [b"kept"])
    with open(directory / "00000000000000000000.log", "ab") as file:
        file.write(b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01\x00garbage")
    recorder, leader = await run_node(directory, [b"next"])
    assert leader == LeaderAndEpoch(1, 2)
    assert recorder.values == [b"kept", b"next"]
