"""Raft messages (messages.py) to and from Kafka's Vote, BeginQuorumEpoch, EndQuorumEpoch,
Fetch and FetchSnapshot entities (kio), as controllers exchange them on their listener.

Every RPC names the metadata partition (`__cluster_metadata`, partition 0; Fetch v13+ by
Kafka's fixed topic id 0-1) and carries the sender's cluster id. A request is checked here,
before the core sees it, the way KafkaRaftClient checks it:

    cluster id present and not ours          -> top-level INCONSISTENT_CLUSTER_ID
    not exactly one topic and one partition,
    or not the metadata partition            -> top-level INVALID_REQUEST
    impossible values (negative offsets,
    epochs, a last epoch above the epoch)    -> partition-level INVALID_REQUEST
    Vote / BeginQuorumEpoch / EndQuorumEpoch
    from a node outside the voter set        -> partition-level INCONSISTENT_VOTER_SET
    FetchSnapshot of another partition       -> UNKNOWN_TOPIC_OR_PARTITION for the partition
                                                asked for (KafkaRaftClient's answer)

so that nothing malformed reaches the core; stale epochs are the core's business (it answers
FENCED_LEADER_EPOCH). The sender of a request is named in its body (the candidate, the
leader, the fetching replica), as in Kafka.

Responses do not echo everything the core wants to see again (Vote v2 answers carry neither
the candidate epoch nor the pre-vote flag), so a response is decoded against the request it
answers. A response with a top-level error becomes a core response with that error and no
leader or epoch (-1): the core then drops its in-flight state for it and retries by its timers.
A response of the wrong shape decodes to None and is dropped, like a lost message.

Epochs on the wire. Vote v2 (KIP-996) carries `replica_epoch`: the candidate's bumped epoch
for a vote, the sender's current epoch for a pre-vote. The core speaks of the epoch a
pre-vote asks about (current + 1), so a pre-vote is sent with `candidate_epoch - 1`.
"""

from __future__ import annotations

import datetime
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import field, make
from pykraft.protocol.framing import request_type, response_type
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
    RaftRequest,
    RaftResponse,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)

__all__ = [
    "VOTE",
    "BEGIN_QUORUM_EPOCH",
    "END_QUORUM_EPOCH",
    "FETCH",
    "FETCH_SNAPSHOT",
    "RAFT_APIS",
    "REQUEST_VERSIONS",
    "METADATA_TOPIC_NAME",
    "METADATA_TOPIC_ID",
    "DecodedRequest",
    "RejectedRequest",
    "api_key_of",
    "encode_request",
    "decode_request",
    "encode_response",
    "error_response",
    "decode_response",
]

VOTE: Final = 52
BEGIN_QUORUM_EPOCH: Final = 53
END_QUORUM_EPOCH: Final = 54
FETCH: Final = int(ApiKey.FETCH)
FETCH_SNAPSHOT: Final = 59

# What a controller listener accepts for the quorum's RPCs. Fetch below v12 has no last
# fetched epoch, without which a follower cannot be checked against the leader's log.
RAFT_APIS: Final[dict[int, tuple[int, int]]] = {
    VOTE: (0, 2),
    BEGIN_QUORUM_EPOCH: (0, 1),
    END_QUORUM_EPOCH: (0, 1),
    FETCH: (12, 18),
    FETCH_SNAPSHOT: (0, 1),
}
# what this node sends: the newest of each (Vote v2 is the first with pre-vote)
REQUEST_VERSIONS: Final[dict[int, int]] = {key: high for key, (_, high) in RAFT_APIS.items()}

METADATA_TOPIC_NAME: Final = "__cluster_metadata"
METADATA_TOPIC_ID: Final = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, fixed
METADATA_PARTITION: Final = 0
NO_LEADER: Final = -1
NO_EPOCH_ON_WIRE: Final = -1
HIGH_WATERMARK_ABSENT: Final = (1 << 63) - 1  # Fetch v18's default: the fetcher did not say
INT32_MAX: Final = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    source_id: int
    body: RaftRequest


@dataclass(frozen=True, slots=True)
class RejectedRequest:
    """The request cannot reach the core; answer it with `response`."""

    error: ErrorCode
    response: Any


