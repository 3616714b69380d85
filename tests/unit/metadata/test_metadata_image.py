"""MetadataImage / MetadataDelta: replay semantics of each record kind, what the delta
reports as changed, structural sharing, and replay determinism."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence

import immutables
import pytest

from pykraft.errors import InvariantViolation
from pykraft.metadata.image import (
    METADATA_VERSION,
    ConfigResource,
    LeaderRecoveryState,
    MetadataDelta,
    MetadataImage,
    TopicIdPartition,
)
from pykraft.metadata.records import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
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
)
from pykraft.metadata.registrations import (
    MIGRATING_DIRECTORY,
    UNASSIGNED_DIRECTORY,
    ScramKey,
)
from tests.unit.metadata.metadata_workload import workload

FOO = uuid.UUID(int=0xF00)
BAR = uuid.UUID(int=0xBA4)
TOPIC = 2  # ConfigResource types
BROKER = 4


def fold(
    records: Sequence[MetadataRecord], base: MetadataImage = MetadataImage.EMPTY
) -> tuple[MetadataDelta, MetadataImage]:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta, delta.apply(base.offset + max(1, len(records)), 1)


def partition(
    topic_id: uuid.UUID, index: int, replicas: tuple[int, ...] = (1, 2, 3), leader: int = 1
) -> PartitionRecord:
    return PartitionRecord(
        partition_id=index, topic_id=topic_id, replicas=replicas, isr=replicas,
        leader=leader, leader_epoch=0, partition_epoch=0,
    )  # fmt: skip


def topic(name: str, topic_id: uuid.UUID, count: int) -> list[MetadataRecord]:
    records: list[MetadataRecord] = [TopicRecord(name=name, topic_id=topic_id)]
    return records + [partition(topic_id, index) for index in range(count)]


def broker(broker_id: int, epoch: int = 10, fenced: bool = True) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        broker_epoch=epoch,
        incarnation_id=uuid.UUID(int=broker_id),
        end_points=(
            RegisterBrokerRecord.BrokerEndpoint(
                name="PLAINTEXT", host=f"host{broker_id}", port=9092, security_protocol=0
            ),
        ),
        features=(
            RegisterBrokerRecord.BrokerFeature(
                name=METADATA_VERSION, min_supported_version=1, max_supported_version=21
            ),
        ),
        rack="rack-a",
        fenced=fenced,
    )


# ---------------------------------------------------------------------------------------------
# Topics and partitions


def test_create_topic_with_partitions() -> None:
    """TopicRecord + PartitionRecords make a topic reachable by id and name."""
    delta, image = fold(topic("foo", FOO, 3))
    found = image.topic_by_name("foo")
    assert found is not None and found.topic_id == FOO and sorted(found.partitions) == [0, 1, 2]
    assert image.topics.by_id[FOO] is found
    registration = image.partition(FOO, 1)
    assert registration is not None
    assert registration.replicas == (1, 2, 3) and registration.isr == (1, 2, 3)
    assert registration.leader_recovery_state is LeaderRecoveryState.RECOVERED
    assert registration.directories == (MIGRATING_DIRECTORY,) * 3  # written without dirs
    assert image.leader_for("foo", 2) == 1
    assert image.leader_for("foo", 3) is None and image.leader_for("nope", 0) is None
    assert delta.created_topic_ids == {FOO} and delta.deleted_topic_ids == set()
    assert delta.changed_topics[FOO] is found  # the very object the image holds
    assert sorted(delta.changed_partitions(FOO)) == [0, 1, 2]
    assert delta.changed_partitions(BAR) == {}


def test_add_partitions_to_an_existing_topic() -> None:
    """New PartitionRecords on a base topic add partitions and keep the old ones."""
    _, base = fold(topic("foo", FOO, 2))
    delta, image = fold([partition(FOO, 2, replicas=(4, 5), leader=4)], base)
    found = image.topic_by_name("foo")
    assert found is not None and sorted(found.partitions) == [0, 1, 2]
    assert found.partitions[0] is base.topics.by_id[FOO].partitions[0]
    assert delta.created_topic_ids == set()
    assert list(delta.changed_partitions(FOO)) == [2]
    assert image.leader_for("foo", 2) == 4


def test_partition_change_changes_only_what_it_sets() -> None:
    """PartitionChangeRecord: null fields, leader -2 and recovery state -1 mean "no change";
    a new leader bumps the leader epoch; every change bumps the partition epoch."""
    _, base = fold(topic("foo", FOO, 1))
    _, isr_only = fold([PartitionChangeRecord(partition_id=0, topic_id=FOO, isr=(1, 2))], base)
    registration = isr_only.partition(FOO, 0)
    assert registration is not None
    assert registration.isr == (1, 2) and registration.replicas == (1, 2, 3)
    assert (registration.leader, registration.leader_epoch) == (1, 0)
    assert registration.partition_epoch == 1

    leader_change = PartitionChangeRecord(partition_id=0, topic_id=FOO, leader=2)
    _, new_leader = fold([leader_change], isr_only)
    registration = new_leader.partition(FOO, 0)
    assert registration is not None
    assert (registration.leader, registration.leader_epoch, registration.partition_epoch) == (
        2, 1, 2,
    )  # fmt: skip
    assert registration.isr == (1, 2)

    same_leader = PartitionChangeRecord(partition_id=0, topic_id=FOO, leader=2)
    _, reelected = fold([same_leader], new_leader)
    registration = reelected.partition(FOO, 0)
    assert registration is not None and registration.leader_epoch == 2  # bumped anyway

    leaderless = PartitionChangeRecord(
        partition_id=0, topic_id=FOO, leader=-1, leader_recovery_state=1
    )
    _, offline = fold([leaderless], reelected)
    registration = offline.partition(FOO, 0)
    assert registration is not None and not registration.has_leader
    assert registration.leader_recovery_state is LeaderRecoveryState.RECOVERING
    assert offline.leader_for("foo", 0) is None


def test_partition_change_of_replicas_carries_directories() -> None:
    """New replicas keep the directory of replicas that stay; newcomers are unassigned."""
    dir_1, dir_2 = uuid.UUID(int=101), uuid.UUID(int=102)
    first = PartitionRecord(
        partition_id=0, topic_id=FOO, replicas=(1, 2), isr=(1, 2), leader=1,
        directories=(dir_1, dir_2),
    )  # fmt: skip
    _, base = fold([TopicRecord(name="foo", topic_id=FOO), first])
    move = PartitionChangeRecord(
        partition_id=0, topic_id=FOO, replicas=(2, 3), adding_replicas=(3,),
        removing_replicas=(1,),
    )  # fmt: skip
    _, image = fold([move], base)
    registration = image.partition(FOO, 0)
    assert registration is not None
    assert registration.directories == (dir_2, UNASSIGNED_DIRECTORY)
    assert registration.adding_replicas == (3,) and registration.removing_replicas == (1,)
    assert registration.isr == (1, 2)  # not set, not changed


def test_partition_records_need_a_live_topic_and_partition() -> None:
    """Changes to what does not exist are bugs upstream: replay stops on an invariant."""
    _, base = fold(topic("foo", FOO, 1))
    with pytest.raises(InvariantViolation):
        fold([partition(BAR, 0)], base)
    with pytest.raises(InvariantViolation):
        fold([PartitionChangeRecord(partition_id=5, topic_id=FOO, leader=2)], base)
    with pytest.raises(InvariantViolation):
        fold([TopicRecord(name="foo", topic_id=BAR)], base)  # name taken
    with pytest.raises(InvariantViolation):
        fold([TopicRecord(name="other", topic_id=FOO)], base)  # id taken
    with pytest.raises(InvariantViolation):
        fold([RemoveTopicRecord(topic_id=BAR)], base)
    with pytest.raises(InvariantViolation):
        fold([RemoveTopicRecord(topic_id=FOO), partition(FOO, 1)], base)


def test_delete_topic_removes_it_and_its_configs() -> None:
    """RemoveTopicRecord drops the topic from both maps and its TOPIC config resource."""
    config = ConfigRecord(resource_type=TOPIC, resource_name="foo", name="retention.ms", value="1")
    _, base = fold([*topic("foo", FOO, 2), *topic("bar", BAR, 1), config])
    assert dict(base.configs.get(TOPIC, "foo")) == {"retention.ms": "1"}
    delta, image = fold([RemoveTopicRecord(topic_id=FOO)], base)
    assert image.topic_by_name("foo") is None and FOO not in image.topics.by_id
    assert image.topics.by_id[BAR] is base.topics.by_id[BAR]
    assert len(image.configs.get(TOPIC, "foo")) == 0
    assert delta.deleted_topic_ids == {FOO} and dict(delta.changed_topics) == {}
    assert delta.changed_configs == {ConfigResource(TOPIC, "foo"): immutables.Map()}
    assert delta.base.topics.by_id[FOO].name == "foo"  # publishers can still see what went


def test_topic_created_and_deleted_in_one_delta_leaves_no_trace() -> None:
    """Create then remove inside one delta: the image equals the base, nothing reported."""
    _, base = fold(topic("bar", BAR, 1))
    delta, image = fold([*topic("foo", FOO, 2), RemoveTopicRecord(topic_id=FOO)], base)
    assert image.topics is base.topics
    assert delta.changed_topics == {} and delta.deleted_topic_ids == set()


def test_delete_and_recreate_a_name_in_one_delta() -> None:
    """A removed topic's name can be reused at once by a topic with a new id."""
    _, base = fold(topic("foo", FOO, 2))
    delta, image = fold([RemoveTopicRecord(topic_id=FOO), *topic("foo", BAR, 1)], base)
    found = image.topic_by_name("foo")
    assert found is not None and found.topic_id == BAR and sorted(found.partitions) == [0]
    assert FOO not in image.topics.by_id
    assert delta.deleted_topic_ids == {FOO} and delta.created_topic_ids == {BAR}


