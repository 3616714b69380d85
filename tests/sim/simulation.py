"""A seeded, single-threaded simulator of a KRaft quorum: RaftCore nodes over a fake network
and fake disks, on virtual time.

Every choice -- cluster shape, message delay, loss, duplication, partitions, crashes, disk
stalls, proposals, election jitter -- is drawn from one `random.Random(seed)`, and events
with equal times run in the order they were scheduled, so a seed replays exactly.

The transport's `Unreachable` reports are simulated too: a request to a node that is down is
reported (connection refused), one whose destination crashed before it arrived is reported
(reset); with faults on, some requests are reported although they are delivered (a flapping
listener), at any time up to the request timeout, and some reports name no request at all.
A cut link stays silent. Reports go through the node's inbox like any message.

Each node's shell follows core.py's `Ready` contract: persist the quorum state, truncate,
append and fsync (taking simulated disk time, during which messages wait in the node's
inbox), then send, deliver commits to a state machine, `advance`, `flushed`. A crash loses
what was not fsynced (MemoryLogStore.crash) and any write still in progress.

Snapshots (KIP-630). Each node's state machine (a running digest of the committed records)
takes snapshots at random applied offsets and sometimes deletes the log below one; a node
restarts from its latest snapshot and replays the log after it; a node whose fetch falls
below its leader's log start pulls the leader's snapshot in chunks (FetchSnapshot) and
installs it. A wipe fault erases a node's disk (log, snapshots, quorum-state): it rejoins
empty and catches up by snapshot. A voter is wiped only when that cannot break Raft's
assumptions -- a majority of the other voters holds its whole durable log, and every node
has moved past the epochs it voted in -- and one at a time (see `_may_wipe`).

After every event `check` verifies the safety invariants:
- at most one leader per epoch, over the whole run;
- the log of every node below its high watermark equals the committed log: a committed
  batch is never lost or changed (a new leader's high watermark passes its epoch start,
  which is after every committed entry, so a leader that lost one is caught too);
- the high watermark of a node never moves backwards, across restarts too;
- every node's state machine digest after the same offset is the same, whether it got there
  by replaying the log or by loading a snapshot (its own, or one fetched from its leader).
Then `heal` ends the faults and `run_until_converged` checks liveness: a leader is elected
and a new entry is committed and applied on every node within a bounded virtual time.

Replay a seed with a trace:  .venv/bin/python -m tests.sim.simulation --seed N --trace
Long run:                    .venv/bin/python -m tests.sim.simulation --seeds 0:10000
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import itertools
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pykraft.errors import RequestTimedOut
from pykraft.raft.core import CommittedBatch, RaftConfig, RaftCore, Ready
from pykraft.raft.log_store import MemoryLogStore, SnapshotWriter
from pykraft.raft.messages import (
    InboundMessage,
    OutboundMessage,
    RaftRequest,
    SnapshotId,
    Unreachable,
)
from pykraft.raft.snapshot import build_snapshot, snapshot_values
from pykraft.raft.state import Leader, QuorumStateData
from pykraft.records.batch import iter_headers, read_header

__all__ = ["Faults", "Bugs", "SimCluster", "SimulationFailure", "run_seed", "replay_command"]

INBOX_MAX = 10_000
SAME_INSTANT_STEPS_MAX = 5_000
SAFETY_TIME_MS = 12_000  # virtual time with faults on
LIVENESS_TIME_MS = 60_000  # bound on convergence after heal


class SimulationFailure(AssertionError):
    """An invariant broke or the cluster did not converge."""


def replay_command(seed: int, bug: str | None = None) -> str:
    flag = f" --bug {bug}" if bug else ""
    return f"replay: .venv/bin/python -m tests.sim.simulation --seed {seed}{flag} --trace"


@dataclass(frozen=True, slots=True)
class Faults:
    voters: int
    observers: int
    loss: float
    duplication: float
    delay_ms: tuple[int, int]
    spike_probability: float  # a much longer delay: reordering
    crash_every_ms: int  # mean time between crashes, 0 for none
    partition_every_ms: int
    stall_every_ms: int
    proposal_every_ms: int
    election_timeout_ms: int
    snapshot_every_ms: int  # mean time between two nodes' snapshots, 0 for none
    wipe_every_ms: int  # mean time between disk wipes, 0 for none
    false_unreachable: float  # chance that a request is reported Unreachable all the same

    @classmethod
    def from_seed(cls, rng: random.Random) -> Faults:
        low = rng.choice([0, 1, 2])
        return cls(
            voters=rng.choice([3, 3, 5]),
            observers=rng.choice([0, 0, 1, 2]),
            loss=rng.choice([0.0, 0.01, 0.05, 0.15]),
            duplication=rng.choice([0.0, 0.02, 0.1]),
            delay_ms=(low, low + rng.choice([2, 10, 40])),
            spike_probability=rng.choice([0.0, 0.01, 0.05]),
            crash_every_ms=rng.choice([0, 1_500, 4_000]),
            partition_every_ms=rng.choice([0, 2_000, 5_000]),
            stall_every_ms=rng.choice([0, 3_000]),
            proposal_every_ms=rng.choice([20, 60, 200]),
            election_timeout_ms=rng.choice([150, 300, 500]),
            snapshot_every_ms=rng.choice([0, 100, 400, 1_500]),
            wipe_every_ms=rng.choice([0, 0, 3_000]),
            false_unreachable=rng.choice([0.0, 0.01, 0.05, 0.2]),
        )

    def raft_config(self, rng: random.Random) -> RaftConfig:
        election = self.election_timeout_ms
        return RaftConfig(
            append_linger_ms=rng.choice([0, 5, 25]),
            batch_bytes_max=4096,
            election_timeout_ms=election,
            election_backoff_max_ms=election,
            fetch_timeout_ms=2 * election,
            request_timeout_ms=election,
            fetch_max_wait_ms=election // 2,
            fetch_bytes_max=rng.choice([4096, 16384]),
            fetch_snapshot_bytes_max=rng.choice([16, 64, 1 << 20]),
        )


@dataclass(frozen=True, slots=True)
class Bugs:
    """Deliberate faults, to show the simulator catches them."""

    skip_quorum_state_fsync: bool = False  # the vote lands in the page cache only
    commit_previous_epoch: bool = False  # count replicas of an older epoch's entry
    skip_snapshot_load: bool = False  # the shell installs a snapshot but keeps its old state
    wipe_voters_anytime: bool = False  # a voter forgets its disk whatever it voted and acked

    @classmethod
    def named(cls, name: str | None) -> Bugs:
        if name is None:
            return cls()
        return cls(**{name: True})


class _CommitsPreviousEpochs(RaftCore):
    """Raft's figure 8 bug: commit by counting replicas of any entry."""

    def _may_commit(self, majority_end: int, leader: Leader) -> bool:
        return majority_end > 0


