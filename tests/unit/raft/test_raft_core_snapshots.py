"""RaftCore with snapshots (KIP-630), message by message: a fetch below the leader's log
start gets its snapshot id, FetchSnapshot serves chunks and its errors, a follower pulls a
snapshot chunk by chunk and installs it, a restart loads the latest snapshot first, and the
shell's snapshot API checks what it is given."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from pykraft.errors import InvariantViolation
from pykraft.raft.core import CommittedBatch, RaftConfig, RaftCore
from pykraft.raft.log_store import MemoryLogStore, SnapshotWriter
from pykraft.raft.messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    InboundMessage,
    OutboundMessage,
    RaftMessage,
    SnapshotId,
)
from pykraft.raft.snapshot import build_snapshot
from pykraft.raft.state import Leader, QuorumStateData
from pykraft.records.record import build_batch

TRIO = frozenset({1, 2, 3})
OBSERVER = 5
CONFIG = RaftConfig(election_timeout_ms=100, fetch_timeout_ms=200, request_timeout_ms=100,
                    fetch_max_wait_ms=50, fetch_snapshot_bytes_max=100)


class Node:
    """One core over a MemoryLogStore; the shell's steps, snapshots included, done at once."""

    def __init__(self, node_id: int, voters: frozenset[int], store: MemoryLogStore,
                 persisted: QuorumStateData) -> None:
        self.store = store
        self.persisted = persisted
        self.core = RaftCore(node_id, voters, store, persisted, random.Random(node_id), 0,
                             config=CONFIG)
        self.writer: SnapshotWriter | None = None
        self.loaded: list[SnapshotId] = []
        self.committed: list[CommittedBatch] = []

    def turn(self) -> list[OutboundMessage]:
        ready = self.core.ready()
        if ready.quorum_state is not None:
            self.persisted = ready.quorum_state
        chunk = ready.snapshot_chunk
        if chunk is not None:
            if chunk.position == 0:
                self.writer = self.store.create_snapshot(chunk.snapshot_id)
            assert self.writer is not None and self.writer.size_bytes == chunk.position
            self.writer.append(chunk.data)
            if chunk.is_last:
                self.writer.freeze()
        if ready.install_snapshot is not None:
            self.store.install_snapshot(ready.install_snapshot)
        if ready.delete_before is not None:
            self.store.delete_before(ready.delete_before)
        if ready.truncate_to is not None:
            self.store.truncate_to(ready.truncate_to)
        for batch in ready.batches:
            self.store.append(batch)
        self.store.flush()
        if ready.load_snapshot is not None:
            self.loaded.append(ready.load_snapshot)
        self.committed.extend(ready.committed)
        self.core.advance(ready)
        self.core.flushed(self.store.flushed_offset)
        return list(ready.messages)

    def settle(self) -> None:
        for _ in range(10):
            self.turn()

    def receive(self, source: int, body: RaftMessage,
                correlation_id: int = 1) -> list[OutboundMessage]:
        self.core.step(InboundMessage(source, correlation_id, body), 0)
        return self.turn()

    def take_snapshot(self, end_offset: int) -> SnapshotId:
        snapshot_id = self.core.snapshot_id_at(end_offset)
        write(self.store, snapshot_id, b"state at %d" % end_offset)
        return snapshot_id


def write(store: MemoryLogStore, snapshot_id: SnapshotId, *values: bytes) -> bytes:
    data = b"".join(build_snapshot(snapshot_id, values, last_contained_log_timestamp=0,
                                   timestamp_ms=0))
    writer = store.create_snapshot(snapshot_id)
    writer.append(data)
    writer.freeze()
    return data


def log_of(*epochs: int) -> MemoryLogStore:
    """A log with one single-record batch per given epoch, at offsets 0, 1, ..."""
    store = MemoryLogStore()
    for offset, epoch in enumerate(epochs):
        store.append(build_batch([(None, b"e%d" % epoch, (), 0)], base_offset=offset,
                                 partition_leader_epoch=epoch))
    store.flush()
    return store


def leader_with_snapshot() -> tuple[Node, SnapshotId]:
    """A single voter over the log [1, 1, 2, 2]: it leads epoch 3 (LeaderChange at offset 4),
    snapshots at offset 4 (epoch 2) and deletes the log below."""
    leader = Node(1, frozenset({1}), log_of(1, 1, 2, 2), QuorumStateData(leader_epoch=2))
    leader.settle()
    assert isinstance(leader.core.state, Leader) and leader.core.applied_offset == 5
    snapshot_id = leader.take_snapshot(4)
    assert snapshot_id == SnapshotId(4, 2)
    leader.core.delete_before(snapshot_id)
    assert leader.core.ready().delete_before == snapshot_id
    leader.turn()
    assert (leader.store.log_start_offset, leader.core.log_start_offset) == (4, 4)
    return leader, snapshot_id


