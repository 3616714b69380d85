"""The `__consumer_offsets` record codec writes Kafka's bytes and reads back what it wrote."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.broker.group_coordinator.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicMetadata,
    TopicPartitions,
    decode_record,
    encode_record,
)
from pykraft.errors import CorruptRecord

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=20)


def test_offset_commit_bytes_match_kafkas_layout() -> None:
    """Key: int16 version 1, then group/topic as int16-length strings and the partition;
    value: int16 version 3, offset, leader epoch, metadata, commit timestamp."""
    record = CoordinatorRecord(OffsetCommitKey(group="g", topic="t", partition=3),
                               OffsetCommitValue(offset=5, leader_epoch=2, metadata="x",
                                                 commit_timestamp=9))
    key, value = encode_record(record)
    assert key == bytes.fromhex("0001" "000167" "000174" "00000003")
    assert value == bytes.fromhex("0003" "0000000000000005" "00000002" "000178"
                                  "0000000000000009")
    assert decode_record(key, value) == record


def test_an_expiring_offset_is_written_at_version_1() -> None:
    value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=2, expire_timestamp=3)
    _, data = encode_record(CoordinatorRecord(OffsetCommitKey(group="g", topic="t"), value))
    assert data is not None and data[:2] == b"\x00\x01"
    decoded = decode_record(b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00", data)
    assert decoded is not None and decoded.value == value


def test_group_metadata_key_is_version_2_and_a_tombstone_has_no_value() -> None:
    key, value = encode_record(CoordinatorRecord(GroupMetadataKey(group="grp"), None))
    assert key == bytes.fromhex("0002" "0003") + b"grp"
    assert value is None
    assert decode_record(key, None) == CoordinatorRecord(GroupMetadataKey(group="grp"), None)


def test_share_group_and_later_records_are_skipped_not_misread() -> None:
    assert decode_record(b"\x00\x0a\x00\x01g", b"\x00\x00") is None


def test_kip_848_records_match_kafkas_layout_and_round_trip() -> None:
    """Key versions 3-8, flexible values at version 0: a group epoch record is the key
    version, the group id, then value version 0, the epoch and an empty tag buffer; every
    kind reads back what it wrote."""
    key, value = encode_record(CoordinatorRecord(ConsumerGroupMetadataKey(group_id="g"),
                                                 ConsumerGroupMetadataValue(epoch=5)))
    assert key == bytes.fromhex("0003" "0001") + b"g"
    assert value == bytes.fromhex("0000" "00000005" "00")
    topic = uuid.UUID(int=7)
    parts = (TopicPartitions(topic_id=topic, partitions=(0, 2)),)
    records = [
        CoordinatorRecord(ConsumerGroupPartitionMetadataKey(group_id="g"),
                          ConsumerGroupPartitionMetadataValue(topics=(TopicMetadata(
                              topic_id=topic, topic_name="t", num_partitions=3),))),
        CoordinatorRecord(ConsumerGroupMemberMetadataKey(group_id="g", member_id="m"),
                          ConsumerGroupMemberMetadataValue(
                              instance_id="i", client_id="c", client_host="/h",
                              subscribed_topic_names=("t",), rebalance_timeout_ms=300,
                              server_assignor="uniform")),
        CoordinatorRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id="g"),
                          ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=4)),
        CoordinatorRecord(ConsumerGroupTargetAssignmentMemberKey(group_id="g", member_id="m"),
                          ConsumerGroupTargetAssignmentMemberValue(topic_partitions=parts)),
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m"),
                          ConsumerGroupCurrentMemberAssignmentValue(
                              member_epoch=4, previous_member_epoch=3, state=1,
                              assigned_partitions=parts,
                              partitions_pending_revocation=parts)),
        CoordinatorRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id="g", member_id="m"),
                          None),
    ]
    for record in records:
        key, value = encode_record(record)
        assert decode_record(key, value) == record


@pytest.mark.parametrize("key,value", [
    (None, None),
    (b"\x00", None),
    (b"\x00\x01\x00\x05ab", None),  # string runs past the end
    (b"\x00\x02\x00\x01g", b"\x00"),  # value without a whole version
    (b"\x00\x02\x00\x01g", b"\x00\x09"),  # unknown value version
])
def test_malformed_records_raise_corrupt_record(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(CorruptRecord):
        decode_record(key, value)


members = st.builds(
    MemberMetadata, member_id=TEXT, group_instance_id=st.none() | TEXT, client_id=TEXT,
    client_host=TEXT, rebalance_timeout=INT32, session_timeout=INT32,
    subscription=st.binary(max_size=30), assignment=st.binary(max_size=30))
group_values = st.builds(
    GroupMetadataValue, protocol_type=TEXT, generation=INT32, protocol=st.none() | TEXT,
    leader=st.none() | TEXT, current_state_timestamp=INT64,
    members=st.lists(members, max_size=4).map(tuple))
offset_values = st.builds(OffsetCommitValue, offset=INT64, leader_epoch=INT32, metadata=TEXT,
                          commit_timestamp=INT64, expire_timestamp=st.just(-1))


@settings(deadline=None)  # the first example compiles the codecs: 0.4 s on a busy machine
@given(st.one_of(
    st.builds(CoordinatorRecord, st.builds(GroupMetadataKey, group=TEXT),
              st.none() | group_values),
    st.builds(CoordinatorRecord,
              st.builds(OffsetCommitKey, group=TEXT, topic=TEXT, partition=INT32),
              st.none() | offset_values),
))
def test_every_record_round_trips(record: CoordinatorRecord) -> None:
    assert decode_record(*encode_record(record)) == record


UUIDS = st.builds(uuid.UUID, int=st.integers(0, (1 << 128) - 1))
topic_partitions = st.lists(st.builds(TopicPartitions, topic_id=UUIDS, partitions=st.lists(
    INT32, max_size=5).map(tuple)), max_size=3).map(tuple)


@given(st.one_of(
    st.builds(CoordinatorRecord, st.builds(ConsumerGroupMetadataKey, group_id=TEXT),
              st.none() | st.builds(ConsumerGroupMetadataValue, epoch=INT32)),
    st.builds(CoordinatorRecord,
              st.builds(ConsumerGroupMemberMetadataKey, group_id=TEXT, member_id=TEXT),
              st.none() | st.builds(
                  ConsumerGroupMemberMetadataValue, instance_id=st.none() | TEXT,
                  rack_id=st.none() | TEXT, client_id=TEXT, client_host=TEXT,
                  subscribed_topic_names=st.lists(TEXT, max_size=3).map(tuple),
                  subscribed_topic_regex=st.none() | TEXT, rebalance_timeout_ms=INT32,
                  server_assignor=st.none() | TEXT)),
    st.builds(CoordinatorRecord,
              st.builds(ConsumerGroupCurrentMemberAssignmentKey, group_id=TEXT, member_id=TEXT),
              st.none() | st.builds(
                  ConsumerGroupCurrentMemberAssignmentValue, member_epoch=INT32,
                  previous_member_epoch=INT32, state=st.integers(0, 2),
                  assigned_partitions=topic_partitions,
                  partitions_pending_revocation=topic_partitions)),
    st.builds(CoordinatorRecord,
              st.builds(ConsumerGroupTargetAssignmentMemberKey, group_id=TEXT, member_id=TEXT),
              st.none() | st.builds(ConsumerGroupTargetAssignmentMemberValue,
                                    topic_partitions=topic_partitions)),
))
def test_every_kip_848_record_round_trips(record: CoordinatorRecord) -> None:
    assert decode_record(*encode_record(record)) == record
