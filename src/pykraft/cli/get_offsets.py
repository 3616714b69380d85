"""`pykraft get-offsets`: partition offsets at a time, like kafka-get-offsets.sh (GetOffsetShell).

    pykraft get-offsets --bootstrap-server H:P [--topic REGEX] [--partitions 0,1] [--time T]
    pykraft get-offsets --bootstrap-server H:P --topic-partitions 'orders:0-3,audit.*,:1'

One `topic:partition:offset` line per partition, in Kafka's order (by the "topic-partition"
string). `--time` is latest (-1, the default), earliest (-2), max-timestamp (-3),
earliest-local (-4), latest-tiered (-5) or a timestamp in ms: the earliest offset whose
timestamp is at or after it. A partition with no such offset prints no line, as in Kafka;
a partition the cluster refuses is reported on stderr and skipped. Without tiered storage,
earliest-local is the earliest offset and latest-tiered prints nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Final

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin._listoffsets import OffsetSpec

from pykraft.cli.args import ArgumentParser, UsageError, load_properties
from pykraft.cli.client_config import (
    admin_client,
    client_config,
    kafka_error_message,
    result_of,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import check_login

__all__ = ["add_parser", "parse_time", "partition_filter"]

# Kafka's Topic.isInternal
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state",
                                    "__share_group_state"})
_RULE: Final = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
_TIMES: Final = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4,
                 "latest-tiered": -5}
_INT32_MAX: Final = (1 << 31) - 1


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "get-offsets", help="print partition offsets (kafka-get-offsets.sh)",
        description="An interactive shell for getting topic-partition offsets.")
    parser.add_argument("--bootstrap-server", metavar="HOST1:PORT1,...",
                        help="REQUIRED. The server(s) to connect to.")
    parser.add_argument("--topic-partitions", metavar="topic1:1,topic2:0-3,topic3,topic4:5-",
                        help="Comma separated list of topic-partition patterns, each "
                             "'TOPIC_REGEX:PARTITIONS' where PARTITIONS is a number, a range "
                             "N-M (upper exclusive), N- or -M, or omitted for all. Cannot be "
                             "used with --topic or --partitions.")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="The topic to get the offsets for; a regular expression. If not "
                             "present, all topics are queried.")
    parser.add_argument("--partitions", metavar="IDS",
                        help="Comma separated list of partition ids to get the offsets for. If "
                             "not present, all partitions of the matched topics are queried.")
    parser.add_argument("--time", default="latest",
                        metavar="<timestamp> / -1 or latest / -2 or earliest / -3 or "
                                "max-timestamp",
                        help="timestamp of the offsets before that (default latest); also -4 "
                             "or earliest-local, -5 or latest-tiered")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client "
                             "(security settings included).")
    parser.add_argument("--exclude-internal-topics", action="store_true",
                        help="By default, internal topics are included. If specified, internal "
                             "topics are excluded.")
    parser.set_defaults(handler=_run_args)


def parse_time(text: str) -> int:
    """--time as Kafka's ListOffsets timestamp (a negative value names a special offset)."""
    if text in _TIMES:
        return _TIMES[text]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not -(1 << 63) <= value < (1 << 63):
        raise UsageError(f"Malformed time argument {text}. Please use -1 or latest / -2 or "
                         "earliest / -3 or max-timestamp / -4 or earliest-local / -5 or "
                         "latest-tiered, or a specified long format timestamp")
    return value


Rule = tuple["re.Pattern[str]", int, int]  # topic regex, partitions [low, high)


