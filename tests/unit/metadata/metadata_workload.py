"""Seeded random streams of valid metadata records, for replay property tests.

A small shadow model tracks what exists (topics, partitions, brokers and their epochs,
config keys, the next producer id), so every record drawn makes sense where it lands.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from pykraft.metadata.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

BROKER_IDS = range(1, 6)


@dataclass
class Shadow:
    topics: dict[uuid.UUID, tuple[str, int]] = field(default_factory=dict)  # id -> name, count
    brokers: dict[int, int] = field(default_factory=dict)  # id -> epoch
    acls: list[uuid.UUID] = field(default_factory=list)
    next_producer_id: int = 0
    topic_sequence: int = 0


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128))


def _replicas(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.sample(list(BROKER_IDS), rng.randint(1, 3)))


def _partition(rng: random.Random, topic_id: uuid.UUID, index: int) -> PartitionRecord:
    replicas = _replicas(rng)
    return PartitionRecord(
        partition_id=index,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas,
        leader=replicas[0],
        leader_epoch=0,
        partition_epoch=0,
    )


def _change(rng: random.Random, topic_id: uuid.UUID, count: int) -> PartitionChangeRecord:
    replicas = _replicas(rng)
    return PartitionChangeRecord(
        partition_id=rng.randrange(count),
        topic_id=topic_id,
        isr=rng.choice([None, replicas[:1], replicas]),
        leader=rng.choice([-2, -1, replicas[0]]),
        replicas=rng.choice([None, replicas]),
        leader_recovery_state=rng.choice([-1, 0, 1]),
    )


def _topic_records(rng: random.Random, shadow: Shadow) -> list[MetadataRecord]:
    choice = rng.random()
    if not shadow.topics or choice < 0.3:
        topic_id = _uuid(rng)
        shadow.topic_sequence += 1
        name = f"topic-{shadow.topic_sequence}"
        count = rng.randint(1, 4)
        shadow.topics[topic_id] = (name, count)
        records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
        return records + [_partition(rng, topic_id, index) for index in range(count)]
    topic_id = rng.choice(sorted(shadow.topics))
    name, count = shadow.topics[topic_id]
    if choice < 0.4:
        del shadow.topics[topic_id]
        return [RemoveTopicRecord(topic_id=topic_id)]
    if choice < 0.5:
        shadow.topics[topic_id] = (name, count + 1)
        return [_partition(rng, topic_id, count)]
    if choice < 0.65:
        return [
            ConfigRecord(
                resource_type=2,
                resource_name=name,
                name=rng.choice(["retention.ms", "cleanup.policy", "segment.bytes"]),
                value=rng.choice([None, "1", "2", "compact"]),
            )
        ]
    return [_change(rng, topic_id, count)]


def _broker_records(rng: random.Random, shadow: Shadow) -> list[MetadataRecord]:
    broker_id = rng.choice(list(BROKER_IDS))
    epoch = shadow.brokers.get(broker_id)
    if epoch is None or rng.random() < 0.2:
        epoch = shadow.brokers[broker_id] = rng.randrange(1 << 40)
        return [
            RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=_uuid(rng),
                broker_epoch=epoch,
                end_points=(
                    RegisterBrokerRecord.BrokerEndpoint(
                        name="PLAINTEXT", host=f"h{broker_id}", port=9092, security_protocol=0
                    ),
                ),
                rack=rng.choice([None, "a", "b"]),
            )
        ]
    kind = rng.randrange(4)
    if kind == 0:
        return [FenceBrokerRecord(id=broker_id, epoch=epoch)]
    if kind == 1:
        return [UnfenceBrokerRecord(id=broker_id, epoch=epoch)]
    if kind == 2:
        return [
            BrokerRegistrationChangeRecord(
                broker_id=broker_id,
                broker_epoch=epoch,
                fenced=rng.choice([-1, 0, 1]),
                in_controlled_shutdown=rng.choice([0, 1]),
            )
        ]
    del shadow.brokers[broker_id]
    return [UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch)]


def _other_records(rng: random.Random, shadow: Shadow) -> list[MetadataRecord]:
    kind = rng.randrange(6)
    if kind == 0:
        level = rng.choice([0, 1, 2])
        name = rng.choice(["kraft.version", "transaction.version"])
        return [FeatureLevelRecord(name=name, feature_level=level)]
    if kind == 1:
        return [FeatureLevelRecord(name="metadata.version", feature_level=rng.randint(1, 25))]
    if kind == 2:
        shadow.next_producer_id += 1000
        return [ProducerIdsRecord(broker_id=1, next_producer_id=shadow.next_producer_id)]
    if kind == 3:
        if shadow.acls and rng.random() < 0.5:
            acl_id = shadow.acls.pop(rng.randrange(len(shadow.acls)))
            return [RemoveAccessControlEntryRecord(id=acl_id)]
        acl_id = _uuid(rng)
        shadow.acls.append(acl_id)
        return [AccessControlEntryRecord(id=acl_id, resource_name="t", principal="User:a")]
    if kind == 4:
        entity = (ClientQuotaRecord.EntityData(entity_type="client-id", entity_name="c"),)
        return [
            ClientQuotaRecord(
                entity=entity,
                key="producer_byte_rate",
                value=float(rng.randint(1, 9)),
                remove=rng.random() < 0.3,
            )
        ]
    return [NoOpRecord()]


def workload(seed: int, steps: int) -> list[MetadataRecord]:
    """`steps` operations' worth of valid records (an operation may write several)."""
    rng = random.Random(seed)
    shadow = Shadow()
    records: list[MetadataRecord] = []
    for _ in range(steps):
        pick = rng.random()
        if pick < 0.5:
            records.extend(_topic_records(rng, shadow))
        elif pick < 0.8:
            records.extend(_broker_records(rng, shadow))
        else:
            records.extend(_other_records(rng, shadow))
    return records
