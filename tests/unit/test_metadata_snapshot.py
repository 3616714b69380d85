"""A MetadataImage as snapshot records (metadata/snapshot.py) and the loader's snapshot load:
random histories folded into an image, written as records, encoded and decoded as a
snapshot holds them, and replayed into an empty delta give the same image (and digest);
change records turn an earlier image of a history into a later one; the loader publishes a
snapshot as one delta from the image it held."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykraft.controller.features import LATEST_METADATA_VERSION, record_version
from pykraft.errors import InvariantViolation
from pykraft.metadata.codec import decode_metadata_record, encode_metadata_record
from pykraft.metadata.image import METADATA_VERSION, MetadataDelta, MetadataImage
from pykraft.metadata.loader import MetadataLoader
from pykraft.metadata.records import (
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from pykraft.metadata.snapshot import change_records, image_records
from pykraft.server.image_digest import image_digest
from tests.unit.metadata.metadata_workload import workload


def fold(records: Sequence[MetadataRecord], offset: int, epoch: int = 3) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(offset, epoch)


def extras(seed: int) -> list[MetadataRecord]:
    """What the shared workload does not write: controllers, SCRAM credentials, delegation
    tokens, the ZooKeeper migration state, a broker in controlled shutdown, log dirs."""
    rng = random.Random(seed)
    records: list[MetadataRecord] = []
    for controller_id in rng.sample(range(100, 105), rng.randint(0, 3)):
        records.append(RegisterControllerRecord(
            controller_id=controller_id, incarnation_id=uuid.UUID(int=rng.getrandbits(128)),
            end_points=(RegisterControllerRecord.ControllerEndpoint(
                name="CONTROLLER", host=f"c{controller_id}", port=9093),),
            features=(RegisterControllerRecord.ControllerFeature(
                name=METADATA_VERSION, min_supported_version=1, max_supported_version=22),)))
    names = [f"user-{i}" for i in range(rng.randint(0, 4))]
    for name in names:
        records.append(UserScramCredentialRecord(
            name=name, mechanism=rng.choice([1, 2]), salt=rng.randbytes(8),
            stored_key=rng.randbytes(32), server_key=rng.randbytes(32), iterations=4096))
    if names and rng.random() < 0.5:
        doomed = next(r for r in records if isinstance(r, UserScramCredentialRecord))
        records.append(RemoveUserScramCredentialRecord(name=doomed.name,
                                                       mechanism=doomed.mechanism))
    tokens = [f"token-{i}" for i in range(rng.randint(0, 3))]
    for token_id in tokens:
        records.append(DelegationTokenRecord(
            owner="User:a", requester="User:b", renewers=("User:c",),
            issue_timestamp=rng.randrange(1 << 40), max_timestamp=1 << 41,
            expiration_timestamp=1 << 40, token_id=token_id))
    if tokens and rng.random() < 0.5:
        records.append(RemoveDelegationTokenRecord(token_id=tokens[0]))
    if rng.random() < 0.3:
        records.append(ZkMigrationStateRecord(zk_migration_state=rng.randint(1, 3)))
    broker_id = 50 + rng.randrange(3)
    records.append(RegisterBrokerRecord(
        broker_id=broker_id, broker_epoch=rng.randrange(1 << 40),
        incarnation_id=uuid.UUID(int=rng.getrandbits(128)),
        end_points=(RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="b", port=1),),
        fenced=False, log_dirs=(uuid.UUID(int=rng.getrandbits(128)),)))
    if rng.random() < 0.5:
        epoch = next(r.broker_epoch for r in reversed(records)
                     if isinstance(r, RegisterBrokerRecord))
        records.append(BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=epoch, in_controlled_shutdown=1))
    return records


def history(seed: int, steps: int) -> list[MetadataRecord]:
    """A valid random history whose final metadata.version can hold every field."""
    rng = random.Random(seed)
    records = workload(seed, steps)
    mixed = extras(seed)
    low = len(records) - len(records) // 4  # spread the extras over the history's end
    places = sorted(rng.randint(low, len(records)) for _ in mixed)
    for shift, (place, record) in enumerate(zip(places, mixed, strict=True)):
        records.insert(place + shift, record)  # in their own order
    records.append(FeatureLevelRecord(name=METADATA_VERSION,
                                      feature_level=LATEST_METADATA_VERSION))
    return records


def through_bytes(records: Sequence[MetadataRecord], metadata_version: int) -> list[MetadataRecord]:
    """The records as a snapshot stores them: encoded at the level's versions, decoded."""
    return [decode_metadata_record(encode_metadata_record(r, record_version(r, metadata_version)))
            for r in records]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 300))
