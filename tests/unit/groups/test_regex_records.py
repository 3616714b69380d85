"""KIP-848 regex resolutions in `__consumer_offsets`, as Kafka 4.0 logs them: a
ConsumerGroupRegularExpression record (key version 16) with the regex's topics is written
with the group epoch its resolution bumps, replayed on load instead of resolving again, and
tombstoned when no member uses the regex any more."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pykraft.broker.group_coordinator.consumer import TopicInfo
from pykraft.broker.group_coordinator.core import GroupCoordinator
from pykraft.broker.group_coordinator.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    CoordinatorRecord,
    decode_record,
    encode_record,
)
from pykraft.errors import CorruptRecord
from tests.unit.groups.test_consumer_group_core import GROUP, Harness, T

U = uuid.UUID(int=0xB0B)
REGEX_KEY = ConsumerGroupRegularExpressionKey(group_id=GROUP, regular_expression="t.*")


def regex_records(log: list[CoordinatorRecord]) -> list[CoordinatorRecord]:
    return [r for r in log if isinstance(r.key, ConsumerGroupRegularExpressionKey)]


def test_the_codec_round_trips_kafkas_layout() -> None:
    """Key: int16 version 16, group id, regex (non-flexible strings); value: version 0,
    flexible, topics, version, timestamp."""
    value = ConsumerGroupRegularExpressionValue(topics=("t", "tu"), version=-1, timestamp=7)
    key_bytes, value_bytes = encode_record(CoordinatorRecord(REGEX_KEY, value))
    assert key_bytes == b"\x00\x10" + b"\x00\x02cg" + b"\x00\x03t.*"
    assert value_bytes == (b"\x00\x00" + b"\x03" + b"\x02t" + b"\x03tu"
                           + b"\xff" * 8 + (7).to_bytes(8, "big") + b"\x00")
    assert decode_record(key_bytes, value_bytes) == CoordinatorRecord(REGEX_KEY, value)
    assert decode_record(key_bytes, None) == CoordinatorRecord(REGEX_KEY, None)


TEXT = st.text(max_size=20)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(st.builds(CoordinatorRecord, st.builds(ConsumerGroupRegularExpressionKey,
                                              group_id=TEXT, regular_expression=TEXT),
                 st.none() | st.builds(ConsumerGroupRegularExpressionValue,
                                       topics=st.lists(TEXT, max_size=4).map(tuple),
                                       version=INT64, timestamp=INT64)))
def test_every_regex_record_round_trips(record: CoordinatorRecord) -> None:
    assert decode_record(*encode_record(record)) == record


@pytest.mark.parametrize("value", [
    b"\x00\x00",  # no topics array
    b"\x00\x00\x05\x02t",  # four topics promised, one given
    b"\x00\x00\x01" + b"\x00" * 7,  # version cut short
])
def test_a_truncated_regex_value_is_a_corrupt_record(value: bytes) -> None:
    key, _ = encode_record(CoordinatorRecord(REGEX_KEY, None))
    with pytest.raises(CorruptRecord):
        decode_record(key, value)


def test_the_resolution_is_written_with_the_group_epoch_it_bumps() -> None:
    """The heartbeat that brings the regex writes no resolution; the resolution writes the
    regex's topics just before the new group epoch."""
    h = Harness()
    h.core.update_topics({"t": TopicInfo(T, "t", 6), "tu": TopicInfo(U, "tu", 2),
                          "x": TopicInfo(uuid.UUID(int=9), "x", 1)}, h.now_ms)
    h.beat("a", 0, regex="t.*")
    assert regex_records(h.log) == []
    start = len(h.log)
    h.advance(0)
    written = h.log[start:]
    keys = [type(r.key) for r in written]
    assert keys.index(ConsumerGroupRegularExpressionKey) < keys.index(ConsumerGroupMetadataKey)
    (record,) = regex_records(written)
    assert record.key == REGEX_KEY
    assert isinstance(record.value, ConsumerGroupRegularExpressionValue)
    assert record.value.topics == ("t", "tu") and record.value.timestamp == h.now_ms


