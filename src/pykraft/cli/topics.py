"""`pykraft topics`: create, list, describe, alter and delete topics, like kafka-topics.sh.

The tool speaks the Kafka protocol through confluent-kafka's AdminClient, so it works
against any Kafka cluster. Option checks and output formats follow Kafka's TopicCommand:
`--topic` is a regular expression except with `--create`; describe prints a summary line
per topic (its non-default configs included) and a tab-indented line per partition; a
failure prints "Error while executing topic command : <message>" and exits 1.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    AlterConfigOpType,
    ClusterMetadata,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
    TopicMetadata,
)

from pykraft.cli.args import (
    INT32,
    ArgumentParser,
    CommandError,
    UsageError,
    check_int,
    load_properties,
    parse_key_values,
)
from pykraft.cli.client_config import (
    ErrorReporter,
    client_config,
    kafka_error_message,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import check_login

__all__ = [
    "INTERNAL_TOPICS",
    "PartitionInfo",
    "TopicInfo",
    "TopicsOptions",
    "add_parser",
    "describe_lines",
    "parse_replica_assignment",
    "run",
    "select_topics",
    "topics_options",
]

Action = Literal["create", "list", "describe", "alter", "delete"]
ACTIONS: Final[tuple[Action, ...]] = ("create", "list", "describe", "alter", "delete")
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
MAX_REPLICATION_FACTOR: Final = 32767  # the field is an int16 on the wire
ERROR_PREFIX: Final = "Error while executing topic command : "


@dataclass(frozen=True, slots=True)
class TopicsOptions:
    bootstrap_servers: str | None
    action: Action
    topic: str | None
    partitions: int | None
    replication_factor: int | None
    replica_assignment: tuple[tuple[int, ...], ...] | None
    configs: tuple[tuple[str, str], ...]
    delete_configs: tuple[str, ...]
    if_exists: bool
    if_not_exists: bool
    exclude_internal: bool
    under_replicated: bool
    unavailable: bool
    under_min_isr: bool
    at_min_isr: bool
    topics_with_overrides: bool
    command_config: tuple[tuple[str, str], ...]

    @property
    def reports_partitions_only(self) -> bool:
        """A partition filter is on: the topic summary line is left out, as Kafka does."""
        return self.under_replicated or self.unavailable or self.under_min_isr or self.at_min_isr


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int | None  # None: no leader (Kafka prints "none")
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding: tuple[int, ...] = ()  # replicas a reassignment in progress adds (KIP-455)
    removing: tuple[int, ...] = ()  # and removes

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def replication_factor(self) -> int:
        """Kafka's: the replicas the partition keeps, without those being added."""
        return len(self.replicas) - len(self.adding)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: str | None  # Kafka's base64 form; None when the cluster did not say
    partitions: tuple[PartitionInfo, ...]  # sorted by partition
    configs: tuple[tuple[str, str], ...]  # the non-default ones, in the broker's order
    min_insync_replicas: int | None


_ACTION_HELP: Final = {
    "create": "create a new topic",
    "list": "list the topics (those matching --topic if given)",
    "describe": "describe the topics (those matching --topic if given)",
    "alter": "change a topic's partition count or configs",
    "delete": "delete the topics matching --topic",
}


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "topics", help="create, delete, describe, or change a topic (kafka-topics.sh)"
    )
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client "
                             "(security.protocol, sasl.*, ssl.*, default.api.timeout.ms ...)")
    for action, text in _ACTION_HELP.items():
        parser.add_argument(f"--{action}", action="store_true", help=text)
    parser.add_argument("--topic", help="a topic name; a regular expression except for --create")
    parser.add_argument("--partitions", type=INT32, metavar="N",
                        help="the partition count of a topic to create (default: the broker's "
                             "num.partitions), or the larger count to grow it to with --alter")
    parser.add_argument("--replication-factor", type=int, metavar="N",
                        help="replicas of each partition of a topic to create (default: the "
                             "broker's default.replication.factor)")
    parser.add_argument("--replica-assignment", metavar="B1:B2,B3:B4,...",
                        help="the brokers of each partition, partitions separated by commas and "
                             "a partition's replicas by colons (instead of --partitions and "
                             "--replication-factor)")
    parser.add_argument("--config", action="append", metavar="NAME=VALUE",
                        help="a topic config to set at --create or --alter (repeatable)")
    parser.add_argument("--delete-config", action="append", metavar="NAME",
                        help="a topic config override to remove with --alter (repeatable)")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter, --delete or --describe: act only if the topic exists "
                             "(no error otherwise)")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: create only if the topic does not exist (no error "
                             "otherwise)")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave internal topics out of --list and --describe")
    parser.add_argument("--under-replicated-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than their "
                             "replica set")
    parser.add_argument("--unavailable-partitions", action="store_true",
                        help="with --describe: only partitions without a live leader")
    parser.add_argument("--under-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR is smaller than "
                             "min.insync.replicas")
    parser.add_argument("--at-min-isr-partitions", action="store_true",
                        help="with --describe: only partitions whose ISR equals "
                             "min.insync.replicas")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics that override a config, and no "
                             "partition lines")
    parser.set_defaults(handler=lambda args: run(topics_options(args)))


