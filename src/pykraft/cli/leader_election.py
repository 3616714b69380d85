"""`pykraft leader-election`: elect partition leaders, like kafka-leader-election.sh.

    pykraft leader-election --bootstrap-server H:P --election-type preferred|unclean
        (--all-topic-partitions | --topic T --partition P | --path-to-json-file F)
        [--admin.config FILE]

The JSON file lists partitions as Kafka's tool reads them:

    {"partitions": [{"topic": "foo", "partition": 1}, {"topic": "bar", "partition": 0}]}

Output follows Kafka's LeaderElectionCommand: the partitions whose election succeeded, those
whose valid leader was already elected (ELECTION_NOT_NEEDED), then one line per failure;
any failure makes the exit code 1.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from pykraft.cli.args import (
    INT32,
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

__all__ = ["add_parser", "parse_partitions_json", "run"]

_TYPES = {"preferred": ElectionType.PREFERRED, "unclean": ElectionType.UNCLEAN}


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "leader-election", help="elect partition leaders (kafka-leader-election.sh)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--admin.config", dest="admin_config", metavar="FILE",
                        help="admin client properties file (security settings included)")
    parser.add_argument("--election-type", metavar="preferred|unclean",
                        help="REQUIRED: the kind of election")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="every partition of every topic")
    parser.add_argument("--topic", metavar="TOPIC", help="one topic (needs --partition)")
    parser.add_argument("--partition", type=INT32, metavar="P", help="the partition of --topic")
    parser.add_argument("--path-to-json-file", metavar="FILE",
                        help="the partitions, as {\"partitions\": [{\"topic\": ..., "
                             "\"partition\": ...}]}")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    if not args.election_type:
        raise UsageError("Missing required option(s) [election-type]")
    election = _TYPES.get(args.election_type.strip().lower())
    if election is None:
        raise UsageError(f"Invalid election type {args.election_type!r}: "
                         "expected preferred or unclean")
    chosen = [name for name, given in (("--all-topic-partitions", args.all_topic_partitions),
                                       ("--topic", args.topic is not None),
                                       ("--path-to-json-file", args.path_to_json_file))
              if given]
    if len(chosen) != 1:
        raise UsageError("One and only one of the following options is required: "
                         "--all-topic-partitions, --topic, --path-to-json-file")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    partitions: list[TopicPartition] | None = None
    if args.topic is not None:
        if args.partition is None:
            raise UsageError("Missing required option(s) [partition]")
        partitions = [TopicPartition(args.topic, args.partition)]
    elif args.path_to_json_file:
        partitions = parse_partitions_json(read_text_file(args.path_to_json_file))
    properties = load_properties(args.admin_config) if args.admin_config else {}
    config = client_config(args.bootstrap_server, properties, warn=warn)
    check_login(config, properties)
    return run(config, election, partitions, timeout_seconds(properties))


def parse_partitions_json(text: str) -> list[TopicPartition]:
    """The partitions of Kafka's election JSON; CommandError if it is malformed."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"the partitions JSON file is not valid JSON: {error}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise CommandError("the partitions JSON file must be an object with a "
                           "'partitions' list")
    result = []
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic or not isinstance(partition, int) \
                or isinstance(partition, bool):
            raise CommandError(f"partition entry {entry!r} needs a 'topic' string and an "
                               "integer 'partition'")
        result.append(TopicPartition(topic, check_int(partition, 32, "partition")))
    keys = [(tp.topic, tp.partition) for tp in result]
    duplicates = sorted({f"{t}-{p}" for t, p in keys if keys.count((t, p)) > 1})
    if duplicates:
        raise CommandError("Replica election data contains duplicate partitions: "
                           + ",".join(duplicates))
    if not result:
        raise CommandError("the partitions JSON file names no partition")
    return result


def _name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def run(config: dict[str, Any], election: ElectionType,
        partitions: Sequence[TopicPartition] | None, timeout_s: float) -> int:
    admin, errors = admin_client(config)
    # confluent-kafka 2.16 refuses request_timeout / operation_timeout here (its C function
    # takes no keywords): the client's own timeouts apply, the wait below bounds the call
    future = admin.elect_leaders(election, None if partitions is None else list(partitions))
    try:
        results: dict[TopicPartition, Any] = result_of(future, timeout_s)
    except TimeoutError:
        admin.poll(0)  # serves the connection errors, which say why nothing came
        raise CommandError("Timed out waiting for the leader election results"
                           f"{errors.describe_last()}") from None
    kind = "PREFERRED" if election == ElectionType.PREFERRED else "UNCLEAN"
    succeeded, noop, failed = [], [], []
    for tp, outcome in sorted(results.items(), key=lambda item: (item[0].topic,
                                                                 item[0].partition)):
        error = _error_of(outcome)
        if error is None:
            succeeded.append(tp)
        elif error.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(tp)
        else:
            failed.append((tp, error))
    if succeeded:
        print(f"Successfully completed leader election ({kind}) for partitions "
              + ", ".join(_name(tp) for tp in succeeded))
    if noop:
        print("Valid replica already elected for partitions "
              + ", ".join(_name(tp) for tp in noop))
    for tp, error in failed:
        print(f"Error completing leader election ({kind}) for partition: {_name(tp)}: "
              f"{error.name()}: {error.str()}")
    if failed:
        raise CommandError(f"{len(failed)} replica(s) could not be elected")
    return 0


def _error_of(outcome: Any) -> KafkaError | None:
    if outcome is None:
        return None
    if isinstance(outcome, KafkaException):
        inner = outcome.args[0] if outcome.args else None
        if isinstance(inner, KafkaError):
            return inner if inner.code() != KafkaError.NO_ERROR else None
        return KafkaError(KafkaError._FAIL, kafka_error_message(outcome))
    if isinstance(outcome, KafkaError):
        return outcome if outcome.code() != KafkaError.NO_ERROR else None
    return None