def partition_filter(args: argparse.Namespace) -> list[Rule]:
    """The rules a partition must match one of (Kafka's TopicPartitionFilter)."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise UsageError("Option \"[topic-partitions]\" can't be used with option "
                             f"\"[{'topic' if args.topic is not None else 'partitions'}]\"")
        return [_rule(spec) for spec in args.topic_partitions.split(",")]
    topic = _topic_regex(args.topic if args.topic is not None else ".*")
    if not args.partitions:
        return [(topic, 0, _INT32_MAX)]
    try:
        ids = {int(text) for text in args.partitions.split(",")}
    except ValueError:
        raise UsageError("--partitions expects a comma separated list of numeric partition ids, "
                         f"but received: {args.partitions}") from None
    return [(topic, partition, partition + 1) for partition in sorted(ids)]


def _rule(spec: str) -> Rule:
    match = _RULE.fullmatch(spec)
    if match is None:
        raise UsageError(f"Invalid rule specification: {spec}")
    topic, single, low, high = (group or None for group in match.groups())
    regex = _topic_regex(topic or ".*")
    try:
        if single is not None:
            return regex, int(single), int(single) + 1
        return regex, int(low) if low else 0, int(high) if high else _INT32_MAX
    except ValueError:
        raise UsageError(f"Invalid rule specification: {spec}") from None


def _topic_regex(text: str) -> re.Pattern[str]:
    # Kafka's IncludeList: commas separate alternatives; the whole name must match
    try:
        return re.compile(text.strip().replace(",", "|"))
    except re.error as error:
        raise UsageError(f"invalid topic regular expression '{text}': {error}") from None


def _allowed(rules: list[Rule], topic: str, partition: int) -> bool:
    return any(regex.fullmatch(topic) and low <= partition < high for regex, low, high in rules)


def _run_args(args: argparse.Namespace) -> int:
    if not args.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    time_ms = parse_time(args.time)
    rules = partition_filter(args)
    properties = load_properties(args.command_config) if args.command_config else {}
    config = client_config(args.bootstrap_server, properties, warn=warn)
    config.setdefault("client.id", "GetOffsetShell")
    check_login(config, properties)
    timeout_s = timeout_seconds(properties)
    for topic, partition, offset in fetch_offsets(config, rules, time_ms, timeout_s,
                                                  args.exclude_internal_topics):
        print(f"{topic}:{partition}:{offset}")
    return 0


def fetch_offsets(config: dict[str, Any], rules: list[Rule], time_ms: int, timeout_s: float,
                  exclude_internal: bool) -> list[tuple[str, int, int]]:
    admin, _ = admin_client(config)
    metadata = admin.list_topics(timeout=timeout_s)
    wanted = [TopicPartition(name, partition)
              for name, topic in metadata.topics.items()
              if topic.error is None and not (exclude_internal and name in INTERNAL_TOPICS)
              for partition in topic.partitions
              if _allowed(rules, name, partition)]
    if not wanted:
        raise UsageError("Could not match any topic-partitions with the specified filters")
    if time_ms == -5:
        return []  # latest-tiered: no partition has tiered segments without tiered storage
    spec = _offset_spec(time_ms)
    futures = admin.list_offsets({tp: spec for tp in wanted}, request_timeout=timeout_s)
    found = []
    for tp, future in futures.items():
        try:
            info = result_of(future, timeout_s)
        except KafkaException as exception:
            print(f"Skip getting offsets for topic-partition {tp.topic}-{tp.partition} due to "
                  f"error: {kafka_error_message(exception)}", file=sys.stderr, flush=True)
            continue
        if info.offset != -1:  # no offset at or after the timestamp
            found.append((tp.topic, tp.partition, int(info.offset)))
    return sorted(found, key=lambda row: f"{row[0]}-{row[1]}")


# confluent-kafka leaves these untyped
_LATEST: Final[Any] = OffsetSpec.latest
_EARLIEST: Final[Any] = OffsetSpec.earliest
_MAX_TIMESTAMP: Final[Any] = OffsetSpec.max_timestamp


def _offset_spec(time_ms: int) -> Any:
    if time_ms == -1:
        return _LATEST()
    if time_ms in (-2, -4):
        # earliest-local: without tiered storage the local log starts where the log does
        # (librdkafka has no spec for -4, which Kafka's broker would answer the same)
        return _EARLIEST()
    if time_ms == -3:
        return _MAX_TIMESTAMP()
    return OffsetSpec.for_timestamp(time_ms)
