"""The metadata image: the cluster's metadata at one offset of `__cluster_metadata`.

Theory of operation. A `MetadataImage` is an immutable value, the fold of every record of
the metadata log up to `offset`. It is never changed in place: a `MetadataDelta` starts
from a base image, `replay`s records, and `apply(offset, epoch)` builds the next image.
Everything large is an `immutables.Map` (a hash array mapped trie), and `apply` only
`set`s what changed, so the next image shares every untouched node with its base: one
partition changed on a 100,000-partition image makes one new `PartitionRegistration`, one
new tuple of its topic's partitions (`PartitionMap`: Kafka's partition ids are dense, and a
tuple is one object for the garbage collector where a trie was two per partition), one new
`TopicImage` and one new path in each topic map, and every other `TopicImage` object is
the very same object in both images.

Publishers get `(delta, image)` and ask the delta what changed (`changed_topics`,
`changed_partitions(topic_id)`, `deleted_topic_ids`, `changed_brokers`, `changed_configs`,
`local_changes(broker_id)`...) instead of diffing two images.

Invariants. Every record must make sense against the state it is replayed on: a partition
belongs to a live topic, a partition change to an existing partition, a fence to a broker
registered with that epoch, no two live topics share a name or id. The active controller
only writes records that do; a record that does not is a bug, and `replay` stops on an
`invariant` rather than build an image nobody could reproduce.

Transactions (Begin/End/AbortTransactionRecord) are the loader's business: `replay`
ignores them, as it ignores NoOpRecord.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import ClassVar, Final, Generic, TypeVar, assert_never

import immutables

from pykraft.errors import InvariantViolation, invariant
from pykraft.metadata.partition_map import EMPTY_PARTITIONS, PartitionMap
from pykraft.metadata.records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    MetadataRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from pykraft.metadata.registrations import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokerRegistration,
    ConfigResource,
    ConfigResourceType,
    ControllerRegistration,
    DelegationTokenData,
    Endpoint,
    LeaderRecoveryState,
    PartitionRegistration,
    ScramCredential,
    ScramKey,
    StandardAcl,
    TopicIdPartition,
    VersionRange,
    quota_entity,
)

__all__ = [
    "METADATA_VERSION",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "AclsImage",
    "BrokerRegistration",
    "ClientQuotaEntity",
    "ClientQuotasImage",
    "ClusterImage",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationsImage",
    "ControllerRegistration",
    "DelegationTokenData",
    "DelegationTokensImage",
    "Endpoint",
    "FeaturesImage",
    "LeaderRecoveryState",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "ScramCredential",
    "ScramImage",
    "ScramKey",
    "StandardAcl",
    "TopicDelta",
    "TopicIdPartition",
    "TopicImage",
    "TopicsDelta",
    "TopicsImage",
    "VersionRange",
]

METADATA_VERSION: Final = "metadata.version"  # the feature that versions the metadata log

K = TypeVar("K")
V = TypeVar("V")
ClientQuotaEntity = tuple[tuple[str, str | None], ...]  # see registrations.quota_entity


def _empty_map() -> immutables.Map[K, V]:
    return immutables.Map()


def _required(value: V | None, message: str) -> V:
    """`value`, which a valid log guarantees exists; None is a broken invariant."""
    if value is None:
        raise InvariantViolation(message)
    return value


# ---------------------------------------------------------------------------------------------
# Images


@dataclass(frozen=True, slots=True)
class FeaturesImage:
    metadata_version: int  # the metadata.version feature level; 0 before bootstrap set it
    finalized: immutables.Map[str, int]  # every other finalized feature -> level (never 0)
    zk_migration_state: int = 0  # ZkMigrationStateRecord; 0 = NONE

    def level(self, feature: str) -> int:
        """The finalized level of `feature`, 0 when not finalized."""
        if feature == METADATA_VERSION:
            return self.metadata_version
        return self.finalized.get(feature, 0)


@dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: immutables.Map[int, BrokerRegistration]
    controllers: immutables.Map[int, ControllerRegistration]


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: PartitionMap  # by index (partition_map.py: a tuple, not a trie)


@dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: immutables.Map[uuid.UUID, TopicImage]
    by_name: immutables.Map[str, TopicImage]  # the same TopicImage objects as by_id


@dataclass(frozen=True, slots=True)
class ConfigurationsImage:
    # Only resources with at least one key set are present.
    resources: immutables.Map[ConfigResource, immutables.Map[str, str]]

    def get(self, resource_type: int, resource_name: str) -> immutables.Map[str, str]:
        """The keys set on one resource; empty when none are."""
        found = self.resources.get(ConfigResource(resource_type, resource_name))
        return _empty_map() if found is None else found


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    next_producer_id: int  # the first producer id of the next block to hand out; -1: none yet


@dataclass(frozen=True, slots=True)
class AclsImage:
    by_id: immutables.Map[uuid.UUID, StandardAcl]


@dataclass(frozen=True, slots=True)
class ClientQuotasImage:
    entities: immutables.Map[ClientQuotaEntity, immutables.Map[str, float]]


@dataclass(frozen=True, slots=True)
class ScramImage:
    credentials: immutables.Map[ScramKey, ScramCredential]


@dataclass(frozen=True, slots=True)
class DelegationTokensImage:
    tokens: immutables.Map[str, DelegationTokenData]  # by token id


@dataclass(frozen=True, slots=True)
class MetadataImage:
    offset: int  # the last record folded in; -1 for the empty image
    epoch: int  # the leader epoch of the batch holding that record
    features: FeaturesImage
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    client_quotas: ClientQuotasImage
    scram: ScramImage
    delegation_tokens: DelegationTokensImage

    EMPTY: ClassVar[MetadataImage]

    def __repr__(self) -> str:  # a summary: the whole image can be millions of partitions
        partition_count = sum(len(topic.partitions) for topic in self.topics.by_id.values())
        return (
            f"MetadataImage(offset={self.offset}, epoch={self.epoch}, "
            f"metadata_version={self.features.metadata_version}, "
            f"brokers={len(self.cluster.brokers)}, topics={len(self.topics.by_id)}, "
            f"partitions={partition_count}, config_resources={len(self.configs.resources)})"
        )

    def topic_by_name(self, name: str) -> TopicImage | None:
        return self.topics.by_name.get(name)

    def partition(self, topic_id: uuid.UUID, index: int) -> PartitionRegistration | None:
        topic = self.topics.by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(index)

    def live_brokers(self) -> tuple[BrokerRegistration, ...]:
        """Registered, unfenced brokers (those in controlled shutdown included), by id."""
        return tuple(
            broker for _, broker in sorted(self.cluster.brokers.items()) if not broker.fenced
        )

    def leader_for(self, topic_name: str, partition: int) -> int | None:
        """The leader's broker id; None when the topic or partition is unknown or leaderless."""
        topic = self.topics.by_name.get(topic_name)
        registration = None if topic is None else topic.partitions.get(partition)
        if registration is None or registration.leader == NO_LEADER:
            return None
        return registration.leader