# ---------------------------------------------------------------------------------------------
# Configs


def test_config_set_and_delete() -> None:
    """ConfigRecord sets a key; value null deletes it; a resource with no key is gone."""
    records: list[MetadataRecord] = [
        ConfigRecord(resource_type=TOPIC, resource_name="foo", name="a", value="1"),
        ConfigRecord(resource_type=TOPIC, resource_name="foo", name="b", value="2"),
        ConfigRecord(resource_type=BROKER, resource_name="", name="log.retention.ms", value="9"),
    ]
    delta, base = fold(records)
    assert dict(base.configs.get(TOPIC, "foo")) == {"a": "1", "b": "2"}
    assert dict(base.configs.get(BROKER, "")) == {"log.retention.ms": "9"}
    assert dict(delta.changed_configs[ConfigResource(TOPIC, "foo")]) == {"a": "1", "b": "2"}

    overwrite = ConfigRecord(resource_type=TOPIC, resource_name="foo", name="a", value="3")
    delete_b = ConfigRecord(resource_type=TOPIC, resource_name="foo", name="b", value=None)
    delta, image = fold([overwrite, delete_b], base)
    assert dict(image.configs.get(TOPIC, "foo")) == {"a": "3"}
    assert {k: dict(v) for k, v in delta.changed_configs.items()} == {
        ConfigResource(TOPIC, "foo"): {"a": "3"}
    }
    assert image.configs.get(BROKER, "") is base.configs.get(BROKER, "")

    delete_a = ConfigRecord(resource_type=TOPIC, resource_name="foo", name="a", value=None)
    _, emptied = fold([delete_a], image)
    assert ConfigResource(TOPIC, "foo") not in emptied.configs.resources
    _, unchanged = fold([delete_a], emptied)  # deleting a missing key changes nothing
    assert unchanged.configs is emptied.configs