def test_a_new_matching_topic_rewrites_the_resolution() -> None:
    """A topic created that the regex matches: a new resolution record with both topics."""
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)
    start = len(h.log)
    h.core.update_topics({"t": TopicInfo(T, "t", 6), "tu": TopicInfo(U, "tu", 2)}, h.now_ms)
    h.drain()
    (record,) = regex_records(h.log[start:])
    assert isinstance(record.value, ConsumerGroupRegularExpressionValue)
    assert record.value.topics == ("t", "tu")


def test_the_last_member_using_the_regex_tombstones_it() -> None:
    """Two members share the regex: the first leaving keeps it, the second moving to topic
    names tombstones it (with the group still alive)."""
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)
    b = h.beat("b", 0, regex="t.*")
    h.beat("a", -1)
    assert [r.value for r in regex_records(h.log) if r.value is None] == []
    start = len(h.log)
    h.beat("b", b.member_epoch, owned={}, topics=("t",), regex="")
    tombstones = [r for r in regex_records(h.log[start:]) if r.value is None]
    assert [r.key for r in tombstones] == [REGEX_KEY]
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None and consumer.resolved_regexes == {}


def test_deleting_the_group_tombstones_the_regex_before_the_group_epoch() -> None:
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)
    start = len(h.log)
    h.beat("a", -1)
    gone = [type(r.key) for r in h.log[start:] if r.value is None]
    assert ConsumerGroupRegularExpressionKey in gone
    assert gone.index(ConsumerGroupRegularExpressionKey) < gone.index(ConsumerGroupMetadataKey)


def test_a_loaded_group_takes_the_resolution_from_the_log() -> None:
    """A topic the regex matches was created while no coordinator had the group loaded: the
    coordinator that loads it keeps the logged resolution (same group epoch, same target)
    and resolves again only after the next heartbeat, which then bumps the epoch."""
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)
    member = h.beat("a", 1, owned={})
    consumer = h.core.partitions[0].groups[GROUP].consumer
    assert consumer is not None
    epoch = consumer.group_epoch
    assert member.member_epoch == epoch

    restarted = GroupCoordinator(h.config, random.Random(4))
    restarted.update_topics({"t": TopicInfo(T, "t", 6), "tu": TopicInfo(U, "tu", 2)}, h.now_ms)
    restarted.begin_load(0, 1)
    for record in h.log:
        restarted.load(0, decode_record(*encode_record(record)))  # type: ignore[arg-type]
    restarted.complete_load(0, h.now_ms)
    loaded = restarted.partitions[0].groups[GROUP].consumer
    assert loaded is not None
    assert loaded.group_epoch == epoch and set(loaded.subscription_metadata) == {"t"}
    assert loaded.resolved_regexes["t.*"].topics == frozenset({"t"})
    assert restarted.ready().appends == ()

    h.core = restarted
    h.log.clear()
    kept = h.beat("a", epoch, owned={T: set(range(6))})
    assert kept.member_epoch == epoch
    h.advance(0)  # the resolution after that heartbeat
    assert loaded.group_epoch == epoch + 1
    (record,) = regex_records(h.log)
    assert isinstance(record.value, ConsumerGroupRegularExpressionValue)
    assert record.value.topics == ("t", "tu")
    moved = h.beat("a", epoch, owned={T: set(range(6))})
    assert moved.member_epoch == epoch + 1
    assert moved.assignment is not None and set(moved.assignment[U]) == {0, 1}


def test_a_log_without_the_resolution_is_resolved_on_load() -> None:
    """A group written before regex records existed (no record for its regex): resolved at
    load against the current topics, so its member keeps its partitions."""
    h = Harness()
    h.beat("a", 0, regex="t.*")
    h.advance(0)
    h.beat("a", 1, owned={})
    restarted = GroupCoordinator(h.config, random.Random(4))
    restarted.update_topics({"t": TopicInfo(T, "t", 6)}, h.now_ms)
    restarted.begin_load(0, 1)
    for record in h.log:
        if not isinstance(record.key, ConsumerGroupRegularExpressionKey):
            restarted.load(0, record)
    restarted.complete_load(0, h.now_ms)
    loaded = restarted.partitions[0].groups[GROUP].consumer
    assert loaded is not None and set(loaded.subscription_metadata) == {"t"}
    assert loaded.target["a"] == {T: frozenset(range(6))}