class EventQueue:
    def __init__(self) -> None:
        self.now_ms = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._sequence = itertools.count()  # equal deadlines run in insertion order

    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now_ms + delay_ms, next(self._sequence), action))

    def pop(self) -> Callable[[], None] | None:
        if not self._events:
            return None
        self.now_ms, _, action = heapq.heappop(self._events)
        return action


@dataclass
class SimNode:
    node_id: int
    cluster: SimCluster
    store: MemoryLogStore = field(default_factory=MemoryLogStore)
    durable_state: QuorumStateData = field(default_factory=QuorumStateData)
    written_state: QuorumStateData = field(default_factory=QuorumStateData)  # page cache
    core: RaftCore | None = None
    incarnation: int = 0
    busy: bool = False
    turn_scheduled: bool = False
    timer_generation: int = 0
    inbox: deque[InboundMessage] = field(default_factory=deque)
    stalled_until_ms: int = 0
    digest: bytes = b""
    applied_end: int = 0
    high_watermark_max: int = 0
    checked_end: int = 0  # log below this was compared with the committed log
    saw_marker: bool = False
    in_flight_ready: Ready | None = None
    snapshot_writer: SnapshotWriter | None = None  # the snapshot being fetched
    wiped_from: tuple[int, int] | None = None  # (epoch, durable end) it had, until regained

    @property
    def up(self) -> bool:
        return self.core is not None

    def start(self) -> None:
        cluster = self.cluster
        core_class = _CommitsPreviousEpochs if cluster.bugs.commit_previous_epoch else RaftCore
        self.written_state = self.durable_state
        self.core = core_class(
            self.node_id,
            cluster.voter_ids,
            self.store,
            self.durable_state,
            random.Random(cluster.rng.getrandbits(64)),
            cluster.events.now_ms,
            config=cluster.config,
        )
        self.digest, self.applied_end, self.saw_marker = b"", 0, False
        self.checked_end = self.store.log_start_offset
        self.snapshot_writer = None
        self.busy = self.turn_scheduled = False
        self.inbox.clear()
        self.schedule_turn()

    def crash(self) -> None:
        if self.busy and self.in_flight_ready is not None:
            # the write in progress may or may not have reached the quorum-state file
            state = self.in_flight_ready.quorum_state
            if state is not None and self.cluster.rng.random() < 0.5:
                self.written_state = state
                if not self.cluster.bugs.skip_quorum_state_fsync:
                    self.durable_state = state
        self.incarnation += 1
        self.core = None
        self.in_flight_ready = None
        self.snapshot_writer = None
        self.store.crash()
        self.written_state = self.durable_state

    def wipe(self) -> None:
        """Lose the whole disk: log, snapshots and quorum-state."""
        if self.up:
            self.crash()
        self.incarnation += 1
        self.wiped_from = (self.epoch_ever, self.store.flushed_offset)
        self.store = MemoryLogStore()
        self.durable_state = self.written_state = QuorumStateData()
        self.high_watermark_max = 0  # a wiped node learns the high watermark anew

    @property
    def epoch_ever(self) -> int:
        """The highest epoch this node may have voted or led in."""
        epoch = max(self.durable_state.leader_epoch, self.written_state.leader_epoch)
        return int(max(epoch, self.core.state.epoch) if self.core is not None else epoch)

    # the shell's loop ------------------------------------------------------------------

    def schedule_turn(self) -> None:
        if self.turn_scheduled or self.busy or self.core is None:
            return
        self.turn_scheduled = True
        incarnation = self.incarnation
        self.cluster.events.at(0, lambda: self._turn(incarnation))

    def _turn(self, incarnation: int) -> None:
        if incarnation != self.incarnation or self.core is None:
            return
        self.turn_scheduled = False
        core = self.core
        now = self.cluster.events.now_ms
        core.tick(now)
        ready = core.ready()
        if (
            ready.quorum_state is not None
            or ready.batches
            or ready.truncate_to is not None
            or ready.snapshot_chunk is not None
            or ready.install_snapshot is not None
            or ready.delete_before is not None
        ):
            self.busy = True
            self.in_flight_ready = ready
            latency = self.cluster.rng.randint(0, 2)
            if self.stalled_until_ms > now:
                latency += self.stalled_until_ms - now
            self.cluster.events.at(latency, lambda: self._write_done(incarnation, ready))
        else:
            self._finish(ready, None)

    def _write_done(self, incarnation: int, ready: Ready) -> None:
        if incarnation != self.incarnation or self.core is None:
            return
        if ready.quorum_state is not None:
            self.written_state = ready.quorum_state
            if self.cluster.bugs.skip_quorum_state_fsync:
                state = ready.quorum_state
                self.cluster.events.at(
                    self.cluster.rng.randint(50, 2_000),
                    lambda: self._write_back(incarnation, state),
                )
            else:
                self.durable_state = ready.quorum_state
        self._write_snapshots(ready)
        if ready.truncate_to is not None:
            self.cluster.counts["truncations"] += 1
            self.store.truncate_to(ready.truncate_to)
        if ready.batches:
            self.store.append(b"".join(ready.batches))
        flushed = self.store.flush() if ready.batches else self.store.flushed_offset
        self.busy = False
        self.in_flight_ready = None
        self._finish(ready, flushed)

    def _write_snapshots(self, ready: Ready) -> None:
        chunk = ready.snapshot_chunk
        if chunk is not None:
            if chunk.position == 0:
                self.snapshot_writer = self.store.create_snapshot(chunk.snapshot_id)
            writer = self.snapshot_writer
            assert writer is not None and writer.snapshot_id == chunk.snapshot_id
            assert writer.size_bytes == chunk.position
            writer.append(chunk.data)
            if chunk.is_last:
                writer.freeze()
                self.snapshot_writer = None
                self.cluster.counts["snapshots_fetched"] += 1
        if ready.install_snapshot is not None:
            self.store.install_snapshot(ready.install_snapshot)
        if ready.delete_before is not None:
            self.store.delete_before(ready.delete_before)
            self.cluster.counts["prefix_deletions"] += 1

    def _write_back(self, incarnation: int, state: QuorumStateData) -> None:
        """The page cache reaches the disk some time later (the skip-fsync bug only)."""
        if incarnation == self.incarnation and self.written_state == state:
            self.durable_state = state

    def _finish(self, ready: Ready, flushed: int | None) -> None:
        core = self.core
        assert core is not None
        for message in ready.messages:
            self.cluster.send(self.node_id, message)
        if ready.load_snapshot is not None and not self.cluster.bugs.skip_snapshot_load:
            self._load(ready.load_snapshot)
        for batch in ready.committed:
            self._apply(batch)
        core.advance(ready)
        if flushed is not None:
            core.flushed(flushed)
        now = self.cluster.events.now_ms
        stepped = bool(self.inbox)
        while self.inbox:
            core.step(self.inbox.popleft(), now)
        if ready.has_work or flushed is not None or stepped:
            self.schedule_turn()
        else:
            self.timer_generation += 1
            generation, incarnation = self.timer_generation, self.incarnation
            self.cluster.events.at(
                max(0, ready.wake_at_ms - now), lambda: self._timer(incarnation, generation)
            )

    def _timer(self, incarnation: int, generation: int) -> None:
        if incarnation == self.incarnation and generation == self.timer_generation:
            self.schedule_turn()

    def receive(self, message: InboundMessage) -> None:
        if self.core is None:
            return
        if self.busy:
            if len(self.inbox) < INBOX_MAX:
                self.inbox.append(message)
            return
        self.core.step(message, self.cluster.events.now_ms)
        self.schedule_turn()

    def propose(self, value: bytes) -> bool:
        core = self.core
        if core is None or not isinstance(core.state, Leader):
            return False
        try:
            core.propose([value], self.cluster.events.now_ms)
        except RequestTimedOut:
            return False
        self.schedule_turn()
        return True

    # the state machine ------------------------------------------------------------------

    def take_snapshot(self) -> None:
        """Snapshot the state machine where it is; sometimes delete the log below."""
        core = self.core
        if core is None or self.busy or self.applied_end == 0:
            return
        if core.applied_offset != self.applied_end or self.applied_end < core.log_start_offset:
            return  # a snapshot load is still to be delivered
        snapshot_id = core.snapshot_id_at(self.applied_end)
        cluster = self.cluster
        if self.store.snapshot_size(snapshot_id) is None:
            values = [self.digest] + ([b"saw-marker"] if self.saw_marker else [])
            writer = self.store.create_snapshot(snapshot_id)
            batches = build_snapshot(
                snapshot_id,
                values,
                last_contained_log_timestamp=0,
                timestamp_ms=0,
                batch_bytes_max=32,
            )
            for batch in batches:
                writer.append(batch)
            writer.freeze()
            cluster.counts["snapshots"] += 1
        if cluster.rng.random() < 0.7:
            core.delete_before(snapshot_id)
        self.schedule_turn()

    def _load(self, snapshot_id: SnapshotId) -> None:
        cluster = self.cluster
        size = self.store.snapshot_size(snapshot_id)
        if size is None:
            cluster.fail(f"node {self.node_id}: snapshot {snapshot_id} to load is not stored")
        assert size is not None
        chunks = (self.store.read_snapshot(snapshot_id, p, 100) for p in range(0, size, 100))
        values = list(snapshot_values(chunks))
        self.digest = values[0]
        self.saw_marker = b"saw-marker" in values[1:]
        self.applied_end = snapshot_id.end_offset
        cluster.counts["snapshot_loads"] += 1
        known = cluster.digests.get(self.applied_end)
        if known != self.digest:
            cluster.fail(f"node {self.node_id}: snapshot {snapshot_id} holds digest "
                         f"{self.digest.hex()}, replay gave {known and known.hex()}")

    def _apply(self, batch: CommittedBatch) -> None:
        cluster = self.cluster
        if batch.base_offset != self.applied_end:
            cluster.fail(f"node {self.node_id} applied {batch.base_offset}, expected "
                         f"{self.applied_end}")
        hasher = hashlib.blake2b(self.digest, digest_size=16)
        hasher.update(batch.epoch.to_bytes(8, "big"))
        for value in batch.records:
            hasher.update(len(value).to_bytes(4, "big"))
            hasher.update(value)
            if value == cluster.marker:
                self.saw_marker = True
        self.digest = hasher.digest()
        self.applied_end = batch.last_offset + 1
        known = cluster.digests.setdefault(self.applied_end, self.digest)
        if known != self.digest:
            cluster.fail(f"node {self.node_id}: state machine digest differs at offset "
                         f"{self.applied_end}")


