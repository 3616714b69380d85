"""A MetadataImage as metadata records, and back: what a metadata snapshot holds.

Theory of operation. `image_records(image)` lists records that, replayed into an empty
`MetadataDelta`, rebuild `image` exactly (every field of every registration, fencing and
controlled-shutdown state included), in Kafka's order: features (metadata.version first),
cluster, topics with their partitions, configs, client quotas, producer ids, ACLs, SCRAM
credentials, delegation tokens. Replaying them into an empty `MetadataDelta` is the other
way (`MetadataLoader.load_snapshot_steps`).

`change_records(base, target)` is the general form: records that, replayed onto `base`,
give `target`'s content (removals included: topics, brokers, config keys, quotas, ACLs,
credentials and tokens absent from `target`). `image_records(image)` is
`change_records(EMPTY, image)`. Loading a snapshot into a node that already holds an image
replays these change records onto it, so publishers see one ordinary delta (a topic
deleted meanwhile is a deleted topic, a partition moved is a changed partition).

Some differences have no record that expresses them, because the log can never make
them: metadata.version unset again, a controller registration removed, a partition
removed from a live topic, the next producer id going back. `change_records` stops on
such an `invariant`: a snapshot that asks for one is not a snapshot of this log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import immutables

from pykraft.errors import invariant
from pykraft.metadata.image import (
    METADATA_VERSION,
    MetadataImage,
)
from pykraft.metadata.partition_map import EMPTY_PARTITIONS
from pykraft.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    MetadataRecord,
    ProducerIdsRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from pykraft.metadata.registrations import (
    ConfigResource,
    ConfigResourceType,
    PartitionRegistration,
)

__all__ = ["change_records", "image_records"]


def image_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """Records that rebuild `image` from nothing (a snapshot's content), lazily."""
    return change_records(MetadataImage.EMPTY, image)


def change_records(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    """Records that turn `base`'s content into `target`'s (offsets and epochs aside)."""
    yield from _features(base, target)
    yield from _cluster(base, target)
    yield from _topics(base, target)
    removed_topic_names = {
        topic.name
        for topic_id, topic in base.topics.by_id.items()
        if topic_id not in target.topics.by_id
    }
    yield from _configs(base, target, removed_topic_names)
    yield from _client_quotas(base, target)
    yield from _producer_ids(base, target)
    yield from _acls(base, target)
    yield from _credentials(base, target)


def _features(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.features, target.features
    if new.metadata_version != old.metadata_version:
        invariant(new.metadata_version > 0, "metadata.version cannot be unset")
        yield FeatureLevelRecord(name=METADATA_VERSION, feature_level=new.metadata_version)
    for name in sorted(set(old.finalized.keys()) | set(new.finalized.keys())):
        level = new.finalized.get(name, 0)
        if level != old.finalized.get(name, 0):
            yield FeatureLevelRecord(name=name, feature_level=level)
    if new.zk_migration_state != old.zk_migration_state:
        yield ZkMigrationStateRecord(zk_migration_state=new.zk_migration_state)


def _cluster(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.cluster, target.cluster
    for broker_id, was in sorted(old.brokers.items()):
        if broker_id not in new.brokers:
            yield UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=was.epoch)
    for broker_id, broker in sorted(new.brokers.items()):
        if old.brokers.get(broker_id) != broker:
            yield broker.to_record()  # fenced and in controlled shutdown as they are
    for controller_id in old.controllers.keys():
        invariant(
            controller_id in new.controllers,
            f"controller {controller_id}'s registration cannot be removed",
        )
    for controller_id, controller in sorted(new.controllers.items()):
        if old.controllers.get(controller_id) != controller:
            yield controller.to_record()


def _topics(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.topics.by_id, target.topics.by_id
    for topic_id, _topic in sorted(old.items(), key=lambda item: item[1].name):
        if topic_id not in new:
            yield RemoveTopicRecord(topic_id=topic_id)
    for topic_id, topic in sorted(new.items(), key=lambda item: item[1].name):
        was = old.get(topic_id)
        partitions: Mapping[int, PartitionRegistration] = EMPTY_PARTITIONS
        if was is None:
            yield TopicRecord(name=topic.name, topic_id=topic_id)
        elif was is topic:
            continue
        else:
            invariant(was.name == topic.name, "topic %s cannot be renamed", topic_id)
            partitions = was.partitions
            for index in partitions.keys():
                invariant(index in topic.partitions,
                          "partition %s-%d cannot be removed from a live topic", topic.name,
                          index)
        for index, registration in topic.partitions.items():  # by index (PartitionMap)
            if partitions.get(index) != registration:
                yield registration.to_record(topic_id, index)


def _configs(
    base: MetadataImage, target: MetadataImage, removed_topic_names: set[str]
) -> Iterator[MetadataRecord]:
    old, new = base.configs.resources, target.configs.resources
    empty: immutables.Map[str, str] = immutables.Map()
    for resource in sorted(set(old.keys()) | set(new.keys())):
        gone = (
            resource.resource_type == ConfigResourceType.TOPIC
            and resource.resource_name in removed_topic_names
        )
        was = empty if gone else old.get(resource, empty)
        now = new.get(resource, empty)
        yield from _config_changes(resource, was, now)


def _config_changes(
    resource: ConfigResource, was: immutables.Map[str, str], now: immutables.Map[str, str]
) -> Iterator[MetadataRecord]:
    if was is now:
        return
    for name in sorted(set(was.keys()) | set(now.keys())):
        value = now.get(name)
        if value != was.get(name):
            yield ConfigRecord(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                name=name,
                value=value,  # None removes the key
            )


def _client_quotas(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.client_quotas.entities, target.client_quotas.entities
    empty: immutables.Map[str, float] = immutables.Map()
    for entity in sorted(set(old.keys()) | set(new.keys()), key=repr):
        was, now = old.get(entity, empty), new.get(entity, empty)
        if was is now:
            continue
        data = tuple(
            ClientQuotaRecord.EntityData(entity_type=kind, entity_name=name)
            for kind, name in entity
        )
        for key in sorted(set(was.keys()) | set(now.keys())):
            value = now.get(key)
            if value is None:
                yield ClientQuotaRecord(entity=data, key=key, remove=True)
            elif value != was.get(key):
                yield ClientQuotaRecord(entity=data, key=key, value=value)


def _producer_ids(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.producer_ids.next_producer_id, target.producer_ids.next_producer_id
    if new != old:
        invariant(new > old, f"the next producer id cannot go back from {old} to {new}")
        yield ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=new)


def _acls(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old, new = base.acls.by_id, target.acls.by_id
    for acl_id in sorted(old.keys()):
        if acl_id not in new:
            yield RemoveAccessControlEntryRecord(id=acl_id)
    for acl_id, acl in sorted(new.items()):
        if old.get(acl_id) != acl:
            yield AccessControlEntryRecord(
                id=acl_id,
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )


def _credentials(base: MetadataImage, target: MetadataImage) -> Iterator[MetadataRecord]:
    old_scram, new_scram = base.scram.credentials, target.scram.credentials
    for key in sorted(old_scram.keys()):
        if key not in new_scram:
            yield RemoveUserScramCredentialRecord(name=key.name, mechanism=key.mechanism)
    for key, credential in sorted(new_scram.items()):
        if old_scram.get(key) != credential:
            yield UserScramCredentialRecord(
                name=key.name,
                mechanism=key.mechanism,
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
            )
    old_tokens, new_tokens = base.delegation_tokens.tokens, target.delegation_tokens.tokens
    for token_id in sorted(old_tokens.keys()):
        if token_id not in new_tokens:
            yield RemoveDelegationTokenRecord(token_id=token_id)
    for token_id, token in sorted(new_tokens.items()):
        if old_tokens.get(token_id) != token:
            yield DelegationTokenRecord(
                owner=token.owner,
                requester=token.requester,
                renewers=token.renewers,
                issue_timestamp=token.issue_timestamp,
                max_timestamp=token.max_timestamp,
                expiration_timestamp=token.expiration_timestamp,
                token_id=token_id,
            )
