"""The raft codec: core messages survive a trip through real Kafka request/response bytes
(kio encode and decode, framing included), and malformed requests get Kafka's errors
without reaching the core."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from pykraft.protocol.framing import (
    decode_request as decode_frame,
)
from pykraft.protocol.framing import (
    decode_response as decode_response_frame,
)
from pykraft.protocol.framing import (
    encode_request as encode_frame,
)
from pykraft.protocol.framing import (
    encode_response as encode_response_frame,
)
from pykraft.protocol.framing import (
    is_flexible,
    parse_request_header,
    skip_header_tags,
)
from pykraft.raft import codec
from pykraft.raft.codec import DecodedRequest, RejectedRequest
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
from pykraft.records.record import build_batch

CLUSTER = "q1VCF0qTQ3iLxYhUHUZtnQ"
VOTERS = frozenset({1, 2, 3})


def wire_request(api_key: int, version: int, entity: Any) -> Any:
    """Encode to a frame and decode it back as the listener does."""
    frame = encode_frame(api_key, version, 7, "raft-test", entity)[4:]
    header = parse_request_header(frame)
    if is_flexible(api_key, version):
        header = skip_header_tags(header, frame)
    return decode_frame(header, frame)


def wire_response(api_key: int, version: int, entity: Any) -> Any:
    frame = encode_response_frame(9, entity)[4:]
    correlation_id, decoded = decode_response_frame(api_key, version, frame)
    assert correlation_id == 9
    return decoded


def through_wire(body: RaftRequest, version: int | None = None) -> DecodedRequest | RejectedRequest:
    api_key, version, entity = codec.encode_request(
        body, cluster_id=CLUSTER, destination_id=2, version=version
    )
    return codec.decode_request(
        api_key, version, wire_request(api_key, version, entity), cluster_id=CLUSTER,
        voters=VOTERS,
    )


REQUESTS: list[RaftRequest] = [
    VoteRequest(candidate_epoch=5, candidate_id=1, last_offset_epoch=3, last_offset=120),
    VoteRequest(candidate_epoch=5, candidate_id=3, last_offset_epoch=4, last_offset=0,
                pre_vote=True),
    BeginQuorumEpochRequest(leader_id=2, leader_epoch=9),
    EndQuorumEpochRequest(leader_id=3, leader_epoch=9, preferred_successors=(1, 2)),
    FetchRequest(replica_id=1, current_leader_epoch=9, fetch_offset=77, last_fetched_epoch=8,
                 high_watermark=70),
    FetchRequest(replica_id=4, current_leader_epoch=2, fetch_offset=0, last_fetched_epoch=0),
    FetchSnapshotRequest(replica_id=2, current_leader_epoch=9, snapshot_id=SnapshotId(500, 7),
                         position=4096, max_bytes=65536),
]


@pytest.mark.parametrize("body", REQUESTS, ids=lambda body: type(body).__name__)
def test_requests_round_trip_at_the_versions_sent(body: RaftRequest) -> None:
    decoded = through_wire(body)
    assert isinstance(decoded, DecodedRequest)
    assert decoded.body == body
    sources = {VoteRequest: "candidate_id", FetchRequest: "replica_id",
               FetchSnapshotRequest: "replica_id"}
    assert decoded.source_id == getattr(body, sources.get(type(body), "leader_id"))


@pytest.mark.parametrize(("api_key", "version"), [
    (api_key, version)
    for api_key, (low, high) in codec.RAFT_APIS.items()
    for version in range(low, high + 1)
])
def test_every_served_version_round_trips(api_key: int, version: int) -> None:
    """Fields a version lacks fall back to their meaning (no pre-vote, no high watermark)."""
    body = {
        codec.VOTE: REQUESTS[0],
        codec.BEGIN_QUORUM_EPOCH: REQUESTS[2],
        codec.END_QUORUM_EPOCH: REQUESTS[3],
        codec.FETCH: REQUESTS[4],
        codec.FETCH_SNAPSHOT: REQUESTS[6],
    }[api_key]
    decoded = through_wire(body, version)
    assert isinstance(decoded, DecodedRequest)
    expected = body
    if isinstance(body, FetchRequest) and version < 18:
        expected = dataclasses.replace(body, high_watermark=-1)
    assert decoded.body == expected


def test_pre_vote_carries_the_senders_current_epoch_on_the_wire() -> None:
    """KIP-996: a pre-vote names the epoch its sender is in, not the one it asks about."""
    body = VoteRequest(candidate_epoch=5, candidate_id=3, last_offset_epoch=4, last_offset=9,
                       pre_vote=True)
    _, _, entity = codec.encode_request(body, cluster_id=CLUSTER, destination_id=1)
    partition = entity.topics[0].partitions[0]
    assert (partition.replica_epoch, partition.pre_vote, entity.voter_id) == (4, True, 1)


def test_fetch_names_the_metadata_partition_by_its_fixed_topic_id() -> None:
    _, version, entity = codec.encode_request(REQUESTS[4], cluster_id=CLUSTER, destination_id=2)
    assert version == 18
    assert entity.topics[0].topic_id == codec.METADATA_TOPIC_ID
    assert entity.replica_state.replica_id == 1
    assert entity.cluster_id == CLUSTER


RESPONSES: list[tuple[RaftRequest, RaftResponse]] = [
    (REQUESTS[0], VoteResponse(ErrorCode.none, -1, 5, True, 5)),
    (REQUESTS[1], VoteResponse(ErrorCode.none, 2, 4, False, 5, pre_vote=True)),
    (REQUESTS[2], BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, 3, 10)),
    (REQUESTS[3], EndQuorumEpochResponse(ErrorCode.none, -1, 9)),
    (REQUESTS[4], FetchResponse(ErrorCode.none, 2, 9, 77, records=build_batch(
        [(None, b"value", (), 1000)], base_offset=77, partition_leader_epoch=9))),
    (REQUESTS[4], FetchResponse(ErrorCode.none, 2, 9, -1,
                                diverging_epoch=DivergingEpoch(epoch=6, end_offset=50))),
    (REQUESTS[5], FetchResponse(ErrorCode.not_leader_or_follower, 3, 4, -1)),
    (REQUESTS[4], FetchResponse(ErrorCode.none, 2, 9, 600, snapshot_id=SnapshotId(500, 7),
                                log_start_offset=500)),
    (REQUESTS[6], FetchSnapshotResponse(ErrorCode.none, 2, 9, SnapshotId(500, 7), size=10_000,
                                        position=4096, unaligned_records=b"\x01" * 100)),
    (REQUESTS[6], FetchSnapshotResponse(ErrorCode.snapshot_not_found, 2, 9, SnapshotId(500, 7))),
]


@pytest.mark.parametrize(("request_body", "response"), RESPONSES,
                         ids=lambda value: type(value).__name__)
def test_responses_round_trip(request_body: RaftRequest, response: Any) -> None:
    api_key = codec.api_key_of(request_body)
    version = codec.REQUEST_VERSIONS[api_key]
    entity = codec.encode_response(api_key, version, response)
    assert codec.decode_response(request_body, wire_response(api_key, version, entity)) == response


@given(
    epoch=st.integers(1, 2**31 - 1),
    candidate=st.sampled_from(sorted(VOTERS)),
    last_offset=st.integers(0, 2**63 - 1),
    pre_vote=st.booleans(),
    data=st.data(),
)
def test_vote_requests_round_trip_for_any_valid_values(
    epoch: int, candidate: int, last_offset: int, pre_vote: bool, data: st.DataObject
) -> None:
    last_epoch = data.draw(st.integers(0, epoch - 1))
    body = VoteRequest(epoch, candidate, last_epoch, last_offset, pre_vote=pre_vote)
    decoded = through_wire(body)
    assert isinstance(decoded, DecodedRequest) and decoded.body == body


@given(
    replica=st.integers(0, 2**31 - 1),
    epoch=st.integers(0, 2**31 - 1),
    fetch_offset=st.integers(0, 2**63 - 1),
    high_watermark=st.integers(-1, 2**63 - 2),
    data=st.data(),
)
def test_fetch_requests_round_trip_for_any_valid_values(
    replica: int, epoch: int, fetch_offset: int, high_watermark: int, data: st.DataObject
) -> None:
    last_fetched_epoch = data.draw(st.integers(0, epoch))
    body = FetchRequest(replica, epoch, fetch_offset, last_fetched_epoch, high_watermark)
    decoded = through_wire(body)
    assert isinstance(decoded, DecodedRequest) and decoded.body == body


# refusals -----------------------------------------------------------------------------------


def refused(api_key: int, entity: Any, version: int | None = None) -> tuple[RejectedRequest, Any]:
    version = codec.REQUEST_VERSIONS[api_key] if version is None else version
    result = codec.decode_request(
        api_key, version, wire_request(api_key, version, entity), cluster_id=CLUSTER,
        voters=VOTERS, leader_id=2, leader_epoch=9,
    )
    assert isinstance(result, RejectedRequest)
    answer = wire_response(api_key, version, result.response)
    return result, answer


@pytest.mark.parametrize("body", REQUESTS, ids=lambda body: type(body).__name__)
def test_another_clusters_request_is_answered_inconsistent_cluster_id(body: RaftRequest) -> None:
    api_key, _, entity = codec.encode_request(body, cluster_id="another-cluster",
                                              destination_id=2)
    result, answer = refused(api_key, entity)
    assert result.error == ErrorCode.inconsistent_cluster_id
    assert answer.error_code == ErrorCode.inconsistent_cluster_id
    assert codec.decode_response(body, answer) is not None  # the sender learns why


def test_a_request_without_cluster_id_is_accepted_as_kafka_does() -> None:
    api_key, version, entity = codec.encode_request(REQUESTS[2], cluster_id=CLUSTER,
                                                    destination_id=1)
    entity = dataclasses.replace(entity, cluster_id=None)
    result = codec.decode_request(api_key, version, wire_request(api_key, version, entity),
                                  cluster_id=CLUSTER, voters=VOTERS)
    assert isinstance(result, DecodedRequest)


@pytest.mark.parametrize("change", ["topic", "partition", "two_partitions", "no_topic"])
@pytest.mark.parametrize("body", REQUESTS[:5], ids=lambda body: type(body).__name__)
def test_a_request_for_another_partition_is_answered_invalid_request(
    body: RaftRequest, change: str
) -> None:
    """KafkaRaftClient treats any topic-partition mismatch as INVALID_REQUEST (top level)."""
    api_key, _, entity = codec.encode_request(body, cluster_id=CLUSTER, destination_id=2)
    topic = entity.topics[0]
    partition = topic.partitions[0]
    topics: tuple[Any, ...]
    if change == "topic":
        topic = (dataclasses.replace(topic, topic_id=codec.METADATA_TOPIC_ID.__class__(int=2))
                 if api_key == codec.FETCH else dataclasses.replace(topic, topic_name="other"))
        topics = (topic,)
    elif change == "partition":
        name = "partition" if api_key == codec.FETCH else "partition_index"
        topics = (dataclasses.replace(
            topic, partitions=(dataclasses.replace(partition, **{name: 1}),)),)
    elif change == "two_partitions":
        topics = (dataclasses.replace(topic, partitions=(partition, partition)),)
    else:
        topics = ()
    result, answer = refused(api_key, dataclasses.replace(entity, topics=topics))
    assert result.error == answer.error_code == ErrorCode.invalid_request


@pytest.mark.parametrize("body", [
    REQUESTS[0], REQUESTS[2], REQUESTS[3],
], ids=lambda body: type(body).__name__)
def test_a_non_voter_is_answered_inconsistent_voter_set(body: RaftRequest) -> None:
    changed: Any = body  # replace() with a field named at run time
    outsider = dataclasses.replace(
        changed, **{"candidate_id" if isinstance(body, VoteRequest) else "leader_id": 7})
    api_key, _, entity = codec.encode_request(outsider, cluster_id=CLUSTER, destination_id=2)
    result, answer = refused(api_key, entity)
    assert result.error == ErrorCode.inconsistent_voter_set
    decoded = codec.decode_response(body, answer)
    assert decoded is not None
    assert (decoded.error, decoded.leader_id, decoded.leader_epoch) == (
        ErrorCode.inconsistent_voter_set, 2, 9)


@pytest.mark.parametrize("body", [
    VoteRequest(5, 1, 5, 10),  # last epoch must be below the candidate's
    VoteRequest(5, 1, 3, -1),
    VoteRequest(0, 1, 0, 0, pre_vote=False),
    BeginQuorumEpochRequest(-1, 4),
    BeginQuorumEpochRequest(1, -3),
    EndQuorumEpochRequest(1, 4, (2, 2)),
    EndQuorumEpochRequest(1, 4, (-5,)),
    FetchRequest(1, 4, -1, 2),
    FetchRequest(1, 4, 10, 5),  # last fetched epoch above the epoch it fetches in
    FetchRequest(-1, 4, 10, 3),
    FetchRequest(1, -1, 10, 0),
], ids=repr)
def test_impossible_values_are_answered_invalid_request(body: RaftRequest) -> None:
    api_key, _, entity = codec.encode_request(body, cluster_id=CLUSTER, destination_id=2)
    result, answer = refused(api_key, entity)
    assert result.error == ErrorCode.invalid_request
    decoded = codec.decode_response(body, answer)
    assert decoded is not None and decoded.error == ErrorCode.invalid_request


def test_a_negative_fetch_max_wait_is_invalid() -> None:
    api_key, _, entity = codec.encode_request(REQUESTS[4], cluster_id=CLUSTER, destination_id=2,
                                              fetch_max_wait_ms=-5)
    result, _ = refused(api_key, entity)
    assert result.error == ErrorCode.invalid_request


def test_malformed_responses_are_dropped() -> None:
    """A response that does not name the metadata partition decodes to None (lost)."""
    request = REQUESTS[4]
    entity = codec.encode_response(codec.FETCH, 18, RESPONSES[4][1])
    topic = entity.responses[0]
    assert codec.decode_response(request, dataclasses.replace(entity, responses=())) is None
    other = dataclasses.replace(topic, topic_id=codec.METADATA_TOPIC_ID.__class__(int=3))
    assert codec.decode_response(request, dataclasses.replace(entity, responses=(other,))) is None
    vote = codec.encode_response(codec.VOTE, 2, RESPONSES[0][1])
    renamed = dataclasses.replace(vote.topics[0], topic_name="elsewhere")
    assert codec.decode_response(REQUESTS[0], dataclasses.replace(vote, topics=(renamed,))) is None


def test_a_half_diverging_epoch_is_dropped() -> None:
    entity = codec.encode_response(codec.FETCH, 18, RESPONSES[5][1])
    partition = entity.responses[0].partitions[0]
    broken = dataclasses.replace(
        partition, diverging_epoch=dataclasses.replace(partition.diverging_epoch, epoch=-1))
    topic = dataclasses.replace(entity.responses[0], partitions=(broken,))
    assert codec.decode_response(REQUESTS[4], dataclasses.replace(entity, responses=(topic,))) \
        is None


def test_fetch_snapshot_of_another_partition_is_unknown_topic_or_partition() -> None:
    """As KafkaRaftClient: the answer names the partition asked for, with the error."""
    api_key, version, entity = codec.encode_request(REQUESTS[6], cluster_id=CLUSTER,
                                                    destination_id=2)
    topic = dataclasses.replace(entity.topics[0], name="elsewhere")
    result, answer = refused(api_key, dataclasses.replace(entity, topics=(topic,)))
    assert result.error == ErrorCode.unknown_topic_or_partition
    assert answer.topics[0].name == "elsewhere"
    assert answer.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert codec.decode_response(REQUESTS[6], answer) is None  # not about our partition


@pytest.mark.parametrize("body", [
    FetchSnapshotRequest(-1, 9, SnapshotId(500, 7), 0),
    FetchSnapshotRequest(2, 9, SnapshotId(500, 7), -1),
    FetchSnapshotRequest(2, 9, SnapshotId(-1, 7), 0),
    FetchSnapshotRequest(2, -2, SnapshotId(500, 7), 0),
    FetchSnapshotRequest(2, 9, SnapshotId(500, 7), 0, max_bytes=0),
], ids=repr)
def test_impossible_fetch_snapshot_values_are_invalid(body: FetchSnapshotRequest) -> None:
    api_key, _, entity = codec.encode_request(body, cluster_id=CLUSTER, destination_id=2)
    result, answer = refused(api_key, entity)
    assert result.error == ErrorCode.invalid_request
    decoded = codec.decode_response(body, answer)
    assert isinstance(decoded, FetchSnapshotResponse)
    assert (decoded.error, decoded.leader_id, decoded.leader_epoch) == (
        ErrorCode.invalid_request, 2, 9)


def test_a_fetch_response_with_both_diverging_epoch_and_snapshot_is_dropped() -> None:
    body = FetchResponse(ErrorCode.none, 2, 9, -1, diverging_epoch=DivergingEpoch(6, 50))
    entity = codec.encode_response(codec.FETCH, 18, body)
    partition = entity.responses[0].partitions[0]
    both = dataclasses.replace(partition, snapshot_id=dataclasses.replace(
        partition.snapshot_id, end_offset=40, epoch=5))
    topic = dataclasses.replace(entity.responses[0], partitions=(both,))
    assert codec.decode_response(REQUESTS[4], dataclasses.replace(entity, responses=(topic,))) \
        is None
