"""RaftNode among three voters, its peers scripted through a fake transport: messages go out
only after their writes, answers come back to the connection that asked, and wait_committed
fails for the proposals of an epoch the node lost -- but not for those committed in it."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from pykraft.errors import InvalidConfig, NotLeaderError
from pykraft.raft.core import RaftConfig, RaftCore
from pykraft.raft.driver import RaftNode, SystemClock
from pykraft.raft.log_store import MemoryLogStore
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    InboundMessage,
    OutboundMessage,
    VoteRequest,
    VoteResponse,
)
from pykraft.raft.state import Leader, QuorumStateData, QuorumStateStore
from tests.unit.raft.raft_shell import Recorder

VOTERS = frozenset({1, 2, 3})
CONFIG = RaftConfig(append_linger_ms=1, election_timeout_ms=20, election_backoff_max_ms=20,
                    fetch_timeout_ms=200, request_timeout_ms=100, fetch_max_wait_ms=50)


class Peers:
    """Voters 2 and 3: grant every (pre-)vote, acknowledge BeginQuorumEpoch."""

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self.deliver: Callable[[InboundMessage], None] | None = None
        self.durable_when_sent: list[QuorumStateData | None] = []
        self.state_store: QuorumStateStore | None = None

    def connect(self, deliver: Callable[[InboundMessage], None]) -> None:
        self.deliver = deliver

    def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)
        if self.state_store is not None:
            self.durable_when_sent.append(self.state_store.read())
        body = message.body
        answer: VoteResponse | BeginQuorumEpochResponse | None = None
        if isinstance(body, VoteRequest):
            epoch = body.candidate_epoch - 1 if body.pre_vote else body.candidate_epoch
            answer = VoteResponse(ErrorCode.none, -1, epoch, True, body.candidate_epoch,
                                  pre_vote=body.pre_vote)
        elif isinstance(body, BeginQuorumEpochRequest):
            answer = BeginQuorumEpochResponse(ErrorCode.none, body.leader_id, body.leader_epoch)
        if answer is not None:
            assert self.deliver is not None
            asyncio.get_running_loop().call_soon(
                self.deliver, InboundMessage(message.destination_id, message.correlation_id,
                                             answer))

    async def flush(self, timeout_ms: int) -> None:
        return None

    async def close(self) -> None:
        return None


def make_node(tmp_path: Path, peers: Peers) -> tuple[RaftNode, Recorder]:
    clock = SystemClock()
    state_store = QuorumStateStore(tmp_path / "quorum-state")
    peers.state_store = state_store
    store = MemoryLogStore()
    core = RaftCore(1, VOTERS, store, QuorumStateData(), random.Random(3), clock.now_ms(),
                    config=CONFIG)
    node = RaftNode(core, store, state_store, clock=clock, transport=peers)
    recorder = Recorder()
    node.register_listener(recorder)
    return node, recorder


async def lead(node: RaftNode) -> int:
    await node.start()
    async with asyncio.timeout(5):
        while not isinstance(node.core.state, Leader):
            await asyncio.sleep(0.005)
    return node.core.state.epoch


async def ack(node: RaftNode, replica: int, epoch: int, offset: int) -> FetchResponse | None:
    """Replica `replica` fetches from `offset`: its acknowledgement of the log below."""
    answer = await asyncio.wait_for(
        node.handle_request(replica, FetchRequest(replica, epoch, offset, epoch)), 5)
    assert answer is None or isinstance(answer, FetchResponse)
    return answer


async def test_votes_go_out_only_once_durable_and_the_node_leads(tmp_path: Path) -> None:
    peers = Peers()
    node, _ = make_node(tmp_path, peers)
    try:
        epoch = await lead(node)
        votes = [(m, durable) for m, durable in zip(peers.sent, peers.durable_when_sent,
                                                     strict=True)
                 if isinstance(m.body, VoteRequest) and not m.body.pre_vote]
        assert votes and {m.destination_id for m, _ in votes} == {2, 3}
        for _, durable in votes:  # our vote for ourselves was on disk before we asked
            assert durable is not None and durable.voted_id == 1
            assert durable.leader_epoch == epoch
        async with asyncio.timeout(5):  # then the leadership, once it is durable too
            while not any(isinstance(m.body, BeginQuorumEpochRequest) for m in peers.sent):
                await asyncio.sleep(0.005)
        begin = next(i for i, m in enumerate(peers.sent)
                     if isinstance(m.body, BeginQuorumEpochRequest))
        durable = peers.durable_when_sent[begin]
        assert durable is not None and (durable.leader_id, durable.leader_epoch) == (1, epoch)
    finally:
        await node.stop(resign=False)


async def test_a_request_is_answered_with_the_cores_answer(tmp_path: Path) -> None:
    peers = Peers()
    node, _ = make_node(tmp_path, peers)
    try:
        epoch = await lead(node)
        stale = await node.handle_request(2, BeginQuorumEpochRequest(2, epoch - 1))
        assert stale == BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, 1, epoch)
        answer = await ack(node, 2, epoch, 0)
        assert answer is not None and answer.error == ErrorCode.none
        assert answer.leader_id == 1 and answer.records  # the log from the start
    finally:
        await node.stop(resign=False)


async def test_losing_the_epoch_fails_only_what_it_did_not_commit(tmp_path: Path) -> None:
    """Offsets committed while leading resolve; a proposal of the lost epoch beyond the
    high watermark fails with NotLeaderError, and so does waiting on it afterwards."""
    peers = Peers()
    node, recorder = make_node(tmp_path, peers)
    try:
        epoch = await lead(node)
        first = node.append([b"committed in time"])
        end = node.core.next_offset
        async with asyncio.timeout(5):
            while node.core.flushed_end_offset < end:
                await asyncio.sleep(0.005)
        await ack(node, 2, epoch, end)  # a majority has it: committed in our epoch
        await asyncio.wait_for(node.wait_committed(first), 5)
        second = node.append([b"never acknowledged"])
        waiting = asyncio.ensure_future(node.wait_committed(second))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        answer = await asyncio.wait_for(
            node.handle_request(3, BeginQuorumEpochRequest(3, epoch + 1)), 5)
        assert answer == BeginQuorumEpochResponse(ErrorCode.none, 3, epoch + 1)
        with pytest.raises(NotLeaderError):
            await asyncio.wait_for(waiting, 5)
        with pytest.raises(NotLeaderError):
            await asyncio.wait_for(node.wait_committed(second), 5)
        assert b"committed in time" in recorder.values
        assert b"never acknowledged" not in recorder.values
    finally:
        await node.stop(resign=False)


async def test_several_voters_need_a_transport(tmp_path: Path) -> None:
    store = MemoryLogStore()
    core = RaftCore(1, VOTERS, store, QuorumStateData(), random.Random(1), 0, config=CONFIG)
    with pytest.raises(InvalidConfig):
        RaftNode(core, store, None, clock=SystemClock())
    with pytest.raises(InvalidConfig):
        RaftNode.open(node_id=1, voters=VOTERS, log_dir=tmp_path / "log")


async def test_a_stall_of_its_own_loop_does_not_cost_a_leader_its_leadership(
        tmp_path: Path) -> None:
    """The event loop is held past the check-quorum timeout while a follower keeps
    fetching: its fetch, delivered once the loop runs again, is read before the leader
    judges whether a majority fetched -- the silence was the leader's own."""
    peers = Peers()
    node, _ = make_node(tmp_path, peers)
    try:
        epoch = await lead(node)
        stop = asyncio.Event()

        async def follower() -> None:
            offset = 0
            while not stop.is_set():
                for _ in range(2):  # as a connection's reader: a turn or two of the loop
                    await asyncio.sleep(0)
                answer = await ack(node, 2, epoch, offset)
                if answer is not None and answer.records:
                    offset = node.core.next_offset
                await asyncio.sleep(0.01)

        fetching = asyncio.ensure_future(follower())
        await asyncio.sleep(0.3)
        for _ in range(3):
            time.sleep(CONFIG.check_quorum_timeout_ms * 2 / 1000)  # the loop is held
            await asyncio.sleep(0.3)
            assert isinstance(node.core.state, Leader) and node.core.state.epoch == epoch
        stop.set()
        await fetching
    finally:
        await node.stop(resign=False)