def fetch(node: Node, fetch_offset: int, last_fetched_epoch: int) -> FetchResponse:
    (answer,) = node.receive(OBSERVER, FetchRequest(OBSERVER, 3, fetch_offset,
                                                    last_fetched_epoch))
    assert isinstance(answer.body, FetchResponse)
    return answer.body


def test_a_fetch_below_the_log_start_or_diverging_below_it_gets_the_snapshot_id() -> None:
    leader, snapshot_id = leader_with_snapshot()
    below = fetch(leader, 0, 0)
    assert below.snapshot_id == snapshot_id and below.records == b""
    assert below.log_start_offset == 4
    matching = fetch(leader, 4, 2)  # the snapshot's own end and epoch: the log follows
    assert matching.snapshot_id is None and matching.records
    assert fetch(leader, 4, 1).snapshot_id == snapshot_id  # diverges at offset 3
    assert fetch(leader, 5, 1).snapshot_id == snapshot_id  # epoch 1 is below the log
    assert fetch(leader, 5, 3).snapshot_id is None  # caught up


def test_fetch_snapshot_serves_chunks_and_reports_errors() -> None:
    leader, snapshot_id = leader_with_snapshot()
    data = leader.store.read_snapshot(snapshot_id, 0, 1 << 20)

    def ask(request: FetchSnapshotRequest) -> FetchSnapshotResponse:
        (answer,) = leader.receive(OBSERVER, request)
        assert isinstance(answer.body, FetchSnapshotResponse)
        return answer.body

    first = ask(FetchSnapshotRequest(OBSERVER, 3, snapshot_id, position=0, max_bytes=10))
    assert (first.error, first.size, first.position) == (ErrorCode.none, len(data), 0)
    assert first.unaligned_records == data[:10]
    rest = ask(FetchSnapshotRequest(OBSERVER, 3, snapshot_id, position=10))
    assert rest.unaligned_records == data[10:110]  # capped by fetch_snapshot_bytes_max
    past = ask(FetchSnapshotRequest(OBSERVER, 3, snapshot_id, position=len(data)))
    assert past.error == ErrorCode.position_out_of_range
    unknown = ask(FetchSnapshotRequest(OBSERVER, 3, SnapshotId(4, 1), position=0))
    assert unknown.error == ErrorCode.snapshot_not_found
    stale = ask(FetchSnapshotRequest(OBSERVER, 2, snapshot_id, position=0))
    assert stale.error == ErrorCode.fenced_leader_epoch and stale.leader_epoch == 3
    forged = ask(FetchSnapshotRequest(7, 3, snapshot_id, position=0))
    assert forged.error == ErrorCode.invalid_request


def test_a_follower_pulls_the_snapshot_in_chunks_and_installs_it() -> None:
    """An empty follower is sent the snapshot id; it asks for the snapshot chunk by chunk,
    each written before the next is asked for; the last one installs the snapshot, loads it
    into the state machine and raises the high watermark to its end; then it fetches on
    from the snapshot's end and epoch."""
    source, snapshot_id = leader_with_snapshot()
    data = source.store.read_snapshot(snapshot_id, 0, 1 << 20)
    follower = Node(1, TRIO, log_of(1), QuorumStateData(leader_epoch=3, leader_id=2))
    follower.core.tick(0)
    (first_fetch,) = follower.turn()
    assert first_fetch.body == FetchRequest(1, 3, fetch_offset=1, last_fetched_epoch=1)
    answer = FetchResponse(ErrorCode.none, 2, 3, 5, snapshot_id=snapshot_id)
    (request,) = follower.receive(2, answer, first_fetch.correlation_id)
    assert request.body == FetchSnapshotRequest(1, 3, snapshot_id, position=0, max_bytes=100)
    position = 0
    while True:
        chunk = data[position : position + 100]
        response = FetchSnapshotResponse(ErrorCode.none, 2, 3, snapshot_id, size=len(data),
                                         position=position, unaligned_records=chunk)
        follower.core.step(InboundMessage(2, request.correlation_id, response), 0)
        ready = follower.core.ready()
        assert ready.snapshot_chunk is not None and ready.snapshot_chunk.data == chunk
        position += len(chunk)
        if position == len(data):
            assert ready.install_snapshot == ready.load_snapshot == snapshot_id
            assert ready.committed == ()
            break
        assert ready.install_snapshot is None and ready.messages == ()  # written first
        follower.turn()
        (request,) = follower.turn()
        assert request.body == FetchSnapshotRequest(1, 3, snapshot_id, position=position,
                                                    max_bytes=100)
    follower.turn()
    assert follower.loaded == [snapshot_id]
    assert follower.store.read_snapshot(snapshot_id, 0, 1 << 20) == data
    assert (follower.store.log_start_offset, follower.store.log_end_offset) == (4, 4)
    assert follower.core.high_watermark == 4 and follower.core.applied_offset == 4
    (next_fetch,) = follower.turn()
    assert next_fetch.body == FetchRequest(1, 3, fetch_offset=4, last_fetched_epoch=2,
                                           high_watermark=4)