def topics_options(args: argparse.Namespace) -> TopicsOptions:
    """Check the option combination the way Kafka's TopicCommand does; build the options."""
    actions = [action for action in ACTIONS if getattr(args, action)]
    if len(actions) != 1:
        raise UsageError(
            "Command must include exactly one action: "
            "--list, --describe, --create, --alter or --delete"
        )
    action = actions[0]
    if not args.bootstrap_server:
        raise UsageError("--bootstrap-server must be specified")
    options = TopicsOptions(
        bootstrap_servers=args.bootstrap_server,
        action=action,
        topic=args.topic,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        replica_assignment=(
            parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
        ),
        configs=tuple(parse_key_values(args.config, "--config", strip_values=True).items()),
        delete_configs=tuple(args.delete_config or ()),
        if_exists=args.if_exists,
        if_not_exists=args.if_not_exists,
        exclude_internal=args.exclude_internal,
        under_replicated=args.under_replicated_partitions,
        unavailable=args.unavailable_partitions,
        under_min_isr=args.under_min_isr_partitions,
        at_min_isr=args.at_min_isr_partitions,
        topics_with_overrides=args.topics_with_overrides,
        command_config=tuple(
            load_properties(args.command_config).items() if args.command_config else ()
        ),
    )
    _check_options(options)
    return options


def _check_options(options: TopicsOptions) -> None:
    action = options.action
    if action not in ("list", "describe") and not options.topic:
        raise UsageError(f"--topic is required with --{action}")
    _only_with("config", bool(options.configs), action, ("create", "alter"))
    _only_with("delete-config", bool(options.delete_configs), action, ("alter",))
    _only_with("partitions", options.partitions is not None, action, ("create", "alter"))
    _only_with("replication-factor", options.replication_factor is not None, action, ("create",))
    _only_with(
        "replica-assignment", options.replica_assignment is not None, action, ("create", "alter")
    )
    _only_with("if-exists", options.if_exists, action, ("alter", "delete", "describe"))
    _only_with("if-not-exists", options.if_not_exists, action, ("create",))
    _only_with("exclude-internal", options.exclude_internal, action, ("list", "describe"))
    for report, present in (
        ("under-replicated-partitions", options.under_replicated),
        ("unavailable-partitions", options.unavailable),
        ("under-min-isr-partitions", options.under_min_isr),
        ("at-min-isr-partitions", options.at_min_isr),
        ("topics-with-overrides", options.topics_with_overrides),
    ):
        _only_with(report, present, action, ("describe",))
    if options.reports_partitions_only and options.topics_with_overrides:
        raise UsageError("--topics-with-overrides can't be used with the partition reports")
    if action == "create" and options.replica_assignment is not None:
        if options.partitions is not None or options.replication_factor is not None:
            raise UsageError(
                "--replica-assignment can't be used with --partitions or --replication-factor"
            )
    if action == "alter" and options.partitions is None:
        if options.replica_assignment is not None:
            raise UsageError("--replica-assignment with --alter needs --partitions")
        if not options.configs and not options.delete_configs:
            raise UsageError("--alter needs --partitions, --config or --delete-config")
    if options.partitions is not None and options.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    factor = options.replication_factor
    if factor is not None and not 1 <= factor <= MAX_REPLICATION_FACTOR:
        raise UsageError(
            f"The replication factor must be between 1 and {MAX_REPLICATION_FACTOR} inclusive"
        )


def _only_with(option: str, present: bool, action: Action, allowed: Sequence[Action]) -> None:
    if present and action not in allowed:
        allowed_text = ", ".join(f"--{name}" for name in allowed)
        raise UsageError(f"--{option} can only be used with {allowed_text}, not --{action}")