class LeaderTwo:
    """Voter 2 leads epoch 1 with `log` (whole batches) committed: it answers node 1's
    fetches from it and grants no vote."""

    def __init__(self, log: bytes, end_offset: int) -> None:
        self.log, self.end_offset = log, end_offset
        self.deliver: Callable[[InboundMessage], None] | None = None

    def connect(self, deliver: Callable[[InboundMessage], None]) -> None:
        self.deliver = deliver

    def send(self, message: OutboundMessage) -> None:
        body = message.body
        if not isinstance(body, FetchRequest) or message.destination_id != 2:
            return
        records = self.log if body.fetch_offset == 0 else b""
        answer = FetchResponse(ErrorCode.none, 2, 1, self.end_offset, records=records)
        assert self.deliver is not None
        asyncio.get_running_loop().call_soon(
            self.deliver, InboundMessage(2, message.correlation_id, answer))

    async def flush(self, timeout_ms: int) -> None:
        return None

    async def close(self) -> None:
        return None


async def test_a_follower_delivers_a_backlog_of_commits_without_yielding_after_each(
        tmp_path: Path) -> None:
    """A follower with several Readies' worth of committed batches to deliver (each Ready at
    most apply_bytes_max) delivers them one after another, without handing the loop to
    other tasks between two (up to DELIVERY_TURN_S): a broker's metadata is not one
    batch per turn of a busy loop."""
    # the leader's log: its epoch's control batch, then six batches of ~40 KB each
    source = MemoryLogStore()
    writer = RaftNode(RaftCore(2, frozenset({2}), source, QuorumStateData(), random.Random(1),
                               SystemClock().now_ms(), config=CONFIG),
                      source, QuorumStateStore(tmp_path / "writer-state"), clock=SystemClock())
    await writer.start()
    async with asyncio.timeout(5):
        await writer.wait_leader()
    for index in range(6):
        await writer.wait_committed(writer.append([bytes([index]) * 40_000]))
    await writer.stop(resign=False)
    end = source.log_end_offset
    assert CONFIG.apply_bytes_max < 2 * 40_000  # one batch a Ready

    leader = LeaderTwo(source.read(0, 1 << 24), end)
    state_store = QuorumStateStore(tmp_path / "quorum-state")
    store = MemoryLogStore()
    core = RaftCore(1, VOTERS, store, QuorumStateData(), random.Random(3),
                    SystemClock().now_ms(), config=CONFIG)
    node = RaftNode(core, store, state_store, clock=SystemClock(), transport=leader)
    turns = 0
    seen_at: list[int] = []  # the loop turn each big batch was delivered in

    class Listener:
        def handle_commit(self, batch: Any) -> None:
            if any(len(record) == 40_000 for record in batch.records):
                seen_at.append(turns)

        def handle_leader_change(self, leader_id: int, epoch: int) -> None:
            pass

    node.register_listener(Listener())

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(count_turns())
    try:
        await node.start()
        await node.handle_request(2, BeginQuorumEpochRequest(2, 1))
        async with asyncio.timeout(5):
            while len(seen_at) < 6:
                await asyncio.sleep(0.001)
        assert not isinstance(node.core.state, Leader)
        assert len(set(seen_at)) < len(seen_at), seen_at  # some in one turn of the loop
    finally:
        counter.cancel()
        await node.stop(resign=False)
