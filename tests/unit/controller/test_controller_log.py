"""The controller and its log: pending state, commits, standbys, failover, indexes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.controller.config import ControllerConfig
from pykraft.controller.features import (
    BOOTSTRAP_METADATA_VERSION,
    LATEST_METADATA_VERSION,
    bootstrap_records,
    record_version,
)
from pykraft.controller.quorum_controller import QuorumController
from pykraft.controller.requests import (
    BrokerFeatureRange,
    CreatableTopic,
    CreatePartitionsTopic,
)
from pykraft.controller.state import ControllerState
from pykraft.errors import InvariantViolation, UnsupportedVersion
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.records import (
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
)
from tests.unit.controller.controller_harness import LEADER_EPOCH, Harness, incarnation, log_dir

TIMEOUT_MS = 9000


def test_bootstrap_records_set_metadata_version() -> None:
    """A fresh log starts with metadata.version = 3.9-IV0 (21) unless told otherwise."""
    assert BOOTSTRAP_METADATA_VERSION == 21
    assert bootstrap_records() == (FeatureLevelRecord(name="metadata.version", feature_level=21),)
    assert bootstrap_records(22)[0].feature_level == 22
    for level in (3, LATEST_METADATA_VERSION + 1):
        with pytest.raises(UnsupportedVersion):
            bootstrap_records(level)
    h = Harness()
    assert h.controller.image.features.metadata_version == 21
    assert h.controller.bootstrap().records == ()  # already bootstrapped


def test_proposed_records_are_seen_by_the_next_operation_before_commit() -> None:
    """Pending state: a topic proposed but not committed already exists for the next op."""
    h = Harness()
    h.start_brokers(1)
    op = h.controller.create_topics([CreatableTopic("t", 1, 1)], validate_only=False, now_ms=0)
    h.controller.propose(op.records)
    assert "t" in h.controller.image.topics.by_name
    assert "t" not in h.controller.committed_image.topics.by_name
    again = h.controller.create_topics([CreatableTopic("t", 1, 1)], validate_only=False, now_ms=0)
    assert again.response[0].error_code == 36  # TOPIC_ALREADY_EXISTS


def test_deactivate_drops_uncommitted_records() -> None:
    """Losing leadership reverts to the committed state; later commits replay from there."""
    h = Harness()
    h.start_brokers(1)
    committed = h.controller.create_topics(
        [CreatableTopic("kept", 1, 1)], validate_only=False, now_ms=0
    )
    first = h.controller.propose(committed.records) - len(committed.records) + 1
    pending = h.controller.create_topics(
        [CreatableTopic("lost", 1, 1)], validate_only=False, now_ms=0
    )
    h.controller.propose(pending.records)
    h.controller.handle_commit(committed.records, base_offset=first, epoch=LEADER_EPOCH)
    h.controller.deactivate()
    image = h.controller.image
    assert "kept" in image.topics.by_name and "lost" not in image.topics.by_name
    assert image.offset == first + len(committed.records) - 1
    assert not h.controller.is_active and h.controller.next_write_offset == -1
    # The new leader's records arrive as commits and are replayed.
    other = FeatureLevelRecord(name="some.feature", feature_level=1)
    h.controller.handle_commit((other,), base_offset=image.offset + 1, epoch=2)
    assert h.controller.image.features.finalized["some.feature"] == 1


def test_a_standby_replaying_the_log_matches_the_active() -> None:
    """A standby folding the committed log reaches the active's image and indexes."""
    h = Harness()
    h.start_brokers(3)
    h.create("a", 4, 2)
    h.create("b.c", 2, 3, configs={"retention.ms": "9"})
    h.heartbeat(1, TIMEOUT_MS)
    h.heartbeat(2, TIMEOUT_MS)
    h.run(h.controller.tick(TIMEOUT_MS + 1))
    standby = QuorumController(ControllerConfig(node_id=3001), random.Random(0))
    for offset in range(0, len(h.log), 3):  # in batches of three
        batch = h.log[offset : offset + 3]
        standby.handle_commit(batch, base_offset=offset, epoch=LEADER_EPOCH)
    assert standby.image == h.controller.image
    assert standby.state == h.controller.state


def test_commits_already_folded_are_not_replayed_twice() -> None:
    h = Harness()
    h.start_brokers(1)
    image = h.controller.image
    h.controller.handle_commit(h.log[:2], base_offset=0, epoch=LEADER_EPOCH)
    assert h.controller.image is image


