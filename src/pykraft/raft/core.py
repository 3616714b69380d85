"""The sans-I/O Raft core of the KRaft metadata log.

Theory of operation. The core decides; the shell (driver.py, or the simulator) does every
read of a clock and every write of a file, in the order `Ready` spells out:

    1. persist `ready.quorum_state` (atomically)        -- the epoch, the vote, the leader
    2. append `ready.batches` to the log, then fsync    -- offsets and epochs already set
    3. send `ready.messages`
    4. deliver `ready.committed` to listeners, then `ready.leader_change`
    5. `advance(ready)`, then `flushed(end_offset)` with the log's durable end
    6. call `tick` again no later than `ready.wake_at_ms`, or sooner on a proposal

The core trusts the shell's reports and nothing else: a vote (its own included) counts only
once the quorum state carrying it was persisted, and an entry counts toward the high
watermark only once `flushed` says it is durable -- appended is not enough.

With a single voter (all this core supports for now) the life of a node is:

    start:   restore the state of the quorum-state file, then become Candidate(epoch + 1)
             whatever it was: every restart bumps the epoch, and a node that led before the
             restart never leads that epoch again (see `state.restore`)
    Ready 1: persist the candidacy (a vote for itself); `advance` -> Leader of that epoch
    Ready 2: persist the leadership, append the LeaderChangeMessage control batch at the
             epoch start offset; once it is flushed the high watermark jumps to the flushed
             end, committing everything before it -- that is how a restart replays the
             whole log to the listeners
    then:    proposals gather in a draft batch that is sealed (RecordBatch v2 bytes, built
             once) when `controller.quorum.append.linger.ms` has passed since its first
             record or it is full; one Ready appends every sealed batch, one fsync covers
             them: group commit

Invariants: offsets are assigned contiguously by the leader and never reused in an epoch;
the high watermark never decreases and never passes the durable end; committed batches
are delivered once each, in offset order, and always come out of the log itself (so a
restart and a live run deliver the same bytes); the leader change is announced to
listeners only once every batch before the epoch start has been delivered to them.

The core reads committed batches back through `RaftLogView` (the in-memory store in the
simulator), as etcd's raft reads its `Storage`; it never writes.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from pykraft.errors import (
    InvalidConfig,
    InvariantViolation,
    KafkaStorageError,
    MessageTooLarge,
    NotLeaderError,
    RequestTimedOut,
    invariant,
)
from pykraft.raft.control import leader_change_record
from pykraft.raft.log_store import RaftLogView
from pykraft.raft.state import (
    Candidate,
    EpochState,
    Leader,
    LeaderAndEpoch,
    QuorumStateData,
    become_candidate,
    become_leader,
    has_majority,
    leader_and_epoch,
    restore,
    to_quorum_state,
)
from pykraft.records.batch import iter_headers, read_header
from pykraft.records.record import build_batch, iter_records

__all__ = [
    "RaftConfig",
    "CommittedBatch",
    "OutboundMessage",
    "Ready",
    "RaftCore",
]

IDLE_WAKE_MS: Final = 1_000  # nothing is due: look again anyway, so a lost wake-up costs little
RECORD_OVERHEAD_BYTES_MAX: Final = 24  # a v2 record's framing around a value, keys null


@dataclass(frozen=True, slots=True)
class RaftConfig:
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    batch_bytes_max: int = 8 * 1024 * 1024  # Kafka's metadata batch limit
    pending_batches_max: int = 5  # batches' worth of proposals held before appends refuse
    apply_bytes_max: int = 8 * 1024 * 1024  # committed bytes read back per Ready

    def __post_init__(self) -> None:
        if self.append_linger_ms < 0 or self.batch_bytes_max < 1024:
            raise InvalidConfig(f"invalid raft configuration {self!r}")
        if self.pending_batches_max < 1 or self.apply_bytes_max < 1:
            raise InvalidConfig(f"invalid raft configuration {self!r}")


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """One committed batch as listeners see it. A control batch (the LeaderChangeMessage)
    is delivered with no records, so that listeners still see every offset go by."""

    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp: int
    records: tuple[bytes, ...]
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A request for another voter; a single voter never sends one."""

    destination_id: int
    body: object


