"""RaftNode, the asyncio shell: election on start, commits, group commit, replay, failures."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from pykraft.errors import NotLeaderError
from pykraft.raft.core import RaftConfig, RaftCore
from pykraft.raft.driver import RaftNode, SystemClock
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.state import LeaderAndEpoch, QuorumStateData, QuorumStateStore
from pykraft.records.batch import read_header
from tests.unit.raft.raft_shell import Recorder

NODE_ID = 1


def make_node(
    store: MemoryLogStore, state_path: Path, recorder: Recorder, linger_ms: int = 5
) -> RaftNode:
    clock = SystemClock()
    state_store = QuorumStateStore(state_path)
    core = RaftCore(
        NODE_ID,
        frozenset({NODE_ID}),
        store,
        state_store.read() or QuorumStateData(),
        random.Random(1),
        clock.now_ms(),
        config=RaftConfig(append_linger_ms=linger_ms),
    )
    node = RaftNode(core, store, state_store, clock=clock)
    node.register_listener(recorder)
    return node


async def test_start_elects_the_node_and_appends_commit_in_order(tmp_path: Path) -> None:
    """After start the node leads epoch 1; appended records reach the listener, in order,
    before wait_committed returns."""
    store, recorder = MemoryLogStore(), Recorder()
    node = make_node(store, tmp_path / "quorum-state", recorder)
    with pytest.raises(NotLeaderError):
        node.append([b"too early"])
    assert not node.is_leader
    await node.start()
    assert await asyncio.wait_for(node.wait_leader(), 5) == LeaderAndEpoch(NODE_ID, 1)
    assert node.is_leader
    first = node.append([b"a", b"b"])
    second = node.append([b"c"])
    assert (first, second) == (2, 3)
    await asyncio.wait_for(node.wait_committed(second), 5)
    assert recorder.values == [b"a", b"b", b"c"]
    assert node.high_watermark == 4
    assert QuorumStateStore(tmp_path / "quorum-state").read() == QuorumStateData(
        leader_epoch=1, leader_id=NODE_ID, voted_id=-1, current_voters=frozenset({NODE_ID})
    )
    await node.stop()
    await node.stop()  # twice is harmless
    assert not node.is_leader
    with pytest.raises(NotLeaderError):
        node.append([b"too late"])


async def test_concurrent_appends_share_batches_and_fsyncs(tmp_path: Path) -> None:
    """Group commit: 200 proposals arriving together cost a handful of batches and fsyncs."""
    store, recorder = MemoryLogStore(), Recorder()
    node = make_node(store, tmp_path / "quorum-state", recorder, linger_ms=20)
    await node.start()
    await asyncio.wait_for(node.wait_leader(), 5)
    flushes_before = store.flush_count

    async def propose(index: int) -> int:
        offset = node.append([f"v{index}".encode()])
        await node.wait_committed(offset)
        return offset

    offsets = await asyncio.wait_for(asyncio.gather(*(propose(i) for i in range(200))), 10)
    assert offsets == list(range(1, 201))
    assert recorder.values == [f"v{i}".encode() for i in range(200)]
    data_batches = [read_header(batch) for batch in store.batches[1:]]
    assert len(data_batches) <= 3
    assert store.flush_count - flushes_before <= 3
    await node.stop()


async def test_restart_replays_the_committed_log_then_leads_a_new_epoch(tmp_path: Path) -> None:
    """The listener of a restarted node receives the same batches as before, in order, then
    the leadership of epoch 2."""
    store, first_run = MemoryLogStore(), Recorder()
    node = make_node(store, tmp_path / "quorum-state", first_run)
    await node.start()
    await node.wait_leader()
    for i in range(5):
        await node.wait_committed(node.append([f"r{i}".encode(), b"x"]))
    await node.stop()

    second_run = Recorder()
    node = make_node(store, tmp_path / "quorum-state", second_run)
    await node.start()
    assert await asyncio.wait_for(node.wait_leader(), 5) == LeaderAndEpoch(NODE_ID, 2)
    await node.wait_committed(node.append([b"after"]))
    replayed = second_run.batches
    assert replayed[: len(first_run.batches)] == first_run.batches
    leader_at = second_run.events.index(LeaderAndEpoch(NODE_ID, 2))
    assert second_run.events[1:leader_at] == first_run.batches
    assert second_run.values == first_run.values + [b"after"]
    await node.stop()


async def test_a_failing_listener_stops_the_node_and_its_waiters(tmp_path: Path) -> None:
    """The image can no longer follow the log: waiters fail and appends are refused."""
    store, recorder = MemoryLogStore(), Recorder(fail_on=b"poison")
    node = make_node(store, tmp_path / "quorum-state", recorder)
    await node.start()
    await node.wait_leader()
    offset = node.append([b"poison"])
    with pytest.raises(RuntimeError, match="listener failure"):
        await asyncio.wait_for(node.wait_committed(offset), 5)
    with pytest.raises(NotLeaderError):
        node.append([b"more"])
    await node.stop()


async def test_stop_fails_pending_waiters(tmp_path: Path) -> None:
    """A commit that can no longer be awaited ends in NotLeaderError, not a hang."""
    store, recorder = MemoryLogStore(), Recorder()
    node = make_node(store, tmp_path / "quorum-state", recorder, linger_ms=10_000)
    await node.start()
    await node.wait_leader()
    waiter = asyncio.ensure_future(node.wait_committed(node.append([b"never flushed"])))
    await asyncio.sleep(0.01)
    await node.stop()
    with pytest.raises(NotLeaderError):
        await waiter
