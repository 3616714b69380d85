"""Raft nodes over real TCP: each RaftNode runs on its own asyncio loop in its own thread,
serves the quorum's RPCs on a real listener on 127.0.0.1 and keeps its log and quorum-state
on disk; the nodes elect one leader, replicate identical logs, fail over, catch up after a
restart, follow as observers, and refuse another cluster."""

from __future__ import annotations

import asyncio
import dataclasses
import filecmp
import random
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from pykraft.errors import NotLeaderError
from pykraft.net.server import Listener
from pykraft.raft import codec
from pykraft.raft.core import CommittedBatch, RaftConfig
from pykraft.raft.driver import RaftNode
from pykraft.raft.log_store import RaftLogView
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    SnapshotId,
    VoteRequest,
)
from pykraft.raft.network import RaftApis, RaftChannels, RaftDispatcher
from pykraft.raft.snapshot import snapshot_values
from pykraft.raft.state import Leader
from pykraft.testing.ports import free_ports
from pykraft.testing.wire import WireClient
from tests.integration import waits

T = TypeVar("T")

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
CONFIG = RaftConfig(
    append_linger_ms=2,
    election_timeout_ms=150,
    election_backoff_max_ms=150,
    fetch_timeout_ms=400,
    request_timeout_ms=300,
    fetch_max_wait_ms=100,
    retry_backoff_ms=20,
)
WAIT_S = 15.0