MetadataImage.EMPTY = MetadataImage(
    offset=-1,
    epoch=-1,
    features=FeaturesImage(metadata_version=0, finalized=_empty_map()),
    cluster=ClusterImage(brokers=_empty_map(), controllers=_empty_map()),
    topics=TopicsImage(by_id=_empty_map(), by_name=_empty_map()),
    configs=ConfigurationsImage(resources=_empty_map()),
    producer_ids=ProducerIdsImage(next_producer_id=-1),
    acls=AclsImage(by_id=_empty_map()),
    client_quotas=ClientQuotasImage(entities=_empty_map()),
    scram=ScramImage(credentials=_empty_map()),
    delegation_tokens=DelegationTokensImage(tokens=_empty_map()),
)


# ---------------------------------------------------------------------------------------------
# Deltas


class _MapDelta(Generic[K, V]):
    """Changes to one immutables.Map: key -> new value, or None where the key is removed."""

    def __init__(self, base: immutables.Map[K, V]) -> None:
        self.base = base
        self.changes: dict[K, V | None] = {}

    def get(self, key: K) -> V | None:
        if key in self.changes:
            return self.changes[key]
        return self.base.get(key)

    def set(self, key: K, value: V) -> None:
        self.changes[key] = value

    def remove(self, key: K) -> None:
        if key in self.base:
            self.changes[key] = None
        else:  # added and removed within this delta: no trace
            self.changes.pop(key, None)

    def apply(self) -> immutables.Map[K, V]:
        if not self.changes:
            return self.base  # untouched: the very same map
        mutation = self.base.mutate()
        for key, value in self.changes.items():
            if value is None:
                mutation.pop(key, None)
            else:
                mutation[key] = value
        return mutation.finish()