def parse_replica_assignment(text: str) -> tuple[tuple[int, ...], ...]:
    """`0:1,1:2` -> ((0, 1), (1, 2)): the replica broker ids of partition 0, 1, ..."""
    assignment: list[tuple[int, ...]] = []
    for index, part in enumerate(text.split(",")):
        try:
            brokers = tuple(check_int(int(broker.strip()), 32, "broker id")
                            for broker in part.split(":"))
        except ValueError:
            raise UsageError(
                f"invalid --replica-assignment '{text}': broker ids are integers"
            ) from None
        duplicates = sorted({broker for broker in brokers if brokers.count(broker) > 1})
        if duplicates:
            listed = ",".join(str(broker) for broker in duplicates)
            raise UsageError(f"Partition replica lists may not contain duplicate entries: {listed}")
        if assignment and len(brokers) != len(assignment[0]):
            raise UsageError(f"Partition {index} has different replication factor: {list(brokers)}")
        assignment.append(brokers)
    return tuple(assignment)


def select_topics(names: Iterable[str], pattern: str | None, exclude_internal: bool) -> list[str]:
    """The sorted topic names `pattern` matches whole (Kafka's include list; ',' means '|')."""
    regex = None
    if pattern:
        try:
            regex = re.compile(pattern.strip().strip("'\"").replace(",", "|"))
        except re.error as error:
            raise UsageError(
                f"--topic '{pattern}' is not a valid regular expression: {error}"
            ) from None
    return [
        name
        for name in sorted(names)
        if not (exclude_internal and name in INTERNAL_TOPICS)
        and (regex is None or regex.fullmatch(name) is not None)
    ]


# -- output --------------------------------------------------------------------------------


def describe_lines(
    topics: Iterable[TopicInfo], options: TopicsOptions, live_brokers: frozenset[int]
) -> list[str]:
    lines: list[str] = []
    for topic in topics:
        if options.topics_with_overrides and not topic.configs:
            continue
        if not options.reports_partitions_only:
            lines.append(summary_line(topic))
        if options.topics_with_overrides:
            continue
        for partition in topic.partitions:
            if _partition_selected(partition, topic, options, live_brokers):
                lines.append(partition_line(topic.name, partition))
    return lines


def summary_line(topic: TopicInfo) -> str:
    replication_factor = topic.partitions[0].replication_factor if topic.partitions else 0
    configs = ",".join(f"{name}={value}" for name, value in topic.configs)
    topic_id = f"\tTopicId: {topic.topic_id}" if topic.topic_id else ""
    return (
        f"Topic: {topic.name}{topic_id}\tPartitionCount: {len(topic.partitions)}"
        f"\tReplicationFactor: {replication_factor}\tConfigs: {configs}"
    )


def partition_line(topic: str, partition: PartitionInfo) -> str:
    leader = "none" if partition.leader is None else str(partition.leader)
    replicas = ",".join(str(replica) for replica in partition.replicas)
    isr = ",".join(str(replica) for replica in partition.isr)
    line = (
        f"\tTopic: {topic}\tPartition: {partition.partition}\tLeader: {leader}"
        f"\tReplicas: {replicas}\tIsr: {isr}"
    )
    if partition.reassigning:
        adding = ",".join(str(replica) for replica in partition.adding)
        removing = ",".join(str(replica) for replica in partition.removing)
        line += f"\tAdding Replicas: {adding}\tRemoving Replicas: {removing}"
    return line


def _partition_selected(
    partition: PartitionInfo,
    topic: TopicInfo,
    options: TopicsOptions,
    live_brokers: frozenset[int],
) -> bool:
    if not options.reports_partitions_only:
        return True
    min_isr = topic.min_insync_replicas
    return (
        (options.under_replicated and len(partition.isr) < partition.replication_factor)
        or (
            options.unavailable
            and (partition.leader is None or partition.leader not in live_brokers)
        )
        or (
            options.under_min_isr
            and (partition.leader is None or (min_isr is not None and len(partition.isr) < min_isr))
        )
        or (options.at_min_isr and min_isr is not None and len(partition.isr) == min_isr)
    )


# -- talking to the cluster ----------------------------------------------------------------