def test_image_records_rebuild_the_image_exactly(seed: int, steps: int) -> None:
    records = history(seed, steps)
    image = fold(records, offset=len(records) + 17, epoch=5)
    written = list(image_records(image))
    rebuilt = fold(through_bytes(written, image.features.metadata_version),
                   offset=image.offset, epoch=image.epoch)
    assert rebuilt == image
    assert image_digest(rebuilt) == image_digest(image)
    # a snapshot holds the state, not the history: one record per thing that exists
    partitions = sum(len(t.partitions) for t in image.topics.by_id.values())
    assert sum(isinstance(r, PartitionRecord) for r in written) == partitions
    assert sum(isinstance(r, TopicRecord) for r in written) == len(image.topics.by_id)
    assert not any(isinstance(r, RemoveTopicRecord) for r in written)
    assert written[0] == FeatureLevelRecord(name=METADATA_VERSION,
                                            feature_level=LATEST_METADATA_VERSION)


def test_image_records_of_a_written_broker_keep_fencing_and_controlled_shutdown() -> None:
    records = extras(7)
    image = fold(records, offset=10)
    brokers = {r.broker_id: r for r in image_records(image) if isinstance(r, RegisterBrokerRecord)}
    for broker_id, registration in image.cluster.brokers.items():
        assert brokers[broker_id].fenced == registration.fenced
        assert brokers[broker_id].in_controlled_shutdown == registration.in_controlled_shutdown
    assert any(b.in_controlled_shutdown for b in image.cluster.brokers.values()) or not any(
        isinstance(r, BrokerRegistrationChangeRecord) for r in records)


def test_the_empty_image_is_no_records() -> None:
    assert list(image_records(MetadataImage.EMPTY)) == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 300), cut=st.floats(0, 1))
def test_change_records_turn_an_earlier_image_into_a_later_one(
    seed: int, steps: int, cut: float
) -> None:
    records = history(seed, steps)
    split = int(len(records) * cut)
    base = fold(records[:split], offset=split)
    target = fold(records, offset=len(records) + 1, epoch=4)
    delta = MetadataDelta(base)
    for record in change_records(base, target):
        delta.replay(record)
    assert delta.apply(target.offset, target.epoch) == target
    # the delta says what changed as replaying the history would
    assert delta.deleted_topic_ids == {
        topic_id for topic_id in base.topics.by_id if topic_id not in target.topics.by_id}
    assert set(delta.created_topic_ids) == {
        topic_id for topic_id in target.topics.by_id if topic_id not in base.topics.by_id}


def test_change_records_of_equal_images_are_none() -> None:
    records = history(3, 200)
    image = fold(records, offset=500)
    assert list(change_records(image, fold(records, offset=900))) == []


def test_a_topic_recreated_under_its_name_gets_a_remove_then_its_new_configs() -> None:
    old_id, new_id = uuid.UUID(int=1), uuid.UUID(int=2)
    base = fold([
        FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
        TopicRecord(name="t", topic_id=old_id),
        PartitionRecord(partition_id=0, topic_id=old_id, replicas=(1,), isr=(1,), leader=1,
                        leader_epoch=0, partition_epoch=0),
        ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1"),
        ConfigRecord(resource_type=2, resource_name="t", name="segment.bytes", value="9"),
    ], offset=5)
    target = fold([
        FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
        TopicRecord(name="t", topic_id=new_id),
        PartitionRecord(partition_id=0, topic_id=new_id, replicas=(2,), isr=(2,), leader=2,
                        leader_epoch=0, partition_epoch=0),
        ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value="1"),
    ], offset=9)
    changes = list(change_records(base, target))
    assert changes[0] == RemoveTopicRecord(topic_id=old_id)
    assert changes[1] == TopicRecord(name="t", topic_id=new_id)
    # the removal took every config key of "t": the one kept is written again
    assert ConfigRecord(resource_type=2, resource_name="t", name="retention.ms",
                        value="1") in changes
    delta = MetadataDelta(base)
    for record in changes:
        delta.replay(record)
    assert delta.apply(target.offset, target.epoch) == target