def api_key_of(body: RaftRequest | RaftResponse) -> int:
    match body:
        case VoteRequest() | VoteResponse():
            return VOTE
        case BeginQuorumEpochRequest() | BeginQuorumEpochResponse():
            return BEGIN_QUORUM_EPOCH
        case EndQuorumEpochRequest() | EndQuorumEpochResponse():
            return END_QUORUM_EPOCH
        case FetchRequest() | FetchResponse():
            return FETCH
        case FetchSnapshotRequest() | FetchSnapshotResponse():
            return FETCH_SNAPSHOT
    raise TypeError(f"not a raft message: {body!r}")


def _request_module(api_key: int, version: int) -> ModuleType:
    return sys.modules[request_type(api_key, version).__module__]


def _response_module(api_key: int, version: int) -> ModuleType:
    return sys.modules[response_type(api_key, version).__module__]


# requests: core -> wire ---------------------------------------------------------------------


def encode_request(
    body: RaftRequest,
    *,
    cluster_id: str,
    destination_id: int,
    version: int | None = None,
    fetch_max_wait_ms: int = 500,
    fetch_bytes_max: int = INT32_MAX,
) -> tuple[int, int, Any]:
    """(api key, version, kio request entity) for `body` sent to `destination_id`."""
    api_key = api_key_of(body)
    version = REQUEST_VERSIONS[api_key] if version is None else version
    module = _request_module(api_key, version)
    match body:
        case VoteRequest():
            replica_epoch = body.candidate_epoch - 1 if body.pre_vote else body.candidate_epoch
            partition = make(
                module.PartitionData,
                partition_index=METADATA_PARTITION,
                replica_epoch=replica_epoch,
                replica_id=body.candidate_id,
                replica_directory_id=None,
                voter_directory_id=None,
                last_offset_epoch=body.last_offset_epoch,
                last_offset=body.last_offset,
                pre_vote=body.pre_vote,
            )
            entity = make(
                module.VoteRequest,
                cluster_id=cluster_id,
                voter_id=destination_id,
                topics=(_topic(module, partition),),
            )
        case BeginQuorumEpochRequest():
            partition = make(
                module.PartitionData,
                partition_index=METADATA_PARTITION,
                voter_directory_id=None,
                leader_id=body.leader_id,
                leader_epoch=body.leader_epoch,
            )
            entity = make(
                module.BeginQuorumEpochRequest,
                cluster_id=cluster_id,
                voter_id=destination_id,
                topics=(_topic(module, partition),),
                leader_endpoints=(),
            )
        case EndQuorumEpochRequest():
            successors = body.preferred_successors
            candidates: tuple[Any, ...] = ()
            if hasattr(module, "ReplicaInfo"):
                candidates = tuple(
                    make(module.ReplicaInfo, candidate_id=node, candidate_directory_id=None)
                    for node in successors
                )
            partition = make(
                module.PartitionData,
                partition_index=METADATA_PARTITION,
                leader_id=body.leader_id,
                leader_epoch=body.leader_epoch,
                preferred_successors=successors,
                preferred_candidates=candidates,
            )
            entity = make(
                module.EndQuorumEpochRequest,
                cluster_id=cluster_id,
                topics=(_topic(module, partition),),
                leader_endpoints=(),
            )
        case FetchRequest():
            entity = _encode_fetch_request(
                module, version, body, cluster_id, fetch_max_wait_ms, fetch_bytes_max
            )
        case FetchSnapshotRequest():
            partition = make(
                module.PartitionSnapshot,
                partition=METADATA_PARTITION,
                current_leader_epoch=body.current_leader_epoch,
                snapshot_id=make(
                    module.SnapshotId,
                    end_offset=body.snapshot_id.end_offset,
                    epoch=body.snapshot_id.epoch,
                ),
                position=body.position,
                replica_directory_id=None,
            )
            entity = make(
                module.FetchSnapshotRequest,
                cluster_id=cluster_id,
                replica_id=body.replica_id,
                max_bytes=body.max_bytes,
                topics=(
                    make(module.TopicSnapshot, name=METADATA_TOPIC_NAME, partitions=(partition,)),
                ),
            )
    return api_key, version, entity


def _topic(module: ModuleType, partition: Any) -> Any:
    return make(module.TopicData, topic_name=METADATA_TOPIC_NAME, partitions=(partition,))


