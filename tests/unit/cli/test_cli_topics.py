"""`pykraft topics`: option checks, replica assignments, topic selection and describe output."""

from __future__ import annotations

import pytest

from pykraft.cli.args import UsageError
from pykraft.cli.main import build_parser
from pykraft.cli.topics import (
    PartitionInfo,
    TopicInfo,
    TopicsOptions,
    describe_lines,
    parse_replica_assignment,
    select_topics,
    topics_options,
)

BOOTSTRAP = ["--bootstrap-server", "localhost:9092"]


def options_for(*argv: str) -> TopicsOptions:
    return topics_options(build_parser().parse_args(["topics", *BOOTSTRAP, *argv]))


def test_create_options_are_parsed() -> None:
    """--create collects partitions, replication factor and stripped config pairs."""
    options = options_for(
        "--create",
        "--topic",
        "t",
        "--partitions",
        "3",
        "--replication-factor",
        "2",
        "--config",
        "cleanup.policy = compact",
        "--config",
        "retention.ms=5",
        "--if-not-exists",
    )
    assert options.action == "create"
    assert (options.topic, options.partitions, options.replication_factor) == ("t", 3, 2)
    assert options.configs == (("cleanup.policy", "compact"), ("retention.ms", "5"))
    assert options.if_not_exists


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "exactly one action"),
        (("--list", "--describe"), "exactly one action"),
        (("--create",), "--topic is required with --create"),
        (("--delete",), "--topic is required with --delete"),
        (("--list", "--partitions", "2"), "--partitions can only be used with --create, --alter"),
        (
            ("--alter", "--topic", "t", "--replication-factor", "2"),
            "--replication-factor can only be used with --create",
        ),
        (("--describe", "--config", "a=b"), "--config can only be used with --create, --alter"),
        (("--create", "--topic", "t", "--delete-config", "a"), "--delete-config can only"),
        (("--create", "--topic", "t", "--if-exists"), "--if-exists can only be used with"),
        (("--delete", "--topic", "t", "--if-not-exists"), "--if-not-exists can only be used"),
        (("--create", "--topic", "t", "--exclude-internal"), "--exclude-internal can only"),
        (("--list", "--under-replicated-partitions"), "--under-replicated-partitions can only"),
        (
            ("--describe", "--unavailable-partitions", "--topics-with-overrides"),
            "--topics-with-overrides can't be used",
        ),
        (("--create", "--topic", "t", "--partitions", "0"), "partitions must be greater than 0"),
        (("--create", "--topic", "t", "--replication-factor", "0"), "between 1 and 32767"),
        (
            ("--create", "--topic", "t", "--replica-assignment", "1:2", "--partitions", "1"),
            "--replica-assignment can't be used with --partitions",
        ),
        (("--alter", "--topic", "t"), "--alter needs --partitions, --config or --delete-config"),
        (("--alter", "--topic", "t", "--replica-assignment", "1,2"), "needs --partitions"),
        (("--create", "--topic", "t", "--config", "novalue"), "--config expects key=value"),
        (("--describe", "--topic", "a("), "not a valid regular expression"),
    ],
)
def test_bad_option_combinations_are_usage_errors(argv: tuple[str, ...], message: str) -> None:
    """Each combination Kafka's TopicCommand refuses is refused with a readable message."""
    with pytest.raises(UsageError, match=None) as raised:
        options = options_for(*argv)
        select_topics(["x"], options.topic, options.exclude_internal)
    assert message in str(raised.value)


def test_bootstrap_server_is_required() -> None:
    with pytest.raises(UsageError, match="--bootstrap-server must be specified"):
        topics_options(build_parser().parse_args(["topics", "--list"]))


def test_alter_with_config_only_is_accepted() -> None:
    """--alter may change configs without --partitions (incremental alter)."""
    options = options_for(
        "--alter", "--topic", "t", "--config", "retention.ms=1", "--delete-config", "segment.ms"
    )
    assert options.configs == (("retention.ms", "1"),)
    assert options.delete_configs == ("segment.ms",)
    assert options.partitions is None