class TopicDelta:
    """Changes to one topic: its partitions, new or changed, by index."""

    def __init__(self, image: TopicImage) -> None:
        self.image = image  # the topic before this delta (with no partitions if created)
        self.partition_changes: dict[int, PartitionRegistration] = {}
        self._applied: TopicImage | None = None

    def partition(self, index: int) -> PartitionRegistration | None:
        found = self.partition_changes.get(index)
        return self.image.partitions.get(index) if found is None else found

    def replay_partition(self, record: PartitionRecord) -> None:
        invariant(record.partition_id >= 0, "partition id %d", record.partition_id)
        self.partition_changes[record.partition_id] = PartitionRegistration.from_record(record)
        self._applied = None

    def replay_change(self, record: PartitionChangeRecord) -> None:
        current = self.partition(record.partition_id)
        if current is None:  # the message only then: this runs for every partition change
            raise InvariantViolation(
                f"change to unknown partition {self.image.name}-{record.partition_id}")
        self.partition_changes[record.partition_id] = current.merge(record)
        self._applied = None

    def apply(self) -> TopicImage:
        """The topic after this delta; the same object until the next replay."""
        if self._applied is None:
            if not self.partition_changes:
                self._applied = self.image
            else:
                partitions = self.image.partitions.update(self.partition_changes)
                self._applied = replace(self.image, partitions=partitions)
        return self._applied


@dataclass(frozen=True, slots=True)
class LocalReplicaChanges:
    """What a delta means for one broker's replicas (Kafka's LocalReplicaChanges).

    `leaders` are partitions this broker now leads whose partition epoch moved (ISR or
    replicas changed, or newly led); `elected_leaders` is the subset whose leader epoch moved,
    where the broker must become leader. `followers` likewise for the partitions it follows.
    `deletes` are replicas this broker no longer hosts: removed from the replica set, or
    their topic deleted.
    """

    deletes: frozenset[TopicIdPartition]
    elected_leaders: Mapping[TopicIdPartition, PartitionRegistration]
    leaders: Mapping[TopicIdPartition, PartitionRegistration]
    followers: Mapping[TopicIdPartition, PartitionRegistration]