# ---------------------------------------------------------------------------------------------
# Brokers and controllers


def test_broker_register_fence_unfence_unregister() -> None:
    """Registration, then fencing by epoch; live brokers are the unfenced ones."""
    delta, image = fold([broker(1), broker(2), broker(3)])
    registration = image.cluster.brokers[1]
    assert registration.fenced and registration.rack == "rack-a"
    assert registration.listeners["PLAINTEXT"].host == "host1"
    assert registration.listeners["PLAINTEXT"].port == 9092
    assert registration.supported_features[METADATA_VERSION].max_version == 21
    assert image.live_brokers() == ()
    assert set(delta.changed_brokers) == {1, 2, 3}

    _, image = fold(
        [UnfenceBrokerRecord(id=1, epoch=10), UnfenceBrokerRecord(id=3, epoch=10)], image
    )
    assert [b.id for b in image.live_brokers()] == [1, 3]
    delta, image = fold([FenceBrokerRecord(id=3, epoch=10)], image)
    assert [b.id for b in image.live_brokers()] == [1]
    assert image.cluster.brokers[2] is delta.base.cluster.brokers[2]
    changed = delta.changed_brokers[3]
    assert changed is not None and changed.fenced

    delta, image = fold([UnregisterBrokerRecord(broker_id=2, broker_epoch=10)], image)
    assert 2 not in image.cluster.brokers and delta.changed_brokers == {2: None}


