"""CreateTopics, DeleteTopics and CreatePartitions decisions."""

from __future__ import annotations

import random
import uuid

import pytest

from pykraft.controller.naming import METADATA_TOPIC_ID, new_topic_id
from pykraft.controller.requests import (
    NO_TOPIC_ID,
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    CreatableTopic,
    CreatePartitionsTopic,
)
from pykraft.controller.topics import MAX_RECORDS_PER_USER_OP
from pykraft.errors import ErrorCode, PolicyViolation
from pykraft.metadata.records import (
    ConfigRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from pykraft.storage.log_config import ConfigSource
from tests.unit.controller.controller_harness import Harness, log_dir


@pytest.fixture
def harness() -> Harness:
    h = Harness(num_partitions=2, default_replication_factor=3)
    h.start_brokers(4)
    return h


def test_create_topic_writes_topic_configs_then_partitions(harness: Harness) -> None:
    """A new topic is a TopicRecord, its ConfigRecords, then one PartitionRecord each."""
    op = harness.controller.create_topics(
        [CreatableTopic("orders", 3, 2, configs={"retention.ms": "1000"})],
        validate_only=False,
        now_ms=0,
    )
    (result,) = op.response
    assert result.error_code == ErrorCode.none and result.error_message is None
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    topic, config, *partitions = op.records
    assert topic == TopicRecord(name="orders", topic_id=result.topic_id)
    assert config == ConfigRecord(
        resource_type=2, resource_name="orders", name="retention.ms", value="1000"
    )
    assert all(isinstance(p, PartitionRecord) for p in partitions)
    assert [p.partition_id for p in partitions if isinstance(p, PartitionRecord)] == [0, 1, 2]
    for partition in partitions:
        assert isinstance(partition, PartitionRecord)
        assert partition.topic_id == result.topic_id
        assert len(set(partition.replicas)) == 2
        assert partition.isr == partition.replicas
        assert partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
        assert partition.directories == tuple(log_dir(b) for b in partition.replicas)


def test_replaying_create_yields_the_topic(harness: Harness) -> None:
    """Replaying the records (here and from scratch) shows the topic, partitions, configs."""
    result = harness.create("orders", 3, 2, configs={"cleanup.policy": "compact"})
    for image in (harness.controller.image, harness.replayed_image()):
        topic = image.topics.by_name["orders"]
        assert topic.topic_id == result.topic_id
        assert sorted(topic.partitions) == [0, 1, 2]
        assert all(p.leader == p.replicas[0] for p in topic.partitions.values())
        assert dict(image.configs.get(2, "orders")) == {"cleanup.policy": "compact"}


def test_defaults_come_from_the_controller_config(harness: Harness) -> None:
    """-1 partitions and -1 replication factor take num.partitions / default.replication.factor."""
    result = harness.create("defaults", -1, -1)
    assert (result.num_partitions, result.replication_factor) == (2, 3)
    partitions = harness.controller.image.topics.by_name["defaults"].partitions
    assert len(partitions) == 2 and all(len(p.replicas) == 3 for p in partitions.values())


def test_effective_configs_in_the_response_name_their_source() -> None:
    """Topic override > dynamic cluster default > static property > Kafka default."""
    h = Harness(server_configs={"log.segment.bytes": "2000000"})
    h.start_brokers(1)
    h.run(
        h.controller.incremental_alter_configs(
            [_broker_set("", "log.cleanup.policy", "compact")], validate_only=False
        )
    )
    result = h.create("t", 1, 1, configs={"retention.ms": "5"})
    by_name = {config.name: config for config in result.configs}
    assert by_name["retention.ms"].value == "5"
    assert by_name["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert by_name["cleanup.policy"].value == "compact"
    assert by_name["cleanup.policy"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert by_name["segment.bytes"].value == "2000000"
    assert by_name["segment.bytes"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert by_name["min.insync.replicas"].config_source == ConfigSource.DEFAULT_CONFIG
    assert [c.name for c in result.configs] == sorted(by_name)


def _broker_set(name: str, key: str, value: str) -> AlterConfigsResource:
    return AlterConfigsResource(4, name, (AlterableConfig(key, AlterConfigOp.SET, value),))


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        (CreatableTopic(""), ErrorCode.invalid_topic_exception, "the empty string is not allowed"),
        (CreatableTopic("."), ErrorCode.invalid_topic_exception, "'.' is not allowed"),
        (CreatableTopic(".."), ErrorCode.invalid_topic_exception, "'..' is not allowed"),
        (
            CreatableTopic("x" * 250),
            ErrorCode.invalid_topic_exception,
            "is longer than the max allowed length 249",
        ),
        (
            CreatableTopic("a/b"),
            ErrorCode.invalid_topic_exception,
            "Topic name is invalid: 'a/b' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        ),
        (
            CreatableTopic("existing.topic"),
            ErrorCode.topic_already_exists,
            "Topic 'existing.topic' already exists.",
        ),
        (
            CreatableTopic("existing_topic"),
            ErrorCode.invalid_topic_exception,
            "Topic 'existing_topic' collides with existing topic: existing.topic",
        ),
        (
            CreatableTopic("p", 0, 1),
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        ),
        (CreatableTopic("p", -2, 1), ErrorCode.invalid_partitions, "non-positive"),
        (
            CreatableTopic("r", 1, 0),
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        ),
        (CreatableTopic("r", 1, -3), ErrorCode.invalid_replication_factor, "larger than 0"),
        (
            CreatableTopic("r", 1, 5),
            ErrorCode.invalid_replication_factor,
            "Unable to replicate the partition 5 time(s): The target replication factor of 5 "
            "cannot be reached because only 4 broker(s) are registered.",
        ),
        (
            CreatableTopic("c", 1, 1, configs={"retention.ms": "soon"}),
            ErrorCode.invalid_config,
            "retention.ms",
        ),
        (
            CreatableTopic("c", 1, 1, configs={"no.such.key": "1"}),
            ErrorCode.invalid_config,
            "no.such.key",
        ),
        (
            CreatableTopic("c", 1, 1, configs={"retention.ms": None}),
            ErrorCode.invalid_config,
            "Null value not supported for topic configs: retention.ms",
        ),
        (
            CreatableTopic("m", 1, 1, assignments={0: (0,)}),
            ErrorCode.invalid_request,
            "replication factor was not set to -1",
        ),
        (
            CreatableTopic("m", 1, -1, assignments={0: (0,)}),
            ErrorCode.invalid_request,
            "numPartitions was not set to -1",
        ),
        (
            CreatableTopic("m", assignments={0: ()}),
            ErrorCode.invalid_replica_assignment,
            "includes an empty replica list",
        ),
        (
            CreatableTopic("m", assignments={0: (0, 9)}),
            ErrorCode.invalid_replica_assignment,
            "includes broker 9, but no such broker is registered",
        ),
        (
            CreatableTopic("m", assignments={0: (1, 1)}),
            ErrorCode.invalid_replica_assignment,
            "includes the broker 1 more than once",
        ),
        (
            CreatableTopic("m", assignments={0: (0, 1), 1: (2,)}),
            ErrorCode.invalid_replica_assignment,
            "includes a partition with 1 replica(s), but this is not consistent with previous "
            "partitions, which have 2 replica(s)",
        ),
        (
            CreatableTopic("m", assignments={0: (0,), 2: (1,)}),
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        ),
    ],
)
def test_invalid_topics_are_refused_with_kafkas_error(
    harness: Harness, topic: CreatableTopic, code: ErrorCode, message: str
) -> None:
    """Each validation failure gives Kafka's error code and message, and no records."""
    harness.create("existing.topic", 1, 1)
    op = harness.controller.create_topics([topic], validate_only=False, now_ms=0)
    (result,) = op.response
    assert result.error_code == code
    assert result.error_message is not None and message in result.error_message
    assert result.topic_id == NO_TOPIC_ID
    assert op.records == ()


def test_duplicate_names_in_one_request_are_invalid(harness: Harness) -> None:
    """A name given twice gets one INVALID_REQUEST result; other topics still succeed."""
    op = harness.controller.create_topics(
        [CreatableTopic("a", 1, 1), CreatableTopic("dup", 1, 1), CreatableTopic("dup", 2, 1)],
        validate_only=False,
        now_ms=0,
    )
    assert [(r.name, r.error_code) for r in op.response] == [
        ("a", ErrorCode.none),
        ("dup", ErrorCode.invalid_request),
    ]
    assert op.response[1].error_message == "Duplicate topic name."
    assert [r.name for r in op.records if isinstance(r, TopicRecord)] == ["a"]


def test_the_metadata_log_name_is_never_a_topic(harness: Harness) -> None:
    """Whoever asks (a client's forwarded request or a coordinator), __cluster_metadata is
    refused: its partition 0 would share the metadata log's directory."""
    op = harness.controller.create_topics(
        [CreatableTopic("__cluster_metadata", 1, 1), CreatableTopic("__consumer_offsets", 1, 1)],
        validate_only=False, now_ms=0)
    assert [(r.name, r.error_code, r.error_message) for r in op.response] == [
        ("__cluster_metadata", ErrorCode.invalid_request,
         "Creation of internal topic __cluster_metadata is prohibited."),
        ("__consumer_offsets", ErrorCode.none, None),  # its coordinator's way of making it
    ]
    assert [r.name for r in op.records if isinstance(r, TopicRecord)] == ["__consumer_offsets"]


def test_colliding_names_within_one_request(harness: Harness) -> None:
    """The second of 'a.b' and 'a_b' in one request collides with the first."""
    op = harness.controller.create_topics(
        [CreatableTopic("a.b", 1, 1), CreatableTopic("a_b", 1, 1)], validate_only=False, now_ms=0
    )
    assert [r.error_code for r in op.response] == [
        ErrorCode.none,
        ErrorCode.invalid_topic_exception,
    ]


def test_validate_only_emits_no_records_but_the_same_answers(harness: Harness) -> None:
    """validate_only: every check runs, results are the same, nothing is written."""
    topics = [CreatableTopic("v", 4, 2), CreatableTopic("v!", 1, 1)]
    op = harness.controller.create_topics(topics, validate_only=True, now_ms=0)
    assert op.records == ()
    assert [r.error_code for r in op.response] == [
        ErrorCode.none,
        ErrorCode.invalid_topic_exception,
    ]
    assert op.response[0].num_partitions == 4
    assert "v" not in harness.controller.image.topics.by_name


def test_creation_is_deterministic_given_the_seed() -> None:
    """Two controllers with the same seed and history write identical records."""

    def records(seed: int) -> tuple[object, ...]:
        h = Harness(seed=seed)
        h.start_brokers(5)
        return h.controller.create_topics(
            [CreatableTopic(f"t{i}", 6, 3) for i in range(3)], validate_only=False, now_ms=0
        ).records

    assert records(4) == records(4)
    assert records(4) != records(5)


def test_fenced_brokers_are_followers_only_and_left_out_of_the_isr() -> None:
    """With RF = all brokers, a fenced broker gets a replica but never leads nor is in-sync."""
    h = Harness()
    for broker_id in range(3):
        h.register(broker_id)
    for broker_id in (0, 1):
        h.heartbeat(broker_id, 0)
    result = h.create("t", 4, 3)
    assert result.error_code == ErrorCode.none
    for partition in h.controller.image.topics.by_name["t"].partitions.values():
        assert 2 in partition.replicas
        assert partition.leader != 2 and 2 not in partition.isr


def test_all_brokers_fenced_is_an_invalid_replication_factor() -> None:
    h = Harness()
    h.register(0)
    op = h.controller.create_topics([CreatableTopic("t", 1, 1)], validate_only=False, now_ms=0)
    assert op.response[0].error_code == ErrorCode.invalid_replication_factor
    assert op.response[0].error_message == (
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced."
    )


def test_manual_assignment_is_used_as_given(harness: Harness) -> None:
    """Manual replica lists are kept in order; the first replica leads."""
    result = harness.create("m", -1, -1, assignments={0: (3, 1), 1: (2, 0)})
    assert (result.num_partitions, result.replication_factor) == (2, 2)
    partitions = harness.controller.image.topics.by_name["m"].partitions
    assert partitions[0].replicas == (3, 1) and partitions[0].leader == 3
    assert partitions[1].replicas == (2, 0) and partitions[1].leader == 2


def test_too_many_records_fail_the_whole_request(harness: Harness) -> None:
    """Over 10,000 records in one operation: POLICY_VIOLATION (Kafka's bound)."""
    op = harness.controller.create_topics(
        [CreatableTopic("huge", MAX_RECORDS_PER_USER_OP + 1, 1)], validate_only=False, now_ms=0
    )
    assert op.response[0].error_code == ErrorCode.policy_violation
    with pytest.raises(PolicyViolation):
        harness.controller.create_topics(
            [CreatableTopic(f"t{i}", 5000, 1) for i in range(3)], validate_only=False, now_ms=0
        )


class _ScriptedRandom(random.Random):
    def __init__(self, values: list[int]) -> None:
        super().__init__(0)
        self.values = values

    def getrandbits(self, k: int) -> int:
        return self.values.pop(0) if self.values else super().getrandbits(k)


def test_topic_ids_skip_taken_and_dash_leading_ids() -> None:
    """An id in use, or one whose base64 form starts with '-', is drawn again."""
    taken = uuid.UUID(int=(5 << 100) | 77, version=4)
    dash = uuid.UUID(int=62 << 122, version=4)
    assert dash.int >> 122 == 62  # setting the version bits kept the leading sextet
    rng = _ScriptedRandom([taken.int, dash.int, 12345])
    assert new_topic_id(rng, {taken}) == uuid.UUID(int=12345, version=4)


def test_topic_ids_are_version_4_and_never_reserved() -> None:
    rng = random.Random(3)
    for _ in range(2000):
        topic_id = new_topic_id(rng, ())
        assert topic_id.version == 4
        assert topic_id not in (NO_TOPIC_ID, METADATA_TOPIC_ID)
        assert topic_id.int >> 122 != 62


# -- DeleteTopics ---------------------------------------------------------------------


def test_delete_by_name_and_by_id_removes_topic_and_configs(harness: Harness) -> None:
    """RemoveTopicRecord per topic; replayed, the topic and its configs are gone."""
    a = harness.create("a", 1, 1, configs={"retention.ms": "10"})
    b = harness.create("b", 1, 1)
    op = harness.controller.delete_topics(["a", b.topic_id])
    assert op.records == (
        RemoveTopicRecord(topic_id=a.topic_id),
        RemoveTopicRecord(topic_id=b.topic_id),
    )
    assert [(r.name, r.topic_id, r.error_code) for r in op.response] == [
        ("a", a.topic_id, ErrorCode.none),
        ("b", b.topic_id, ErrorCode.none),
    ]
    harness.run(op)
    for image in (harness.controller.image, harness.replayed_image()):
        assert not image.topics.by_name
        assert not image.configs.get(2, "a")


def test_delete_unknown_topics(harness: Harness) -> None:
    """Unknown name: UNKNOWN_TOPIC_OR_PARTITION; unknown id: UNKNOWN_TOPIC_ID."""
    missing = uuid.UUID(int=99)
    op = harness.controller.delete_topics(["nope", missing])
    assert op.records == ()
    assert [r.error_code for r in op.response] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    ]
    assert op.response[1].name is None and op.response[1].topic_id == missing


def test_delete_duplicates_and_disabled_deletion() -> None:
    h = Harness(delete_topic_enable=False)
    h.start_brokers(1)
    h.create("a", 1, 1)
    op = h.controller.delete_topics(["a", "a"])
    assert [(r.error_code, r.error_message) for r in op.response] == [
        (ErrorCode.invalid_request, "Duplicate topic name.")
    ]
    op = h.controller.delete_topics(["a"])
    assert op.records == () and op.response[0].error_code == ErrorCode.topic_deletion_disabled


def test_a_deleted_name_can_be_created_again(harness: Harness) -> None:
    first = harness.create("again", 1, 1)
    harness.run(harness.controller.delete_topics(["again"]))
    second = harness.create("again", 2, 1)
    assert second.error_code == ErrorCode.none and second.topic_id != first.topic_id


# -- CreatePartitions -----------------------------------------------------------------


def test_create_partitions_adds_partition_records(harness: Harness) -> None:
    """Growing 2 -> 5 writes partitions 2, 3, 4 with the topic's replication factor."""
    topic = harness.create("grow", 2, 3)
    op = harness.controller.create_partitions(
        [CreatePartitionsTopic("grow", 5)], validate_only=False
    )
    assert [r.error_code for r in op.response] == [ErrorCode.none]
    assert [r.partition_id for r in op.records if isinstance(r, PartitionRecord)] == [2, 3, 4]
    harness.run(op)
    partitions = harness.controller.image.topics.by_id[topic.topic_id].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 3 for p in partitions.values())


@pytest.mark.parametrize(
    ("request_", "code", "message"),
    [
        (
            CreatePartitionsTopic("grow", 2),
            ErrorCode.invalid_partitions,
            "Topic already has 2 partition(s).",
        ),
        (
            CreatePartitionsTopic("grow", 1),
            ErrorCode.invalid_partitions,
            "The topic grow currently has 2 partition(s); 1 would not be an increase.",
        ),
        (
            CreatePartitionsTopic("none", 3),
            ErrorCode.unknown_topic_or_partition,
            "does not host this topic-partition",
        ),
        (
            CreatePartitionsTopic("grow", 4, ((0, 1),)),
            ErrorCode.invalid_replica_assignment,
            "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.",
        ),
        (
            CreatePartitionsTopic("grow", 3, ((0,),)),
            ErrorCode.invalid_replica_assignment,
            "not consistent with previous partitions, which have 2 replica(s)",
        ),
    ],
)
def test_create_partitions_errors(
    harness: Harness, request_: CreatePartitionsTopic, code: ErrorCode, message: str
) -> None:
    harness.create("grow", 2, 2)
    op = harness.controller.create_partitions([request_], validate_only=False)
    assert op.records == ()
    assert op.response[0].error_code == code
    assert op.response[0].error_message is not None and message in op.response[0].error_message


def test_create_partitions_manual_and_validate_only(harness: Harness) -> None:
    harness.create("grow", 1, 2)
    op = harness.controller.create_partitions(
        [CreatePartitionsTopic("grow", 2, ((3, 2),))], validate_only=True
    )
    assert op.records == () and op.response[0].error_code == ErrorCode.none
    op = harness.controller.create_partitions(
        [CreatePartitionsTopic("grow", 2, ((3, 2),))], validate_only=False
    )
    (record,) = op.records
    assert isinstance(record, PartitionRecord)
    assert (record.partition_id, record.replicas, record.leader) == (1, (3, 2), 3)