class TopicsDelta:
    def __init__(self, base: TopicsImage) -> None:
        self.base = base
        self.changed: dict[uuid.UUID, TopicDelta] = {}  # created or changed, by topic id
        self.deleted: set[uuid.UUID] = set()  # ids of base topics removed
        self._names: dict[str, uuid.UUID | None] = {}  # name -> live id, where it changed

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of the live topic called `name`, with this delta's changes."""
        if name in self._names:
            return self._names[name]
        found = self.base.by_name.get(name)
        return None if found is None else found.topic_id

    def topic(self, topic_id: uuid.UUID) -> TopicDelta | None:
        """The live topic `topic_id`, as a TopicDelta tracked by this delta from now on."""
        found = self.changed.get(topic_id)
        if found is None and topic_id not in self.deleted:
            image = self.base.by_id.get(topic_id)
            if image is not None:
                found = self.changed[topic_id] = TopicDelta(image)
        return found

    def replay_topic(self, record: TopicRecord) -> None:
        invariant(self.topic_id(record.name) is None, f"topic {record.name!r} already exists")
        live = record.topic_id in self.changed or (
            record.topic_id in self.base.by_id and record.topic_id not in self.deleted
        )
        invariant(not live, f"topic id {record.topic_id} already in use")
        image = TopicImage(name=record.name, topic_id=record.topic_id, partitions=EMPTY_PARTITIONS)
        self.changed[record.topic_id] = TopicDelta(image)
        self._names[record.name] = record.topic_id

    def replay_partition(self, record: PartitionRecord | PartitionChangeRecord) -> None:
        topic = self.topic(record.topic_id)
        if topic is None:  # formatting a UUID costs more than the rest of the lookup
            raise InvariantViolation(
                f"{type(record).__name__} for unknown topic {record.topic_id}")
        if isinstance(record, PartitionRecord):
            topic.replay_partition(record)
        else:
            topic.replay_change(record)

    def replay_remove(self, record: RemoveTopicRecord) -> str:
        """Remove a topic; return its name (its configs go with it)."""
        topic = _required(
            self.topic(record.topic_id), f"RemoveTopicRecord for unknown topic {record.topic_id}"
        )
        del self.changed[record.topic_id]
        if record.topic_id in self.base.by_id:
            self.deleted.add(record.topic_id)
        self._names[topic.image.name] = None
        return topic.image.name

    def apply(self) -> TopicsImage:
        if not self.changed and not self.deleted:
            return self.base
        by_id, by_name = self.base.by_id.mutate(), self.base.by_name.mutate()
        for topic_id in self.deleted:  # first: a deleted topic's name may be reused
            del by_name[by_id.pop(topic_id).name]
        for topic_id, delta in self.changed.items():
            topic = delta.apply()
            by_id[topic_id] = topic
            by_name[topic.name] = topic
        return TopicsImage(by_id=by_id.finish(), by_name=by_name.finish())

    def local_changes(self, broker_id: int, topic: str | None = None) -> LocalReplicaChanges:
        deletes: set[TopicIdPartition] = set()
        elected: dict[TopicIdPartition, PartitionRegistration] = {}
        leaders: dict[TopicIdPartition, PartitionRegistration] = {}
        followers: dict[TopicIdPartition, PartitionRegistration] = {}
        new_key = tuple.__new__  # TopicIdPartition(...) is a Python call: 4% of a broker's
        # time while a controlled shutdown's changes were applied (py-spy)
        for topic_id in self.deleted:
            deleted = self.base.by_id[topic_id]
            if topic is not None and deleted.name != topic:
                continue
            for index, partition in deleted.partitions.items():
                if broker_id in partition.replicas:
                    deletes.add(new_key(TopicIdPartition, (topic_id, deleted.name, index)))
        for topic_id, delta in self.changed.items():
            name = delta.image.name
            if topic is not None and name != topic:
                continue
            previous_partitions = delta.image.partitions
            for index, partition in delta.partition_changes.items():
                key = new_key(TopicIdPartition, (topic_id, name, index))
                previous = previous_partitions.get(index)
                if broker_id not in partition.replicas:
                    if previous is not None and broker_id in previous.replicas:
                        deletes.add(key)
                    continue
                if previous is not None and previous.partition_epoch == partition.partition_epoch:
                    continue  # replayed, but nothing this broker must act on
                if partition.leader == broker_id:
                    leaders[key] = partition
                    if previous is None or previous.leader_epoch != partition.leader_epoch:
                        elected[key] = partition
                else:
                    followers[key] = partition
        return LocalReplicaChanges(
            deletes=frozenset(deletes),
            elected_leaders=MappingProxyType(elected),
            leaders=MappingProxyType(leaders),
            followers=MappingProxyType(followers),
        )