def _encode_fetch_request(
    module: ModuleType,
    version: int,
    body: FetchRequest,
    cluster_id: str,
    max_wait_ms: int,
    bytes_max: int,
) -> Any:
    partition = make(
        module.FetchPartition,
        partition=METADATA_PARTITION,
        current_leader_epoch=body.current_leader_epoch,
        fetch_offset=body.fetch_offset,
        last_fetched_epoch=body.last_fetched_epoch,
        log_start_offset=-1,
        partition_max_bytes=bytes_max,
        replica_directory_id=None,
        high_watermark=body.high_watermark,
    )
    topic = make(
        module.FetchTopic,
        topic=METADATA_TOPIC_NAME,
        topic_id=METADATA_TOPIC_ID,
        partitions=(partition,),
    )
    values: dict[str, Any] = {}
    if version >= 15:
        values["replica_state"] = make(module.ReplicaState, replica_id=body.replica_id)
    else:
        values["replica_id"] = body.replica_id
    return make(
        module.FetchRequest,
        cluster_id=cluster_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=0,
        max_bytes=bytes_max,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(topic,),
        forgotten_topics_data=(),
        rack_id="",
        **values,
    )


# requests: wire -> core ---------------------------------------------------------------------


def decode_request(
    api_key: int,
    version: int,
    entity: Any,
    *,
    cluster_id: str,
    voters: frozenset[int],
    leader_id: int = NO_LEADER,
    leader_epoch: int = NO_EPOCH_ON_WIRE,
) -> DecodedRequest | RejectedRequest:
    """Check a request and turn it into a core message, or say how to refuse it.
    `leader_id` / `leader_epoch` (this node's view) go into partition-level refusals."""
    request_cluster = field(entity, "cluster_id")
    if request_cluster is not None and request_cluster != cluster_id:
        return _reject_top(api_key, version, ErrorCode.inconsistent_cluster_id)
    if api_key == FETCH_SNAPSHOT:
        return _decode_fetch_snapshot(version, entity, leader_id, leader_epoch)
    partition = _single_partition(api_key, entity)
    if partition is None:
        return _reject_top(api_key, version, ErrorCode.invalid_request)

    def refuse(error: ErrorCode) -> RejectedRequest:
        response = error_response(api_key, version, error, leader_id, leader_epoch)
        return RejectedRequest(error, response)

    match api_key:
        case 52:
            return _decode_vote(partition, voters, refuse)
        case 53:
            leader = int(partition.leader_id)
            epoch = int(partition.leader_epoch)
            if leader < 0 or epoch < 0:
                return refuse(ErrorCode.invalid_request)
            if leader not in voters:
                return refuse(ErrorCode.inconsistent_voter_set)
            return DecodedRequest(leader, BeginQuorumEpochRequest(leader, epoch))
        case 54:
            leader = int(partition.leader_id)
            epoch = int(partition.leader_epoch)
            successors = _successors(partition)
            if leader < 0 or epoch < 0 or successors is None:
                return refuse(ErrorCode.invalid_request)
            if leader not in voters:
                return refuse(ErrorCode.inconsistent_voter_set)
            return DecodedRequest(leader, EndQuorumEpochRequest(leader, epoch, successors))
        case _:
            return _decode_fetch(entity, partition, refuse)


def _decode_fetch_snapshot(
    version: int, entity: Any, leader_id: int, leader_epoch: int
) -> DecodedRequest | RejectedRequest:
    topics = entity.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return _reject_top(FETCH_SNAPSHOT, version, ErrorCode.invalid_request)
    topic, partition = topics[0], topics[0].partitions[0]
    if topic.name != METADATA_TOPIC_NAME or partition.partition != METADATA_PARTITION:
        error = ErrorCode.unknown_topic_or_partition
        response = _fetch_snapshot_response(
            _response_module(FETCH_SNAPSHOT, version),
            FetchSnapshotResponse(error, leader_id, leader_epoch, SnapshotId(-1, -1)),
            topic_name=topic.name,
            partition_index=partition.partition,
        )
        return RejectedRequest(error, response)
    replica_id = int(entity.replica_id)
    snapshot_id = SnapshotId(
        end_offset=int(partition.snapshot_id.end_offset), epoch=int(partition.snapshot_id.epoch)
    )
    current_epoch = int(partition.current_leader_epoch)
    position = int(partition.position)
    max_bytes = int(entity.max_bytes)
    if (
        replica_id < 0
        or current_epoch < 0
        or position < 0
        or max_bytes <= 0
        or snapshot_id.end_offset < 0
        or snapshot_id.epoch < 0
    ):
        error = ErrorCode.invalid_request
        response = error_response(FETCH_SNAPSHOT, version, error, leader_id, leader_epoch)
        return RejectedRequest(error, response)
    body = FetchSnapshotRequest(replica_id, current_epoch, snapshot_id, position, max_bytes)
    return DecodedRequest(replica_id, body)