def test_broker_registration_change_record() -> None:
    """fenced -1 unfences, 0 keeps, 1 fences; in_controlled_shutdown 1 sets, 0 keeps."""
    _, image = fold([broker(1)])

    def change(fenced: int, shutdown: int) -> BrokerRegistrationChangeRecord:
        return BrokerRegistrationChangeRecord(
            broker_id=1, broker_epoch=10, fenced=fenced, in_controlled_shutdown=shutdown
        )

    _, image = fold([change(-1, 0)], image)
    assert not image.cluster.brokers[1].fenced
    delta, image = fold([change(0, 1)], image)
    assert not image.cluster.brokers[1].fenced and image.cluster.brokers[1].in_controlled_shutdown
    delta, same = fold([change(0, 0)], image)
    assert delta.changed_brokers == {} and same.cluster is image.cluster
    _, image = fold([change(1, 0)], image)
    assert image.cluster.brokers[1].fenced and image.cluster.brokers[1].in_controlled_shutdown
    with pytest.raises(InvariantViolation):
        fold([change(2, 0)], image)


def test_broker_changes_need_the_registered_epoch() -> None:
    """A fence, unfence or change for another epoch (or broker) is a bug upstream."""
    _, image = fold([broker(1, epoch=10)])
    with pytest.raises(InvariantViolation):
        fold([FenceBrokerRecord(id=1, epoch=9)], image)
    with pytest.raises(InvariantViolation):
        fold([UnfenceBrokerRecord(id=2, epoch=10)], image)
    _, reregistered = fold([broker(1, epoch=11)], image)
    with pytest.raises(InvariantViolation):
        fold([UnfenceBrokerRecord(id=1, epoch=10)], reregistered)
    _, image = fold([UnfenceBrokerRecord(id=1, epoch=11)], reregistered)
    assert not image.cluster.brokers[1].fenced


def test_controller_registration() -> None:
    """RegisterControllerRecord registers a controller and its listeners."""
    record = RegisterControllerRecord(
        controller_id=3000,
        incarnation_id=uuid.UUID(int=7),
        end_points=(
            RegisterControllerRecord.ControllerEndpoint(
                name="CONTROLLER", host="c", port=9093, security_protocol=0
            ),
        ),
    )
    delta, image = fold([record])
    assert image.cluster.controllers[3000].listeners["CONTROLLER"].port == 9093
    assert set(delta.changed_controllers) == {3000}
    assert image.cluster.controllers[3000].to_record() == record


# ---------------------------------------------------------------------------------------------
# Features, producer ids, ACLs, quotas, credentials


def test_features() -> None:
    """metadata.version has its own slot; other features are removed by level 0."""
    delta, image = fold(
        [
            FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
            FeatureLevelRecord(name="kraft.version", feature_level=1),
        ]
    )
    assert image.features.metadata_version == 21
    assert dict(image.features.finalized) == {"kraft.version": 1}
    assert image.features.level(METADATA_VERSION) == 21
    assert dict(delta.changed_features) == {METADATA_VERSION: 21, "kraft.version": 1}
    _, image = fold([FeatureLevelRecord(name="kraft.version", feature_level=0)], image)
    assert dict(image.features.finalized) == {} and image.features.metadata_version == 21
    with pytest.raises(InvariantViolation):
        fold([FeatureLevelRecord(name=METADATA_VERSION, feature_level=0)], image)