class MetadataDelta:
    """Records replayed on a base image; `apply` makes the next image.

    Replaying on a delta never touches its base. A delta may be applied more than once (to
    the same result) and replayed after an apply; publishers only read it.
    """

    def __init__(self, base: MetadataImage) -> None:
        self.base = base
        self._metadata_version: int | None = None
        self._features = _MapDelta(base.features.finalized)
        self._feature_levels: dict[str, int] = {}
        self._zk_migration_state: int | None = None
        self._brokers = _MapDelta(base.cluster.brokers)
        self._controllers = _MapDelta(base.cluster.controllers)
        self._topics = TopicsDelta(base.topics)
        self._configs = _MapDelta(base.configs.resources)
        self._next_producer_id: int | None = None
        self._acls = _MapDelta(base.acls.by_id)
        self._quotas = _MapDelta(base.client_quotas.entities)
        self._scram = _MapDelta(base.scram.credentials)
        self._tokens = _MapDelta(base.delegation_tokens.tokens)

    # -- replay --------------------------------------------------------------------------

    def replay(self, record: MetadataRecord) -> None:
        match record:
            case TopicRecord():
                self._topics.replay_topic(record)
            case PartitionRecord() | PartitionChangeRecord():
                self._topics.replay_partition(record)
            case RemoveTopicRecord():
                name = self._topics.replay_remove(record)
                self._configs.remove(ConfigResource(ConfigResourceType.TOPIC, name))
            case ConfigRecord():
                self._replay_config(record)
            case (
                RegisterBrokerRecord()
                | UnregisterBrokerRecord()
                | FenceBrokerRecord()
                | UnfenceBrokerRecord()
                | BrokerRegistrationChangeRecord()
            ):
                self._replay_broker(record)
            case RegisterControllerRecord():
                registration = ControllerRegistration.from_record(record)
                self._controllers.set(registration.id, registration)
            case FeatureLevelRecord() | ZkMigrationStateRecord():
                self._replay_feature(record)
            case ProducerIdsRecord():
                self._replay_producer_ids(record)
            case AccessControlEntryRecord() | RemoveAccessControlEntryRecord():
                self._replay_acl(record)
            case ClientQuotaRecord():
                self._replay_client_quota(record)
            case (
                UserScramCredentialRecord()
                | RemoveUserScramCredentialRecord()
                | DelegationTokenRecord()
                | RemoveDelegationTokenRecord()
            ):
                self._replay_credential(record)
            case (
                NoOpRecord()
                | BeginTransactionRecord()
                | EndTransactionRecord()
                | AbortTransactionRecord()
            ):
                pass  # no state; the loader handles transaction boundaries
            case _:
                assert_never(record)

    def _replay_config(self, record: ConfigRecord) -> None:
        resource = ConfigResource(record.resource_type, record.resource_name)
        current = self._configs.get(resource)
        if current is None:
            current = _empty_map()
        if record.value is not None:
            self._configs.set(resource, current.set(record.name, record.value))
        elif record.name in current:
            remaining = current.delete(record.name)
            if remaining:
                self._configs.set(resource, remaining)
            else:  # an empty resource is no resource
                self._configs.remove(resource)

    def _replay_broker(
        self,
        record: RegisterBrokerRecord
        | UnregisterBrokerRecord
        | FenceBrokerRecord
        | UnfenceBrokerRecord
        | BrokerRegistrationChangeRecord,
    ) -> None:
        match record:
            case RegisterBrokerRecord():
                registration = BrokerRegistration.from_record(record)
                self._brokers.set(registration.id, registration)
            case UnregisterBrokerRecord():
                self._brokers.remove(record.broker_id)
            case FenceBrokerRecord():
                current = self._registered(record.id, record.epoch)
                self._brokers.set(record.id, replace(current, fenced=True))
            case UnfenceBrokerRecord():
                current = self._registered(record.id, record.epoch)
                self._brokers.set(record.id, replace(current, fenced=False))
            case BrokerRegistrationChangeRecord():
                current = self._registered(record.broker_id, record.broker_epoch)
                changed = _changed_registration(current, record)
                if changed != current:
                    self._brokers.set(record.broker_id, changed)
            case _:
                assert_never(record)

    def _registered(self, broker_id: int, epoch: int) -> BrokerRegistration:
        current = _required(self._brokers.get(broker_id), f"broker {broker_id} is not registered")
        invariant(
            current.epoch == epoch,
            f"broker {broker_id} is registered with epoch {current.epoch}, not {epoch}",
        )
        return current

    def _replay_feature(self, record: FeatureLevelRecord | ZkMigrationStateRecord) -> None:
        if isinstance(record, ZkMigrationStateRecord):
            self._zk_migration_state = record.zk_migration_state
            return
        self._feature_levels[record.name] = record.feature_level
        if record.name == METADATA_VERSION:
            invariant(record.feature_level > 0, "metadata.version cannot be unset")
            self._metadata_version = record.feature_level
        elif record.feature_level == 0:  # level 0: the feature is no longer finalized
            self._features.remove(record.name)
        else:
            self._features.set(record.name, record.feature_level)

    def _replay_producer_ids(self, record: ProducerIdsRecord) -> None:
        current = self.base.producer_ids.next_producer_id
        if self._next_producer_id is not None:
            current = self._next_producer_id
        invariant(
            record.next_producer_id > current,
            f"next producer id {record.next_producer_id} does not pass {current}",
        )
        self._next_producer_id = record.next_producer_id

    def _replay_acl(
        self, record: AccessControlEntryRecord | RemoveAccessControlEntryRecord
    ) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self._acls.set(record.id, StandardAcl.from_record(record))
            return
        invariant(self._acls.get(record.id) is not None, f"no ACL with id {record.id}")
        self._acls.remove(record.id)

    def _replay_client_quota(self, record: ClientQuotaRecord) -> None:
        entity = quota_entity((entry.entity_type, entry.entity_name) for entry in record.entity)
        current = self._quotas.get(entity)
        if current is None:
            current = _empty_map()
        if not record.remove:
            self._quotas.set(entity, current.set(record.key, record.value))
        elif record.key in current:
            remaining = current.delete(record.key)
            if remaining:
                self._quotas.set(entity, remaining)
            else:
                self._quotas.remove(entity)

    def _replay_credential(
        self,
        record: UserScramCredentialRecord
        | RemoveUserScramCredentialRecord
        | DelegationTokenRecord
        | RemoveDelegationTokenRecord,
    ) -> None:
        match record:
            case UserScramCredentialRecord():
                key = ScramKey(record.mechanism, record.name)
                self._scram.set(key, ScramCredential.from_record(record))
            case RemoveUserScramCredentialRecord():
                self._scram.remove(ScramKey(record.mechanism, record.name))
            case DelegationTokenRecord():
                self._tokens.set(record.token_id, DelegationTokenData.from_record(record))
            case RemoveDelegationTokenRecord():
                self._tokens.remove(record.token_id)
            case _:
                assert_never(record)

    # -- apply ---------------------------------------------------------------------------

    def apply(self, offset: int, epoch: int) -> MetadataImage:
        """The image after every record replayed so far, as of log `offset` in `epoch`.
        A part of the image that did not change is the base's object itself."""
        base = self.base
        configs = self._configs.apply()
        acls = self._acls.apply()
        quotas = self._quotas.apply()
        credentials = self._scram.apply()
        tokens = self._tokens.apply()
        return MetadataImage(
            offset=offset,
            epoch=epoch,
            features=self._apply_features(),
            cluster=self._apply_cluster(),
            topics=self._topics.apply(),
            configs=(
                base.configs if configs is base.configs.resources else ConfigurationsImage(configs)
            ),
            producer_ids=(
                base.producer_ids
                if self._next_producer_id is None
                else ProducerIdsImage(self._next_producer_id)
            ),
            acls=base.acls if acls is base.acls.by_id else AclsImage(acls),
            client_quotas=(
                base.client_quotas
                if quotas is base.client_quotas.entities
                else ClientQuotasImage(quotas)
            ),
            scram=base.scram if credentials is base.scram.credentials else ScramImage(credentials),
            delegation_tokens=(
                base.delegation_tokens
                if tokens is base.delegation_tokens.tokens
                else DelegationTokensImage(tokens)
            ),
        )

    def _apply_features(self) -> FeaturesImage:
        base = self.base.features
        finalized = self._features.apply()
        if (
            finalized is base.finalized
            and self._metadata_version is None
            and self._zk_migration_state is None
        ):
            return base
        return FeaturesImage(
            metadata_version=(
                base.metadata_version if self._metadata_version is None else self._metadata_version
            ),
            finalized=finalized,
            zk_migration_state=(
                base.zk_migration_state
                if self._zk_migration_state is None
                else self._zk_migration_state
            ),
        )

    def _apply_cluster(self) -> ClusterImage:
        base = self.base.cluster
        brokers, controllers = self._brokers.apply(), self._controllers.apply()
        if brokers is base.brokers and controllers is base.controllers:
            return base
        return ClusterImage(brokers=brokers, controllers=controllers)

    # -- what changed ----------------------------------------------------------------------

    @property
    def changed_topics(self) -> Mapping[uuid.UUID, TopicImage]:
        """Topics created or changed, as they are after this delta (the very objects the
        applied image holds)."""
        return MappingProxyType(
            {topic_id: delta.apply() for topic_id, delta in self._topics.changed.items()}
        )

    @property
    def created_topic_ids(self) -> Set[uuid.UUID]:
        base, deleted = self.base.topics.by_id, self._topics.deleted
        return frozenset(
            topic_id
            for topic_id in self._topics.changed
            if topic_id not in base or topic_id in deleted
        )

    @property
    def deleted_topic_ids(self) -> Set[uuid.UUID]:
        """Base topics removed (`base.topics.by_id` still has their name and partitions)."""
        return frozenset(self._topics.deleted)

    def changed_partitions(self, topic_id: uuid.UUID) -> Mapping[int, PartitionRegistration]:
        """Partitions of `topic_id` created or changed, as they are after this delta."""
        delta = self._topics.changed.get(topic_id)
        return MappingProxyType({} if delta is None else delta.partition_changes)

    def local_changes(self, broker_id: int, topic: str | None = None) -> LocalReplicaChanges:
        """What this delta means for `broker_id`'s replicas; with `topic`, for those of
        that topic only (a coordinator's internal topic)."""
        return self._topics.local_changes(broker_id, topic)

    @property
    def changed_brokers(self) -> Mapping[int, BrokerRegistration | None]:
        """Brokers registered or changed; None for a broker unregistered."""
        return MappingProxyType(self._brokers.changes)

    @property
    def changed_controllers(self) -> Mapping[int, ControllerRegistration | None]:
        return MappingProxyType(self._controllers.changes)

    @property
    def changed_configs(self) -> Mapping[ConfigResource, immutables.Map[str, str]]:
        """Every resource with a key set or removed, with all its keys after this delta
        (an empty map when none is left)."""
        return MappingProxyType(
            {
                resource: _empty_map() if keys is None else keys
                for resource, keys in self._configs.changes.items()
            }
        )

    @property
    def changed_features(self) -> Mapping[str, int]:
        """Feature levels set by this delta, metadata.version included; 0 = removed."""
        return MappingProxyType(self._feature_levels)

    @property
    def changed_next_producer_id(self) -> int | None:
        return self._next_producer_id

    @property
    def changed_acls(self) -> Mapping[uuid.UUID, StandardAcl | None]:
        return MappingProxyType(self._acls.changes)

    @property
    def changed_client_quotas(self) -> Mapping[ClientQuotaEntity, immutables.Map[str, float]]:
        return MappingProxyType(
            {
                entity: _empty_map() if quotas is None else quotas
                for entity, quotas in self._quotas.changes.items()
            }
        )

    @property
    def changed_scram_credentials(self) -> Mapping[ScramKey, ScramCredential | None]:
        return MappingProxyType(self._scram.changes)

    @property
    def changed_delegation_tokens(self) -> Mapping[str, DelegationTokenData | None]:
        return MappingProxyType(self._tokens.changes)


def _changed_registration(
    current: BrokerRegistration, record: BrokerRegistrationChangeRecord
) -> BrokerRegistration:
    """BrokerRegistrationChangeRecord: fenced -1 unfence / 0 keep / 1 fence; in controlled
    shutdown 0 keep / 1 set; log dirs, when given, replace the broker's."""
    invariant(record.fenced in (-1, 0, 1), f"unknown fencing change {record.fenced}")
    invariant(
        record.in_controlled_shutdown in (0, 1),
        f"unknown controlled shutdown change {record.in_controlled_shutdown}",
    )
    fenced = current.fenced if record.fenced == 0 else record.fenced == 1
    in_controlled_shutdown = current.in_controlled_shutdown or record.in_controlled_shutdown == 1
    return replace(
        current,
        fenced=fenced,
        in_controlled_shutdown=in_controlled_shutdown,
        log_dirs=record.log_dirs or current.log_dirs,
    )