def _single_partition(api_key: int, entity: Any) -> Any | None:
    topics = entity.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    topic = topics[0]
    if api_key == FETCH and hasattr(topic, "topic_id"):
        if topic.topic_id != METADATA_TOPIC_ID:
            return None
    elif field(topic, "topic_name", field(topic, "topic")) != METADATA_TOPIC_NAME:
        return None
    partition = topic.partitions[0]
    index = field(partition, "partition_index", field(partition, "partition"))
    return partition if index == METADATA_PARTITION else None


def _decode_vote(
    partition: Any, voters: frozenset[int], refuse: Callable[[ErrorCode], RejectedRequest]
) -> DecodedRequest | RejectedRequest:
    pre_vote = bool(field(partition, "pre_vote", False))
    replica_epoch = int(partition.replica_epoch)
    candidate = int(partition.replica_id)
    last_epoch = int(partition.last_offset_epoch)
    last_offset = int(partition.last_offset)
    candidate_epoch = replica_epoch + 1 if pre_vote else replica_epoch
    if (
        candidate < 0
        or replica_epoch < 0
        or last_offset < 0
        or last_epoch < 0
        or last_epoch >= candidate_epoch
    ):
        return refuse(ErrorCode.invalid_request)
    if candidate not in voters:
        return refuse(ErrorCode.inconsistent_voter_set)
    body = VoteRequest(candidate_epoch, candidate, last_epoch, last_offset, pre_vote=pre_vote)
    return DecodedRequest(candidate, body)


def _successors(partition: Any) -> tuple[int, ...] | None:
    candidates = field(partition, "preferred_candidates")
    if candidates is not None:
        successors = tuple(int(c.candidate_id) for c in candidates)
    else:
        successors = tuple(int(node) for node in field(partition, "preferred_successors", ()))
    if len(set(successors)) != len(successors) or any(node < 0 for node in successors):
        return None
    return successors


def _decode_fetch(
    entity: Any, partition: Any, refuse: Callable[[ErrorCode], RejectedRequest]
) -> DecodedRequest | RejectedRequest:
    replica_state = field(entity, "replica_state")
    replica_id = int(
        replica_state.replica_id if replica_state is not None else field(entity, "replica_id", -1)
    )
    max_wait = entity.max_wait
    max_wait_ms = (
        int(max_wait.total_seconds() * 1000)
        if isinstance(max_wait, datetime.timedelta)
        else int(max_wait)
    )
    current_epoch = int(partition.current_leader_epoch)
    fetch_offset = int(partition.fetch_offset)
    last_fetched_epoch = int(partition.last_fetched_epoch)
    high_watermark = int(field(partition, "high_watermark", HIGH_WATERMARK_ABSENT))
    if high_watermark == HIGH_WATERMARK_ABSENT or high_watermark < 0:
        high_watermark = -1
    if (
        replica_id < 0
        or max_wait_ms < 0
        or current_epoch < 0
        or fetch_offset < 0
        or last_fetched_epoch < 0
        or last_fetched_epoch > current_epoch
    ):
        return refuse(ErrorCode.invalid_request)
    body = FetchRequest(
        replica_id=replica_id,
        current_leader_epoch=current_epoch,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
        high_watermark=high_watermark,
    )
    return DecodedRequest(replica_id, body)


# responses ----------------------------------------------------------------------------------


def encode_response(api_key: int, version: int, body: RaftResponse) -> Any:
    """The kio response entity, at the request's version, for the core's answer."""
    module = _response_module(api_key, version)
    match body:
        case VoteResponse():
            partition = make(
                module.PartitionData,
                partition_index=METADATA_PARTITION,
                error_code=body.error,
                leader_id=body.leader_id,
                leader_epoch=body.leader_epoch,
                vote_granted=body.vote_granted,
            )
            return make(
                module.VoteResponse,
                error_code=ErrorCode.none,
                topics=(_topic(module, partition),),
                node_endpoints=(),
            )
        case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            return _quorum_epoch_response(module, api_key, body.error, body.leader_id,
                                          body.leader_epoch)
        case FetchResponse():
            return _fetch_response(module, body)
        case FetchSnapshotResponse():
            return _fetch_snapshot_response(module, body)