@pytest.mark.parametrize("impossible", ["metadata.version", "controller", "producer ids"])
def test_changes_no_log_can_make_are_refused(impossible: str) -> None:
    base_records: list[MetadataRecord] = [
        FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
        RegisterControllerRecord(controller_id=1),
        ProducerIdsRecord(broker_id=1, next_producer_id=2000),
    ]
    base = fold(base_records, offset=3)
    dropped = {"metadata.version": 0, "controller": 1, "producer ids": 2}[impossible]
    kept = [r for i, r in enumerate(base_records) if i != dropped]
    if impossible == "producer ids":
        kept.append(ProducerIdsRecord(broker_id=1, next_producer_id=1000))
    with pytest.raises(InvariantViolation):
        list(change_records(base, fold(kept, offset=4)))


# ---------------------------------------------------------------------------------------------
# The loader


def test_the_loader_publishes_a_snapshot_as_one_delta_from_its_image() -> None:
    records = history(11, 250)
    published: list[tuple[MetadataDelta, MetadataImage]] = []
    loader = MetadataLoader(publishers=[lambda d, i: published.append((d, i))])
    split = len(records) // 2
    loader.handle_commit(0, 1, records[:split], split - 1)
    before = loader.image
    target = fold(records, offset=len(records) + 9, epoch=2)
    loader.load_snapshot(image_records(target), offset=target.offset, epoch=target.epoch)
    delta, image = published[-1]
    assert image == target and loader.image is image
    assert image_digest(image) == image_digest(target)
    assert delta.base is before
    assert delta.deleted_topic_ids == set(before.topics.by_id) - set(target.topics.by_id)
    assert loader.last_offset == target.offset and not loader.in_transaction
    # the log goes on right after the snapshot
    loader.handle_commit(target.offset + 1, 2, [TopicRecord(name="after", topic_id=uuid.uuid4())],
                         target.offset + 1)
    assert loader.image.topic_by_name("after") is not None


def test_a_snapshot_loaded_in_steps_is_published_once_after_the_last_step() -> None:
    """The steps pause every `per_step` records replayed; until the last one ends, the
    loader keeps its image and publishes nothing; then it is as a one-step load."""
    records = history(13, 250)
    published: list[tuple[MetadataDelta, MetadataImage]] = []
    loader = MetadataLoader(publishers=[lambda d, i: published.append((d, i))])
    split = len(records) // 2
    loader.handle_commit(0, 1, records[:split], split - 1)
    before, count = loader.image, len(published)
    target = fold(records, offset=len(records) + 9, epoch=2)
    wanted = list(image_records(target))
    steps = loader.load_snapshot_steps(wanted, offset=target.offset, epoch=target.epoch,
                                       per_step=7)
    paused = 0
    for _ in steps:
        paused += 1
        assert loader.image is before and len(published) == count
    changes = list(change_records(before, target))
    assert paused == len(wanted) // 7 + len(changes) // 7
    delta, image = published[-1]
    assert len(published) == count + 1 and image == target and loader.image is image
    assert delta.base is before and loader.last_offset == target.offset


def test_the_loader_refuses_a_snapshot_behind_what_it_applied() -> None:
    loader = MetadataLoader()
    loader.handle_commit(0, 1, [FeatureLevelRecord(name=METADATA_VERSION, feature_level=21)], 9)
    with pytest.raises(InvariantViolation):
        loader.load_snapshot([], offset=9, epoch=1)


def test_a_snapshot_drops_an_open_transaction() -> None:
    loader = MetadataLoader()
    loader.handle_commit(0, 1, [FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
                                BeginTransactionRecord(name="t"),
                                TopicRecord(name="half", topic_id=uuid.uuid4())], 2)
    assert loader.in_transaction
    target = fold([FeatureLevelRecord(name=METADATA_VERSION, feature_level=21)], offset=5)
    loader.load_snapshot(image_records(target), offset=5, epoch=target.epoch)
    assert not loader.in_transaction and loader.image.topic_by_name("half") is None
    assert loader.image == target


def test_an_empty_loader_publishes_the_snapshot_as_a_delta_from_empty() -> None:
    records = history(12, 200)
    target = fold(records, offset=len(records) + 3, epoch=2)
    published: list[tuple[MetadataDelta, MetadataImage]] = []
    loader = MetadataLoader(publishers=[lambda d, i: published.append((d, i))])
    loader.load_snapshot(image_records(target), offset=target.offset, epoch=target.epoch)
    ((delta, image),) = published
    assert image == target and delta.base is MetadataImage.EMPTY
    assert set(delta.created_topic_ids) == set(target.topics.by_id)
    assert set(delta.changed_brokers) == set(target.cluster.brokers)