def test_producer_ids_only_move_forward() -> None:
    """ProducerIdsRecord sets the next block; going back would hand out ids twice."""
    delta, image = fold([ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=1000)])
    assert image.producer_ids.next_producer_id == 1000
    assert delta.changed_next_producer_id == 1000
    with pytest.raises(InvariantViolation):
        fold([ProducerIdsRecord(broker_id=1, next_producer_id=1000)], image)


def test_acls_quotas_scram_and_tokens() -> None:
    """The security records replay into their own keyed images."""
    acl_id = uuid.UUID(int=55)
    entity = (
        ClientQuotaRecord.EntityData(entity_type="user", entity_name="alice"),
        ClientQuotaRecord.EntityData(entity_type="client-id", entity_name=None),
    )
    records: list[MetadataRecord] = [
        AccessControlEntryRecord(
            id=acl_id, resource_type=2, resource_name="foo", principal="User:a"
        ),
        ClientQuotaRecord(entity=entity, key="producer_byte_rate", value=1024.0),
        UserScramCredentialRecord(name="alice", mechanism=1, salt=b"s", iterations=4096),
        DelegationTokenRecord(owner="User:a", renewers=("User:b",), token_id="t1"),
    ]  # fmt: skip
    _, image = fold(records)
    assert image.acls.by_id[acl_id].resource_name == "foo"
    key = (("client-id", None), ("user", "alice"))  # sorted by entity type
    assert dict(image.client_quotas.entities[key]) == {"producer_byte_rate": 1024.0}
    assert image.scram.credentials[ScramKey(1, "alice")].iterations == 4096
    assert image.delegation_tokens.tokens["t1"].renewers == ("User:b",)

    removals: list[MetadataRecord] = [
        RemoveAccessControlEntryRecord(id=acl_id),
        ClientQuotaRecord(entity=entity[::-1], key="producer_byte_rate", remove=True),
        RemoveUserScramCredentialRecord(name="alice", mechanism=1),
        RemoveDelegationTokenRecord(token_id="t1"),
    ]
    delta, image = fold(removals, image)
    assert len(image.acls.by_id) == len(image.client_quotas.entities) == 0
    assert len(image.scram.credentials) == len(image.delegation_tokens.tokens) == 0
    assert delta.changed_acls == {acl_id: None}
    with pytest.raises(InvariantViolation):
        fold([RemoveAccessControlEntryRecord(id=acl_id)], image)


def test_noop_changes_nothing_but_the_offset() -> None:
    """An empty delta's image shares every part with its base."""
    _, base = fold([*topic("foo", FOO, 1), broker(1)])
    _, image = fold([NoOpRecord()], base)
    assert image.offset > base.offset
    for part in ("features", "cluster", "topics", "configs", "producer_ids", "acls"):
        assert getattr(image, part) is getattr(base, part)


# ---------------------------------------------------------------------------------------------
# Local replica changes


def test_local_changes_for_a_broker() -> None:
    """Leaders, elected leaders, followers and deletes, from one broker's point of view."""
    records = [
        TopicRecord(name="foo", topic_id=FOO),
        partition(FOO, 0, replicas=(1, 2), leader=1),
        partition(FOO, 1, replicas=(2, 3), leader=2),
        partition(FOO, 2, replicas=(1, 3), leader=3),
        *topic("bar", BAR, 1),  # replicas (1, 2, 3), leader 1
    ]
    delta, base = fold(records)
    created = delta.local_changes(1)
    assert set(created.leaders) == set(created.elected_leaders) == {
        TopicIdPartition(FOO, "foo", 0), TopicIdPartition(BAR, "bar", 0)
    }  # fmt: skip
    assert set(created.followers) == {TopicIdPartition(FOO, "foo", 2)}

    changes: list[MetadataRecord] = [
        PartitionChangeRecord(partition_id=0, topic_id=FOO, isr=(1,)),  # still leader
        PartitionChangeRecord(partition_id=1, topic_id=FOO, leader=3),  # not a replica
        PartitionChangeRecord(partition_id=2, topic_id=FOO, replicas=(2, 3), isr=(3,)),
        RemoveTopicRecord(topic_id=BAR),
    ]
    local = fold(changes, base)[0].local_changes(1)
    assert set(local.leaders) == {TopicIdPartition(FOO, "foo", 0)}
    assert local.elected_leaders == {}  # leader epoch unchanged
    assert local.followers == {}
    assert local.deletes == {TopicIdPartition(FOO, "foo", 2), TopicIdPartition(BAR, "bar", 0)}
    # a coordinator asks about its own topic only
    only_bar = fold(changes, base)[0].local_changes(1, "bar")
    assert (only_bar.leaders, only_bar.deletes) == ({}, {TopicIdPartition(BAR, "bar", 0)})
    only_foo = fold(changes, base)[0].local_changes(1, "foo")
    assert set(only_foo.leaders) == {TopicIdPartition(FOO, "foo", 0)}
    assert only_foo.deletes == {TopicIdPartition(FOO, "foo", 2)}
    assert type(next(iter(only_foo.leaders))) is TopicIdPartition