def _fetch_snapshot_response(
    module: ModuleType,
    body: FetchSnapshotResponse,
    *,
    topic_name: str = METADATA_TOPIC_NAME,
    partition_index: int = METADATA_PARTITION,
) -> Any:
    partition = make(
        module.PartitionSnapshot,
        index=partition_index,
        error_code=body.error,
        snapshot_id=make(
            module.SnapshotId,
            end_offset=body.snapshot_id.end_offset,
            epoch=body.snapshot_id.epoch,
        ),
        current_leader=make(
            module.LeaderIdAndEpoch, leader_id=body.leader_id, leader_epoch=body.leader_epoch
        ),
        size=body.size,
        position=body.position,
        unaligned_records=body.unaligned_records,
    )
    return make(
        module.FetchSnapshotResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        topics=(make(module.TopicSnapshot, name=topic_name, partitions=(partition,)),),
        node_endpoints=(),
    )


def _quorum_epoch_response(
    module: ModuleType, api_key: int, error: ErrorCode, leader_id: int, leader_epoch: int
) -> Any:
    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        error_code=error,
        leader_id=leader_id,
        leader_epoch=leader_epoch,
    )
    name = "BeginQuorumEpochResponse" if api_key == BEGIN_QUORUM_EPOCH else "EndQuorumEpochResponse"
    return make(
        getattr(module, name),
        error_code=ErrorCode.none,
        topics=(_topic(module, partition),),
        node_endpoints=(),
    )


def _fetch_response(module: ModuleType, body: FetchResponse) -> Any:
    diverging = body.diverging_epoch
    partition = make(
        module.PartitionData,
        partition_index=METADATA_PARTITION,
        error_code=body.error,
        high_watermark=body.high_watermark,
        last_stable_offset=-1,
        log_start_offset=body.log_start_offset,
        diverging_epoch=make(
            module.EpochEndOffset,
            epoch=-1 if diverging is None else diverging.epoch,
            end_offset=-1 if diverging is None else diverging.end_offset,
        ),
        current_leader=make(
            module.LeaderIdAndEpoch, leader_id=body.leader_id, leader_epoch=body.leader_epoch
        ),
        snapshot_id=make(
            module.SnapshotId,
            end_offset=-1 if body.snapshot_id is None else body.snapshot_id.end_offset,
            epoch=-1 if body.snapshot_id is None else body.snapshot_id.epoch,
        ),
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=body.records,
    )
    topic = make(
        module.FetchableTopicResponse,
        topic=METADATA_TOPIC_NAME,
        topic_id=METADATA_TOPIC_ID,
        partitions=(partition,),
    )
    return make(
        module.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(topic,),
        node_endpoints=(),
    )


def error_response(
    api_key: int,
    version: int,
    error: ErrorCode,
    leader_id: int = NO_LEADER,
    leader_epoch: int = NO_EPOCH_ON_WIRE,
) -> Any:
    """A partition-level refusal: the metadata partition with `error` and our view."""
    module = _response_module(api_key, version)
    match api_key:
        case 52:
            return encode_response(
                api_key, version, VoteResponse(error, leader_id, leader_epoch, False, -1)
            )
        case 53 | 54:
            return _quorum_epoch_response(module, api_key, error, leader_id, leader_epoch)
        case 59:
            return _fetch_snapshot_response(
                module, FetchSnapshotResponse(error, leader_id, leader_epoch, SnapshotId(-1, -1))
            )
        case _:
            return _fetch_response(module, FetchResponse(error, leader_id, leader_epoch, -1))


def _reject_top(api_key: int, version: int, error: ErrorCode) -> RejectedRequest:
    """A top-level refusal, with no topics, as Kafka answers a request it cannot place."""
    module = _response_module(api_key, version)
    names = {
        VOTE: "VoteResponse",
        BEGIN_QUORUM_EPOCH: "BeginQuorumEpochResponse",
        END_QUORUM_EPOCH: "EndQuorumEpochResponse",
        FETCH: "FetchResponse",
        FETCH_SNAPSHOT: "FetchSnapshotResponse",
    }
    response = make(
        getattr(module, names[api_key]),
        error_code=error,
        topics=(),
        responses=(),
        node_endpoints=(),
        throttle_time=datetime.timedelta(0),
        session_id=0,
    )
    return RejectedRequest(error, response)


