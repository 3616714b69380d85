"""The sans-I/O Raft core of the KRaft metadata log (KIP-595, KIP-996 pre-vote, KIP-630
snapshots).

Theory of operation. The core decides; the shell (driver.py, or the simulator) does every
read of a clock, every write of a file and every send, in the order `Ready` spells out:

    1. persist `ready.quorum_state` (atomically)        -- the epoch, the vote, the leader
    2. write `ready.snapshot_chunk` into the snapshot being fetched (position 0 starts it:
       `store.create_snapshot`; the last chunk: `freeze`), then `store.install_snapshot(
       ready.install_snapshot)`, then `store.delete_before(ready.delete_before)`; then
       truncate the log to `ready.truncate_to`, append `ready.batches`, then fsync
    3. send `ready.messages`                            -- only now: they may rest on 1 and 2
    4. load `ready.load_snapshot` into the state machine (it replaces the state machine's
       state: the snapshot holds everything below its end offset), then deliver
       `ready.committed` to listeners, then `ready.leader_change`
    5. `advance(ready)`, then `flushed(end_offset)` with the log's durable end
    6. call `tick` again no later than `ready.wake_at_ms`, or sooner on a proposal or message

The core trusts the shell's reports and nothing else: a vote (its own included) counts only
once the quorum state carrying it was persisted, and an entry counts toward the high
watermark only once `flushed` says it is durable -- appended is not enough. A follower
fetches from its durable log end only, so the offset a leader learns from a fetch is
durable at the follower too.

Roles (the states of state.py; timers are the core's):

    voter, no leader known   waits a randomized election timeout (election.timeout.ms plus
                             up to as much again, drawn from the injected rng), then turns
                             Prospective and asks every voter for a pre-vote; a majority of
                             pre-votes makes it Candidate of epoch + 1 (its vote for itself
                             persisted first), a majority of durable votes makes it Leader
    leader                   appends a LeaderChangeMessage at its epoch start, sends
                             BeginQuorumEpoch to the voters (again until they answer or
                             fetch), answers Fetch; resigns when no majority has fetched
                             within 1.5 x fetch.timeout.ms (check-quorum), or on `resign`,
                             sending EndQuorumEpoch with its most caught-up voters first
    follower / observer      fetches (fetch offset + last fetched epoch) from its leader,
                             one request at a time, each once the last answer is written
                             and flushed; truncates on a DivergingEpoch; a voter that has
                             not heard from its leader within fetch.timeout.ms of its last
                             fetch (plus a jitter of up to election.backoff.max.ms / 2,
                             drawn for each leader it follows; the time it took to write an
                             answer is its own) turns Prospective; an observer keeps
                             its leader (its heartbeats and requests to the controller still
                             go there) and fetches from a voter drawn at random until the
                             leader answers or a voter names a newer one, as Kafka's
                             observers do; both sooner when the leader is unreachable
                             (below)
    single voter             skips pre-vote: it runs for the next epoch at start and leads

Votes. A voter grants a vote in an epoch at most once, durably, and only to a candidate
whose log is at least as up to date: (last epoch, log end offset) compared in that order.
A pre-vote is granted on the same log test, to a candidate of a higher epoch, when the
voter has not heard from a live leader within fetch.timeout.ms: a node that rejoins after a
partition cannot unseat a healthy leader. Nothing about a pre-vote is persisted. A round
(of pre-votes or votes) that so many voters refuse that no majority is left is lost: the
node tries again after a random backoff of retry.backoff.ms x 1..2^k for the k-th round
lost in a row, at most election.backoff.max.ms, instead of a whole election timeout (a
pre-vote is often refused for a passing reason: the voter had not found the leader dead yet).

An unreachable leader. A leader killed outright closes its connections and refuses new
ones; the transport reports that as an `Unreachable` input for the request that failed
(messages.py). Waiting out fetch.timeout.ms would cost every failover two seconds, so a
follower acts on the report, but only as far as a wrong one (a leader restarting its
listener, a report that comes late) is harmless:

    1st failed fetch         it fetches again after controller.quorum.retry.backoff.ms
                             (one refused connect proves little)
    2nd failure in a row     it stops vouching for the leader -- it grants pre-votes from
                             now on -- and gives up on it after a random jitter of up to
                             election.backoff.max.ms / 2 instead of fetch.timeout.ms, still
                             fetching meanwhile: any answer from the leader cancels all this
    then                     Prospective, as after a fetch timeout: a pre-vote that the other
                             voters refuse while they still hear from the leader, and the
                             leader's next answer takes it back to following. An observer
                             (a broker) has no vote to split: no jitter, it asks the voters
                             who leads at once

Only a report of the fetch in flight counts, so a stale one of an older fetch does nothing.
The jitter is what keeps two followers of a dead leader, who learn of it within the same
millisecond, from asking for pre-votes together, granting each other's and splitting the
vote. Safety never rests on any of this: it changes only when a node asks for pre-votes.

Commit. The leader's high watermark is the largest offset that a majority of voters (the
leader's own fsynced end included) has reached, once that offset covers an entry of the
leader's own epoch: an entry of an earlier epoch is never committed by counting replicas
(Raft's figure 8), only by the commit of a later entry of the current epoch. A follower's
high watermark is the leader's, capped at its own durable log end. Neither ever decreases.

Divergence. The leader checks (fetch offset, last fetched epoch) against its epoch cache: if
it has no entries of that epoch, or that epoch ends below the fetch offset in its log, it
answers DivergingEpoch(largest epoch <= last fetched epoch, where that epoch ends). If the
follower holds that epoch too, it truncates to the smaller of the two ends (the entries of
one epoch were written by one leader, so up to there the logs match); if not, to where its
own largest epoch below that one ends (as Kafka's truncateToEndOffset: the leader's end of
an epoch the follower lacks may fall inside one of the follower's batches) -- never below
its high watermark -- and fetches again; each round strictly shortens its log until it
matches the leader's.

With a single voter the life of a node is:

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
             record or it is full; one Ready appends the sealed batches, up to
             write_bytes_max of them, and one fsync covers them: group commit

Invariants: offsets are assigned contiguously by the leader and never reused in an epoch;
the high watermark never decreases and never passes the durable end; no truncation goes
below it; committed batches are delivered once each, in offset order, and always come out
of the log itself (so a restart and a live run deliver the same bytes); the leader change is
announced to listeners only once every batch before the epoch start has been delivered.

Snapshots (KIP-630). The state machine's image after offset N is a snapshot with id
(end offset N, epoch of entry N-1), stored beside the log (log_store.py, snapshot.py). The
shell takes one when its policy says so, at an offset its listeners have applied: it asks
`snapshot_id_at(applied_offset)` for the id, writes and freezes the snapshot through the
store, and may then call `delete_before(id)`: the log below it goes (Ready.delete_before)
and the log start moves up. The log start is 0 or the end of the earliest snapshot; its
epoch stands for an empty log's last epoch.

    start        the latest snapshot is loaded first (Ready.load_snapshot), then the log
                 from its end offset is delivered as it commits
    leader       answers a Fetch below its log start -- or whose last fetched epoch is
                 unknown at or below the log start, so that the logs diverge below it --
                 with the id of its latest snapshot (FetchResponse.snapshot_id), and a
                 FetchSnapshot with the bytes asked for, up to fetch_snapshot_bytes_max
    follower     given a snapshot id, pulls the snapshot with FetchSnapshot, one chunk at a
                 time, each written (Ready.snapshot_chunk) before the next is asked for;
                 SNAPSHOT_NOT_FOUND or POSITION_OUT_OF_RANGE start over with a Fetch. With
                 the last chunk the snapshot is frozen and installed (Ready.install_snapshot:
                 the log is replaced by it), loaded into the state machine, and the high
                 watermark is at least its end: a leader only sends committed snapshots

A snapshot's end offset is always a batch boundary: the state machine applies whole batches.

The core reads its log back through `RaftLogView` (the in-memory store in the simulator),
as etcd's raft reads its `Storage`; it never writes. At start it scans the batch headers
once, from the log start, to build its epoch cache (epoch -> start offset).
"""

from __future__ import annotations

import bisect
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from kio.schema.errors import ErrorCode

from pykraft.errors import (
    CorruptRecord,
    InvalidConfig,
    InvariantViolation,
    KafkaStorageError,
    MessageTooLarge,
    NotLeaderError,
    PositionOutOfRange,
    RequestTimedOut,
    SnapshotNotFound,
    invariant,
)
from pykraft.raft.control import leader_change_record
from pykraft.raft.log_store import NO_EPOCH, RaftLogView, check_appended
from pykraft.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DivergingEpoch,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    InboundMessage,
    OutboundMessage,
    RaftMessage,
    SnapshotId,
    Unreachable,
    VoteRequest,
    VoteResponse,
)
from pykraft.raft.state import (
    NO_LEADER,
    NO_VOTE,
    Candidate,
    EpochState,
    Follower,
    Leader,
    LeaderAndEpoch,
    Prospective,
    QuorumStateData,
    Resigned,
    Unattached,
    Voted,
    become_candidate,
    become_follower,
    become_leader,
    become_prospective,
    become_resigned,
    become_unattached,
    become_voted,
    has_majority,
    leader_and_epoch,
    restore,
    to_quorum_state,
)
from pykraft.records.batch import BatchHeader, iter_headers, read_header
from pykraft.records.record import build_batch, iter_records

