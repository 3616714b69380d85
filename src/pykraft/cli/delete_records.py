"""`pykraft delete-records`: delete records before an offset, like kafka-delete-records.sh.

The offsets come in Kafka's JSON format (offset -1 means the high watermark):

    {"partitions": [{"topic": "foo", "partition": 1, "offset": 1}], "version": 1}

Output follows Kafka's DeleteRecordsCommand: one line per partition with its new low
watermark or the error. Exit code 1 if the file is unusable; a partition's error is printed
on its line (as Kafka does) and also makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, Final

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    check_int,
    load_properties,
    read_text_file,
)
from pykraft.cli.client_config import (
    admin_client,
    client_config,
    kafka_error_message,
    result_of,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import check_login

__all__ = ["add_parser", "parse_offset_json", "run"]

UNKNOWN_PARTITION: Final = ("UNKNOWN_TOPIC_OR_PARTITION: "
                            "This server does not host this topic-partition.")


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "delete-records", help="delete records below an offset (kafka-delete-records.sh)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--offset-json-file", metavar="FILE", help="REQUIRED: the offsets")
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file (security settings included)")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.offset_json_file:
        raise UsageError("Missing required argument \"[offset-json-file]\"")
    properties = load_properties(args.command_config) if args.command_config else {}
    text = read_text_file(args.offset_json_file)
    partitions = parse_offset_json(text)
    config = client_config(args.bootstrap_server, properties, warn=warn)
    check_login(config, properties)
    return run(config, partitions, timeout_seconds(properties))


def parse_offset_json(text: str) -> list[TopicPartition]:
    """The partitions and offsets of Kafka's offset JSON; CommandError if it is malformed."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"the offset JSON file is not valid JSON: {error}") from None
    if not isinstance(document, dict) or "partitions" not in document:
        raise CommandError("the offset JSON file must be an object with a 'partitions' list")
    version = document.get("version", 1)
    if version != 1:
        raise CommandError(f"Not supported version field value {version}")
    entries = document["partitions"]
    if not isinstance(entries, list):
        raise CommandError("'partitions' in the offset JSON file must be a list")
    result = [_partition(entry) for entry in entries]
    keys = [(tp.topic, tp.partition) for tp in result]
    duplicates = sorted({f"{topic}-{partition}" for topic, partition in keys
                         if keys.count((topic, partition)) > 1})
    if duplicates:
        raise CommandError("Offset json file contains duplicate topic partitions: "
                           + ",".join(duplicates))
    return result


def _partition(entry: Any) -> TopicPartition:
    if not isinstance(entry, dict):
        raise CommandError(f"each partition entry must be an object, got {entry!r}")
    topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
    if not isinstance(topic, str) or not topic:
        raise CommandError(f"partition entry {entry!r} needs a 'topic' string")
    for name, value in (("partition", partition), ("offset", offset)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise CommandError(f"partition entry {entry!r} needs an integer '{name}'")
    assert isinstance(partition, int) and isinstance(offset, int)
    return TopicPartition(topic, check_int(partition, 32, "partition"),
                          check_int(offset, 64, "offset"))


def run(config: dict[str, Any], partitions: Sequence[TopicPartition], timeout_s: float) -> int:
    admin, _ = admin_client(config)
    print("Executing records delete operation")
    # librdkafka reports a partition it finds no leader for as "No leaders found"; Kafka's
    # admin client says the partition does not exist, so ask the metadata first
    unknown = _unknown_partitions(admin, partitions, timeout_s)
    known = [tp for tp in partitions if (tp.topic, tp.partition) not in unknown]
    futures = admin.delete_records(known, request_timeout=timeout_s) if known else {}
    print("Records delete operation completed:")
    failed = False
    for wanted in partitions:
        name = f"{wanted.topic}-{wanted.partition}"
        if (wanted.topic, wanted.partition) in unknown:
            failed = True
            print(f"partition: {name}\terror: {UNKNOWN_PARTITION}")
            continue
        future = next(f for tp, f in futures.items()
                      if (tp.topic, tp.partition) == (wanted.topic, wanted.partition))
        try:
            deleted = result_of(future, timeout_s)
        except KafkaException as exception:
            failed = True
            print(f"partition: {name}\terror: {kafka_error_message(exception)}")
            continue
        print(f"partition: {name}\tlow_watermark: {deleted.low_watermark}")
    return 1 if failed else 0


def _unknown_partitions(admin: AdminClient, partitions: Sequence[TopicPartition],
                        timeout_s: float) -> set[tuple[str, int]]:
    if not partitions:
        return set()
    metadata = admin.list_topics(timeout=timeout_s)
    unknown = set()
    for tp in partitions:
        topic = metadata.topics.get(tp.topic)
        if topic is None or topic.error is not None or tp.partition not in topic.partitions:
            unknown.add((tp.topic, tp.partition))
    return unknown
