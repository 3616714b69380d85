"""alter_partition.py encodes an AlterPartition v3 request byte for byte as kio encodes the
same values, and the request a leader sends for its proposals reads back, through kio and
through the controller's own request decoding, as the proposals it was made of."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition.v3 import request as alter_request

from pykraft.broker.replica_manager import IsrUpdate, alter_partition_request
from pykraft.protocol.alter_partition import encode_alter_partition_v3
from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make
from pykraft.protocol.framing import (
    decode_request,
    encode_entity,
    encode_request,
    parse_request_header,
    skip_header_tags,
)

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
members = st.lists(st.tuples(int32, int64), max_size=4)
items = st.lists(st.tuples(int32, int32, members, int32), max_size=4)
topics = st.lists(st.tuples(st.uuids(), items), max_size=4)


def kio_request(broker_id: int, broker_epoch: int,
                topics: list) -> alter_request.AlterPartitionRequest:
    return make(alter_request.AlterPartitionRequest, broker_id=broker_id,
                broker_epoch=broker_epoch, topics=tuple(
                    make(alter_request.TopicData, topic_id=topic_id, partitions=tuple(
                        make(alter_request.PartitionData, partition_index=p,
                             leader_epoch=leader_epoch, leader_recovery_state=0,
                             partition_epoch=partition_epoch,
                             new_isr_with_epochs=tuple(
                                 make(alter_request.BrokerState, broker_id=b, broker_epoch=e)
                                 for b, e in isr))
                        for p, leader_epoch, isr, partition_epoch in parts))
                    for topic_id, parts in topics))


@settings(max_examples=300, deadline=None)
@given(broker_id=int32, broker_epoch=int64, topics=topics)
def test_a_request_is_encoded_as_kio_encodes_its_entity(
        broker_id: int, broker_epoch: int, topics: list) -> None:
    ours = encode_alter_partition_v3(broker_id, broker_epoch, topics)
    assert ours == encode_entity(kio_request(broker_id, broker_epoch, topics))


@settings(max_examples=10, deadline=None)
@given(count=st.sampled_from([125, 126, 127, 128, 300, 10_000]))
def test_long_arrays_keep_their_lengths(count: int) -> None:
    """Compact lengths take a second byte from 127 elements on: a request of 10,000
    partitions of one topic, or 10,000 topics, or a partition with that many members."""
    one_topic = [(uuid.UUID(int=1), [(i, 2, [(4, 5)], 3) for i in range(count)])]
    many_topics = [(uuid.UUID(int=i + 1), [(0, 2, [(4, 5)], 3)]) for i in range(count)]
    many_members = [(uuid.UUID(int=1), [(0, 2, [(b, b) for b in range(count % 1000)], 3)])]
    for topics in (one_topic, many_topics, many_members):
        assert encode_alter_partition_v3(1, 2, topics) == encode_entity(kio_request(1, 2, topics))


def test_a_leaders_proposals_read_back_as_the_request_the_controller_decodes() -> None:
    first, second = uuid.UUID(int=11), uuid.UUID(int=22)
    updates = [IsrUpdate("a", first, 0, 7, 3, (4, 5, 6), (40, 50, 60)),
               IsrUpdate("b", second, 3, 1, 9, (5,), (50,)),
               IsrUpdate("a", first, 2, 7, 4, (4, 6), (40, -1))]
    frame = encode_request(ApiKey.ALTER_PARTITION, 3, 99, "broker-4",
                           alter_partition_request(updates, 4, 1234))[4:]
    header = skip_header_tags(parse_request_header(frame), frame)
    request = decode_request(header, frame)
    assert (header.api_key, header.api_version, header.correlation_id) == (56, 3, 99)
    assert (request.broker_id, request.broker_epoch) == (4, 1234)
    read = [(topic.topic_id, p.partition_index, p.leader_epoch, p.partition_epoch,
             tuple((m.broker_id, m.broker_epoch) for m in p.new_isr_with_epochs),
             p.leader_recovery_state)
            for topic in request.topics for p in topic.partitions]
    assert read == [(first, 0, 7, 3, ((4, 40), (5, 50), (6, 60)), 0),
                    (first, 2, 7, 4, ((4, 40), (6, -1)), 0),
                    (second, 3, 1, 9, ((5, 50),), 0)]
