"""metadata_topics.py encodes a Metadata response's topics byte for byte as kio encodes the
same values, in every version: random topics (names, ids, leaders, replica lists of any
length, error codes, authorized operations) against the response entity's encoding."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.protocol.api import ApiKey
from pykraft.protocol.entities import make, response_module
from pykraft.protocol.framing import encode_entity
from pykraft.protocol.metadata_topics import encode_partition, encode_topic

broker_ids = st.lists(st.integers(-1, 2**31 - 1), max_size=200)
partitions = st.lists(st.tuples(
    st.sampled_from([0, 5]),  # none, leader_not_available
    st.integers(0, 2**31 - 1), st.integers(-1, 2**31 - 1), st.integers(-1, 2**31 - 1),
    broker_ids, broker_ids, broker_ids), max_size=5)
topics = st.tuples(
    st.sampled_from([0, 3]),
    st.text("abcXYZ019._-", min_size=1, max_size=249),
    st.uuids(), st.booleans(), partitions, st.integers(-(2**31), 2**31 - 1))


@settings(max_examples=300, deadline=None)
@given(version=st.integers(0, 13), topic=topics)
def test_a_topic_is_encoded_as_kio_encodes_its_entity(
        version: int, topic: tuple[int, str, uuid.UUID, bool, list, int]) -> None:
    code, name, topic_id, internal, parts, ops = topic
    module = response_module(ApiKey.METADATA, version)
    entity = make(
        module.MetadataResponseTopic, error_code=code, name=name, topic_id=topic_id,
        is_internal=internal, topic_authorized_operations=ops,
        partitions=tuple(make(
            module.MetadataResponsePartition, error_code=p[0], partition_index=p[1],
            leader_id=p[2], leader_epoch=p[3], replica_nodes=tuple(p[4]),
            isr_nodes=tuple(p[5]), offline_replicas=tuple(p[6])) for p in parts))
    ours = encode_topic(version, code, name, topic_id, internal,
                        [encode_partition(version, *p) for p in parts], len(parts), ops)
    assert ours == encode_entity(entity)


@settings(max_examples=20, deadline=None)
@given(version=st.sampled_from([8, 9, 12]),
       count=st.sampled_from([0, 125, 126, 127, 128, 300, 20_000]))
def test_long_arrays_keep_their_lengths(version: int, count: int) -> None:
    """Compact lengths take a second byte from 127 elements on (count + 1 >= 128): a
    topic with that many partitions, or a partition with that many replicas."""
    module = response_module(ApiKey.METADATA, version)
    ids = tuple(range(count % 1000))
    entity = make(module.MetadataResponseTopic, error_code=0, name="t", topic_id=uuid.UUID(int=7),
                  is_internal=False, topic_authorized_operations=0, partitions=tuple(make(
                      module.MetadataResponsePartition, error_code=0, partition_index=i,
                      leader_id=1, leader_epoch=2, replica_nodes=ids, isr_nodes=ids,
                      offline_replicas=()) for i in range(count)))
    ours = encode_topic(version, 0, "t", uuid.UUID(int=7), False,
                        [encode_partition(version, 0, i, 1, 2, ids, ids, ()) for i in range(count)],
                        count, 0)
    assert ours == encode_entity(entity)