def decode_response(request: RaftRequest, entity: Any) -> RaftResponse | None:
    """The core's view of `entity`, the answer to `request`; None when malformed."""
    api_key = api_key_of(request)
    top_error = ErrorCode(entity.error_code)
    if top_error != ErrorCode.none:
        return _errored(request, top_error)
    topics = entity.responses if api_key == FETCH else entity.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    topic = topics[0]
    if api_key == FETCH_SNAPSHOT:
        return _decode_fetch_snapshot_response(request, topic)
    if api_key == FETCH and hasattr(topic, "topic_id"):
        if topic.topic_id != METADATA_TOPIC_ID:
            return None
    elif field(topic, "topic_name", field(topic, "topic")) != METADATA_TOPIC_NAME:
        return None
    partition = topic.partitions[0]
    if partition.partition_index != METADATA_PARTITION:
        return None
    error = ErrorCode(partition.error_code)
    match request:
        case VoteRequest():
            return VoteResponse(
                error=error,
                leader_id=int(partition.leader_id),
                leader_epoch=int(partition.leader_epoch),
                vote_granted=bool(partition.vote_granted),
                candidate_epoch=request.candidate_epoch,
                pre_vote=request.pre_vote,
            )
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(
                error, int(partition.leader_id), int(partition.leader_epoch)
            )
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(
                error, int(partition.leader_id), int(partition.leader_epoch)
            )
        case FetchRequest():
            return _decode_fetch_response(partition, error)
        case FetchSnapshotRequest():
            return None  # answered above


def _decode_fetch_response(partition: Any, error: ErrorCode) -> FetchResponse | None:
    leader = partition.current_leader
    diverging_wire = partition.diverging_epoch
    diverging = None
    if diverging_wire.epoch >= 0 or diverging_wire.end_offset >= 0:
        if diverging_wire.epoch < 0 or diverging_wire.end_offset < 0:
            return None
        diverging = DivergingEpoch(int(diverging_wire.epoch), int(diverging_wire.end_offset))
    snapshot = partition.snapshot_id
    snapshot_id = None
    if snapshot.epoch >= 0 or snapshot.end_offset >= 0:
        if snapshot.epoch < 0 or snapshot.end_offset < 0 or diverging is not None:
            return None
        snapshot_id = SnapshotId(end_offset=int(snapshot.end_offset), epoch=int(snapshot.epoch))
    high_watermark = int(partition.high_watermark)
    return FetchResponse(
        error=error,
        leader_id=int(leader.leader_id),
        leader_epoch=int(leader.leader_epoch),
        high_watermark=high_watermark if high_watermark >= 0 else -1,
        records=bytes(partition.records or b""),
        diverging_epoch=diverging,
        snapshot_id=snapshot_id,
        log_start_offset=max(-1, int(partition.log_start_offset)),
    )


def _decode_fetch_snapshot_response(
    request: RaftRequest, topic: Any
) -> FetchSnapshotResponse | None:
    partition = topic.partitions[0]
    if topic.name != METADATA_TOPIC_NAME or partition.index != METADATA_PARTITION:
        return None
    if not isinstance(request, FetchSnapshotRequest):
        return None
    leader = partition.current_leader
    snapshot = partition.snapshot_id
    return FetchSnapshotResponse(
        error=ErrorCode(partition.error_code),
        leader_id=int(leader.leader_id),
        leader_epoch=int(leader.leader_epoch),
        snapshot_id=SnapshotId(end_offset=int(snapshot.end_offset), epoch=int(snapshot.epoch)),
        size=int(partition.size),
        position=int(partition.position),
        unaligned_records=bytes(partition.unaligned_records or b""),
    )


def _errored(request: RaftRequest, error: ErrorCode) -> RaftResponse:
    match request:
        case VoteRequest():
            return VoteResponse(
                error, NO_LEADER, NO_EPOCH_ON_WIRE, False, request.candidate_epoch,
                pre_vote=request.pre_vote,
            )
        case BeginQuorumEpochRequest():
            return BeginQuorumEpochResponse(error, NO_LEADER, NO_EPOCH_ON_WIRE)
        case EndQuorumEpochRequest():
            return EndQuorumEpochResponse(error, NO_LEADER, NO_EPOCH_ON_WIRE)
        case FetchRequest():
            return FetchResponse(error, NO_LEADER, NO_EPOCH_ON_WIRE, -1)
        case FetchSnapshotRequest():
            return FetchSnapshotResponse(error, NO_LEADER, NO_EPOCH_ON_WIRE, request.snapshot_id)