__all__ = [
    "RaftConfig",
    "CommittedBatch",
    "OutboundMessage",
    "ReplicaState",
    "SnapshotChunk",
    "Ready",
    "RaftCore",
]

IDLE_WAKE_MS: Final = 1_000  # nothing is due: look again anyway, so a lost wake-up costs little
RECORD_OVERHEAD_BYTES_MAX: Final = 24  # a v2 record's framing around a value, keys null
SCAN_BYTES: Final = 1 << 20  # bytes read at a time when scanning the log's epochs at start
NO_HIGH_WATERMARK: Final = -1
UNREACHABLE_FAILURES: Final = 2  # failed fetches in a row before the leader is suspected


def _proposal_bytes(records: Sequence[bytes]) -> int:
    """What a proposal of `records` counts against a batch and the bytes held unwritten."""
    return sum(len(value) + RECORD_OVERHEAD_BYTES_MAX for value in records)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    append_linger_ms: int = 25  # controller.quorum.append.linger.ms
    batch_bytes_max: int = 8 * 1024 * 1024  # Kafka's metadata batch limit
    # batches' worth of proposals held unwritten before appends refuse (128 MiB): a 1,000,000
    # partition controlled shutdown (42 MB) is appended whole, so that the controller's
    # queue (heartbeats first) is not held while the log writes it write_bytes_max a turn
    pending_batches_max: int = 16
    # committed bytes read back per Ready, and the size past which proposals no longer
    # join a batch (one proposal may be larger, up to batch_bytes_max): the listeners apply
    # a Ready in one turn of the event loop, which answers no fetch meanwhile (8 MiB of
    # PartitionRecords held a follower for seconds at 30,000 partitions, past its fetch
    # timeout; 256 KiB of PartitionChangeRecords still took a busy controller 1-3 s at
    # 100,000 partitions, as a follower folds each record twice: core and image)
    apply_bytes_max: int = 64 * 1024
    # batches handed out per Ready to be appended and flushed, and read for one fetch answer
    # (at least one batch each): a node's loop answers no fetch while it waits for its
    # write, and a follower fetches again only once it has flushed the last answer. At
    # 1,000,000 partitions a leader appending a controlled shutdown's 1,000,001 changes
    # (42 MB) in one write held its voters' fetches 3.8 s; written 4 MiB a turn, its
    # followers took 2.1-4.1 s to write and flush each 8 MiB answer before fetching again
    write_bytes_max: int = 1024 * 1024
    election_timeout_ms: int = 1_000  # controller.quorum.election.timeout.ms
    election_backoff_max_ms: int = 1_000  # controller.quorum.election.backoff.max.ms
    fetch_timeout_ms: int = 2_000  # controller.quorum.fetch.timeout.ms
    request_timeout_ms: int = 2_000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # how long the leader parks a fetch with nothing new
    fetch_bytes_max: int = 8 * 1024 * 1024 + 1024  # one full batch at least
    fetch_snapshot_bytes_max: int = 8 * 1024 * 1024  # bytes of snapshot per FetchSnapshot

    def __post_init__(self) -> None:
        if self.append_linger_ms < 0 or self.batch_bytes_max < 1024:
            raise InvalidConfig(f"invalid raft configuration {self!r}")
        if min(self.pending_batches_max, self.apply_bytes_max, self.write_bytes_max) < 1:
            raise InvalidConfig(f"invalid raft configuration {self!r}")
        if min(self.election_timeout_ms, self.fetch_timeout_ms, self.request_timeout_ms) < 1:
            raise InvalidConfig(f"invalid raft configuration {self!r}")
        if self.election_backoff_max_ms < 0 or self.retry_backoff_ms < 0:
            raise InvalidConfig(f"invalid raft configuration {self!r}")
        if not 0 <= self.fetch_max_wait_ms < self.request_timeout_ms:
            raise InvalidConfig("a parked fetch must be answered before its request times out")
        if self.fetch_bytes_max < self.batch_bytes_max:
            raise InvalidConfig("a fetch must hold at least one full batch")
        if self.fetch_snapshot_bytes_max < 1:
            raise InvalidConfig(f"invalid raft configuration {self!r}")

    @property
    def check_quorum_timeout_ms(self) -> int:
        return self.fetch_timeout_ms * 3 // 2

    @property
    def election_jitter_ms(self) -> int:
        """The most a voter that lost its leader (fetch timeout, or found unreachable) waits
        at random before it asks for pre-votes, so that two followers of a dead leader do not
        run together and split the vote: half of controller.quorum.election.backoff.max.ms,
        Kafka's bound on the random backoff between elections (500 ms by default)."""
        return self.election_backoff_max_ms // 2

    @classmethod
    def from_server_configs(cls, configs: Mapping[str, str]) -> RaftConfig:
        """The controller.quorum.* keys of server.properties, Kafka's defaults for those not
        set: append.linger.ms, election.timeout.ms, election.backoff.max.ms,
        fetch.timeout.ms, request.timeout.ms, retry.backoff.ms. The leader parks a fetch for
        at most 500 ms, or less than half the request timeout when that is shorter."""
        defaults = cls()

        def get(key: str, default: int) -> int:
            value = configs.get(f"controller.quorum.{key}")
            if value is None:
                return default
            try:
                return int(value)
            except ValueError:
                raise InvalidConfig(f"controller.quorum.{key}={value!r}: not an int") from None

        request_timeout_ms = get("request.timeout.ms", defaults.request_timeout_ms)
        return cls(
            append_linger_ms=get("append.linger.ms", defaults.append_linger_ms),
            election_timeout_ms=get("election.timeout.ms", defaults.election_timeout_ms),
            election_backoff_max_ms=get(
                "election.backoff.max.ms", defaults.election_backoff_max_ms
            ),
            fetch_timeout_ms=get("fetch.timeout.ms", defaults.fetch_timeout_ms),
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=get("retry.backoff.ms", defaults.retry_backoff_ms),
            fetch_max_wait_ms=min(defaults.fetch_max_wait_ms, max(0, request_timeout_ms // 2)),
        )


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


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of another replica (for the high watermark, check-quorum and
    DescribeQuorum): its last validated fetch offset and when it fetched -- by the clock,
    and by the time the leader spent able to hear it (`heard_ms`, for check-quorum)."""

    end_offset: int | None
    last_fetch_ms: int
    heard_ms: int
    last_caught_up_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """Bytes of a snapshot being fetched, for the shell to write at `position` (0 starts the
    snapshot anew); the chunk that completes `size` bytes is the last: freeze it then."""

    snapshot_id: SnapshotId
    position: int
    data: bytes
    size: int

    @property
    def is_last(self) -> bool:
        return self.position + len(self.data) == self.size


@dataclass(frozen=True, slots=True)
class Ready:
    quorum_state: QuorumStateData | None  # 1. persist before anything below
    batches: tuple[bytes, ...]  # 2. truncate, append, then fsync, before step 3
    messages: tuple[OutboundMessage, ...]  # 3. send
    committed: tuple[CommittedBatch, ...]  # 4. deliver in order, then the leader change
    leader_change: LeaderAndEpoch | None
    high_watermark: int | None  # None until this leader's first entry is committed
    wake_at_ms: int  # 6. tick again no later than this
    truncate_to: int | None = None  # 2. first remove every batch at or above this offset
    snapshot_chunk: SnapshotChunk | None = None  # 2. write (and, the last, freeze) first
    install_snapshot: SnapshotId | None = None  # 2. then replace the log by this snapshot
    delete_before: SnapshotId | None = None  # 2. then delete the log below this snapshot
    load_snapshot: SnapshotId | None = None  # 4. load into the state machine first

    @property
    def has_work(self) -> bool:
        return bool(
            self.quorum_state is not None
            or self.truncate_to is not None
            or self.batches
            or self.messages
            or self.committed
            or self.leader_change is not None
            or self.snapshot_chunk is not None
            or self.install_snapshot is not None
            or self.delete_before is not None
            or self.load_snapshot is not None
        )


@dataclass(slots=True)
class _Draft:
    """Proposals gathering into the next batch; offsets are already promised to them."""

    base_offset: int
    first_proposal_ms: int
    values: list[tuple[bytes, int]] = field(default_factory=list)  # (value, timestamp)
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class _InFlightFetch:
    destination_id: int
    correlation_id: int
    sent_ms: int
    fetch_offset: int  # or, for a FetchSnapshot, the position asked for
    snapshot_id: SnapshotId | None = None  # set for a FetchSnapshot


@dataclass(slots=True)
class _SnapshotFetch:
    """A snapshot a follower pulls from `leader_id`; `position` bytes are handed out."""

    snapshot_id: SnapshotId
    leader_id: int
    position: int = 0
    size: int | None = None


@dataclass(frozen=True, slots=True)
class _ParkedFetch:
    source_id: int
    correlation_id: int
    request: FetchRequest
    deadline_ms: int


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
        if not voters or min(voters) < 0 or node_id < 0:
            raise InvalidConfig(f"node {node_id} with voters {sorted(voters)}")
        if persisted.leader_epoch < log.last_epoch:
            raise KafkaStorageError(
                f"the metadata log holds epoch {log.last_epoch}, newer than epoch "
                f"{persisted.leader_epoch} in quorum-state"
            )
        self.node_id = node_id
        self.voters = voters
        self.is_voter = node_id in voters
        self.config = config or RaftConfig()
        self._log = log
        self._rng = rng  # election jitter and the voter an observer asks first
        self._now_ms = now_ms
        self._timestamp_offset_ms = 0  # wall clock minus now_ms, for batch timestamps
        self._persisted = persisted
        self._log_start_offset = log.log_start_offset
        self._log_start_epoch = _start_epoch(log)  # of the entry just below the log start
        self._epochs: list[tuple[int, int]] = _scan_epochs(log)  # (epoch, start offset)
        self._log_end_offset = log.log_end_offset  # appended by the shell
        self._flushed_end_offset = log.log_end_offset  # the shell opens the log flushed
        self._end_offset = log.log_end_offset  # appended or handed out to append
        self._next_offset = log.log_end_offset  # ... and promised to proposals
        self._pending_truncate: int | None = None
        self._high_watermark: int | None = None
        self._leader_high_watermark: int | None = None  # a follower's view of the leader's
        latest = log.latest_snapshot_id
        invariant(
            latest is None or self._log_start_offset <= latest.end_offset <= log.log_end_offset,
            f"latest snapshot {latest} outside the log [{self._log_start_offset}, "
            f"{log.log_end_offset}]",
        )
        self._applied_offset = self._log_start_offset  # next offset to deliver to listeners
        self._pending_load = latest  # the state machine starts from the latest snapshot
        self._pending_chunk: SnapshotChunk | None = None
        self._pending_install: SnapshotId | None = None
        self._pending_delete: SnapshotId | None = None
        self._snapshot_fetch: _SnapshotFetch | None = None
        self._notified: LeaderAndEpoch | None = None
        self._draft: _Draft | None = None
        self._sealed: deque[bytes] = deque()  # batches for the shell to append, in order
        self._pending_bytes = 0
        self._outbox: list[OutboundMessage] = []
        self._correlation_ids = rng.getrandbits(30)  # a restarted node does not reuse ids
        # timers (absolute ms) and per-role bookkeeping
        self._election_deadline_ms = now_ms
        self._fetch_deadline_ms = now_ms
        self._leader_contact_ms: int | None = None  # last proof that our leader is alive
        self._answered = False  # our leader answered a fetch and we have not fetched since
        self._deaf_ms = 0  # time this node's loop was held and could hear no one (`stalled`)
        self._fetch_credit_ms = 0  # stalls added to the fetch deadline since it was set
        self._transition_reason: str | None = None  # why a timer changed the state, for logs
        self._leader_failures = 0  # our fetches to it that failed in a row (`Unreachable`)
        self._rejecting_voters: frozenset[int] = frozenset()  # of this (pre-)vote round
        self._round_requests: dict[int, int] = {}  # its requests: correlation id -> voter
        self._lost_rounds = 0  # (pre-)vote rounds lost in a row
        self._fetch_jitter_ms = 0  # added to fetch.timeout.ms, drawn per leader followed
        self._fetch_in_flight: _InFlightFetch | None = None
        self._fetch_backoff_until_ms = now_ms
        self._replicas: dict[int, ReplicaState] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        self._begin_pending: set[int] = set()
        self._begin_resend_at_ms = now_ms
        self._check_quorum_at_ms = now_ms
        self._leader_start_ms = now_ms
        restored = restore(persisted, local_id=node_id, voters=voters)
        if not self.is_voter and not isinstance(restored, Follower):
            restored = Unattached(restored.epoch)
        self._state: EpochState = restored
        if voters == frozenset({node_id}):
            self._state = become_candidate(
                restored, local_id=node_id, voters=voters, log_last_epoch=self._last_epoch()
            )
            self._election_deadline_ms = now_ms + self._election_timeout_ms()
        elif isinstance(restored, Follower):
            self._fetch_jitter_ms = self._rng.randint(0, self.config.election_jitter_ms)
            self._restart_fetch_deadline()
        else:
            self._election_deadline_ms = now_ms + self._election_timeout_ms()

    # observers ----------------------------------------------------------------------------

    @property
    def state(self) -> EpochState:
        return self._state

    def take_transition_reason(self) -> str | None:
        """Why the last timer-driven change of state happened (a fetch timeout, a lost
        quorum), once; None for changes caused by messages."""
        reason, self._transition_reason = self._transition_reason, None
        return reason

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
    def log_start_offset(self) -> int:
        """The first offset of the log, once the shell has done what Ready asked."""
        return self._log_start_offset

    @property
    def hears_leader(self) -> bool:
        """Whether this node leads, or follows a leader that has answered within
        fetch.timeout.ms or, if not, was not found unreachable since it last answered: a
        leader busy with 300,000 partition changes answers late, a dead one refuses the
        connection (an observer names its leader in both cases while it asks the voters
        who leads)."""
        state = self._state
        return isinstance(state, Leader) or (isinstance(state, Follower) and (
            self._now_ms < self._fetch_deadline_ms or self._leader_failures == 0))

    @property
    def fetching_snapshot(self) -> SnapshotId | None:
        """The snapshot this follower is pulling from its leader, if any."""
        fetch = self._snapshot_fetch
        return None if fetch is None else fetch.snapshot_id

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end_offset

    @property
    def next_offset(self) -> int:
        """The offset the next proposed record will get."""
        return self._next_offset

    @property
    def replica_states(self) -> dict[int, ReplicaState]:
        """The leader's view of the other replicas (empty unless leading)."""
        return dict(self._replicas)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(the largest epoch <= `epoch` in the log, the offset where it ends): Kafka's
        OffsetsForLeaderEpoch over the log as appended or handed out to append. Below the
        log start only the snapshot's epoch is known, ending at the log start; an older
        epoch gives (0, log start)."""
        index = bisect.bisect_right(self._epochs, (epoch, self._end_offset + 1)) - 1
        if index < 0:
            first_start = self._epochs[0][1] if self._epochs else self._end_offset
            if self._log_start_offset > 0 and epoch >= self._log_start_epoch:
                return self._log_start_epoch, first_start
            return NO_EPOCH, first_start
        found, _ = self._epochs[index]
        if index + 1 < len(self._epochs):
            return found, self._epochs[index + 1][1]
        return found, self._end_offset

    # inputs -------------------------------------------------------------------------------

    def tick(self, now_ms: int, *, timestamp_ms: int | None = None) -> None:
        """Let time pass. `timestamp_ms`, the wall clock, stamps batches (default now_ms)."""
        self._observe_time(now_ms, timestamp_ms)
        self._poll()

    def stalled(self, stall_ms: int) -> None:
        """This node's loop was held for `stall_ms` and heard no one meanwhile: that silence
        is not its peers'. Check-quorum and the fetch timeout leave it out (the fetch
        deadline moves by at most fetch.timeout.ms in all)."""
        invariant(stall_ms >= 0, "a stall lasts no less than nothing")
        self._deaf_ms += stall_ms
        if isinstance(self._state, Follower):
            # at most one more fetch.timeout.ms per deadline: a loop that is always late
            # (saturated, not stalled once) still finds a dead leader
            credit = min(stall_ms, self.config.fetch_timeout_ms - self._fetch_credit_ms)
            if credit > 0:
                self._fetch_credit_ms += credit
                self._fetch_deadline_ms += credit

    def step(self, message: InboundMessage, now_ms: int) -> None:
        """Take one message from another node."""
        self._observe_time(now_ms, None)
        source, correlation_id, body = message.source_id, message.correlation_id, message.body
        match body:
            case VoteRequest():
                self._on_vote_request(source, correlation_id, body)
            case VoteResponse():
                self._on_vote_response(source, body)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum_epoch(source, correlation_id, body)
            case BeginQuorumEpochResponse():
                self._on_begin_quorum_epoch_response(source, body)
            case EndQuorumEpochRequest():
                self._on_end_quorum_epoch(source, correlation_id, body)
            case EndQuorumEpochResponse():
                self._observe_epoch(body.leader_epoch, body.leader_id)
            case FetchRequest():
                self._on_fetch_request(source, correlation_id, body)
            case FetchResponse():
                self._on_fetch_response(source, correlation_id, body)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot_request(source, correlation_id, body)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(source, correlation_id, body)
            case Unreachable():
                self._on_unreachable(source, correlation_id)
        self._poll()

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
        size = _proposal_bytes(records)
        if size > self.config.batch_bytes_max:
            raise MessageTooLarge(
                f"{size} bytes of records, a batch holds at most {self.config.batch_bytes_max}"
            )
        if not self.has_room(records):
            raise RequestTimedOut(f"{self._pending_bytes} bytes wait to be written to the log")
        # a batch is applied in one go: it grows to apply_bytes_max only (unless one
        # proposal is larger), and never past batch_bytes_max
        limit = min(self.config.batch_bytes_max, self.config.apply_bytes_max)
        if self._draft is not None and self._draft.size_bytes + size > limit:
            self._seal_draft()
        if self._draft is None:
            self._draft = _Draft(base_offset=self._next_offset, first_proposal_ms=now_ms)
        timestamp = now_ms + self._timestamp_offset_ms
        self._draft.values.extend((value, timestamp) for value in records)
        self._draft.size_bytes += size
        self._pending_bytes += size
        self._next_offset += len(records)
        return self._next_offset - 1

    def has_room(self, records: Sequence[bytes]) -> bool:
        """Whether `propose` would take `records` beside what waits to be written."""
        return (self._pending_bytes + _proposal_bytes(records)
                <= self.config.batch_bytes_max * self.config.pending_batches_max)

    def resign(self, now_ms: int) -> None:
        """Give up the leadership gracefully (shutdown): EndQuorumEpoch names successors."""
        self._observe_time(now_ms, None)
        if isinstance(self._state, Leader):
            self._resign()

    def snapshot_id_at(self, end_offset: int) -> SnapshotId:
        """The id of a snapshot of the state machine after `end_offset`: the epoch is that of
        the entry just below. Only an offset the listeners have reached (so committed), at
        or above the log start, can be snapshotted."""
        invariant(
            0 < end_offset <= self._applied_offset and end_offset >= self._log_start_offset,
            f"a snapshot at {end_offset}: the listeners are at {self._applied_offset}, the "
            f"log starts at {self._log_start_offset}",
        )
        index = bisect.bisect_right(self._epochs, end_offset - 1, key=lambda item: item[1]) - 1
        epoch = self._epochs[index][0] if index >= 0 else self._log_start_epoch
        return SnapshotId(end_offset=end_offset, epoch=epoch)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Delete the log below a frozen snapshot (the shell's policy decides when): it is
        handed out in `Ready.delete_before`, and from now on the log starts at its end."""
        invariant(
            self._log.snapshot_size(snapshot_id) is not None, f"no snapshot {snapshot_id}"
        )
        if snapshot_id.end_offset <= self._log_start_offset or self._pending_install:
            return
        invariant(
            snapshot_id == self.snapshot_id_at(snapshot_id.end_offset),
            f"snapshot {snapshot_id} is not of this log",
        )
        end = snapshot_id.end_offset
        kept: list[tuple[int, int]] = []
        for index, (epoch, start) in enumerate(self._epochs):
            following = (
                self._epochs[index + 1][1] if index + 1 < len(self._epochs) else self._end_offset
            )
            if following > end:
                kept.append((epoch, max(start, end)))
        self._epochs = kept
        self._log_start_offset, self._log_start_epoch = end, snapshot_id.epoch
        self._pending_delete = snapshot_id

    def ready(self) -> Ready:
        """What the shell must do now. Calling it twice without `advance` repeats itself,
        except that a draft whose linger has passed is sealed the first time."""
        desired = to_quorum_state(self._state, local_id=self.node_id, voters=self.voters)
        if self._draft is not None and self._now_ms >= self._linger_deadline_ms(self._draft):
            self._seal_draft()
        loading = self._pending_load is not None
        committed = () if loading else self._read_committed()
        applied_after = committed[-1].last_offset + 1 if committed else self._applied_offset
        if loading:
            applied_after = self._applied_offset
        return Ready(
            quorum_state=None if desired == self._persisted else desired,
            batches=self._batches_to_write(),
            messages=tuple(self._outbox),
            committed=committed,
            leader_change=self._leader_change_due(applied_after),
            high_watermark=self._high_watermark,
            wake_at_ms=self._wake_at_ms(applied_after),
            truncate_to=self._pending_truncate,
            snapshot_chunk=self._pending_chunk,
            install_snapshot=self._pending_install,
            delete_before=self._pending_delete,
            load_snapshot=self._pending_load,
        )

    def _batches_to_write(self) -> tuple[bytes, ...]:
        """The sealed batches at the head, up to write_bytes_max (at least one)."""
        taken: list[bytes] = []
        size = 0
        for batch in self._sealed:
            size += len(batch)
            if taken and size > self.config.write_bytes_max:
                break
            taken.append(batch)
        return tuple(taken)

    def advance(self, ready: Ready, *, now_ms: int | None = None) -> None:
        """The shell has done steps 1-4 of `ready`: its state is durable, its batches are
        appended (not necessarily flushed: see `flushed`), its messages sent, its commits
        delivered. Messages may have been stepped in between; they are kept. `now_ms`, the
        shell's clock once done (writing may take seconds), dates what follows: a
        follower's next fetch, from which its leader's fetch timeout runs."""
        if now_ms is not None:
            self._observe_time(now_ms, None)
        if ready.quorum_state is not None:
            self._persisted = ready.quorum_state
        if ready.truncate_to is not None and self._pending_truncate == ready.truncate_to:
            self._pending_truncate = None
        if ready.snapshot_chunk is not None and self._pending_chunk is ready.snapshot_chunk:
            self._pending_chunk = None
        if ready.install_snapshot is not None and self._pending_install == ready.install_snapshot:
            self._pending_install = None
            self._high_watermark = max(
                self._high_watermark or 0, ready.install_snapshot.end_offset
            )
        if ready.delete_before is not None and self._pending_delete == ready.delete_before:
            self._pending_delete = None
        if ready.load_snapshot is not None and self._pending_load == ready.load_snapshot:
            invariant(not ready.committed, "commits delivered with a snapshot load")
            self._pending_load = None
            self._applied_offset = ready.load_snapshot.end_offset
        for batch in ready.batches:
            header = read_header(batch)
            invariant(bool(self._sealed) and self._sealed[0] is batch,
                      "advance with batch at %d this core did not hand out", header.base_offset)
            invariant(header.base_offset == self._log_end_offset,
                      "batch at %d appended at log end %d", header.base_offset,
                      self._log_end_offset)
            self._sealed.popleft()
            self._pending_bytes -= header.size
            self._log_end_offset = header.next_offset
        sent = len(ready.messages)
        invariant(
            self._outbox[:sent] == list(ready.messages), "advance with messages not handed out"
        )
        del self._outbox[:sent]
        if ready.committed:
            invariant(ready.committed[0].base_offset == self._applied_offset, "commit gap")
            self._applied_offset = ready.committed[-1].last_offset + 1
        if ready.leader_change is not None:
            self._notified = ready.leader_change
        self._maybe_become_leader()
        if ready.batches and isinstance(self._state, Leader):
            self._answer_parked(only_expired=False)  # followers may fetch the new batches
        self._poll()

    def flushed(self, end_offset: int) -> None:
        """The log is durable below `end_offset`: only now do those entries count."""
        invariant(
            end_offset <= self._log_end_offset,
            f"flushed up to {end_offset} past the appended end {self._log_end_offset}",
        )
        self._flushed_end_offset = max(self._flushed_end_offset, end_offset)
        if isinstance(self._state, Leader):
            self._maybe_advance_high_watermark()
        else:
            self._update_follower_high_watermark()
        self._poll()

    # timers -------------------------------------------------------------------------------

    def _poll(self) -> None:
        """Act on every timer that is due and send the fetch a follower owes."""
        now = self._now_ms
        state = self._state
        if isinstance(state, Leader):
            self._answer_parked(only_expired=True)
            if now >= self._check_quorum_at_ms and self._check_quorum():
                return
            if self._begin_pending and now >= self._begin_resend_at_ms:
                self._send_begin_quorum_epoch()
            return
        if isinstance(state, Follower):
            if now < self._fetch_deadline_ms or self._answered:
                # until it fetches again after an answer, the time is its own (writing what
                # it got), not its leader's
                self._maybe_fetch(state.leader_id)
            elif self.is_voter:
                self._on_fetch_timeout()
            else:  # an observer keeps its leader and asks any voter (Kafka's too)
                self._maybe_fetch(state.leader_id, any_voter=True)
            return
        if not self.is_voter:  # an observer with no leader: ask any voter who leads
            self._maybe_fetch(None)
            return
        if isinstance(state, Prospective) and state.leader_id not in (NO_LEADER, self.node_id):
            self._maybe_fetch(state.leader_id)  # our leader may answer after all
        if now >= self._election_deadline_ms:
            self._on_election_timeout()

    def _on_election_timeout(self) -> None:
        if self.voters == frozenset({self.node_id}):
            self._become_candidate()
        else:
            self._start_pre_vote()

    def _restart_fetch_deadline(self) -> None:
        """A follower that has just heard from its leader gives up on it after
        fetch.timeout.ms and this leadership's jitter (so that followers who heard from the
        leader together do not time out together); stalls may move it again (`stalled`)."""
        self._fetch_deadline_ms = (self._now_ms + self.config.fetch_timeout_ms
                                   + self._fetch_jitter_ms)
        self._fetch_credit_ms = 0

    def _heard_from_leader(self) -> None:
        """Our leader answered a fetch: it is alive and reachable."""
        self._leader_contact_ms = self._now_ms
        self._leader_failures = 0
        self._answered = True
        self._restart_fetch_deadline()

    def _on_unreachable(self, source: int, correlation_id: int) -> None:
        """The transport says our fetch (or FetchSnapshot) to `source` failed: ask again
        after the backoff, and after UNREACHABLE_FAILURES failures in a row stop vouching
        for the leader and give up on it after a random jitter instead of fetch.timeout.ms.
        A report of a (pre-)vote request of the current round counts as a refusal (the
        voter cannot grant it); reports of other requests, and late ones of an older
        fetch, change nothing."""
        if self._round_requests.get(correlation_id) == source and isinstance(
            self._state, Prospective | Candidate
        ):
            self._on_rejection(source)
            return
        in_flight = self._fetch_in_flight
        if in_flight is None or (in_flight.destination_id, in_flight.correlation_id) != (
            source,
            correlation_id,
        ):
            return
        self._fetch_in_flight = None  # it will never be answered
        self._fetch_backoff_until_ms = self._now_ms + self.config.retry_backoff_ms
        state = self._state
        if not isinstance(state, Follower) or state.leader_id != source:
            return  # an observer's search for the leader, or a Prospective's retry
        self._leader_failures += 1
        if self._leader_failures != UNREACHABLE_FAILURES:
            return  # one failure may be a listener restarting; later ones change nothing
        self._leader_contact_ms = None  # from now on we grant pre-votes
        # the jitter keeps voters from splitting the vote; an observer has none to split,
        # and looks for the new leader at once
        jitter_ms = self._rng.randint(0, self.config.election_jitter_ms) if self.is_voter else 0
        self._fetch_deadline_ms = min(self._fetch_deadline_ms, self._now_ms + jitter_ms)

    def _on_fetch_timeout(self) -> None:
        """A voter's leader has not answered within fetch.timeout.ms."""
        state = self._state
        contact = self._leader_contact_ms
        self._transition_reason = (
            f"no fetch answered by leader {getattr(state, 'leader_id', NO_LEADER)} for "
            + (f"{self._now_ms - contact} ms" if contact is not None else
               "as long as it has been followed, or since it was found unreachable"))
        self._transition(become_prospective(state, local_id=self.node_id, voters=self.voters))
        self._start_pre_vote()

    def _check_quorum(self) -> bool:
        """Resign when no majority of voters fetched within 1.5 x fetch.timeout.ms; True
        when it did."""
        timeout = self.config.check_quorum_timeout_ms
        since = self._now_ms - self._deaf_ms - timeout  # in time spent able to hear them
        heard = {self.node_id} | {
            voter
            for voter, replica in self._replicas.items()
            if voter in self.voters and replica.heard_ms > since
        }
        if not has_majority(frozenset(heard), self.voters):
            ages = ", ".join(
                f"{voter} {self._now_ms - replica.last_fetch_ms} ms ago"
                for voter, replica in sorted(self._replicas.items())
                if voter in self.voters and voter != self.node_id)
            self._transition_reason = (
                f"no majority of voters fetched within {timeout} ms (last fetches: {ages})")
            self._resign()
            return True
        self._check_quorum_at_ms = self._now_ms + max(1, timeout // 4)
        return False

    # elections ----------------------------------------------------------------------------

    def _start_pre_vote(self) -> None:
        state = become_prospective(self._state, local_id=self.node_id, voters=self.voters)
        self._transition(replace(state, granting_voters=frozenset({self.node_id})))
        self._election_deadline_ms = self._now_ms + self._election_timeout_ms()
        leader_id = state.leader_id
        # the leader we would replace never grants one: if alive it leads, if dead it is silent
        known = leader_id != self.node_id and leader_id in self.voters
        self._rejecting_voters = frozenset({leader_id}) if known else frozenset()
        self._send_vote_requests(pre_vote=True)

    def _become_candidate(self) -> None:
        candidate = become_candidate(
            self._state,
            local_id=self.node_id,
            voters=self.voters,
            log_last_epoch=self._last_epoch(),
        )
        self._transition(candidate)
        self._election_deadline_ms = self._now_ms + self._election_timeout_ms()
        self._rejecting_voters = frozenset()
        self._send_vote_requests(pre_vote=False)
        self._maybe_become_leader()

    def _send_vote_requests(self, *, pre_vote: bool) -> None:
        epoch = self._state.epoch + 1 if pre_vote else self._state.epoch
        request = VoteRequest(
            candidate_epoch=epoch,
            candidate_id=self.node_id,
            last_offset_epoch=self._last_epoch(),
            last_offset=self._end_offset,
            pre_vote=pre_vote,
        )
        self._round_requests = {
            self._send(voter, request): voter for voter in sorted(self.voters - {self.node_id})
        }

    def _on_vote_request(self, source: int, correlation_id: int, request: VoteRequest) -> None:
        if (
            not self.is_voter
            or request.candidate_id not in self.voters
            or source != request.candidate_id
        ):
            self._respond_vote(source, correlation_id, request, ErrorCode.inconsistent_voter_set)
            return
        if request.pre_vote:
            # The pre-voter is in the epoch below the one it asks about. If that is above
            # ours we are behind (its epoch had a candidate a majority pre-voted for):
            # catch up, or a minority stuck in a higher epoch could never rejoin a leader
            # that no longer contacts it.
            if request.candidate_epoch - 1 > self._state.epoch:
                self._transition(
                    become_unattached(
                        self._state, epoch=request.candidate_epoch - 1, is_voter=True
                    )
                )
            granted = (
                request.candidate_epoch > self._state.epoch
                and self._log_is_behind(request)
                and not self._has_live_leader()
            )
            self._respond_vote(source, correlation_id, request, ErrorCode.none, granted)
            return
        if request.candidate_epoch > self._state.epoch:
            self._transition(
                become_unattached(self._state, epoch=request.candidate_epoch, is_voter=True)
            )
        granted = False
        state = self._state
        if request.candidate_epoch == state.epoch:
            if isinstance(state, Voted):
                granted = state.voted_id == request.candidate_id
            elif self._may_vote(state) and self._log_is_behind(request):
                self._transition(
                    become_voted(state, candidate_id=request.candidate_id, local_id=self.node_id)
                )
                granted = True
        error = ErrorCode.fenced_leader_epoch if request.candidate_epoch < state.epoch else None
        self._respond_vote(source, correlation_id, request, error or ErrorCode.none, granted)

    def _may_vote(self, state: EpochState) -> bool:
        return isinstance(state, Unattached) or (
            isinstance(state, Prospective)
            and state.leader_id == NO_LEADER
            and state.voted_id == NO_VOTE
        )

    def _respond_vote(
        self,
        source: int,
        correlation_id: int,
        request: VoteRequest,
        error: ErrorCode,
        granted: bool = False,
    ) -> None:
        leader_id, epoch = self.leader_and_epoch
        response = VoteResponse(
            error=error,
            leader_id=leader_id,
            leader_epoch=epoch,
            vote_granted=granted,
            candidate_epoch=request.candidate_epoch,
            pre_vote=request.pre_vote,
        )
        self._send(source, response, correlation_id)

    def _log_is_behind(self, request: VoteRequest) -> bool:
        """The candidate's log is at least as up to date as ours."""
        ours = (self._last_epoch(), self._end_offset)
        return (request.last_offset_epoch, request.last_offset) >= ours

    def _has_live_leader(self) -> bool:
        if isinstance(self._state, Leader):
            return True
        contact = self._leader_contact_ms
        return (
            isinstance(self._state, Follower)
            and contact is not None
            and self._now_ms - contact < self.config.fetch_timeout_ms
        )

    def _on_vote_response(self, source: int, response: VoteResponse) -> None:
        if source not in self.voters or self._observe_epoch(
            response.leader_epoch, response.leader_id
        ):
            return
        state = self._state
        if response.error != ErrorCode.none:
            return
        this_round = (
            isinstance(state, Prospective)
            and response.pre_vote
            and response.candidate_epoch == state.epoch + 1
        ) or (
            isinstance(state, Candidate)
            and not response.pre_vote
            and response.candidate_epoch == state.epoch
        )
        if not response.vote_granted:
            if this_round:
                self._on_rejection(source)
            return
        if (
            response.pre_vote
            and isinstance(state, Prospective)
            and response.candidate_epoch == state.epoch + 1
        ):
            state = replace(state, granting_voters=state.granting_voters | {source})
            self._state = state
            if has_majority(state.granting_voters, self.voters):
                self._become_candidate()
        elif (
            not response.pre_vote
            and isinstance(state, Candidate)
            and response.candidate_epoch == state.epoch
        ):
            self._state = replace(state, granting_voters=state.granting_voters | {source})
            self._maybe_become_leader()

    def _on_rejection(self, source: int) -> None:
        """A voter refused our (pre-)vote of this round. Once so many refused that no
        majority is left, the round is lost: rather than sit out the election timeout, try
        again after a short random backoff that doubles with each round lost in a row, up to
        election.backoff.max.ms, as Kafka's candidates back off. A pre-vote is often refused
        for a passing reason -- the voter had not yet found the leader dead, or was still
        catching up -- and nothing about it is persisted, so a new round is cheap."""
        before = self._rejecting_voters
        self._rejecting_voters = before | {source}
        if self._round_lost(before) or not self._round_lost(self._rejecting_voters):
            return
        self._lost_rounds += 1
        base_ms = max(1, self.config.retry_backoff_ms)  # never a busy loop of rounds
        backoff_ms = base_ms * self._rng.randint(1, 2 << min(self._lost_rounds - 1, 16))
        self._election_deadline_ms = min(
            self._election_deadline_ms,
            self._now_ms + min(self.config.election_backoff_max_ms, backoff_ms),
        )

    def _round_lost(self, rejecting_voters: frozenset[int]) -> bool:
        return not has_majority(self.voters - rejecting_voters, self.voters)

    def _maybe_become_leader(self) -> None:
        state = self._state
        if not isinstance(state, Candidate) or not has_majority(state.granting_voters, self.voters):
            return
        if self._persisted != to_quorum_state(state, local_id=self.node_id, voters=self.voters):
            return  # our own vote is not durable yet
        invariant(self._draft is None, "a candidate holds no proposals")
        leader = become_leader(state, voters=self.voters, log_end_offset=self._end_offset)
        self._transition(leader)

    # leadership ---------------------------------------------------------------------------

    def _on_become_leader(self, leader: Leader) -> None:
        now = self._now_ms
        self._replicas = {
            voter: ReplicaState(end_offset=None, last_fetch_ms=now, heard_ms=now - self._deaf_ms)
            for voter in self.voters - {self.node_id}
        }
        self._leader_start_ms = now
        self._check_quorum_at_ms = now + self.config.check_quorum_timeout_ms
        self._begin_pending = set(self.voters - {self.node_id})
        self._send_begin_quorum_epoch()
        self._seal(self._leader_change_batch(leader))
        self._end_offset += 1
        self._next_offset += 1
        self._maybe_advance_high_watermark()

    def _send_begin_quorum_epoch(self) -> None:
        request = BeginQuorumEpochRequest(leader_id=self.node_id, leader_epoch=self._state.epoch)
        for voter in sorted(self._begin_pending):
            self._send(voter, request)
        self._begin_resend_at_ms = self._now_ms + self.config.request_timeout_ms

    def _on_begin_quorum_epoch_response(
        self, source: int, response: BeginQuorumEpochResponse
    ) -> None:
        if self._observe_epoch(response.leader_epoch, response.leader_id):
            return
        if isinstance(self._state, Leader) and response.leader_epoch == self._state.epoch:
            self._begin_pending.discard(source)

    def _resign(self) -> None:
        leader = self._state
        invariant(isinstance(leader, Leader), "only a leader resigns")
        ends = {voter: replica.end_offset or 0 for voter, replica in self._replicas.items()}
        successors = tuple(
            sorted((v for v in self.voters if v != self.node_id), key=lambda v: (-ends[v], v))
        )
        self._transition(become_resigned(leader))
        request = EndQuorumEpochRequest(
            leader_id=self.node_id, leader_epoch=leader.epoch, preferred_successors=successors
        )
        for voter in successors:
            self._send(voter, request)

    def _on_end_quorum_epoch(
        self, source: int, correlation_id: int, request: EndQuorumEpochRequest
    ) -> None:
        state = self._state
        if request.leader_epoch > state.epoch and self.is_voter:
            self._transition(become_unattached(state, epoch=request.leader_epoch, is_voter=True))
        state = self._state
        if request.leader_epoch == state.epoch and self.is_voter:
            position = (
                request.preferred_successors.index(self.node_id)
                if self.node_id in request.preferred_successors
                else len(self.voters)
            )
            deadline = self._now_ms + self._successor_backoff_ms(position)
            if isinstance(state, Follower) and state.leader_id == request.leader_id:
                self._leader_contact_ms = None  # it is gone: grant pre-votes from now on
                self._fetch_deadline_ms = min(self._fetch_deadline_ms, deadline)
            elif not isinstance(state, Leader | Resigned):
                self._election_deadline_ms = min(self._election_deadline_ms, deadline)
        error = (
            ErrorCode.fenced_leader_epoch
            if request.leader_epoch < state.epoch
            else ErrorCode.none
        )
        leader_id, epoch = self.leader_and_epoch
        self._send(source, EndQuorumEpochResponse(error, leader_id, epoch), correlation_id)

    def _successor_backoff_ms(self, position: int) -> int:
        """The first preferred successor runs at once, the others back off exponentially."""
        if position == 0:
            return 0
        backoff = self.config.retry_backoff_ms * (1 << min(position, 16))
        return min(self.config.election_backoff_max_ms, backoff) + self._rng.randint(
            0, self.config.retry_backoff_ms
        )

    # replication: the leader's side -------------------------------------------------------

    def _check_fetcher(self, source: int, current_leader_epoch: int, replica_id: int) -> ErrorCode:
        """The error a Fetch or FetchSnapshot from `source` gets before anything is read."""
        state = self._state
        if current_leader_epoch > state.epoch:
            # the fetcher knows a newer epoch than we do: we lead nothing in it
            self._transition(
                become_unattached(state, epoch=current_leader_epoch, is_voter=self.is_voter)
            )
            state = self._state
        if not isinstance(state, Leader):
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch < state.epoch:
            return ErrorCode.fenced_leader_epoch
        if source != replica_id or source == self.node_id:
            return ErrorCode.invalid_request
        return ErrorCode.none

    def _replica(self, source: int) -> ReplicaState:
        """The leader's record of `source`, which has just fetched (check-quorum counts it)."""
        replica = self._replicas.get(source)
        if replica is None:  # an observer: tracked for DescribeQuorum only
            replica = self._replicas[source] = ReplicaState(None, self._now_ms, 0)
        replica.last_fetch_ms = self._now_ms
        replica.heard_ms = self._now_ms - self._deaf_ms
        return replica

    def _on_fetch_request(self, source: int, correlation_id: int, request: FetchRequest) -> None:
        error = self._check_fetcher(source, request.current_leader_epoch, request.replica_id)
        if error != ErrorCode.none:
            self._respond_fetch(source, correlation_id, error)
            return
        outcome = self._validate_fetch(request.fetch_offset, request.last_fetched_epoch)
        if isinstance(outcome, DivergingEpoch):
            self._respond_fetch(source, correlation_id, ErrorCode.none, diverging=outcome)
            return
        if isinstance(outcome, SnapshotId):
            self._replica(source)
            self._begin_pending.discard(source)
            self._respond_fetch(source, correlation_id, ErrorCode.none, snapshot_id=outcome)
            return
        replica = self._replica(source)
        replica.end_offset = request.fetch_offset
        if request.fetch_offset >= self._log_end_offset:
            replica.last_caught_up_ms = self._now_ms
        self._begin_pending.discard(source)
        self._parked.pop(source, None)  # superseded
        self._maybe_advance_high_watermark()
        if request.fetch_offset < self._log_end_offset or (
            request.high_watermark != self._leader_high_watermark_to_report()
        ):
            self._answer_fetch(source, correlation_id, request)
        else:
            deadline = self._now_ms + self.config.fetch_max_wait_ms
            self._parked[source] = _ParkedFetch(source, correlation_id, request, deadline)

    def _validate_fetch(
        self, fetch_offset: int, last_fetched_epoch: int
    ) -> DivergingEpoch | SnapshotId | None:
        """None when the fetcher's log matches ours up to its fetch offset; else where it
        diverges, or the snapshot it needs when that is below our log start (Kafka's
        validateOffsetAndEpoch)."""
        start = self._log_start_offset
        if fetch_offset < start:
            return self._snapshot_to_send()
        epoch, end_offset = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch == last_fetched_epoch and end_offset >= fetch_offset:
            return None
        if start > 0 and (
            fetch_offset == start or end_offset < start or epoch < self._log_start_epoch
        ):
            return self._snapshot_to_send()
        return DivergingEpoch(epoch=epoch, end_offset=end_offset)

    def _snapshot_to_send(self) -> SnapshotId:
        latest = self._log.latest_snapshot_id
        invariant(
            latest is not None and latest.end_offset >= self._log_start_offset,
            f"log start {self._log_start_offset} without a snapshot (latest {latest})",
        )
        assert latest is not None
        return latest

    def _answer_fetch(self, source: int, correlation_id: int, request: FetchRequest) -> None:
        if request.fetch_offset < self._log_start_offset:  # deleted while the fetch was parked
            snapshot_id = self._snapshot_to_send()
            self._respond_fetch(source, correlation_id, ErrorCode.none, snapshot_id=snapshot_id)
            return
        records = b""
        if request.fetch_offset < self._log_end_offset:
            records = self._log.read(request.fetch_offset,
                                     min(self.config.fetch_bytes_max, self.config.write_bytes_max))
            records = _whole_batches_below(records, self._log_end_offset)
        self._respond_fetch(source, correlation_id, ErrorCode.none, records=records)

    def _answer_parked(self, *, only_expired: bool) -> None:
        for parked in list(self._parked.values()):
            if only_expired and self._now_ms < parked.deadline_ms:
                continue
            del self._parked[parked.source_id]
            self._answer_fetch(parked.source_id, parked.correlation_id, parked.request)

    def _respond_fetch(
        self,
        destination: int,
        correlation_id: int,
        error: ErrorCode,
        *,
        records: bytes = b"",
        diverging: DivergingEpoch | None = None,
        snapshot_id: SnapshotId | None = None,
    ) -> None:
        leader_id, epoch = self.leader_and_epoch
        response = FetchResponse(
            error=error,
            leader_id=leader_id,
            leader_epoch=epoch,
            high_watermark=self._leader_high_watermark_to_report(),
            records=records,
            diverging_epoch=diverging,
            snapshot_id=snapshot_id,
            log_start_offset=self._log_start_offset,
        )
        self._send(destination, response, correlation_id)

    def _on_fetch_snapshot_request(
        self, source: int, correlation_id: int, request: FetchSnapshotRequest
    ) -> None:
        error = self._check_fetcher(source, request.current_leader_epoch, request.replica_id)
        size, position, data = -1, -1, b""
        if error == ErrorCode.none:
            self._replica(source)
            self._begin_pending.discard(source)
            max_bytes = min(request.max_bytes, self.config.fetch_snapshot_bytes_max)
            try:
                data = self._log.read_snapshot(request.snapshot_id, request.position, max_bytes)
                size = self._log.snapshot_size(request.snapshot_id) or -1
                position = request.position
            except SnapshotNotFound:
                error = ErrorCode.snapshot_not_found
            except PositionOutOfRange:
                error = ErrorCode.position_out_of_range
        leader_id, epoch = self.leader_and_epoch
        response = FetchSnapshotResponse(
            error=error,
            leader_id=leader_id,
            leader_epoch=epoch,
            snapshot_id=request.snapshot_id,
            size=size,
            position=position,
            unaligned_records=data,
        )
        self._send(source, response, correlation_id)

    def _leader_high_watermark_to_report(self) -> int:
        """A new leader reports no high watermark until it has committed in its own epoch
        (the one it kept from following may be behind what the old leader reported)."""
        state, high_watermark = self._state, self._high_watermark
        if (
            isinstance(state, Leader)
            and high_watermark is not None
            and high_watermark > state.epoch_start_offset
        ):
            return high_watermark
        return NO_HIGH_WATERMARK

    def _maybe_advance_high_watermark(self) -> None:
        """The offset a majority of voters has durably reached, once it covers an entry of
        this leader's epoch; never lower than before."""
        state = self._state
        if not isinstance(state, Leader):
            return
        ends = sorted(
            (
                self._flushed_end_offset
                if voter == self.node_id
                else (self._replicas[voter].end_offset or 0)
            )
            for voter in self.voters
        )
        majority_end = ends[(len(ends) - 1) // 2]  # reached by a majority
        if not self._may_commit(majority_end, state):
            return
        if self._high_watermark is not None and majority_end <= self._high_watermark:
            return
        self._high_watermark = majority_end
        self._answer_parked(only_expired=False)

    def _may_commit(self, majority_end: int, leader: Leader) -> bool:
        """Only an entry of the leader's own epoch is committed by counting replicas."""
        return majority_end > leader.epoch_start_offset

    # replication: the follower's side -----------------------------------------------------

    def _fetches(self) -> bool:
        """Whether this node sends fetches in its state (see `_poll`)."""
        state = self._state
        if isinstance(state, Follower):
            return True
        if isinstance(state, Leader):
            return False
        if not self.is_voter:
            return True
        return isinstance(state, Prospective) and state.leader_id not in (NO_LEADER, self.node_id)

    def _maybe_fetch(self, leader_id: int | None, *, any_voter: bool = False) -> None:
        """Send the next fetch: one at a time, from the durable log end only; to
        `leader_id`, or to a voter drawn at random when there is none or `any_voter` (an
        observer whose leader has not answered: a voter that knows of a newer one says so,
        and a snapshot being fetched from the leader goes on when it answers)."""
        in_flight = self._fetch_in_flight
        if in_flight is not None:
            if self._now_ms - in_flight.sent_ms < self.config.request_timeout_ms:
                return
            self._fetch_in_flight = None  # lost: ask again
        if self._now_ms < self._fetch_backoff_until_ms:
            return
        if self._sealed or self._pending_truncate is not None:
            return
        if self._pending_chunk is not None or self._pending_install is not None:
            return  # the last chunk is not written yet, or the snapshot not installed
        if self._flushed_end_offset < self._end_offset:
            return
        if self._answered:
            # the time since the last answer went to writing it: the leader's fetch timeout
            # runs from this fetch (a leader that stops answering still times out, once)
            self._answered = False
            self._restart_fetch_deadline()
        destination = leader_id
        if destination is None or any_voter:
            destination = self._rng.choice(sorted(self.voters))
        snapshot_fetch = self._snapshot_fetch
        if snapshot_fetch is not None and destination == leader_id:
            if snapshot_fetch.leader_id == leader_id:
                self._send_fetch_snapshot(snapshot_fetch)
                return
            self._snapshot_fetch = None  # another leader: ask it what it has
        request = FetchRequest(
            replica_id=self.node_id,
            current_leader_epoch=self._state.epoch,
            fetch_offset=self._end_offset,
            last_fetched_epoch=self._last_epoch(),
            high_watermark=NO_HIGH_WATERMARK
            if self._high_watermark is None
            else self._high_watermark,
        )
        correlation_id = self._send(destination, request)
        self._fetch_in_flight = _InFlightFetch(
            destination, correlation_id, self._now_ms, request.fetch_offset
        )

    def _send_fetch_snapshot(self, fetch: _SnapshotFetch) -> None:
        request = FetchSnapshotRequest(
            replica_id=self.node_id,
            current_leader_epoch=self._state.epoch,
            snapshot_id=fetch.snapshot_id,
            position=fetch.position,
            max_bytes=self.config.fetch_snapshot_bytes_max,
        )
        correlation_id = self._send(fetch.leader_id, request)
        self._fetch_in_flight = _InFlightFetch(
            fetch.leader_id, correlation_id, self._now_ms, fetch.position, fetch.snapshot_id
        )

    def _on_fetch_snapshot_response(
        self, source: int, correlation_id: int, response: FetchSnapshotResponse
    ) -> None:
        in_flight = self._fetch_in_flight
        if (
            in_flight is None
            or in_flight.correlation_id != correlation_id
            or in_flight.destination_id != source
            or in_flight.snapshot_id is None
        ):
            return  # an answer to an older request, or a duplicate
        self._fetch_in_flight = None
        if self._observe_epoch(response.leader_epoch, response.leader_id):
            return
        fetch = self._snapshot_fetch
        if fetch is None or fetch.snapshot_id != in_flight.snapshot_id:
            return
        if response.error in (ErrorCode.snapshot_not_found, ErrorCode.position_out_of_range):
            self._snapshot_fetch = None  # the leader moved on: a Fetch tells what it has now
            return
        if response.error != ErrorCode.none:
            self._fetch_backoff_until_ms = self._now_ms + self.config.retry_backoff_ms
            return
        state = self._state
        following = isinstance(state, Follower | Prospective) and state.leader_id == source
        if not following or response.leader_epoch != state.epoch:
            return
        if isinstance(state, Prospective):  # our leader answered: back to following it
            self._transition(
                become_follower(state, epoch=state.epoch, leader_id=source, local_id=self.node_id)
            )
        self._heard_from_leader()
        data, size = response.unaligned_records, response.size
        if (
            response.snapshot_id != fetch.snapshot_id
            or response.position != fetch.position
            or fetch.size not in (None, size)
            or not data
            or fetch.position + len(data) > size
        ):
            self._snapshot_fetch = None  # an answer that does not fit: start over
            return
        chunk = SnapshotChunk(fetch.snapshot_id, fetch.position, data, size)
        self._pending_chunk = chunk
        fetch.position += len(data)
        fetch.size = size
        if chunk.is_last:
            self._install(fetch.snapshot_id)

    def _start_snapshot_fetch(self, snapshot_id: SnapshotId, leader_id: int) -> None:
        """The leader says our log ends below its log start, or diverges below it."""
        committed = max(self._high_watermark or 0, self._applied_offset)
        if snapshot_id.end_offset <= committed:
            # no use to us (only a confused leader sends it): fetch again, after a while
            self._fetch_backoff_until_ms = self._now_ms + self.config.retry_backoff_ms
            return
        current = self._snapshot_fetch
        if current is None or current.snapshot_id != snapshot_id:
            self._snapshot_fetch = _SnapshotFetch(snapshot_id, leader_id)

    def _install(self, snapshot_id: SnapshotId) -> None:
        """The snapshot is whole: it replaces the log, then the state machine's state."""
        invariant(not self._sealed, "a follower installs a snapshot with nothing to append")
        self._snapshot_fetch = None
        self._pending_install = snapshot_id
        self._pending_load = snapshot_id
        self._pending_truncate = None
        self._pending_delete = None
        self._epochs = []
        end = snapshot_id.end_offset
        self._log_start_offset, self._log_start_epoch = end, snapshot_id.epoch
        self._end_offset = self._next_offset = end
        self._log_end_offset = self._flushed_end_offset = end

    def _on_fetch_response(
        self, source: int, correlation_id: int, response: FetchResponse
    ) -> None:
        in_flight = self._fetch_in_flight
        if (
            in_flight is None
            or in_flight.correlation_id != correlation_id
            or in_flight.destination_id != source
            or in_flight.snapshot_id is not None
        ):
            return  # an answer to an older fetch, or a duplicate
        self._fetch_in_flight = None
        if in_flight.fetch_offset != self._end_offset:
            return  # our log moved since we asked (we led for a while): ask again
        if self._observe_epoch(response.leader_epoch, response.leader_id):
            return
        state = self._state
        if response.error != ErrorCode.none:
            self._fetch_backoff_until_ms = self._now_ms + self.config.retry_backoff_ms
            return
        following = isinstance(state, Follower | Prospective) and state.leader_id == source
        if not following or response.leader_epoch != state.epoch:
            return
        if isinstance(state, Prospective):  # our leader answered: back to following it
            self._transition(
                become_follower(state, epoch=state.epoch, leader_id=source, local_id=self.node_id)
            )
        self._heard_from_leader()
        if response.snapshot_id is not None:
            self._start_snapshot_fetch(response.snapshot_id, source)
            return
        if response.diverging_epoch is not None:
            self._truncate_diverging(response.diverging_epoch)
            return
        if response.records:
            self._append_fetched(response.records, response.leader_epoch)
        if response.high_watermark >= 0:
            self._leader_high_watermark = response.high_watermark
            self._update_follower_high_watermark()

    def _append_fetched(self, records: bytes, leader_epoch: int) -> None:
        try:
            headers = check_appended(
                records, log_end_offset=self._end_offset, last_epoch=self._last_epoch()
            )
        except CorruptRecord:
            return  # a damaged response: fetch again
        for position, header in zip(_positions(headers), headers, strict=True):
            invariant(
                header.partition_leader_epoch <= leader_epoch,
                f"a batch of epoch {header.partition_leader_epoch} from the leader of "
                f"epoch {leader_epoch}",
            )
            self._sealed.append(records[position : position + header.size])
            self._pending_bytes += header.size
            self._note_epoch(header.partition_leader_epoch, header.base_offset)
            self._end_offset = self._next_offset = header.next_offset

    def _truncate_diverging(self, diverging: DivergingEpoch) -> None:
        own_epoch, own_end = self.end_offset_for_epoch(diverging.epoch)
        if diverging.epoch == NO_EPOCH or own_epoch == diverging.epoch:
            target = min(diverging.end_offset, own_end)
        else:
            target = own_end
        committed = max(self._high_watermark or 0, self._log_start_offset)
        invariant(
            target >= committed,
            f"truncating to {target}, below the high watermark or log start {committed}",
        )
        invariant(not self._sealed, "a follower truncates with nothing left to append")
        if target >= self._end_offset:
            return
        while self._epochs and self._epochs[-1][1] >= target:
            self._epochs.pop()
        self._end_offset = self._next_offset = target
        self._log_end_offset = min(self._log_end_offset, target)
        self._flushed_end_offset = min(self._flushed_end_offset, target)
        pending = self._pending_truncate
        self._pending_truncate = target if pending is None else min(pending, target)

    def _update_follower_high_watermark(self) -> None:
        leader_high_watermark = self._leader_high_watermark
        if leader_high_watermark is None:
            return
        candidate = min(leader_high_watermark, self._flushed_end_offset)
        if self._high_watermark is None or candidate > self._high_watermark:
            self._high_watermark = candidate

    # epochs -------------------------------------------------------------------------------

    def _on_begin_quorum_epoch(
        self, source: int, correlation_id: int, request: BeginQuorumEpochRequest
    ) -> None:
        state = self._state
        if not self.is_voter or request.leader_id not in self.voters or source != request.leader_id:
            error = ErrorCode.inconsistent_voter_set
        elif request.leader_epoch < state.epoch:
            error = ErrorCode.fenced_leader_epoch
        else:
            self._follow(request.leader_epoch, request.leader_id)
            error = ErrorCode.none
        leader_id, epoch = self.leader_and_epoch
        self._send(source, BeginQuorumEpochResponse(error, leader_id, epoch), correlation_id)

    def _observe_epoch(self, epoch: int, leader_id: int) -> bool:
        """Catch up with what another node says of the quorum; True if our state changed."""
        state = self._state
        known_leader = leader_id not in (NO_LEADER, self.node_id) and leader_id in self.voters
        if epoch > state.epoch:
            if known_leader:
                self._follow(epoch, leader_id)
            else:
                self._transition(become_unattached(state, epoch=epoch, is_voter=self.is_voter))
            return True
        if epoch == state.epoch and known_leader and self._leader_unknown(state):
            self._follow(epoch, leader_id)
            return True
        return False

    def _leader_unknown(self, state: EpochState) -> bool:
        if isinstance(state, Prospective):
            return state.leader_id == NO_LEADER
        return isinstance(state, Unattached | Voted | Candidate)

    def _follow(self, epoch: int, leader_id: int) -> None:
        state = self._state
        if not isinstance(state, Follower) or (state.epoch, state.leader_id) != (epoch, leader_id):
            self._transition(
                become_follower(state, epoch=epoch, leader_id=leader_id, local_id=self.node_id)
            )
        self._leader_contact_ms = self._now_ms

    def _transition(self, new_state: EpochState) -> None:
        """Enter `new_state`, with the side effects of leaving the old one."""
        old = self._state
        if isinstance(old, Leader) and not isinstance(new_state, Leader):
            self._step_down()
        if new_state.epoch != old.epoch or leader_and_epoch(
            new_state, local_id=self.node_id
        ) != leader_and_epoch(old, local_id=self.node_id):
            self._leader_high_watermark = None
        self._state = new_state
        now = self._now_ms
        if isinstance(new_state, Follower | Leader):
            self._lost_rounds = 0
        match new_state:
            case Follower():
                same_leader = isinstance(old, Follower | Prospective) and (
                    old.leader_id == new_state.leader_id
                )
                if not same_leader:
                    self._fetch_in_flight = None
                    self._leader_contact_ms = None
                    self._answered = False
                    self._snapshot_fetch = None
                    self._leader_failures = 0
                    self._fetch_jitter_ms = self._rng.randint(0, self.config.election_jitter_ms)
                self._restart_fetch_deadline()
            case Leader():
                self._on_become_leader(new_state)
            case Unattached() | Voted() | Resigned():
                self._fetch_in_flight = None
                self._snapshot_fetch = None
                self._election_deadline_ms = now + self._election_timeout_ms()
            case Candidate():
                self._fetch_in_flight = None
                self._snapshot_fetch = None
            case Prospective():
                pass

    def _step_down(self) -> None:
        """Leaving the leadership: unwritten proposals are dropped, parked fetches told."""
        draft = self._draft
        if draft is not None:
            self._draft = None
            self._pending_bytes -= draft.size_bytes
            self._next_offset = draft.base_offset
        parked, self._parked = self._parked, {}
        self._replicas = {}
        self._begin_pending = set()
        for fetch in parked.values():
            self._send(
                fetch.source_id,
                FetchResponse(
                    ErrorCode.not_leader_or_follower, NO_LEADER, self._state.epoch, -1
                ),
                fetch.correlation_id,
            )

    # helpers ------------------------------------------------------------------------------

    def _send(self, destination: int, body: RaftMessage, correlation_id: int | None = None) -> int:
        if correlation_id is None:
            self._correlation_ids += 1
            correlation_id = self._correlation_ids
        self._outbox.append(OutboundMessage(destination, correlation_id, body))
        return correlation_id

    def _election_timeout_ms(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self._rng.randint(0, timeout)

    def _last_epoch(self) -> int:
        return self._epochs[-1][0] if self._epochs else self._log_start_epoch

    def _note_epoch(self, epoch: int, base_offset: int) -> None:
        if not self._epochs or self._epochs[-1][0] != epoch:
            invariant(
                not self._epochs or self._epochs[-1][0] < epoch,
                f"epoch {epoch} at offset {base_offset} after epoch {self._last_epoch()}",
            )
            self._epochs.append((epoch, base_offset))

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
        self._end_offset = draft.base_offset + len(draft.values)

    def _seal(self, batch: bytes) -> None:
        header = read_header(batch)
        invariant(header.base_offset == self._end_offset, "sealed batches are contiguous")
        self._note_epoch(header.partition_leader_epoch, header.base_offset)
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
        if self._applied_offset >= high_watermark or self._pending_install is not None:
            return ()
        invariant(
            self._applied_offset >= self._log_start_offset,
            f"delivering from {self._applied_offset}, below the log start {self._log_start_offset}",
        )
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
        now = self._now_ms
        if high_watermark is not None and applied_after < high_watermark:
            return now  # more committed batches (or the leader change) are due
        deadlines = [now + IDLE_WAKE_MS]
        if self._draft is not None:
            deadlines.append(self._linger_deadline_ms(self._draft))
        state = self._state
        if isinstance(state, Leader):
            deadlines.append(self._check_quorum_at_ms)
            deadlines.extend(parked.deadline_ms for parked in self._parked.values())
            if self._begin_pending:
                deadlines.append(self._begin_resend_at_ms)
        elif isinstance(state, Follower):
            if self.is_voter or self._fetch_deadline_ms > now:  # (an observer past it
                deadlines.append(self._fetch_deadline_ms)  # only fetches, below)
        elif self.is_voter:
            deadlines.append(self._election_deadline_ms)
        if self._fetches():
            in_flight = self._fetch_in_flight
            if in_flight is not None:
                deadlines.append(in_flight.sent_ms + self.config.request_timeout_ms)
            elif self._fetch_backoff_until_ms > now:
                deadlines.append(self._fetch_backoff_until_ms)
        return max(now, min(deadlines))


def _start_epoch(log: RaftLogView) -> int:
    """The epoch of the entry just below the log start: that of the snapshot ending there."""
    start = log.log_start_offset
    if start == 0:
        return NO_EPOCH
    earliest = log.earliest_snapshot_id
    invariant(
        earliest is not None and earliest.end_offset == start,
        f"the log starts at {start} but the earliest snapshot is {earliest}",
    )
    assert earliest is not None
    return earliest.epoch


def _scan_epochs(log: RaftLogView) -> list[tuple[int, int]]:
    """(epoch, start offset) of every epoch in the log, from its batch headers."""
    epochs: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, SCAN_BYTES)
        advanced = False
        for _, header in iter_headers(data):
            if not epochs or epochs[-1][0] != header.partition_leader_epoch:
                invariant(
                    not epochs or epochs[-1][0] < header.partition_leader_epoch,
                    f"epoch {header.partition_leader_epoch} at {header.base_offset} follows "
                    f"epoch {epochs[-1][0] if epochs else NO_EPOCH}",
                )
                epochs.append((header.partition_leader_epoch, header.base_offset))
            offset = header.next_offset
            advanced = True
        invariant(advanced, f"no whole batch readable at offset {offset}")
    return epochs


def _whole_batches_below(data: bytes, end_offset: int) -> bytes:
    """The prefix of `data` made of whole batches that end below `end_offset`."""
    size = 0
    for position, header in iter_headers(data):
        if header.next_offset > end_offset:
            break
        size = position + header.size
    return data[:size]


def _positions(headers: Sequence[BatchHeader]) -> list[int]:
    positions, position = [], 0
    for header in headers:
        positions.append(position)
        position += header.size
    return positions


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