def test_replica_assignment_parses_per_partition_broker_lists() -> None:
    assert parse_replica_assignment("0:1, 1:2 ,2:0") == ((0, 1), (1, 2), (2, 0))
    assert parse_replica_assignment("5") == ((5,),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1:1", "may not contain duplicate entries: 1"),
        ("1:2,3", "Partition 1 has different replication factor: [3]"),
        ("1:x", "broker ids are integers"),
    ],
)
def test_bad_replica_assignments_are_refused(text: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_replica_assignment(text)
    assert message in str(raised.value)


NAMES = ["orders", "orders.eu", "ordersXeu", "__consumer_offsets", "payments"]


def test_select_topics_matches_whole_names_as_regular_expressions() -> None:
    """--topic is a regex matched against the whole name; ',' separates alternatives."""
    assert select_topics(NAMES, "orders", False) == ["orders"]
    assert select_topics(NAMES, "orders.eu", False) == ["orders.eu", "ordersXeu"]
    assert select_topics(NAMES, "orders.*", False) == ["orders", "orders.eu", "ordersXeu"]
    assert select_topics(NAMES, "payments,orders", False) == ["orders", "payments"]
    assert select_topics(NAMES, "nothing", False) == []


def test_select_topics_sorts_and_can_exclude_internal_topics() -> None:
    assert select_topics(NAMES, None, False) == sorted(NAMES)
    assert "__consumer_offsets" not in select_topics(NAMES, None, True)
    assert select_topics(NAMES, "__.*", True) == []


def topic(
    name: str = "t",
    *partitions: PartitionInfo,
    configs: tuple[tuple[str, str], ...] = (),
    topic_id: str | None = "x8bH5b1OQ2W0G3k_v3kJ1g",
    min_isr: int | None = 1,
) -> TopicInfo:
    return TopicInfo(name, topic_id, partitions, configs, min_isr)


HEALTHY = PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3))
UNDER_REPLICATED = PartitionInfo(1, 2, (2, 3, 1), (2,))
LEADERLESS = PartitionInfo(2, None, (3, 1, 2), ())
DEAD_LEADER = PartitionInfo(3, 9, (9, 1, 2), (9, 1, 2))


def test_describe_prints_kafka_summary_and_partition_lines() -> None:
    """The layout of kafka-topics.sh --describe, tabs included."""
    info = topic(
        "orders",
        HEALTHY,
        LEADERLESS,
        configs=(("cleanup.policy", "compact"), ("retention.ms", "100")),
    )
    lines = describe_lines([info], options_for("--describe"), frozenset({1, 2, 3}))
    assert lines == [
        "Topic: orders\tTopicId: x8bH5b1OQ2W0G3k_v3kJ1g\tPartitionCount: 2\tReplicationFactor: 3"
        "\tConfigs: cleanup.policy=compact,retention.ms=100",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: orders\tPartition: 2\tLeader: none\tReplicas: 3,1,2\tIsr: ",
    ]


def test_describe_leaves_out_an_unknown_topic_id() -> None:
    lines = describe_lines(
        [topic("t", HEALTHY, topic_id=None)], options_for("--describe"), frozenset({1})
    )
    assert lines[0] == "Topic: t\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: "


def test_partition_reports_print_only_matching_partitions_without_summary() -> None:
    """--under-replicated-partitions / --unavailable-partitions filter partitions."""
    info = topic("t", HEALTHY, UNDER_REPLICATED, LEADERLESS, DEAD_LEADER)
    live = frozenset({1, 2, 3})

    def partitions(*flags: str) -> list[int]:
        lines = describe_lines([info], options_for("--describe", *flags), live)
        assert not any(line.startswith("Topic:") for line in lines)
        return [int(line.split("Partition: ")[1].split("\t")[0]) for line in lines]

    assert partitions("--under-replicated-partitions") == [1, 2]
    assert partitions("--unavailable-partitions") == [2, 3]
    assert partitions("--under-replicated-partitions", "--unavailable-partitions") == [1, 2, 3]


def test_min_isr_reports_use_the_topic_min_insync_replicas() -> None:
    info = topic("t", HEALTHY, UNDER_REPLICATED, LEADERLESS, min_isr=3)
    live = frozenset({1, 2, 3})
    under = describe_lines([info], options_for("--describe", "--under-min-isr-partitions"), live)
    at = describe_lines([info], options_for("--describe", "--at-min-isr-partitions"), live)
    assert [line.split("\t")[2] for line in under] == ["Partition: 1", "Partition: 2"]
    assert [line.split("\t")[2] for line in at] == ["Partition: 0"]


def test_topics_with_overrides_prints_summaries_of_overridden_topics_only() -> None:
    plain = topic("plain", HEALTHY)
    custom = topic("custom", HEALTHY, configs=(("retention.ms", "1"),))
    lines = describe_lines(
        [custom, plain], options_for("--describe", "--topics-with-overrides"), frozenset({1, 2, 3})
    )
    assert len(lines) == 1
    assert lines[0].startswith("Topic: custom\t")