def test_a_snapshot_gone_at_the_leader_sends_the_follower_back_to_fetch() -> None:
    follower = Node(1, TRIO, MemoryLogStore(), QuorumStateData(leader_epoch=3, leader_id=2))
    follower.core.tick(0)
    (first_fetch,) = follower.turn()
    old = SnapshotId(4, 2)
    (request,) = follower.receive(2, FetchResponse(ErrorCode.none, 2, 3, 5, snapshot_id=old),
                                  first_fetch.correlation_id)
    assert isinstance(request.body, FetchSnapshotRequest)
    gone = FetchSnapshotResponse(ErrorCode.snapshot_not_found, 2, 3, old)
    (again,) = follower.receive(2, gone, request.correlation_id)
    assert again.body == FetchRequest(1, 3, fetch_offset=0, last_fetched_epoch=0)
    assert follower.core.fetching_snapshot is None


def test_a_chunk_that_does_not_fit_starts_the_snapshot_over() -> None:
    follower = Node(1, TRIO, MemoryLogStore(), QuorumStateData(leader_epoch=3, leader_id=2))
    follower.core.tick(0)
    (first_fetch,) = follower.turn()
    snapshot_id = SnapshotId(4, 2)
    (request,) = follower.receive(
        2, FetchResponse(ErrorCode.none, 2, 3, 5, snapshot_id=snapshot_id),
        first_fetch.correlation_id)
    wrong = FetchSnapshotResponse(ErrorCode.none, 2, 3, snapshot_id, size=50, position=10,
                                  unaligned_records=b"x" * 10)
    (again,) = follower.receive(2, wrong, request.correlation_id)
    assert isinstance(again.body, FetchRequest)
    assert follower.core.ready().snapshot_chunk is None


def test_a_restart_loads_the_latest_snapshot_then_delivers_the_log_after_it() -> None:
    store = log_of(1, 1, 2, 2)
    write(store, SnapshotId(2, 1), b"old")
    write(store, SnapshotId(3, 2), b"latest")
    node = Node(1, frozenset({1}), store, QuorumStateData(leader_epoch=2))
    ready = node.core.ready()
    assert ready.load_snapshot == SnapshotId(3, 2) and ready.committed == ()
    node.settle()
    assert node.loaded == [SnapshotId(3, 2)]
    assert [batch.base_offset for batch in node.committed] == [3, 4]  # then LeaderChange


def test_a_restart_after_prefix_deletion_starts_at_the_snapshot() -> None:
    store = log_of(1, 1, 2, 2)
    write(store, SnapshotId(2, 1), b"state")
    store.delete_before(SnapshotId(2, 1))
    node = Node(1, TRIO, store, QuorumStateData(leader_epoch=2))
    assert node.core.end_offset_for_epoch(1) == (1, 2)
    assert node.core.end_offset_for_epoch(2) == (2, 4)
    assert node.core.end_offset_for_epoch(0) == (0, 2)
    assert node.core.log_start_offset == 2


def test_the_snapshot_api_checks_its_offsets() -> None:
    """Only an applied offset at or above the log start is snapshotted, with the epoch of
    the entry below it; deleting below a snapshot not of this log is a bug."""
    leader, snapshot_id = leader_with_snapshot()
    assert leader.core.snapshot_id_at(5) == SnapshotId(5, 3)
    assert leader.core.snapshot_id_at(4) == snapshot_id
    for bad in (0, 3, 6):
        with pytest.raises(InvariantViolation):
            leader.core.snapshot_id_at(bad)
    write(leader.store, SnapshotId(5, 2), b"wrong epoch")
    with pytest.raises(InvariantViolation):
        leader.core.delete_before(SnapshotId(5, 2))
    with pytest.raises(InvariantViolation):
        leader.core.delete_before(SnapshotId(5, 3))  # not written
