"""The messages voters and observers exchange, as plain values (KIP-595, KIP-996).

The core takes these in (`RaftCore.step`) and hands them out (`Ready.messages`); the
simulator passes them as they are, and the network shell will translate them to and from
Kafka's Vote / BeginQuorumEpoch / EndQuorumEpoch / Fetch entities. Fields follow Kafka's
names in snake_case; an `error` is a Kafka error code, `ErrorCode.none` when all is well.

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
    "RaftRequest",
    "RaftResponse",
    "RaftMessage",
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


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error: ErrorCode
    leader_id: int
    leader_epoch: int
    high_watermark: int  # -1 until the leader has committed in its epoch
    records: bytes = b""  # whole RecordBatch v2 batches starting at the fetch offset
    diverging_epoch: DivergingEpoch | None = None


RaftRequest = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
RaftResponse = VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
RaftMessage = RaftRequest | RaftResponse


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
    body: RaftMessage