class Collector:
    """A RaftListener that keeps what was committed (read from the test thread)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, tuple[bytes, ...]]] = []
        self.leaders: list[tuple[int, int]] = []
        self.snapshots: list[tuple[SnapshotId, list[bytes]]] = []

    def handle_load_snapshot(self, snapshot_id: SnapshotId, snapshot: RaftLogView) -> None:
        size = snapshot.snapshot_size(snapshot_id)
        assert size is not None
        data = snapshot.read_snapshot(snapshot_id, 0, size)
        self.snapshots.append((snapshot_id, list(snapshot_values([data]))))
        self.batches = []  # the snapshot replaces everything before its end

    def handle_commit(self, batch: CommittedBatch) -> None:
        self.batches.append((batch.base_offset, batch.epoch, batch.records))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))

    @property
    def values(self) -> list[bytes]:
        return [value for _, _, records in self.batches for value in records]


class NodeThread:
    """One node: its loop, its listener, its RaftNode; driven from the test thread."""

    def __init__(self, node_id: int, addresses: dict[int, tuple[str, int]], port: int,
                 log_dir: Path, *, cluster_id: str = CLUSTER,
                 voters: frozenset[int] | None = None, config: RaftConfig = CONFIG) -> None:
        self.node_id = node_id
        self.addresses = addresses
        self.port = port
        self.log_dir = log_dir
        self.cluster_id = cluster_id
        self.voters = voters if voters is not None else frozenset(addresses)
        self.config = config
        self.collector = Collector()
        self.loop = asyncio.new_event_loop()
        self.node: RaftNode | None = None
        self.listener: Listener | None = None
        self.fatal: list[BaseException] = []
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name=f"raft-node-{node_id}")

    def start(self) -> NodeThread:
        self.thread.start()
        self.call(self._start)
        return self

    async def _start(self) -> None:
        channels = RaftChannels.for_voters(self.node_id, self.cluster_id, self.addresses,
                                           self.config)
        self.node = RaftNode.open(
            node_id=self.node_id, voters=self.voters, log_dir=self.log_dir,
            listener=self.collector, config=self.config, rng=random.Random(self.node_id),
            transport=channels,
        )
        self.listener = Listener(
            "CONTROLLER", "127.0.0.1", self.port,
            RaftDispatcher(RaftApis(self.node, self.cluster_id)),
            request_bytes_max=100 * 1024 * 1024, on_fatal=self.fatal.append,
        )
        await self.listener.start()
        await self.node.start()

    def call(self, make: Callable[[], Coroutine[Any, Any, T]], timeout_s: float = WAIT_S) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(make(), self.loop)
        return future.result(timeout_s)

    def stop(self, *, resign: bool = True) -> None:
        """Stop the node; without `resign` a leader just goes away, as if it crashed."""
        if not self.thread.is_alive():
            return
        self.call(lambda: self._stop(resign))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()
        assert not self.fatal

    def restart_listener(self) -> None:
        """Close the node's listener (every connection to it drops) and listen again at
        once: the node itself runs on."""
        async def again() -> None:
            assert self.listener is not None and self.node is not None
            await self.listener.close()
            self.listener = Listener(
                "CONTROLLER", "127.0.0.1", self.port,
                RaftDispatcher(RaftApis(self.node, self.cluster_id)),
                request_bytes_max=100 * 1024 * 1024, on_fatal=self.fatal.append,
            )
            await self.listener.start()
        self.call(again)

    async def _stop(self, resign: bool) -> None:
        if self.node is not None:
            await self.node.stop(resign=resign)
        if self.listener is not None:
            await self.listener.close()
        # a connection accepted while the listener closed may still have its task: end it
        # here, not by closing the loop under it
        current = asyncio.current_task()
        rest = [task for task in asyncio.all_tasks() if task is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    # views, read on the node's loop ---------------------------------------------------------

    def view(self) -> tuple[bool, int, int, int]:
        """(leads and announced it, leader id, epoch, applied offset)"""
        async def look() -> tuple[bool, int, int, int]:
            assert self.node is not None
            leader = self.node.leader_and_epoch
            return (self.node.is_leader, leader.leader_id, leader.epoch,
                    self.node.core.applied_offset)
        return self.call(look)

    def propose(self, values: list[bytes]) -> int:
        """Append `values` as one batch on this node and wait until committed."""
        async def go() -> int:
            assert self.node is not None
            offset = self.node.append(values)
            await self.node.wait_committed(offset)
            return offset
        return self.call(go)


def wait_for(predicate: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    return waits.wait_for(predicate, what, timeout_s, interval_s=0.02)


def single_leader(nodes: list[NodeThread]) -> NodeThread | None:
    """The one node that leads, once every other live node follows it in its epoch."""
    views = {node.node_id: node.view() for node in nodes}
    leaders = [node for node in nodes if views[node.node_id][0]]
    if len(leaders) != 1:
        return None
    _, leader_id, epoch, _ = views[leaders[0].node_id]
    if all(view[1:3] == (leader_id, epoch) for view in views.values()):
        return leaders[0]
    return None


def caught_up(nodes: list[NodeThread], offset: int) -> bool:
    return all(node.view()[3] > offset for node in nodes)


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    started: list[NodeThread] = []

    def make(count: int, *, cluster_ids: dict[int, str] | None = None,
             observers: int = 0, config: RaftConfig = CONFIG) -> list[NodeThread]:
        ports = free_ports(count + observers)
        voters = {i + 1: ("127.0.0.1", ports[i]) for i in range(count)}
        nodes = []
        for index, port in enumerate(ports):
            node_id = index + 1
            node = NodeThread(
                node_id, voters, port, tmp_path / f"node-{node_id}" / "__cluster_metadata-0",
                cluster_id=(cluster_ids or {}).get(node_id, CLUSTER),
                voters=frozenset(voters), config=config,
            )
            nodes.append(node)
        for node in nodes:
            started.append(node.start())
        return nodes

    yield make, started
    for node in started:
        node.stop(resign=False)


def restart(node: NodeThread, started: list[NodeThread]) -> NodeThread:
    fresh = NodeThread(node.node_id, node.addresses, node.port, node.log_dir,
                       cluster_id=node.cluster_id, voters=node.voters, config=node.config)
    started.append(fresh.start())
    return fresh


def test_three_voters_elect_one_leader_and_replicate_identical_logs(cluster: Any) -> None:
    """Exactly one leader; what it commits reaches all three listeners in the same order and
    the three metadata logs on disk end byte for byte identical."""
    make, _ = cluster
    nodes = make(3)
    leader = wait_for(lambda: single_leader(nodes), "one leader followed by all")
    offsets = [leader.propose([f"record-{i}".encode(), b"x" * i]) for i in range(20)]
    assert offsets == sorted(offsets)
    wait_for(lambda: caught_up(nodes, offsets[-1]), "every node to apply the last record")
    expected = [value for i in range(20) for value in (f"record-{i}".encode(), b"x" * i)]
    for node in nodes:
        assert node.collector.values == expected
    assert len({tuple(node.collector.batches) for node in nodes}) == 1
    for node in sorted(nodes, key=lambda node: node is leader):  # the leader last, no handover
        node.stop(resign=False)
    segments = [sorted(node.log_dir.glob("*.log")) for node in nodes]
    assert [p.name for p in segments[0]] == [p.name for p in segments[1]] == \
        [p.name for p in segments[2]]
    for other in segments[1:]:
        for left, right in zip(segments[0], other, strict=True):
            assert filecmp.cmp(left, right, shallow=False)


def test_every_node_waits_until_caught_up_with_whoever_leads(cluster: Any) -> None:
    """wait_answered and wait_caught_up return on the leader, an observer, and a follower
    restarted behind the log -- the latter only once it applied what was committed before
    it started."""
    make, started = cluster
    nodes = make(3, observers=1)
    leader = wait_for(lambda: single_leader(nodes[:3]), "a leader")
    behind = next(node for node in nodes[:3] if node is not leader)
    behind.stop()
    offset = max(leader.propose([f"record-{i}".encode()]) for i in range(30))
    behind = restart(behind, started)
    for node in (leader, behind, nodes[3]):
        async def wait(node: NodeThread = node) -> tuple[int, int]:
            assert node.node is not None
            await node.node.wait_answered()  # a broker's bounded start-up step: done first
            leader_and_epoch = await node.node.wait_caught_up()
            return leader_and_epoch.leader_id, node.node.core.applied_offset
        leader_id, applied = node.call(wait)
        assert leader_id == leader.node_id
        if node is behind:
            assert applied > offset


def test_a_new_leader_takes_over_and_a_restarted_node_catches_up(cluster: Any) -> None:
    """Stop the leader: the other two elect one of themselves in a later epoch and commit;
    the old leader, restarted on its log, follows and catches up with every record."""
    make, started = cluster
    nodes = make(3)
    first = wait_for(lambda: single_leader(nodes), "a first leader")
    before = first.propose([b"before failover"])
    wait_for(lambda: caught_up(nodes, before), "replication before the failover")
    first_epoch = first.view()[2]
    first.stop(resign=False)
    survivors = [node for node in nodes if node is not first]
    second = wait_for(lambda: single_leader(survivors), "a second leader")
    assert second.view()[2] > first_epoch
    after = second.propose([b"after failover"])
    assert after > before
    wait_for(lambda: caught_up(survivors, after), "the survivors to apply")
    back = restart(first, started)
    everyone = [*survivors, back]
    wait_for(lambda: caught_up(everyone, after), "the restarted node to catch up")
    wait_for(lambda: single_leader(everyone) is second, "the restarted node to follow")
    assert b"before failover" in back.collector.values
    assert b"after failover" in back.collector.values
    assert back.collector.values == second.collector.values


def test_a_crashed_leader_is_replaced_long_before_the_fetch_timeout(cluster: Any) -> None:
    """The leader goes away without resigning (its connections reset, its port refusing):
    the followers hear it from their transport and elect a new leader within a second,
    although controller.quorum.fetch.timeout.ms is 10 s."""
    make, _ = cluster
    slow_fetch_timeout = dataclasses.replace(CONFIG, fetch_timeout_ms=10_000)
    nodes = make(3, config=slow_fetch_timeout)
    first = wait_for(lambda: single_leader(nodes), "a first leader")
    first.propose([b"before the crash"])
    crashed_at = time.monotonic()
    first.stop(resign=False)
    survivors = [node for node in nodes if node is not first]
    second = wait_for(lambda: single_leader(survivors), "a second leader")
    assert time.monotonic() - crashed_at < 2.0
    assert second.propose([b"after the crash"]) > 0


def test_a_leader_that_only_restarts_its_listener_keeps_leading(cluster: Any) -> None:
    """Flapping: the leader's connections drop and its port is back at once. The followers'
    fetches fail once, the retry gets through, and nobody runs for election."""
    make, _ = cluster
    nodes = make(3, config=dataclasses.replace(CONFIG, fetch_timeout_ms=10_000))
    leader = wait_for(lambda: single_leader(nodes), "a leader")
    epoch = leader.view()[2]
    for _ in range(3):
        leader.restart_listener()
        time.sleep(0.3)
    offset = leader.propose([b"after the flapping"])
    wait_for(lambda: caught_up(nodes, offset), "every node to apply")
    assert single_leader(nodes) is leader and leader.view()[2] == epoch


def test_an_observer_replicates_without_voting(cluster: Any) -> None:
    """A node outside the voter set fetches the committed log from the leader."""
    make, _ = cluster
    nodes = make(3, observers=1)
    voters, observer = nodes[:3], nodes[3]
    leader = wait_for(lambda: single_leader(voters), "a leader")
    offset = leader.propose([b"seen by the observer"])
    wait_for(lambda: caught_up([observer], offset), "the observer to apply")
    assert observer.collector.values == leader.collector.values
    assert not observer.view()[0]
    assert observer.view()[1] == leader.node_id


def test_a_node_of_another_cluster_is_refused(cluster: Any) -> None:
    """Voter 3 was formatted for another cluster: 1 and 2 refuse it and it refuses them, so
    it never learns the leader nor the log, and the quorum of two goes on without it."""
    make, _ = cluster
    nodes = make(3, cluster_ids={3: "another-cluster-id-0000"})
    good, stranger = nodes[:2], nodes[2]
    leader = wait_for(lambda: single_leader(good), "a leader among the two of one cluster")
    offset = leader.propose([b"not for the stranger"])
    wait_for(lambda: caught_up(good, offset), "the two to apply")
    time.sleep(0.3)
    assert stranger.view()[1] != leader.node_id
    assert stranger.collector.values == []
    with WireClient(f"127.0.0.1:{leader.port}") as client:
        vote = VoteRequest(candidate_epoch=99, candidate_id=3, last_offset_epoch=98,
                           last_offset=10**6)
        api_key, version, entity = codec.encode_request(
            vote, cluster_id=stranger.cluster_id, destination_id=leader.node_id)
        answer = client.request(api_key, version, entity)
    assert answer.error_code == ErrorCode.inconsistent_cluster_id
    assert single_leader(good) is leader  # the stranger's vote changed nothing
    assert leader.view()[2] < 99


def test_wait_committed_fails_when_the_leader_loses_its_quorum(cluster: Any) -> None:
    """With both followers gone the leader cannot commit: once check-quorum makes it resign,
    a proposal of its epoch fails with NotLeaderError instead of waiting for ever."""
    make, _ = cluster
    nodes = make(3)
    leader = wait_for(lambda: single_leader(nodes), "a leader")
    for node in nodes:
        if node is not leader:
            node.stop(resign=False)
    started_at = time.monotonic()
    with pytest.raises(NotLeaderError):
        leader.propose([b"never committed"])
    assert time.monotonic() - started_at < 5
    assert not isinstance(leader.node.core.state if leader.node else None, Leader)


def test_malformed_and_stale_requests_leave_the_quorum_alone(cluster: Any) -> None:
    """Requests from outsiders, of stale epochs, for other partitions, with impossible values
    or garbled bytes get Kafka's errors (or a closed connection) and change nothing: same
    leader, same epoch, same quorum-state files, and the quorum still commits."""
    make, started = cluster
    nodes = make(3)
    leader = wait_for(lambda: single_leader(nodes), "a leader")
    leader.stop(resign=False)  # a failover, so that there is an older epoch to be stale in
    nodes = [node for node in nodes if node is not leader]
    leader = wait_for(lambda: single_leader(nodes), "a second leader")
    nodes.append(restart(next(n for n in started if not n.thread.is_alive()), started))
    first = leader.propose([b"first"])
    wait_for(lambda: caught_up(nodes, first), "replication")
    wait_for(lambda: single_leader(nodes) is leader, "all three to follow")
    follower = next(node for node in nodes if node is not leader)
    other_voter = next(node for node in nodes if node not in (leader, follower))
    _, leader_id, epoch, _ = follower.view()
    states = {node.node_id: (node.log_dir / "quorum-state").read_bytes() for node in nodes}

    def ask(node: NodeThread, body: Any, **change: Any) -> Any:
        api_key, version, entity = codec.encode_request(
            body, cluster_id=CLUSTER, destination_id=node.node_id)
        if change:
            entity = change["edit"](entity)
        with WireClient(f"127.0.0.1:{node.port}") as client:
            return client.request(api_key, version, entity)

    def partition_error(answer: Any) -> ErrorCode:
        topics = getattr(answer, "responses", None) or answer.topics
        return ErrorCode(topics[0].partitions[0].error_code)

    assert partition_error(ask(follower, BeginQuorumEpochRequest(leader_id, epoch - 1))) == \
        ErrorCode.fenced_leader_epoch
    assert epoch >= 2
    assert partition_error(ask(follower, VoteRequest(epoch - 1, other_voter.node_id, 0, 0))) \
        == ErrorCode.fenced_leader_epoch
    assert partition_error(ask(leader, FetchRequest(other_voter.node_id, epoch - 1, 0, 0))) \
        == ErrorCode.fenced_leader_epoch
    for outsider in (BeginQuorumEpochRequest(9, epoch + 5), VoteRequest(epoch + 5, 7, 0, 0),
                     EndQuorumEpochRequest(8, epoch + 5, ())):
        assert partition_error(ask(follower, outsider)) == ErrorCode.inconsistent_voter_set
    assert partition_error(ask(follower, VoteRequest(epoch + 5, other_voter.node_id,
                                                     epoch + 5, 0))) == ErrorCode.invalid_request
    elsewhere = ask(leader, FetchRequest(other_voter.node_id, epoch, 0, 0), edit=lambda e:
                    dataclasses.replace(e, topics=(dataclasses.replace(
                        e.topics[0], topic_id=uuid.uuid4()),)))
    assert elsewhere.error_code == ErrorCode.invalid_request
    with WireClient(f"127.0.0.1:{follower.port}") as client:
        client.send_raw(b"\x00\x00\x00\x0c" + b"\x00\x34\x00\x07garbage!")
        assert client.is_closed_by_peer()
    for node in nodes:
        assert node.view()[1:3] == (leader_id, epoch)
        assert (node.log_dir / "quorum-state").read_bytes() == states[node.node_id]
    second = leader.propose([b"second"])
    wait_for(lambda: caught_up(nodes, second), "replication after the noise")


def test_a_leader_stopping_gracefully_hands_over_at_once(cluster: Any) -> None:
    """At shutdown the leader resigns (EndQuorumEpoch naming its successors): a survivor
    leads long before the followers' fetch.timeout.ms (3 s here) could have expired."""
    make, _ = cluster
    slow_to_notice = dataclasses.replace(CONFIG, fetch_timeout_ms=3_000)
    nodes = make(3, config=slow_to_notice)
    leader = wait_for(lambda: single_leader(nodes), "a leader")
    offset = leader.propose([b"before the handover"])
    wait_for(lambda: caught_up(nodes, offset), "replication")
    epoch = leader.view()[2]
    survivors = [node for node in nodes if node is not leader]
    started_at = time.monotonic()
    leader.stop()
    second = wait_for(lambda: single_leader(survivors), "a successor")
    assert time.monotonic() - started_at < 1.5
    assert second.view()[2] > epoch
    assert second.propose([b"after the handover"]) > offset