def run(options: TopicsOptions) -> int:
    properties = dict(options.command_config)
    errors = ErrorReporter()
    config = client_config(options.bootstrap_servers, properties, warn=warn)
    config["error_cb"] = errors
    config.setdefault("log_level", 0)  # errors reach the user through error_cb, once each
    admin = AdminClient(config)
    session = _Session(admin, timeout_seconds(properties), errors,
                       str(config.get("bootstrap.servers", "")), properties)
    try:
        check_login(config, properties)
        _ACTION_RUNNERS[options.action](session, options)
    except KafkaException as exception:
        message = kafka_error_message(exception) + errors.describe_last()
        print(ERROR_PREFIX + message, file=sys.stderr)
        return 1
    except CommandError as error:
        print(ERROR_PREFIX + str(error), file=sys.stderr)
        return 1
    return 0


@dataclass(frozen=True, slots=True)
class _Session:
    admin: AdminClient
    timeout_s: float
    errors: ErrorReporter
    bootstrap: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)  # --command-config

    def metadata(self) -> ClusterMetadata:
        return self.admin.list_topics(timeout=self.timeout_s)

    def matching_topics(self, options: TopicsOptions) -> tuple[ClusterMetadata, list[str]]:
        """The topics --topic names; none is an error unless --if-exists (or --list)."""
        metadata = self.metadata()
        names = select_topics(metadata.topics, options.topic, options.exclude_internal)
        must_exist = options.action != "list" and not options.if_exists
        if options.topic and not names and must_exist:
            raise CommandError(f"Topic '{options.topic}' does not exist as expected")
        return metadata, names


def _create(session: _Session, options: TopicsOptions) -> None:
    name = options.topic
    if not name:
        raise UsageError("--topic is required with --create")
    if "." in name or "_" in name:
        warn(
            "WARNING: Due to limitations in metric names, topics with a period ('.') or "
            "underscore ('_') could collide. To avoid issues it is best to use either, "
            "but not both."
        )
    if options.replica_assignment is not None:
        new_topic = NewTopic(
            name,
            # confluent-kafka refuses an assignment with its default count (-1): give the
            # count the assignment implies
            num_partitions=len(options.replica_assignment),
            replica_assignment=[list(replicas) for replicas in options.replica_assignment],
            config=dict(options.configs),
        )
    else:
        new_topic = NewTopic(
            name,
            num_partitions=-1 if options.partitions is None else options.partitions,
            replication_factor=(
                -1 if options.replication_factor is None else options.replication_factor
            ),
            config=dict(options.configs),
        )
    futures = session.admin.create_topics(
        [new_topic], operation_timeout=session.timeout_s, request_timeout=session.timeout_s
    )
    try:
        futures[name].result()
    except KafkaException as exception:
        if options.if_not_exists and _code(exception) == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise
    print(f"Created topic {name}.")


def _list(session: _Session, options: TopicsOptions) -> None:
    _, names = session.matching_topics(options)
    for name in names:
        print(name)


def _delete(session: _Session, options: TopicsOptions) -> None:
    _, names = session.matching_topics(options)
    if not names:
        return
    futures = session.admin.delete_topics(
        names, operation_timeout=session.timeout_s, request_timeout=session.timeout_s
    )
    _wait_all(futures.values())


def _alter(session: _Session, options: TopicsOptions) -> None:
    metadata, names = session.matching_topics(options)
    if not names:
        return
    if options.partitions is not None:
        partitions = [
            _new_partitions(name, options, len(metadata.topics[name].partitions)) for name in names
        ]
        _wait_all(
            session.admin.create_partitions(
                partitions, operation_timeout=session.timeout_s, request_timeout=session.timeout_s
            ).values()
        )
    if options.configs or options.delete_configs:
        changes = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in options.configs
        ]
        changes += [
            ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
            for key in options.delete_configs
        ]
        resources = [
            ConfigResource(ResourceType.TOPIC, name, incremental_configs=changes) for name in names
        ]
        _wait_all(
            session.admin.incremental_alter_configs(
                resources, request_timeout=session.timeout_s
            ).values()
        )


def _new_partitions(name: str, options: TopicsOptions, current_count: int) -> NewPartitions:
    total_count = current_count if options.partitions is None else options.partitions
    if options.replica_assignment is None or total_count <= current_count:
        return NewPartitions(name, total_count)  # no new partition: the broker refuses it
    # The assignment lists every partition; only the ones being added are sent.
    added = [list(replicas) for replicas in options.replica_assignment[current_count:]]
    if len(added) != total_count - current_count:
        # Kafka's controller answers INVALID_REPLICA_ASSIGNMENT with these words;
        # confluent-kafka would refuse the request before it is sent, with a ValueError
        raise CommandError(f"Attempted to add {total_count - current_count} additional "
                           f"partition(s), but only {len(added)} assignment(s) were specified.")
    return NewPartitions(name, total_count, replica_assignment=added)