# ---------------------------------------------------------------------------------------------
# Structural sharing and determinism


def test_one_partition_change_shares_everything_else() -> None:
    """On a 100,000-partition image, one change copies almost nothing: other topics, other
    partitions and untouched image parts are the same objects, and apply is fast."""
    many = uuid.UUID(int=0x1000)
    records: list[MetadataRecord] = [TopicRecord(name="big", topic_id=many)]
    records += [partition(many, index) for index in range(100_000)]
    for index in range(200):
        records += topic(f"small-{index}", uuid.UUID(int=index + 1), 2)
    _, base = fold(records)

    started = time.perf_counter()
    delta, image = fold([PartitionChangeRecord(partition_id=4242, topic_id=many, isr=(1,))], base)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.05, f"one-partition delta took {elapsed:.3f}s"

    for index in range(200):
        small = uuid.UUID(int=index + 1)
        assert image.topics.by_id[small] is base.topics.by_id[small]
    old_big, new_big = base.topics.by_id[many], image.topics.by_id[many]
    assert new_big is not old_big and image.topics.by_name["big"] is new_big
    assert new_big.partitions[4241] is old_big.partitions[4241]
    assert new_big.partitions[4242].isr == (1,) and old_big.partitions[4242].isr == (1, 2, 3)
    assert image.cluster is base.cluster and image.configs is base.configs
    assert list(delta.changed_topics) == [many] and list(delta.changed_partitions(many)) == [4242]


@pytest.mark.parametrize("seed", range(12))
def test_replay_is_deterministic_and_batching_does_not_matter(seed: int) -> None:
    """The same records make equal images, whether folded in one delta, one delta per
    record, or random batches; and replaying twice gives equal images."""
    records = workload(seed, steps=150)
    _, whole = fold(records)
    _, again = fold(records)
    assert whole == again

    image = MetadataImage.EMPTY
    for record in records:
        image = fold([record], image)[1]
    rng = random.Random(seed)
    batched = MetadataImage.EMPTY
    start = 0
    while start < len(records):
        end = start + rng.randint(1, 20)
        batched = fold(records[start:end], batched)[1]
        start = end
    for other in (image, batched):
        assert other.topics == whole.topics and other.cluster == whole.cluster
        assert other.configs == whole.configs and other.features == whole.features
        assert other.producer_ids == whole.producer_ids and other.acls == whole.acls
        assert other.client_quotas == whole.client_quotas


def test_partition_registration_to_record_round_trips() -> None:
    """A registration written back as a PartitionRecord replays to the same registration."""
    _, base = fold(topic("foo", FOO, 1))
    change = PartitionChangeRecord(
        partition_id=0, topic_id=FOO, leader=2, isr=(2, 3), eligible_leader_replicas=(3,)
    )
    _, image = fold([change], base)
    registration = image.partition(FOO, 0)
    assert registration is not None and registration.elr == (3,)
    rebuilt = fold([TopicRecord(name="foo", topic_id=FOO), registration.to_record(FOO, 0)])[1]
    assert rebuilt.partition(FOO, 0) == registration
    broker_image = fold([broker(1)])[1]
    assert fold([broker_image.cluster.brokers[1].to_record()])[1].cluster == broker_image.cluster