def test_a_wiped_voter_catches_up_through_fetch_snapshot(cluster: Any) -> None:
    """The leader snapshots its state machine and deletes the log below; a voter whose
    data dir was wiped fetches the snapshot over the wire (FetchSnapshot, in chunks),
    installs and loads it, then fetches the log from the snapshot's end."""
    make, started = cluster
    chunked = dataclasses.replace(CONFIG, fetch_snapshot_bytes_max=256 * 1024)
    nodes = make(3, config=chunked)
    leader = wait_for(lambda: single_leader(nodes), "a leader")
    offset = max(leader.propose([f"record-{i}".encode()]) for i in range(40))
    wait_for(lambda: caught_up(nodes, offset), "replication")
    image = [b"the state machine after the first records %d " % i * 1000 for i in range(60)]

    async def snapshot() -> tuple[SnapshotId, int]:  # about 2.5 MiB: several chunks
        assert leader.node is not None
        snapshot_id = await leader.node.write_snapshot(
            offset + 1, image, last_contained_log_timestamp=0)
        leader.node.delete_before(snapshot_id)
        return snapshot_id, leader.node.core.applied_offset
    snapshot_id, _ = leader.call(snapshot)
    assert snapshot_id.end_offset == offset + 1
    wait_for(lambda: leader.call(_log_start(leader)) == offset + 1, "the leader's log start")
    wiped = next(node for node in nodes if node is not leader)
    wiped.stop(resign=False)
    shutil.rmtree(wiped.log_dir)
    wiped = restart(wiped, started)
    later = leader.propose([b"after the snapshot"])
    wait_for(lambda: caught_up([wiped], later), "the wiped voter to catch up")
    assert wiped.collector.snapshots == [(snapshot_id, image)]
    size = leader.call(_snapshot_size(leader, snapshot_id))
    assert size > 4 * chunked.fetch_snapshot_bytes_max  # it came in several chunks
    assert wiped.collector.values == [b"after the snapshot"]
    assert wiped.call(_log_start(wiped)) == offset + 1


def _log_start(node: NodeThread) -> Callable[[], Coroutine[Any, Any, int]]:
    async def look() -> int:
        assert node.node is not None
        return node.node.store.log_start_offset
    return look


def _snapshot_size(node: NodeThread, snapshot_id: SnapshotId) -> Callable[
        [], Coroutine[Any, Any, int]]:
    async def look() -> int:
        assert node.node is not None
        size = node.node.store.snapshot_size(snapshot_id)
        assert size is not None
        return size
    return look