@dataclass(frozen=True, slots=True)
class Ready:
    quorum_state: QuorumStateData | None  # 1. persist before anything below
    batches: tuple[bytes, ...]  # 2. append, then fsync, before step 3
    messages: tuple[OutboundMessage, ...]  # 3. send
    committed: tuple[CommittedBatch, ...]  # 4. deliver in order, then the leader change
    leader_change: LeaderAndEpoch | None
    high_watermark: int | None  # None until this leader's first entry is committed
    wake_at_ms: int  # 6. tick again no later than this

    @property
    def has_work(self) -> bool:
        return bool(
            self.quorum_state is not None
            or self.batches
            or self.messages
            or self.committed
            or self.leader_change is not None
        )


@dataclass(slots=True)
class _Draft:
    """Proposals gathering into the next batch; offsets are already promised to them."""

    base_offset: int
    first_proposal_ms: int
    values: list[tuple[bytes, int]] = field(default_factory=list)  # (value, timestamp)
    size_bytes: int = 0


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: frozenset[int],
        log: RaftLogView,
        persisted: QuorumStateData,
        rng: random.Random,
        now_ms: int,
        *,
        config: RaftConfig | None = None,
    ) -> None:
        if voters != frozenset({node_id}):
            raise InvalidConfig(
                f"node {node_id} with voters {sorted(voters)}: only a single-voter quorum, "
                "this node alone, is supported so far"
            )
        if persisted.leader_epoch < log.last_epoch:
            raise KafkaStorageError(
                f"the metadata log holds epoch {log.last_epoch}, newer than epoch "
                f"{persisted.leader_epoch} in quorum-state"
            )
        self.node_id = node_id
        self.voters = voters
        self.config = config or RaftConfig()
        self._log = log
        self._rng = rng  # election jitter, once there are elections to lose
        self._now_ms = now_ms
        self._timestamp_offset_ms = 0  # wall clock minus now_ms, for batch timestamps
        self._persisted = persisted
        self._log_end_offset = log.log_end_offset  # appended by the shell
        self._flushed_end_offset = log.log_end_offset  # the shell opens the log flushed
        self._next_offset = log.log_end_offset  # promised to proposals
        self._high_watermark: int | None = None
        self._applied_offset = 0  # next offset to deliver to listeners
        self._notified: LeaderAndEpoch | None = None
        self._draft: _Draft | None = None
        self._sealed: deque[bytes] = deque()
        self._pending_bytes = 0
        restored = restore(persisted, local_id=node_id, voters=voters)
        self._state: EpochState = become_candidate(
            restored, local_id=node_id, voters=voters, log_last_epoch=log.last_epoch
        )

    # observers ----------------------------------------------------------------------------

    @property
    def state(self) -> EpochState:
        return self._state

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return leader_and_epoch(self._state, local_id=self.node_id)

    @property
    def high_watermark(self) -> int | None:
        return self._high_watermark

    @property
    def applied_offset(self) -> int:
        """The next offset listeners will be given: all below it was delivered."""
        return self._applied_offset

    @property
    def log_end_offset(self) -> int:
        """End of what the shell has appended (durable or not)."""
        return self._log_end_offset

    @property
    def next_offset(self) -> int:
        """The offset the next proposed record will get."""
        return self._next_offset

    # inputs -------------------------------------------------------------------------------

    def tick(self, now_ms: int, *, timestamp_ms: int | None = None) -> None:
        """Let time pass. `timestamp_ms`, the wall clock, stamps batches (default now_ms)."""
        self._observe_time(now_ms, timestamp_ms)

    def propose(
        self, records: Sequence[bytes], now_ms: int, *, timestamp_ms: int | None = None
    ) -> int:
        """Append `records` atomically (all in one batch); return the last one's offset.

        Raises NotLeaderError when this node does not lead, MessageTooLarge when the
        records cannot fit one batch, RequestTimedOut when too much waits to be written.
        """
        self._observe_time(now_ms, timestamp_ms)
        if not isinstance(self._state, Leader):
            raise NotLeaderError(*self.leader_and_epoch)
        if not records:
            raise ValueError("a proposal needs at least one record")
        size = sum(len(value) + RECORD_OVERHEAD_BYTES_MAX for value in records)
        if size > self.config.batch_bytes_max:
            raise MessageTooLarge(
                f"{size} bytes of records, a batch holds at most {self.config.batch_bytes_max}"
            )
        if (
            self._pending_bytes + size
            > self.config.batch_bytes_max * self.config.pending_batches_max
        ):
            raise RequestTimedOut(f"{self._pending_bytes} bytes wait to be written to the log")
        if self._draft is not None and self._draft.size_bytes + size > self.config.batch_bytes_max:
            self._seal_draft()
        if self._draft is None:
            self._draft = _Draft(base_offset=self._next_offset, first_proposal_ms=now_ms)
        timestamp = now_ms + self._timestamp_offset_ms
        self._draft.values.extend((value, timestamp) for value in records)
        self._draft.size_bytes += size
        self._pending_bytes += size
        self._next_offset += len(records)
        return self._next_offset - 1

    def ready(self) -> Ready:
        """What the shell must do now. Calling it twice without `advance` repeats itself,
        except that a draft whose linger has passed is sealed the first time."""
        desired = to_quorum_state(self._state, local_id=self.node_id, voters=self.voters)
        if self._draft is not None and self._now_ms >= self._linger_deadline_ms(self._draft):
            self._seal_draft()
        committed = self._read_committed()
        applied_after = committed[-1].last_offset + 1 if committed else self._applied_offset
        return Ready(
            quorum_state=None if desired == self._persisted else desired,
            batches=tuple(self._sealed),
            messages=(),
            committed=committed,
            leader_change=self._leader_change_due(applied_after),
            high_watermark=self._high_watermark,
            wake_at_ms=self._wake_at_ms(applied_after),
        )

    def advance(self, ready: Ready) -> None:
        """The shell has done steps 1-4 of `ready`: its state is durable, its batches are
        appended (not necessarily flushed: see `flushed`), its commits delivered."""
        if ready.quorum_state is not None:
            self._persisted = ready.quorum_state
        for batch in ready.batches:
            header = read_header(batch)
            invariant(
                bool(self._sealed) and self._sealed[0] is batch,
                f"advance with batch at {header.base_offset} this core did not hand out",
            )
            invariant(
                header.base_offset == self._log_end_offset,
                f"batch at {header.base_offset} appended at log end {self._log_end_offset}",
            )
            self._sealed.popleft()
            self._pending_bytes -= header.size
            self._log_end_offset = header.next_offset
        if ready.committed:
            invariant(ready.committed[0].base_offset == self._applied_offset, "commit gap")
            self._applied_offset = ready.committed[-1].last_offset + 1
        if ready.leader_change is not None:
            self._notified = ready.leader_change
        self._maybe_become_leader()

    def flushed(self, end_offset: int) -> None:
        """The log is durable below `end_offset`: only now do those entries count."""
        invariant(
            end_offset <= self._log_end_offset,
            f"flushed up to {end_offset} past the appended end {self._log_end_offset}",
        )
        self._flushed_end_offset = max(self._flushed_end_offset, end_offset)
        self._maybe_advance_high_watermark()

    # transitions --------------------------------------------------------------------------

    def _maybe_become_leader(self) -> None:
        state = self._state
        if not isinstance(state, Candidate) or not has_majority(state.granting_voters, self.voters):
            return
        if self._persisted != to_quorum_state(state, local_id=self.node_id, voters=self.voters):
            return  # our own vote is not durable yet
        invariant(self._next_offset == self._log_end_offset, "a candidate holds no proposals")
        leader = become_leader(state, voters=self.voters, log_end_offset=self._log_end_offset)
        self._state = leader
        self._seal(self._leader_change_batch(leader))
        self._next_offset += 1

    def _maybe_advance_high_watermark(self) -> None:
        """With one voter the majority's durable end is ours. A new leader commits nothing
        until an entry of its own epoch (the LeaderChangeMessage) is durable."""
        state = self._state
        if not isinstance(state, Leader) or self._flushed_end_offset <= state.epoch_start_offset:
            return
        new_high_watermark = self._flushed_end_offset
        if self._high_watermark is not None:
            invariant(new_high_watermark >= self._high_watermark, "the high watermark fell")
        self._high_watermark = new_high_watermark

    # helpers ------------------------------------------------------------------------------

    def _observe_time(self, now_ms: int, timestamp_ms: int | None) -> None:
        invariant(now_ms >= self._now_ms, f"time went back from {self._now_ms} to {now_ms}")
        self._now_ms = now_ms
        if timestamp_ms is not None:
            self._timestamp_offset_ms = timestamp_ms - now_ms

    def _linger_deadline_ms(self, draft: _Draft) -> int:
        return draft.first_proposal_ms + self.config.append_linger_ms

    def _seal_draft(self) -> None:
        draft = self._draft
        if draft is None or not draft.values:
            raise InvariantViolation("sealing an empty draft")
        self._draft = None
        self._pending_bytes -= draft.size_bytes
        batch = build_batch(
            ((None, value, (), timestamp) for value, timestamp in draft.values),
            base_offset=draft.base_offset,
            partition_leader_epoch=self._state.epoch,
        )
        self._seal(batch)

    def _seal(self, batch: bytes) -> None:
        self._sealed.append(batch)
        self._pending_bytes += len(batch)

    def _leader_change_batch(self, leader: Leader) -> bytes:
        key, value = leader_change_record(
            leader_id=self.node_id, voters=self.voters, granting_voters=leader.granting_voters
        )
        return build_batch(
            [(key, value, (), self._now_ms + self._timestamp_offset_ms)],
            base_offset=leader.epoch_start_offset,
            partition_leader_epoch=leader.epoch,
            is_control=True,
        )

    def _read_committed(self) -> tuple[CommittedBatch, ...]:
        """Whole batches below the high watermark not yet delivered, read from the log.

        Until listeners have heard that we lead, delivery stops at our epoch start, so that
        they learn it exactly between the last batch of the old epochs and the first of ours.
        """
        high_watermark = self._high_watermark
        if high_watermark is None:
            return ()
        state = self._state
        if isinstance(state, Leader) and self._notified != self.leader_and_epoch:
            high_watermark = min(high_watermark, state.epoch_start_offset)
        if self._applied_offset >= high_watermark:
            return ()
        data = self._log.read(self._applied_offset, self.config.apply_bytes_max)
        committed: list[CommittedBatch] = []
        expected = self._applied_offset
        for position, header in iter_headers(data, check=True):
            if header.last_offset >= high_watermark:
                break
            invariant(
                header.base_offset == expected,
                f"read batch {header.base_offset}, expected {expected}",
            )
            committed.append(_committed_batch(data, position, header.is_control))
            expected = header.next_offset
        invariant(bool(committed), f"nothing readable at committed offset {expected}")
        return tuple(committed)

    def _leader_change_due(self, applied_after: int) -> LeaderAndEpoch | None:
        current = self.leader_and_epoch
        if current == self._notified:
            return None
        state = self._state
        if isinstance(state, Leader) and (
            self._high_watermark is None or applied_after < state.epoch_start_offset
        ):
            return None  # first our epoch commits, and listeners catch up with what precedes it
        return current

    def _wake_at_ms(self, applied_after: int) -> int:
        high_watermark = self._high_watermark
        if high_watermark is not None and applied_after < high_watermark:
            return self._now_ms  # more committed batches (or the leader change) are due
        if self._draft is not None:
            return self._linger_deadline_ms(self._draft)
        return self._now_ms + IDLE_WAKE_MS


def _committed_batch(data: bytes, position: int, is_control: bool) -> CommittedBatch:
    header = read_header(data, position)
    values: tuple[bytes, ...] = ()
    if not is_control:
        decoded = []
        for record in iter_records(data, position):
            if record.value is None:
                raise InvariantViolation(f"null value at offset {record.offset}")
            decoded.append(record.value)
        values = tuple(decoded)
    return CommittedBatch(
        base_offset=header.base_offset,
        last_offset=header.last_offset,
        epoch=header.partition_leader_epoch,
        append_timestamp=header.max_timestamp,
        records=values,
        is_control=is_control,
    )
