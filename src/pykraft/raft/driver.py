"""The asyncio shell around RaftCore: the only place in raft/ that does I/O or awaits.

One task runs the loop of core.py's `Ready` contract:

    step the inbox -> tick -> ready -> [thread: persist quorum-state, write snapshot
    chunks / install / delete, truncate, append, fsync] -> send messages -> load a snapshot,
    deliver commits and the leader change to listeners -> advance -> flushed -> resolve
    waiters -> sleep until the wake deadline, a new proposal or a message

Blocking file work runs in a worker thread so that the event loop keeps serving; meanwhile
`append` calls go on adding to the core's draft batch, and the next turn writes them all
with one fsync: group commit. Only `write_snapshot` writes beside it (a snapshot file of
its own, as the store allows).

Listeners are called on the event loop, in offset order, each committed batch once. On
start the whole committed log is delivered first (the core's high watermark covers it as
soon as the new epoch's LeaderChangeMessage is durable), then `handle_leader_change`: that
is how the metadata image is rebuilt after a restart. A listener that raises stops the
node: its image would no longer be a fold over the log.

Several voters (and observers) talk through a transport (network.RaftChannels): the
messages of a Ready go out only after its quorum state and batches are durable. Answers to
our requests (`receive`) and requests from other nodes (`handle_request`, from the
controller listener) wait in a bounded inbox and are stepped into the core between turns,
never while a write is in progress, as the simulator does; the core's answer to a request
is handed back to the connection that brought it. An offset proposed by this node as leader
of epoch E is waited for in E only: once this node stops leading E before the offset is
committed, `wait_committed` raises NotLeaderError, since the offset may end up holding
another leader's entry. A leader of several voters resigns on `stop` (EndQuorumEpoch), so
that a successor need not wait out fetch.timeout.ms. A snapshot fetched from the leader is
given to listeners that implement SnapshotLoader before the batches after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import inspect
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, Protocol

from kio.schema.errors import ErrorCode

from pykraft.errors import InvalidConfig, NotLeaderError, RequestTimedOut, invariant
from pykraft.raft.core import CommittedBatch, RaftConfig, RaftCore, Ready
from pykraft.raft.log_store import DiskLogStore, LogStore, RaftLogView, SnapshotWriter
from pykraft.raft.messages import (
    FetchResponse,
    InboundMessage,
    OutboundMessage,
    RaftRequest,
    RaftResponse,
    SnapshotId,
    Unreachable,
)
from pykraft.raft.snapshot import build_snapshot
from pykraft.raft.state import (
    NO_LEADER,
    EpochState,
    Leader,
    LeaderAndEpoch,
    QuorumStateData,
    QuorumStateStore,
)

__all__ = [
    "Clock",
    "SystemClock",
    "RaftListener",
    "SnapshotLoader",
    "Transport",
    "RaftNode",
    "QUORUM_STATE_FILE",
]

log = logging.getLogger("pykraft.raft")

QUORUM_STATE_FILE: Final = "quorum-state"
WAITERS_MAX: Final = 100_000  # wait_committed callers at once; each is an in-flight proposal
INBOX_MAX: Final = 10_000  # messages from other nodes waiting to be stepped
LEADERSHIPS_KEPT: Final = 1_000  # lost epochs whose proposals wait_committed still knows
# No timer may blame a peer for this node's own stall: a broker whose loop was held 3.5 s
# applying a large delta timed out its fetch, whose answer sat unread. The loop's lag is
# sampled every BEAT_MS, and at the start of each Raft turn; a lag beyond BLIND_MS was a
# stall, during which no peer could be heard (RaftCore.stalled leaves it out of the
# timeouts): an answer held behind it reaches the peer only after it, and so does the
# peer's next fetch. After a stall the turn yields once, so that what is already readable
# comes in first. (It used to yield six times after any 250 ms without reading the inbox:
# on a broker whose every loop iteration took 2 s, a turn took 12 s, and its fetches to
# the quorum went unanswered that long.)
BLIND_MS: Final = 250
BEAT_MS: Final = 100
# A Ready delivers at most RaftConfig.apply_bytes_max of committed batches, and the loop
# yielded after each: a broker whose loop also answered its followers' fetches applied
# one batch of 1,000 partition changes per turn of the loop, 28% of its time, while a
# controlled shutdown of 300,000 partitions waited for it (py-spy). With a backlog of
# committed batches the loop delivers on, Ready after Ready, for up to DELIVERY_TURN_S
# before it yields: what Kafka's metadata loader, on a thread of its own, gets anyway.
# Not on the quorum's leader, whose voters wait for its fetch answers: in one of the two
# runs with it there, an active controller committing a 300,000-partition shutdown left
# a voter unanswered 2.3 s and was voted out (none in the runs before; not shown to be
# this, but the leader's own listeners are not what a shutdown waits for).
DELIVERY_TURN_S: Final = 0.1


class Transport(Protocol):
    """Sends requests to other nodes (network.RaftChannels); answers come to `deliver`."""

    def connect(self, deliver: Callable[[InboundMessage], None]) -> None: ...

    def send(self, message: OutboundMessage) -> None: ...

    async def flush(self, timeout_ms: int) -> None:
        """Wait (at most `timeout_ms`) until every request handed over was sent and
        answered or dropped."""
        ...

    async def close(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Monotonic milliseconds, for timers."""
        ...

    def wall_clock_ms(self) -> int:
        """Milliseconds since the epoch, for batch timestamps."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_clock_ms(self) -> int:
        return time.time_ns() // 1_000_000


class RaftListener(Protocol):
    def handle_commit(self, batch: CommittedBatch) -> None:
        """One committed batch; a control batch comes with no records."""
        ...

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        """The quorum's leader (-1 when unknown) for `epoch`. When this node leads, it is
        called only after every batch before the epoch was given to `handle_commit`."""
        ...


class SnapshotLoader(Protocol):
    """A listener that can take a snapshot fetched from the leader (KIP-630)."""

    def handle_load_snapshot(self, snapshot_id: SnapshotId, snapshot: RaftLogView) -> None:
        """Replace the state machine's state by snapshot `snapshot_id` (read its bytes with
        `snapshot.read_snapshot`): it holds everything below `snapshot_id.end_offset`.
        Committed batches from that offset on follow through `handle_commit`."""
        ...


class RaftNode:
    def __init__(
        self,
        core: RaftCore,
        store: LogStore,
        state_store: QuorumStateStore | None,
        *,
        clock: Clock,
        transport: Transport | None = None,
    ) -> None:
        """`state_store` None keeps the quorum state in memory only (tests, simulation).
        `transport` is needed unless this node is the only voter."""
        if transport is None and core.voters != frozenset({core.node_id}):
            raise InvalidConfig(
                f"node {core.node_id} with voters {sorted(core.voters)} needs a transport"
            )
        self.core = core
        self._store = store
        self._state_store = state_store
        self._clock = clock
        self._listeners: list[RaftListener] = []
        self._wake = asyncio.Event()
        self._written = asyncio.Event()  # set after each write of proposals to the log
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._closed = False
        self._failure: BaseException | None = None
        # (offset, seq, epoch it was proposed in or -1, future)
        self._waiters: list[tuple[int, int, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()
        self._leader_announced = asyncio.Event()
        self._transport = transport
        self._inbox: deque[InboundMessage] = deque()
        self._stalled_ms = 0  # stalls of the event loop not yet told to the core
        self._beat_due = 0.0  # when the lag sampler should run (the loop's clock)
        self._beat_handle: asyncio.TimerHandle | None = None
        self._answers: dict[tuple[int, int], asyncio.Future[RaftResponse]] = {}
        self._inbound_ids = itertools.count(1)
        # (last offset, first offset, epoch) of what we proposed as leader, one entry an epoch
        self._proposed: deque[tuple[int, int, int]] = deque()
        self._led_epoch: int | None = None  # the epoch we led at the last look
        self._led_high_watermark = 0  # committed in that epoch, as far as we saw
        self._lost: dict[int, int] = {}  # epoch we led and lost -> what it had committed
        self._resign_requested = False
        self._resign_sent = asyncio.Event()
        self._caught_up = asyncio.Event()
        self._fetch_answered = asyncio.Event()  # a fetch of ours was answered without error
        self._snapshot_writer: SnapshotWriter | None = None  # a snapshot being fetched
        self._leader_high_watermark = -1  # the highest a leader told us in a fetch answer
        self._logged_state: EpochState = core.state  # for the debug log of transitions
        if transport is not None:
            transport.connect(self.receive)

    @classmethod
    def open(
        cls,
        *,
        node_id: int,
        voters: frozenset[int],
        log_dir: Path,
        listener: RaftListener | None = None,
        config: RaftConfig | None = None,
        election_timeout_ms: int | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        server_configs: Mapping[str, str] | None = None,
        transport: Transport | None = None,
    ) -> RaftNode:
        """Load `log_dir` (the `__cluster_metadata-0` directory: its quorum-state and its
        log, recovered and flushed) and build the node; nothing runs until `start`.

        Without `config`, the quorum's settings come from `server_configs` (the node's
        server.properties): the controller.quorum.* keys (`RaftConfig.from_server_configs`:
        append.linger.ms, election.timeout.ms, election.backoff.max.ms, fetch.timeout.ms,
        request.timeout.ms, retry.backoff.ms), Kafka's defaults for those not set;
        `election_timeout_ms`, when given, overrides controller.quorum.election.timeout.ms.
        `server_configs` also supplies the `metadata.log.segment.bytes` /
        `metadata.log.segment.ms` keys. Several voters, or a node outside `voters` (an
        observer), need a `transport`.
        """
        if election_timeout_ms is not None and election_timeout_ms <= 0:
            raise InvalidConfig(f"controller.quorum.election.timeout.ms={election_timeout_ms}")
        if transport is None and voters != frozenset({node_id}):
            raise InvalidConfig(
                f"node {node_id} with voters {sorted(voters)}: several voters, or an "
                "observer, need a transport to the other nodes"
            )
        if config is None:
            config = RaftConfig.from_server_configs(server_configs or {})
            if election_timeout_ms is not None:
                config = dataclasses.replace(config, election_timeout_ms=election_timeout_ms)
        clock = clock or SystemClock()
        now_ms = clock.now_ms()
        state_store = QuorumStateStore(log_dir / QUORUM_STATE_FILE)
        persisted = state_store.read() or QuorumStateData()
        store = DiskLogStore.open(
            log_dir, now_ms=clock.wall_clock_ms(), server_configs=server_configs
        )
        try:
            core = RaftCore(
                node_id,
                voters,
                store,
                persisted,
                rng or random.Random(),
                now_ms,
                config=config,
            )
        except BaseException:
            store.close()
            raise
        node = cls(core, store, state_store, clock=clock, transport=transport)
        if listener is not None:
            node.register_listener(listener)
        return node

    # observers ----------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int | None:
        return self.core.high_watermark

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.core.leader_and_epoch

    @property
    def is_leader(self) -> bool:
        """Leads, and its listeners have caught up with every epoch before its own: only
        then may a controller decide on its image."""
        return isinstance(self.core.state, Leader) and self._leader_announced.is_set()

    @property
    def store(self) -> LogStore:
        return self._store

    @property
    def voters(self) -> frozenset[int]:
        return self.core.voters

    @property
    def leader_id_and_epoch(self) -> tuple[int, int]:
        leader = self.core.leader_and_epoch
        return leader.leader_id, leader.epoch

    # messages from other nodes --------------------------------------------------------------

    def receive(self, message: InboundMessage) -> None:
        """An answer to one of our requests (from the transport); stepped next turn."""
        if self._stopping or len(self._inbox) >= INBOX_MAX:
            return  # lost, as any message may be
        self._inbox.append(message)
        self._wake.set()

    async def handle_request(self, source_id: int, body: RaftRequest) -> RaftResponse | None:
        """A request from `source_id` (the controller listener): step it, and return the
        core's answer, or None if the core gave none within the request timeout."""
        if self._stopping or self._task is None or len(self._inbox) >= INBOX_MAX:
            return None
        key = (source_id, next(self._inbound_ids))
        future: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        self._answers[key] = future
        self._inbox.append(InboundMessage(source_id, key[1], body))
        self._wake.set()
        try:
            async with asyncio.timeout(self.core.config.request_timeout_ms / 1000):
                return await future
        except TimeoutError:
            return None
        finally:
            self._answers.pop(key, None)

    # lifecycle ----------------------------------------------------------------------------

    def register_listener(self, listener: RaftListener) -> None:
        """Listeners join before `start`, so each sees the log from its first batch."""
        if self._task is not None:
            raise RuntimeError("listeners are registered before start()")
        self._listeners.append(listener)

    async def start(self) -> None:
        """Start the loop. It elects this node, replays the committed log to the
        listeners, then announces the leadership; `wait_leader` awaits all that."""
        if self._task is not None:
            raise RuntimeError("RaftNode started twice")
        self._task = asyncio.create_task(self._run(), name="raft")

    async def wait_leader(self) -> LeaderAndEpoch:
        """Wait until this node leads and its listeners have caught up with the log."""
        task = self._task
        if task is None:
            raise RuntimeError("wait_leader() before start()")
        announced = asyncio.ensure_future(self._leader_announced.wait())
        await asyncio.wait([announced, task], return_when=asyncio.FIRST_COMPLETED)
        if not announced.done():
            announced.cancel()
            self._raise_if_failed()
            raise NotLeaderError(*self.leader_and_epoch)
        return self.leader_and_epoch

    async def wait_answered(self) -> None:
        """Wait until a fetch of this node's is answered without an error (the quorum is
        reachable and takes this node for one of its cluster), or this node leads."""
        task = self._task
        if task is None:
            raise RuntimeError("wait_answered() before start()")
        answered = asyncio.ensure_future(self._fetch_answered.wait())
        caught_up = asyncio.ensure_future(self._caught_up.wait())
        waits = [answered, caught_up, task]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered.cancel()
            caught_up.cancel()
        if task.done():
            self._raise_if_failed()
            raise NotLeaderError(*self.leader_and_epoch)

    async def wait_caught_up(self) -> LeaderAndEpoch:
        """Wait until this node's listeners have been given the log up to the high
        watermark of the first leader's answer that carried one (or, if this node leads,
        until they heard so): the start-up wait of a node among several voters, or of an
        observer, where `wait_leader` would wait for a leadership that may go elsewhere."""
        task = self._task
        if task is None:
            raise RuntimeError("wait_caught_up() before start()")
        caught_up = asyncio.ensure_future(self._caught_up.wait())
        await asyncio.wait([caught_up, task], return_when=asyncio.FIRST_COMPLETED)
        if not caught_up.done():
            caught_up.cancel()
            self._raise_if_failed()
            raise NotLeaderError(*self.leader_and_epoch)
        return self.leader_and_epoch

    async def stop(self, *, resign: bool = True) -> None:
        """Stop the loop after its current turn, fail the waiters, close the log.

        With `resign`, a leader of several voters first resigns, as Kafka's does at
        shutdown: its EndQuorumEpoch lets the most caught-up voter run at once instead of
        waiting out fetch.timeout.ms (for at most controller.quorum.request.timeout.ms)."""
        if self._closed:
            return
        self._closed = True
        if resign:
            await self._resign(self.core.config.request_timeout_ms)
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        self._leader_announced.clear()  # a stopped node answers for nothing
        self._fail_waiters(NotLeaderError(NO_LEADER, self.leader_and_epoch.epoch))
        for future in self._answers.values():
            if not future.done():
                future.cancel()
        if self._transport is not None:
            await self._transport.close()
        if self._snapshot_writer is not None:
            self._snapshot_writer.abort()
            self._snapshot_writer = None
        self._store.close()

    async def _resign(self, timeout_ms: int) -> None:
        task, transport = self._task, self._transport
        if task is None or task.done() or transport is None:
            return
        if not isinstance(self.core.state, Leader):
            return
        self._resign_requested = True
        self._wake.set()
        resigned = asyncio.ensure_future(self._resign_sent.wait())
        await asyncio.wait([resigned, task], timeout=timeout_ms / 1000)
        resigned.cancel()
        if self._resign_sent.is_set():
            await transport.flush(timeout_ms)

    # proposals ----------------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> int:
        """Propose `records` as one atomic batch; return the offset of the last one.

        Raises NotLeaderError (with the known leader and epoch) when this node does not
        lead, MessageTooLarge or RequestTimedOut (backpressure) as RaftCore.propose does.
        """
        self._raise_if_failed()
        if self._stopping or self._task is None:
            raise NotLeaderError(NO_LEADER, self.leader_and_epoch.epoch)
        offset = self.core.propose(
            records, self._clock.now_ms(), timestamp_ms=self._clock.wall_clock_ms()
        )
        epoch = self.core.state.epoch
        if self._proposed and self._proposed[-1][2] == epoch:
            _, first, _ = self._proposed[-1]  # offsets only grow within an epoch
            self._proposed[-1] = (offset, first, epoch)
        else:
            self._proposed.append((offset, offset - len(records) + 1, epoch))
        self._wake.set()
        return offset

    async def wait_room(self, records: Sequence[bytes], timeout_s: float) -> None:
        """Wait until `append(records)` would not be refused for the bytes that wait to be
        written (its backpressure), which the loop writes write_bytes_max a turn; raises
        RequestTimedOut after `timeout_s`, NotLeaderError if this node stops leading."""
        deadline = time.monotonic() + timeout_s
        while not self.core.has_room(records):
            self._raise_if_failed()
            if self._stopping or not self.is_leader:
                raise NotLeaderError(*self.leader_and_epoch)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RequestTimedOut(
                    f"the log took more than {timeout_s:.0f} s to write what waits for it")
            self._written.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._written.wait(), timeout=left)

    async def wait_committed(self, offset: int) -> None:
        """Wait until `offset` is committed and delivered to every listener.

        For an offset this node proposed as leader of epoch E, raises NotLeaderError once
        this node no longer leads E and the offset was not committed in E. Any other offset
        (a follower waiting to catch up) is simply waited for."""
        self._raise_if_failed()
        epoch = self._proposed_epoch(offset)
        if epoch is not None and offset >= self._lost.get(epoch, offset + 1):
            # lost before it committed: the offset may hold another leader's entry now
            raise NotLeaderError(*self.leader_and_epoch)
        if self.core.applied_offset > offset:
            return
        if self._stopping:
            raise NotLeaderError(NO_LEADER, self.leader_and_epoch.epoch)
        if len(self._waiters) >= WAITERS_MAX:
            raise RequestTimedOut(f"{WAITERS_MAX} callers already wait for commits")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(
            self._waiters, (offset, next(self._sequence), -1 if epoch is None else epoch, future)
        )
        await future

    def _proposed_epoch(self, offset: int) -> int | None:
        """The epoch in which this node proposed `offset` (as far as it remembers)."""
        for last_offset, first_offset, epoch in self._proposed:
            if first_offset <= offset <= last_offset:
                return epoch
        return None

    # the loop -----------------------------------------------------------------------------

    def _beat(self) -> None:
        """Sample the event loop's lag; a long one was a stall of this node's own."""
        loop = asyncio.get_running_loop()
        self._note_lag(loop.time())
        self._beat_handle = loop.call_at(self._beat_due, self._beat)

    def _note_lag(self, now: float) -> None:
        """Count the lag of the beat due by `now` (loop time) if it was a stall."""
        lag_ms = int((now - self._beat_due) * 1000)
        if lag_ms > BLIND_MS:
            self._stalled_ms += lag_ms
        if lag_ms >= 0:
            self._beat_due = now + BEAT_MS / 1000

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._beat_due = loop.time() + BEAT_MS / 1000
        self._beat_handle = loop.call_at(self._beat_due, self._beat)
        turn_ends = loop.time() + DELIVERY_TURN_S
        try:
            while not self._stopping:
                self._wake.clear()
                self._note_lag(loop.time())  # the beat may not have run yet after a stall
                stalled, self._stalled_ms = self._stalled_ms, 0
                if stalled:
                    self.core.stalled(stalled)
                    await asyncio.sleep(0)
                stepped = self._step_inbox()
                self.core.tick(self._clock.now_ms(), timestamp_ms=self._clock.wall_clock_ms())
                self._log_transition()
                resigning, self._resign_requested = self._resign_requested, False
                if resigning:
                    self.core.resign(self._clock.now_ms())
                self._check_leadership()
                ready = self.core.ready()
                flushed_end_offset = await self._write(ready)
                self._send(ready.messages)
                if resigning:
                    self._resign_sent.set()
                await self._deliver(ready)
                self.core.advance(ready, now_ms=self._clock.now_ms())
                if ready.batches:
                    self._written.set()  # room for proposals (wait_room)
                if flushed_end_offset is not None:
                    self.core.flushed(flushed_end_offset)
                self._log_transition()
                self._check_leadership()
                self._resolve_waiters()
                self._note_caught_up()
                if ready.has_work or flushed_end_offset is not None or stepped or self._inbox:
                    if (ready.committed and loop.time() < turn_ends
                            and not isinstance(self.core.state, Leader)):
                        continue  # more committed batches to deliver (DELIVERY_TURN_S)
                    await asyncio.sleep(0)  # let proposers in, then take the next turn
                    turn_ends = loop.time() + DELIVERY_TURN_S
                    continue
                await self._sleep_until(ready.wake_at_ms)
                turn_ends = loop.time() + DELIVERY_TURN_S
        except BaseException as failure:
            self._failure = failure
            self._fail_waiters(failure)
            if not isinstance(failure, asyncio.CancelledError):
                log.exception("the raft loop stopped")
            raise
        finally:
            if self._beat_handle is not None:
                self._beat_handle.cancel()

    async def _write(self, ready: Ready) -> int | None:
        """Persist and append in a worker thread; the durable end offset, if it moved."""
        if (
            ready.quorum_state is None
            and not ready.batches
            and ready.truncate_to is None
            and ready.snapshot_chunk is None
            and ready.install_snapshot is None
            and ready.delete_before is None
        ):
            return None
        return await asyncio.to_thread(self._write_blocking, ready)

    def _write_blocking(self, ready: Ready) -> int:
        started = time.monotonic()
        try:
            return self._persist(ready)
        finally:
            took_ms = (time.monotonic() - started) * 1000
            if took_ms > 500:
                log.warning("metadata log write+fsync took %.0f ms", took_ms)

    def _persist(self, ready: Ready) -> int:
        if ready.quorum_state is not None and self._state_store is not None:
            self._state_store.write(ready.quorum_state)
        self._write_snapshots(ready)
        if ready.truncate_to is not None:
            self._store.truncate_to(ready.truncate_to)
        if ready.batches:
            self._store.append(b"".join(ready.batches))
        return self._store.flush() if ready.batches else self._store.flushed_offset

    def _write_snapshots(self, ready: Ready) -> None:
        """Step 2 of the Ready contract for snapshots: a fetched chunk, then the install of a
        complete fetched snapshot, then the deletion of the log below a snapshot."""
        chunk = ready.snapshot_chunk
        if chunk is not None:
            if chunk.position == 0:
                if self._snapshot_writer is not None:
                    self._snapshot_writer.abort()
                self._snapshot_writer = self._store.create_snapshot(chunk.snapshot_id)
            writer = self._snapshot_writer
            invariant(
                writer is not None
                and writer.snapshot_id == chunk.snapshot_id
                and writer.size_bytes == chunk.position,
                f"snapshot chunk at {chunk.position} of {chunk.snapshot_id} out of order",
            )
            assert writer is not None
            writer.append(chunk.data)
            if chunk.is_last:
                writer.freeze()
                self._snapshot_writer = None
        if ready.install_snapshot is not None:
            self._store.install_snapshot(ready.install_snapshot)
        if ready.delete_before is not None:
            self._store.delete_before(ready.delete_before)

    async def write_snapshot(
        self, end_offset: int, values: Iterable[bytes], *, last_contained_log_timestamp: int
    ) -> SnapshotId:
        """Store `values`, the state machine's records after every entry below `end_offset`
        (an offset the listeners have reached), as snapshot <end_offset>-<epoch> (header,
        the records, footer). The log below it stays until `delete_before`.
        `last_contained_log_timestamp` is the append time of the last batch below
        `end_offset`."""
        snapshot_id = self.core.snapshot_id_at(end_offset)
        # built off the loop too: 175,000 records took 2.3 s, in which no fetch was answered
        await asyncio.to_thread(
            self._write_snapshot_blocking, snapshot_id, values,
            last_contained_log_timestamp, self._clock.wall_clock_ms())
        return snapshot_id

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Delete the log below stored snapshot `snapshot_id` (the shell's retention policy
        decides when); fetchers below it then get the snapshot."""
        self.core.delete_before(snapshot_id)
        self._wake.set()

    def _write_snapshot_blocking(self, snapshot_id: SnapshotId, values: Iterable[bytes],
                                 last_contained_log_timestamp: int, timestamp_ms: int) -> None:
        batches = build_snapshot(
            snapshot_id,
            values,
            last_contained_log_timestamp=last_contained_log_timestamp,
            timestamp_ms=timestamp_ms,
        )
        writer = self._store.create_snapshot(snapshot_id)
        try:
            for batch in batches:
                writer.append(batch)
            writer.freeze()
        except BaseException:
            writer.abort()
            raise

    def _note_caught_up(self) -> None:
        if self._caught_up.is_set():
            return
        core = self.core
        if core.leader_and_epoch.leader_id == core.node_id:
            caught_up = self._leader_announced.is_set()
        else:
            target = self._leader_high_watermark
            caught_up = target >= 0 and core.applied_offset >= target
        if caught_up:
            self._caught_up.set()

    def _step_inbox(self) -> bool:
        inbox = self._inbox
        if not inbox:
            return False
        while inbox:
            message = inbox.popleft()
            body = message.body
            if isinstance(body, FetchResponse) and body.error == ErrorCode.none:
                self._leader_high_watermark = max(self._leader_high_watermark, body.high_watermark)
                self._fetch_answered.set()
            elif isinstance(body, Unreachable):
                log.debug("raft node %d: request %d to node %d failed (unreachable)",
                          self.core.node_id, message.correlation_id, message.source_id)
            self.core.step(message, self._clock.now_ms())
        return True

    def _log_transition(self) -> None:
        state, before = self.core.state, self._logged_state
        reason = self.core.take_transition_reason()
        if state != before:
            self._logged_state = state
            # a change of role is rare and what an operator looks for (Kafka logs it too)
            level = logging.INFO if type(state) is not type(before) else logging.DEBUG
            log.log(level, "raft node %d: %r -> %r%s", self.core.node_id, before, state,
                    f": {reason}" if reason else "")

    def _send(self, messages: Sequence[OutboundMessage]) -> None:
        """Answers go back to the connection that asked; requests to the transport."""
        for message in messages:
            if isinstance(message.body, RaftResponse):
                future = self._answers.get((message.destination_id, message.correlation_id))
                if future is not None and not future.done():
                    future.set_result(message.body)
                continue
            invariant(self._transport is not None, "a single voter has nobody to send to")
            assert self._transport is not None
            self._transport.send(message)

    def _check_leadership(self) -> None:
        """Fail the waiters of an epoch this node no longer leads, for offsets not
        committed while it did."""
        state = self.core.state
        leading = state.epoch if isinstance(state, Leader) else None
        if self._led_epoch is not None and leading != self._led_epoch:
            lost, committed = self._led_epoch, self._led_high_watermark
            error = NotLeaderError(*self.leader_and_epoch)
            kept = []
            for waiter in self._waiters:
                offset, _, epoch, future = waiter
                if epoch == lost and offset >= committed:
                    if not future.done():
                        future.set_exception(error)
                else:
                    kept.append(waiter)
            heapq.heapify(kept)
            self._waiters = kept
            self._lost[lost] = committed
            while len(self._lost) > LEADERSHIPS_KEPT:
                del self._lost[min(self._lost)]
        self._led_epoch = leading
        if leading is not None:
            self._led_high_watermark = max(self._led_high_watermark, self.core.high_watermark or 0)

    async def _deliver(self, ready: Ready) -> None:
        if ready.load_snapshot is not None:
            for listener in self._listeners:
                load = getattr(listener, "handle_load_snapshot", None)
                invariant(
                    load is not None,
                    f"{listener!r} cannot load snapshot {ready.load_snapshot}: its state "
                    "would no longer be a fold over the log",
                )
                assert load is not None
                loading = load(ready.load_snapshot, self._store)
                if inspect.isawaitable(loading):  # a listener that lets the loop turn: the
                    await loading  # batches after the snapshot wait for it, this turn too
        for batch in ready.committed:
            for listener in self._listeners:
                listener.handle_commit(batch)
        change = ready.leader_change
        if change is not None:
            for listener in self._listeners:
                listener.handle_leader_change(change.leader_id, change.epoch)
            if change.leader_id == self.core.node_id:
                self._leader_announced.set()
            else:
                self._leader_announced.clear()

    def _resolve_waiters(self) -> None:
        applied = self.core.applied_offset
        proposed = self._proposed
        while proposed and proposed[0][0] < applied and proposed[0][0] < self._lost.get(
            proposed[0][2], applied
        ):
            proposed.popleft()  # committed and delivered: nothing left to tell about it
        while len(proposed) > LEADERSHIPS_KEPT:
            proposed.popleft()
        while self._waiters and self._waiters[0][0] < applied:
            _, _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)

    def _fail_waiters(self, failure: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        for _, _, _, future in waiters:
            if not future.done():
                if isinstance(failure, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(failure)

    async def _sleep_until(self, wake_at_ms: int) -> None:
        delay_ms = max(0, wake_at_ms - self._clock.now_ms())
        if delay_ms == 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=delay_ms / 1000)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise NotLeaderError(NO_LEADER, self.leader_and_epoch.epoch) from self._failure
