"""The messages voters and observers exchange, as plain values (KIP-595, KIP-996, KIP-630).

The core takes these in (`RaftCore.step`) and hands them out (`Ready.messages`); the
simulator passes them as they are, and the network shell will translate them to and from
Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch / FetchSnapshot entities. Fields
follow Kafka's names in snake_case; an `error` is a Kafka error code, `ErrorCode.none` when
all is well.

Every response carries the responder's view of the quorum (`leader_id`, `leader_epoch`),
as Kafka's do, so that a node that fell behind learns the current epoch from any answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

__all__ = [
    "VoteRequest",
    "VoteResponse",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "FetchRequest",
    "FetchResponse",
    "DivergingEpoch",
    "SnapshotId",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "RaftRequest",
    "RaftResponse",
    "RaftMessage",
    "Unreachable",
    "InboundBody",
    "InboundMessage",
    "OutboundMessage",
]


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Ask for a vote in `candidate_epoch`, or with `pre_vote` (KIP-996) whether the voter
    would grant one: a pre-vote changes nothing at the voter and is never persisted.
    `last_offset_epoch` / `last_offset` are the epoch of the candidate's last entry and its
    log end offset: a voter grants only to a log at least as up to date as its own."""

    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    candidate_epoch: int  # echoed, so an answer to an older round is recognised
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """A new leader announces itself to the other voters."""

    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """A leader resigns; `preferred_successors` (most caught-up first) time out first."""

    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Pull replication. `fetch_offset` is the fetcher's durable log end, and
    `last_fetched_epoch` the epoch of the entry just below it: the leader checks the pair
    against its own log and answers a mismatch with a DivergingEpoch. `high_watermark` is
    what the fetcher knows (-1 for none), so the leader may park a fetch that would tell it
    nothing new (as KIP-1166's field of the same name)."""

    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """The largest epoch the leader holds at or below the fetcher's last fetched epoch, and
    where it ends in the leader's log: the fetcher truncates to at most `end_offset`."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """Names a snapshot (Kafka's OffsetAndEpoch): it holds the state after every entry below
    `end_offset`, and `epoch` is the leader epoch of the last of them (entry end_offset - 1).
    Its file is `<end_offset:020>-<epoch:010>.checkpoint`. Ordered by (end offset, epoch)."""

    end_offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """`snapshot_id` is set when the fetch offset is below the leader's log start, or the
    fetcher's log diverges from the leader's below it: the fetcher must pull that snapshot
    with FetchSnapshot (Kafka's SnapshotId field, tagged in Fetch v12+). `log_start_offset`
    is the leader's log start (Kafka's LogStartOffset, -1 when not told)."""

    error: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int  # -1 until the leader has committed in its epoch
    records: bytes = b""  # whole RecordBatch v2 batches starting at the fetch offset
    diverging_epoch: DivergingEpoch | None = None
    snapshot_id: SnapshotId | None = None
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """Pull up to `max_bytes` of snapshot `snapshot_id` from byte `position` on (KIP-630).
    The chunks need not end on batch boundaries: the fetcher writes them one after another
    into the snapshot file."""

    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """One chunk: `unaligned_records` are the snapshot's bytes from `position`, and `size`
    the snapshot's whole size. Errors: SNAPSHOT_NOT_FOUND (the leader holds no such
    snapshot, e.g. a newer one replaced it), POSITION_OUT_OF_RANGE, and as for Fetch
    NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, INVALID_REQUEST; then `size` and
    `position` are -1."""

    error: ErrorCode
    leader_id: int
    leader_epoch: int
    snapshot_id: SnapshotId
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""


RaftRequest = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)
RaftResponse = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
)
RaftMessage = RaftRequest | RaftResponse


@dataclass(frozen=True, slots=True)
class Unreachable:
    """Not a message on the wire: the transport's report that the request it carried with
    this InboundMessage's correlation id could not reach `source_id` -- the connection was
    refused, or reset or closed before the answer came -- so no answer will come. A request
    that merely goes unanswered is not reported (the core's own timers cover silence).

    It is a hint, never proof: the node may be dead, or alive and only restarting its
    listener, and a report may come late. The core acts on it only as far as a wrong
    report is harmless (core.py: "An unreachable leader")."""


InboundBody = RaftMessage | Unreachable


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    """A message for `destination_id`. A response repeats its request's `correlation_id`."""

    destination_id: int
    correlation_id: int
    body: RaftMessage


@dataclass(frozen=True, slots=True)
class InboundMessage:
    source_id: int
    correlation_id: int
    body: InboundBody