class SimCluster:
    def __init__(self, seed: int, *, bugs: Bugs | None = None, trace: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.bugs = bugs or Bugs()
        self.trace = trace
        self.faults = Faults.from_seed(self.rng)
        self.config = self.faults.raft_config(self.rng)
        self.events = EventQueue()
        self.voter_ids = frozenset(range(1, self.faults.voters + 1))
        ids = range(1, self.faults.voters + self.faults.observers + 1)
        self.nodes = {node_id: SimNode(node_id, self) for node_id in ids}
        self.cut: set[tuple[int, int]] = set()  # (source, destination) links that drop
        self.faulty = True
        self.loss = self.faults.loss
        self.duplication = self.faults.duplication
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.committed: dict[int, bytes] = {}  # base offset -> batch, the committed log
        self.committed_end = 0
        self.digests: dict[int, bytes] = {}  # offset -> state machine digest after it
        self.marker = b""
        self.proposals = itertools.count()
        self.steps = 0
        self.counts: dict[str, int] = dict.fromkeys(
            [
                "crashes",
                "partitions",
                "stalls",
                "truncations",
                "lost_messages",
                "snapshots",
                "prefix_deletions",
                "snapshots_fetched",
                "snapshot_loads",
                "wipes",
                "voter_wipes",
                "unreachable_reports",
                "false_reports",
            ],
            0,
        )
        for node in self.nodes.values():
            node.start()
        self._schedule_faults()
        self.events.at(self.faults.proposal_every_ms, self._workload)

    # the network -----------------------------------------------------------------------

    def send(self, source: int, message: OutboundMessage) -> None:
        destination = message.destination_id
        if (source, destination) in self.cut or destination not in self.nodes:
            return  # a cut link is silence: nothing tells the sender
        if isinstance(message.body, RaftRequest):
            self._maybe_report(source, destination, message.correlation_id)
        if self.rng.random() < self.loss:
            self.counts["lost_messages"] += 1
            return
        copies = 2 if self.rng.random() < self.duplication else 1
        inbound = InboundMessage(source, message.correlation_id, message.body)
        incarnation = self.nodes[destination].incarnation
        for _ in range(copies):
            low, high = self.faults.delay_ms
            delay = self.rng.randint(low, high)
            if self.faulty and self.rng.random() < self.faults.spike_probability:
                delay += self.rng.randint(50, 1_000)
            self.events.at(
                delay, lambda: self._deliver(source, destination, inbound, incarnation)
            )

    def _maybe_report(self, source: int, destination: int, correlation_id: int) -> None:
        """What a real transport reports of a request (messages.Unreachable): refused when
        nobody listens at the destination; and, with faults on, false reports -- of a
        request that is delivered all the same (a flapping listener), at any time in its
        life, or of a correlation id that names no request at all."""
        if not self.nodes[destination].up:
            self._report_at(self.rng.randint(0, 2), source, destination, correlation_id,
                            "unreachable_reports")
        elif self.faulty and self.rng.random() < self.faults.false_unreachable:
            if self.rng.random() < 0.2:
                correlation_id = self.rng.getrandbits(30)
            self._report_at(self.rng.randint(0, self.config.request_timeout_ms), source,
                            destination, correlation_id, "false_reports")

    def _report_at(self, delay_ms: int, source: int, destination: int, correlation_id: int,
                   kind: str) -> None:
        incarnation = self.nodes[source].incarnation  # its connections die with the process

        def report() -> None:
            node = self.nodes[source]
            if node.incarnation != incarnation:
                return
            self.counts[kind] += 1
            if self.trace:
                print(f"{self.events.now_ms:>7} {source}: {destination} unreachable "
                      f"({correlation_id}{', false' if kind == 'false_reports' else ''})")
            node.receive(InboundMessage(destination, correlation_id, Unreachable()))

        self.events.at(delay_ms, report)

    def _deliver(
        self, source: int, destination: int, message: InboundMessage, incarnation: int
    ) -> None:
        if (source, destination) in self.cut:
            return
        if self.nodes[destination].incarnation != incarnation:
            # its connections died with the process it was sent to: the sender sees a reset
            if isinstance(message.body, RaftRequest):
                self._report_at(0, source, destination, message.correlation_id,
                                "unreachable_reports")
            return
        if self.trace:
            print(f"{self.events.now_ms:>7} {source}->{destination} {message.body}")
        self.nodes[destination].receive(message)

    # faults ----------------------------------------------------------------------------

    def _schedule_faults(self) -> None:
        faults = self.faults
        if faults.crash_every_ms:
            self.events.at(self.rng.randint(0, 2 * faults.crash_every_ms), self._crash_one)
        if faults.partition_every_ms:
            self.events.at(self.rng.randint(0, 2 * faults.partition_every_ms), self._partition)
        if faults.stall_every_ms:
            self.events.at(self.rng.randint(0, 2 * faults.stall_every_ms), self._stall)
        if faults.snapshot_every_ms:
            self.events.at(self.rng.randint(0, 2 * faults.snapshot_every_ms), self._snapshot)
        if faults.wipe_every_ms:
            self.events.at(self.rng.randint(0, 2 * faults.wipe_every_ms), self._wipe)

    def _crash_one(self) -> None:
        if not self.faulty:
            return
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if node.up:
            if self.trace:
                print(f"{self.events.now_ms:>7} crash {node.node_id}")
            node.crash()
            self.counts["crashes"] += 1
            self.events.at(self.rng.randint(50, 3_000), lambda: self._restart(node))
        self.events.at(self.rng.randint(1, 2 * self.faults.crash_every_ms), self._crash_one)

    def _restart(self, node: SimNode) -> None:
        if not node.up:
            if self.trace:
                print(f"{self.events.now_ms:>7} restart {node.node_id}")
            node.start()

    def _partition(self) -> None:
        if not self.faulty:
            return
        ids = sorted(self.nodes)
        if self.rng.random() < 0.5:  # symmetric: two sides that cannot talk at all
            side = set(self.rng.sample(ids, self.rng.randint(1, len(ids) - 1)))
            self.cut = {(a, b) for a in ids for b in ids if (a in side) != (b in side)}
        else:  # one-way: some links drop in one direction only
            pairs = [(a, b) for a in ids for b in ids if a != b]
            self.cut = set(self.rng.sample(pairs, self.rng.randint(1, len(ids))))
        self.counts["partitions"] += 1
        if self.trace:
            print(f"{self.events.now_ms:>7} cut {sorted(self.cut)}")
        self.events.at(self.rng.randint(300, 4_000), self._heal_partition)
        self.events.at(self.rng.randint(1, 2 * self.faults.partition_every_ms), self._partition)

    def _heal_partition(self) -> None:
        self.cut = set()

    def _stall(self) -> None:
        if not self.faulty:
            return
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        node.stalled_until_ms = self.events.now_ms + self.rng.randint(100, 2_000)
        self.counts["stalls"] += 1
        self.events.at(self.rng.randint(1, 2 * self.faults.stall_every_ms), self._stall)

    def _snapshot(self) -> None:
        """A node's state machine snapshots itself (also after heal: catching up by snapshot
        must keep working once the faults end)."""
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        node.take_snapshot()
        self.events.at(self.rng.randint(1, 2 * self.faults.snapshot_every_ms), self._snapshot)

    def _wipe(self) -> None:
        if not self.faulty:
            return
        node = self.nodes[self.rng.choice(sorted(self.nodes))]
        if self._may_wipe(node):
            if self.trace:
                print(f"{self.events.now_ms:>7} wipe {node.node_id}")
            node.wipe()
            self.counts["wipes"] += 1
            if node.node_id in self.voter_ids:
                self.counts["voter_wipes"] += 1
            self.events.at(self.rng.randint(50, 3_000), lambda: self._restart(node))
        self.events.at(self.rng.randint(1, 2 * self.faults.wipe_every_ms), self._wipe)

    def _may_wipe(self, node: SimNode) -> bool:
        """An observer always; a voter only when forgetting its disk cannot break Raft:
        no other voter is still catching up from a wipe, a majority of the other voters
        durably holds its whole durable log (so no entry it acknowledged rests on it
        alone), and every other voter's durable epoch is at least the highest it may have
        voted in: a candidate asks for votes once, as it enters its epoch, and messages to
        the wiped incarnation are lost, so no candidate of those epochs can ask it again."""
        if node.node_id not in self.voter_ids or self.bugs.wipe_voters_anytime:
            return True
        others = [self.nodes[v] for v in sorted(self.voter_ids) if v != node.node_id]
        for other in others:
            if other.wiped_from is not None and not self._regained(other):
                return False
        holders = sum(1 for other in others if self._holds_log_of(other, node))
        if 2 * holders <= len(self.voter_ids):
            return False
        epoch = node.epoch_ever
        return all(other.durable_state.leader_epoch >= epoch for other in others)

    def _regained(self, node: SimNode) -> bool:
        wiped_from = node.wiped_from
        assert wiped_from is not None
        epoch, end = wiped_from
        if node.durable_state.leader_epoch > epoch and node.store.flushed_offset >= end:
            node.wiped_from = None
            return True
        return False

    def _holds_log_of(self, holder: SimNode, node: SimNode) -> bool:
        """`holder` durably has every entry `node` durably has: both have the same batch
        at node's durable end - 1 (Raft's log matching), or the same committed batch."""
        end = node.store.flushed_offset
        if end == 0:
            return True
        if holder.store.flushed_offset < end:
            return False
        theirs = self._durable_entry(holder, end - 1)
        return theirs is not None and theirs == self._durable_entry(node, end - 1)

    def _durable_entry(self, node: SimNode, offset: int) -> bytes | None:
        """The batch holding `offset` in the node's log; below its log start, the committed
        batch (its snapshot covers only committed entries); None when unknown."""
        if offset < node.store.log_start_offset:
            return self.committed_at(offset)
        data = node.store.read(offset, 1)
        return bytes(data[: read_header(data).size])

    def committed_at(self, offset: int) -> bytes | None:
        """The committed batch holding `offset`, None when the checker has not seen it."""
        for base_offset, batch in self.committed.items():
            header = read_header(batch)
            if base_offset <= offset <= header.last_offset:
                return batch
        return None

    def _workload(self) -> None:
        value = self.marker if not self.faulty else b"v%d" % next(self.proposals)
        up = [node for node in self.nodes.values() if node.up]
        if up and (self.faulty or not any(node.saw_marker for node in up)):
            self.rng.choice(up).propose(value)
            for node in up:
                if self.rng.random() < 0.5:
                    node.propose(value)  # a leader may get it twice: fine
        self.events.at(self.rng.randint(1, self.faults.proposal_every_ms), self._workload)

    # running ---------------------------------------------------------------------------

    def run(self, until_ms: int, predicate: Callable[[], bool] | None = None) -> bool:
        instant, same_instant_steps = -1, 0
        while self.events.now_ms <= until_ms:
            if predicate is not None and predicate():
                return True
            action = self.events.pop()
            if action is None:
                return False
            action()
            self.steps += 1
            self.check()
            if self.events.now_ms != instant:
                instant, same_instant_steps = self.events.now_ms, 0
            same_instant_steps += 1
            if same_instant_steps > SAME_INSTANT_STEPS_MAX:
                self.fail("livelock: a node asks to be woken at once with nothing to do")
        return predicate is not None and predicate()

    def heal(self) -> None:
        """End every fault: links whole, no loss, nodes up, disks fast; then a new entry
        (the marker) must be committed and applied everywhere."""
        self.faulty = False
        self.cut = set()
        self.loss = self.duplication = 0.0
        self.marker = b"marker-%d" % self.seed
        for node in self.nodes.values():
            node.stalled_until_ms = 0
            if not node.up:
                node.start()


    def converged(self) -> bool:
        return all(node.up and node.saw_marker for node in self.nodes.values())

    def fail(self, message: str) -> None:
        raise SimulationFailure(f"seed {self.seed} at {self.events.now_ms} ms: {message}")

    # invariants ------------------------------------------------------------------------

    def check(self) -> None:
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            state = core.state
            if isinstance(state, Leader):
                leader = self.leaders.setdefault(state.epoch, node.node_id)
                if leader != node.node_id:
                    self.fail(f"nodes {leader} and {node.node_id} both lead epoch {state.epoch}")
            high_watermark = core.high_watermark
            if high_watermark is None:
                continue
            if high_watermark < node.high_watermark_max:
                self.fail(f"node {node.node_id}: high watermark fell from "
                          f"{node.high_watermark_max} to {high_watermark}")
            node.high_watermark_max = high_watermark
            if high_watermark > node.checked_end:
                self._check_committed_prefix(node, high_watermark)

    def _check_committed_prefix(self, node: SimNode, high_watermark: int) -> None:
        """The node's log from `checked_end` to its high watermark is the committed log."""
        offset = max(node.checked_end, node.store.log_start_offset)
        data = node.store.read(offset, 1 << 30) if offset < node.store.log_end_offset else b""
        for position, header in iter_headers(data):
            if header.base_offset >= high_watermark:
                break
            if header.next_offset > high_watermark:
                self.fail(f"node {node.node_id}: high watermark {high_watermark} inside a batch")
            batch = data[position : position + header.size]
            if header.base_offset < self.committed_end:
                known = self.committed.get(header.base_offset)
                if known != batch:
                    self.fail(f"node {node.node_id}: committed batch at {header.base_offset} "
                              "lost or changed")
            elif header.base_offset == self.committed_end:
                self.committed[header.base_offset] = batch
                self.committed_end = header.next_offset
            else:
                self.fail(f"node {node.node_id}: gap in the committed log at {self.committed_end}")
            offset = header.next_offset
        if offset < high_watermark:
            self.fail(f"node {node.node_id}: high watermark {high_watermark} past its log "
                      f"end {offset}")
        node.checked_end = offset


@dataclass(frozen=True, slots=True)
class SeedResult:
    seed: int
    steps: int
    virtual_ms: int
    committed_end: int
    elections: int
    voters: int
    observers: int
    counts: dict[str, int]
    digest: bytes  # of the committed log: equal runs of a seed give equal digests


def run_seed(
    seed: int,
    *,
    bugs: Bugs | None = None,
    trace: bool = False,
    safety_ms: int = SAFETY_TIME_MS,
) -> SeedResult:
    """Faults on for `safety_ms` of virtual time, then heal; raises SimulationFailure."""
    cluster = SimCluster(seed, bugs=bugs, trace=trace)
    cluster.run(safety_ms)
    cluster.heal()
    healed_at = cluster.events.now_ms
    if not cluster.run(healed_at + LIVENESS_TIME_MS, cluster.converged):
        states = {n.node_id: n.core.state if n.core else None for n in cluster.nodes.values()}
        cluster.fail(f"no convergence within {LIVENESS_TIME_MS} ms after heal: {states}")
    log_digest = hashlib.blake2b(digest_size=16)
    for base_offset in sorted(cluster.committed):
        log_digest.update(cluster.committed[base_offset])
    return SeedResult(
        seed,
        cluster.steps,
        cluster.events.now_ms,
        cluster.committed_end,
        len(cluster.leaders),
        cluster.faults.voters,
        cluster.faults.observers,
        dict(cluster.counts),
        log_digest.digest(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seeds", default="0:500", help="start:stop")
    parser.add_argument(
        "--bug",
        choices=[
            "skip_quorum_state_fsync",
            "commit_previous_epoch",
            "skip_snapshot_load",
            "wipe_voters_anytime",
        ],
    )
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--safety-ms", type=int, default=SAFETY_TIME_MS,
                        help="virtual time with faults on, per seed")
    args = parser.parse_args(argv)
    bugs = Bugs.named(args.bug)
    if args.seed is not None:
        seeds = range(args.seed, args.seed + 1)
    else:
        start, stop = (int(part) for part in args.seeds.split(":"))
        seeds = range(start, stop)
    began = time.perf_counter()
    steps = failures = 0
    for seed in seeds:
        try:
            steps += run_seed(seed, bugs=bugs, trace=args.trace, safety_ms=args.safety_ms).steps
        except Exception as failure:  # report every failing seed, then go on
            failures += 1
            print(f"FAIL {failure!r}\n  {replay_command(seed, args.bug)}", file=sys.stderr)
    elapsed = time.perf_counter() - began
    print(f"{len(seeds)} seeds, {steps} steps, {failures} failures, {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