def test_a_commit_inside_a_proposed_batch_is_a_bug() -> None:
    h = Harness()
    h.start_brokers(1)
    op = h.controller.create_topics([CreatableTopic("t", 3, 1)], validate_only=False, now_ms=0)
    last = h.controller.propose(op.records)
    with pytest.raises(InvariantViolation):
        h.controller.handle_commit(op.records[:2], base_offset=last - 3, epoch=LEADER_EPOCH)


def test_proposals_advance_the_predicted_offsets() -> None:
    """Raft may have used later offsets than predicted; epochs then stay unique."""
    h = Harness()
    before = h.controller.next_write_offset
    op = h.controller.register_broker(
        0,
        incarnation(0),
        [],
        [BrokerFeatureRange("metadata.version", 1, 22)],
        None,
        0,
        log_dirs=[log_dir(0)],
    )
    with pytest.raises(InvariantViolation):
        h.controller.propose(op.records, base_offset=before - 1)
    last = h.controller.propose(op.records, base_offset=before + 5)
    assert last == before + 5 and h.controller.next_write_offset == before + 6
    assert h.controller.state.registration_offsets[0] == before + 5


# -- the indexes are the image's ------------------------------------------------------


def _operations(h: Harness, rng: random.Random, steps: int) -> None:
    """A random mix of controller operations, each committed."""
    now_ms = 0
    for step in range(steps):
        now_ms += rng.choice([1, 100, TIMEOUT_MS // 2])
        choice = rng.randrange(6)
        names = sorted(h.controller.image.topics.by_name)
        if choice == 0 or not names:
            h.run(
                h.controller.create_topics(
                    [CreatableTopic(f"t.{step}", rng.randint(1, 5), rng.randint(1, 3))],
                    validate_only=False,
                    now_ms=now_ms,
                )
            )
        elif choice == 1:
            h.run(h.controller.delete_topics([rng.choice(names)]))
        elif choice == 2:
            name = rng.choice(names)
            count = len(h.controller.image.topics.by_name[name].partitions) + 1
            h.run(
                h.controller.create_partitions(
                    [CreatePartitionsTopic(name, count)], validate_only=False
                )
            )
        elif choice == 3:
            broker = rng.choice(sorted(h.epochs))
            h.heartbeat(
                broker,
                now_ms,
                want_fence=rng.random() < 0.2,
                want_shutdown=rng.random() < 0.1,
            )
        elif choice == 4:
            h.run(h.controller.tick(now_ms))
        else:
            broker = rng.choice(sorted(h.epochs))
            if h.controller.image.cluster.brokers[broker].fenced:
                h.register(broker, generation=step, now_ms=now_ms + TIMEOUT_MS + 1)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_folded_indexes_equal_indexes_derived_from_the_image(seed: int) -> None:
    """Whatever the operations, the incrementally kept indexes match a fresh derivation,
    and every replica set and ISR obeys its invariants."""
    rng = random.Random(seed)
    h = Harness(seed=seed)
    h.start_brokers(4)
    _operations(h, rng, 40)
    state = h.controller.state
    derived = ControllerState.from_image(state.image, state.registration_offsets)
    assert derived == state
    assert h.replayed_image().topics == state.image.topics
    for topic in state.image.topics.by_id.values():
        for partition in topic.partitions.values():
            assert len(set(partition.replicas)) == len(partition.replicas)
            assert set(partition.isr) <= set(partition.replicas) and partition.isr
            assert partition.leader == -1 or partition.leader in partition.isr


def test_the_same_seed_gives_the_same_log() -> None:
    """Determinism: a seed replays to the very same records."""

    def log(seed: int) -> list[MetadataRecord]:
        h = Harness(seed=seed)
        h.start_brokers(4)
        _operations(h, random.Random(seed), 30)
        return h.log

    assert log(11) == log(11)


@pytest.mark.parametrize("metadata_version", [5, 11, 21, 22])
def test_every_record_written_encodes_at_its_metadata_version(metadata_version: int) -> None:
    """Records round-trip through Kafka's serde at the version the level calls for; below
    3.7-IV2 that drops partition directories, which readers then take as MIGRATING."""
    h = Harness(seed=2, metadata_version=metadata_version)
    h.start_brokers(3)
    _operations(h, random.Random(2), 30)
    h.heartbeat(0, 10**9, want_shutdown=True)
    for record in h.log:
        version = record_version(record, metadata_version)
        decoded = decode_metadata_record(encode_metadata_record(record, version))
        assert decoded == record
    versions = {type(r).__name__: record_version(r, metadata_version) for r in h.log}
    expected_partition = 1 if metadata_version >= 17 else 0
    assert versions[PartitionRecord.__name__] == expected_partition
    assert versions[RegisterBrokerRecord.__name__] == {5: 0, 11: 2, 21: 3, 22: 3}[metadata_version]