def _describe(session: _Session, options: TopicsOptions) -> None:
    metadata, names = session.matching_topics(options)
    if not names:
        return
    topic_ids = _topic_ids(session, names)
    configs = _topic_configs(session, names)
    moving = _reassignments(session, names)
    topics = [
        _topic_info(name, metadata.topics[name], topic_ids.get(name), configs[name], moving)
        for name in names
    ]
    for line in describe_lines(topics, options, frozenset(metadata.brokers)):
        print(line)


def _topic_ids(session: _Session, names: list[str]) -> dict[str, str]:
    """Topic ids come from DescribeTopics; a cluster that cannot say gets no TopicId field.

    Kafka's tool leaves the field out for a zero id in the same way, so this is best effort
    on purpose: partitions, leaders and ISRs already come from the Metadata response.
    """
    futures = session.admin.describe_topics(
        TopicCollection(names), request_timeout=session.timeout_s
    )
    topic_ids: dict[str, str] = {}
    for name, future in futures.items():
        try:
            description = future.result()
        except KafkaException:
            continue
        # librdkafka prints standard base64; Kafka's form is the URL-safe alphabet
        topic_id = str(description.topic_id).replace("+", "-").replace("/", "_")
        if topic_id != "AAAAAAAAAAAAAAAAAAAAAA":  # the zero id
            topic_ids[name] = topic_id
    return topic_ids


def _topic_configs(session: _Session, names: list[str]) -> dict[str, dict[str, ConfigEntry]]:
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures = session.admin.describe_configs(resources, request_timeout=session.timeout_s)
    return {resource.name: future.result() for resource, future in futures.items()}


def _reassignments(
    session: _Session, names: list[str]
) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
    """(topic, partition) -> (adding, removing) of the reassignments in progress, from
    ListPartitionReassignments (confluent-kafka does not send it), over a connection secured
    as --command-config says. Best effort, as Kafka's tool: a cluster that cannot say shows
    no reassignment columns."""
    from pykraft.cli.protocol_client import ProtocolClient

    def build(module: Any, version: int) -> Any:
        import datetime

        return module.ListPartitionReassignmentsRequest(
            timeout=datetime.timedelta(seconds=session.timeout_s), topics=None)

    try:
        with ProtocolClient(session.bootstrap, timeout_s=session.timeout_s,
                            client_id="pykraft-topics", properties=session.properties) as client:
            _, answer = client.request(46, "ListPartitionReassignments", (0, 0), build)
    except (CommandError, OSError):
        return {}
    if answer.error_code != 0:
        return {}
    wanted = set(names)
    return {(str(t.name), int(p.partition_index)):
            (tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in answer.topics if t.name in wanted for p in t.partitions}


def _topic_info(
    name: str,
    metadata: TopicMetadata,
    topic_id: str | None,
    configs: Mapping[str, ConfigEntry],
    moving: Mapping[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]] | None = None,
) -> TopicInfo:
    moving = moving or {}
    partitions = tuple(
        PartitionInfo(
            partition=partition.id,
            leader=partition.leader if partition.leader >= 0 else None,
            replicas=tuple(partition.replicas),
            isr=tuple(partition.isrs),
            adding=moving.get((name, partition.id), ((), ()))[0],
            removing=moving.get((name, partition.id), ((), ()))[1],
        )
        for partition in sorted(metadata.partitions.values(), key=lambda p: p.id)
    )
    min_isr_entry = configs.get("min.insync.replicas")
    min_isr = (
        int(min_isr_entry.value)
        if min_isr_entry is not None and min_isr_entry.value is not None
        else None
    )
    return TopicInfo(
        name=name,
        topic_id=topic_id,
        partitions=partitions,
        configs=tuple(
            (key, "null" if entry.value is None else entry.value)
            for key, entry in configs.items()
            if not entry.is_default
        ),
        min_insync_replicas=min_isr,
    )


_ACTION_RUNNERS: Final[Mapping[Action, Callable[[_Session, TopicsOptions], None]]] = {
    "create": _create,
    "list": _list,
    "describe": _describe,
    "alter": _alter,
    "delete": _delete,
}


def _wait_all(futures: Iterable[Future[Any]]) -> None:
    for future in futures:
        future.result()


def _code(exception: KafkaException) -> int | None:
    error = exception.args[0] if exception.args else None
    return error.code() if isinstance(error, KafkaError) else None
