"""`pykraft reassign-partitions`: move partition replicas, like kafka-reassign-partitions.sh.

    pykraft reassign-partitions --bootstrap-server H:P --generate
        --topics-to-move-json-file F --broker-list 1,2,3
    pykraft reassign-partitions --bootstrap-server H:P --execute --reassignment-json-file F
    pykraft reassign-partitions --bootstrap-server H:P --verify --reassignment-json-file F
    pykraft reassign-partitions --bootstrap-server H:P --cancel --reassignment-json-file F
    pykraft reassign-partitions --bootstrap-server H:P --list

The files are Kafka's: topics to move as {"topics": [{"topic": "foo"}], "version": 1}, a
reassignment as {"version": 1, "partitions": [{"topic": "foo", "partition": 0,
"replicas": [1, 2], "log_dirs": ["any", "any"]}]} (log_dirs other than "any" are refused:
moving replicas between a broker's log directories is not supported). The requests are
AlterPartitionReassignments and ListPartitionReassignments (KIP-455), which no client
library here sends, over pykraft's protocol client; the output follows Kafka's
ReassignPartitionsCommand. There are no replication throttles, so --throttle and the
throttle-clearing lines of --verify do not exist.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from pykraft.cli.args import (
    ArgumentParser,
    CommandError,
    UsageError,
    check_int,
    load_properties,
    read_text_file,
)
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.protocol_client import ProtocolClient, error_message, error_name

__all__ = ["add_parser", "parse_reassignment_json", "parse_topics_json", "propose", "run"]

METADATA: Final = 3
ALTER_REASSIGNMENTS: Final = 45
LIST_REASSIGNMENTS: Final = 46
Assignment = dict[tuple[str, int], tuple[int, ...]]
_ACTIONS: Final = ("generate", "execute", "verify", "cancel", "list")
_ACTION_HELP: Final = {
    "generate": "propose a reassignment of --topics-to-move-json-file's topics onto "
                "--broker-list (prints the current and the proposed assignment)",
    "execute": "start the reassignment in --reassignment-json-file",
    "verify": "report whether the reassignment in --reassignment-json-file is done",
    "cancel": "cancel the reassignment in --reassignment-json-file",
    "list": "list the partition reassignments in progress",
}


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "reassign-partitions", help="move partition replicas (kafka-reassign-partitions.sh)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host:port[,host:port]")
    parser.add_argument("--command-config", metavar="FILE",
                        help="Property file containing configs to be passed to Admin Client "
                             "(security settings, default.api.timeout.ms)")
    for action in _ACTIONS:
        parser.add_argument(f"--{action}", action="store_true", help=_ACTION_HELP[action])
    parser.add_argument("--topics-to-move-json-file", metavar="FILE",
                        help='with --generate: {"topics": [{"topic": "t"}], "version": 1}')
    parser.add_argument("--broker-list", metavar="1,2,3",
                        help="with --generate: the brokers to place replicas on")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help="with --execute, --verify or --cancel: the partitions and their "
                             "new replicas, in --generate's output format")
    parser.add_argument("--disable-rack-aware", action="store_true",
                        help="accepted for compatibility: generation ignores racks")
    parser.set_defaults(handler=_run_args)


def _run_args(args: argparse.Namespace) -> int:
    chosen = [action for action in _ACTIONS if getattr(args, action)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --generate, --execute, "
                         "--verify, --cancel, or --list")
    if not args.bootstrap_server:
        raise UsageError("Missing required argument \"[bootstrap-server]\"")
    action = chosen[0]
    if action == "generate":
        if not args.topics_to_move_json_file or not args.broker_list:
            raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
    elif action != "list" and not args.reassignment_json_file:
        raise UsageError(f"--{action} needs --reassignment-json-file")
    properties = load_properties(args.command_config) if args.command_config else {}
    return run(action, args.bootstrap_server, timeout_seconds(properties),
               topics_file=args.topics_to_move_json_file, broker_list=args.broker_list,
               reassignment_file=args.reassignment_json_file, properties=properties)


# -- files -----------------------------------------------------------------------------------


def _read(path: str) -> Any:
    text = read_text_file(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"{path} is not valid JSON: {error}") from None


def parse_topics_json(document: Any) -> list[str]:
    topics = document.get("topics") if isinstance(document, dict) else None
    if not isinstance(topics, list):
        raise CommandError("the topics-to-move file must be an object with a 'topics' list")
    names = []
    for entry in topics:
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise CommandError(f"topic entry {entry!r} needs a 'topic' string")
        names.append(name)
    if len(set(names)) != len(names):
        raise CommandError("the topics-to-move file lists a topic twice")
    return names


def parse_reassignment_json(document: Any) -> Assignment:
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise CommandError("the reassignment file must be an object with a 'partitions' list")
    if not entries:
        raise CommandError("Partition reassignment list cannot be empty")
    result: Assignment = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise CommandError(f"partition entry {entry!r} must be an object")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if not isinstance(topic, str) or not isinstance(partition, int) \
                or isinstance(partition, bool) or not isinstance(replicas, list) \
                or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise CommandError(f"partition entry {entry!r} needs 'topic', 'partition' and "
                               "a 'replicas' list of broker ids")
        log_dirs = entry.get("log_dirs")
        if log_dirs is not None and (not isinstance(log_dirs, list)
                                     or any(d != "any" for d in log_dirs)):
            raise CommandError("moving replicas between log directories is not supported "
                               "(log_dirs must be \"any\")")
        if (topic, partition) in result:
            raise CommandError(f"Duplicate partition in the reassignment: {topic}-{partition}")
        if len(set(replicas)) != len(replicas):
            raise CommandError(f"Duplicate replica assignment found for {topic}-{partition}")
        check_int(partition, 32, "partition")
        result[(topic, partition)] = tuple(check_int(r, 32, "broker id") for r in replicas)
    return result


def _json(assignment: Mapping[tuple[str, int], Sequence[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": list(replicas),
         "log_dirs": ["any"] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())]},
        separators=(",", ":"))


def propose(current: Assignment, brokers: Sequence[int], rng: random.Random) -> Assignment:
    """Kafka's rack-unaware placement: replica j of partition p on broker
    (start + p + shift * j) mod n, from a random start, with each topic's replication
    factor."""
    ordered = sorted(brokers)
    count = len(ordered)
    proposal: Assignment = {}
    topics: dict[str, list[int]] = {}
    for topic, partition in current:
        topics.setdefault(topic, []).append(partition)
    for topic, partitions in sorted(topics.items()):
        factor = len(current[(topic, min(partitions))])
        if factor > count:
            raise CommandError(f"Replication factor: {factor} larger than available brokers: "
                               f"{count}.")
        start = rng.randrange(count)
        shift = rng.randrange(count)
        for partition in sorted(partitions):
            if partition > 0 and partition % count == 0:
                shift += 1
            first = (start + partition) % count
            replicas = [ordered[first]]
            for j in range(factor - 1):
                replicas.append(ordered[(first + 1 + (shift + j) % (count - 1)) % count])
            proposal[(topic, partition)] = tuple(replicas)
    return proposal


# -- the cluster ------------------------------------------------------------------------------


def _timeout(timeout_s: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=timeout_s)


def _current(client: ProtocolClient, topics: Sequence[str] | None) -> tuple[Assignment,
                                                                             list[int]]:
    """The replicas of every partition of `topics` (all when None), and the brokers."""
    def build(module: Any, version: int) -> Any:
        return module.MetadataRequest(
            topics=None if topics is None else tuple(
                module.MetadataRequestTopic(topic_id=None, name=name) for name in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    _, answer = client.request(METADATA, "Metadata", (12, 12), build)
    assignment: Assignment = {}
    for topic in answer.topics:
        if topic.error_code != ErrorCode.none:
            raise CommandError(f"Topic {topic.name}: {error_message(topic.error_code)}")
        for partition in topic.partitions:
            assignment[(str(topic.name), int(partition.partition_index))] = tuple(
                int(r) for r in partition.replica_nodes)
    return assignment, sorted(int(b.node_id) for b in answer.brokers)


def _alter(client: ProtocolClient, wanted: Mapping[tuple[str, int], Sequence[int] | None],
           timeout_s: float) -> dict[tuple[str, int], str]:
    """Send the reassignments (None cancels); return the failed partitions' messages."""
    topics: dict[str, list[tuple[int, Sequence[int] | None]]] = {}
    for (topic, partition), replicas in sorted(wanted.items()):
        topics.setdefault(topic, []).append((partition, replicas))

    def build(module: Any, version: int) -> Any:
        return module.AlterPartitionReassignmentsRequest(
            timeout=_timeout(timeout_s), allow_replication_factor_change=True,
            topics=tuple(module.ReassignableTopic(name=name, partitions=tuple(
                module.ReassignablePartition(
                    partition_index=p, replicas=None if r is None else tuple(r))
                for p, r in entries))
                for name, entries in topics.items()))

    _, answer = client.request(ALTER_REASSIGNMENTS, "AlterPartitionReassignments", (0, 1),
                               build)
    if answer.error_code != ErrorCode.none:
        raise CommandError(f"{error_name(answer.error_code)}: {answer.error_message or ''}")
    return {(str(t.name), int(p.partition_index)):
            f"{error_name(p.error_code)}: {p.error_message or ''}".rstrip(": ")
            for t in answer.responses for p in t.partitions if p.error_code != ErrorCode.none}


def _ongoing(client: ProtocolClient, partitions: Sequence[tuple[str, int]] | None,
             timeout_s: float) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
    """(topic, partition) -> (replicas, adding, removing) of the reassignments going on."""
    def build(module: Any, version: int) -> Any:
        wanted: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            wanted.setdefault(topic, []).append(partition)
        return module.ListPartitionReassignmentsRequest(
            timeout=_timeout(timeout_s),
            topics=None if partitions is None else tuple(
                module.ListPartitionReassignmentsTopics(name=name,
                                                        partition_indexes=tuple(ids))
                for name, ids in wanted.items()))

    _, answer = client.request(LIST_REASSIGNMENTS, "ListPartitionReassignments", (0, 0), build)
    if answer.error_code != ErrorCode.none:
        raise CommandError(f"{error_name(answer.error_code)}: {answer.error_message or ''}")
    return {(str(t.name), int(p.partition_index)):
            (tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in answer.topics for p in t.partitions}


# -- actions -----------------------------------------------------------------------------------


def _names(keys: Sequence[tuple[str, int]] | Any) -> str:
    return ",".join(f"{topic}-{partition}" for topic, partition in sorted(keys))


def run(action: str, bootstrap: str, timeout_s: float, *, topics_file: str | None = None,
        broker_list: str | None = None, reassignment_file: str | None = None,
        rng: random.Random | None = None, properties: Mapping[str, str] | None = None) -> int:
    # the files are read before connecting: a bad file is the error, whatever the cluster
    topics = parse_topics_json(_read(topics_file)) if action == "generate" and topics_file \
        else []
    wanted = parse_reassignment_json(_read(reassignment_file)) \
        if action not in ("generate", "list") and reassignment_file else {}
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id="pykraft-reassign-partitions",
                        properties=properties) as client:
        if action == "generate":
            assert broker_list is not None
            return _generate(client, topics, broker_list, rng or random.Random())
        if action == "list":
            return _list(client, timeout_s)
        if action == "execute":
            return _execute(client, wanted, timeout_s)
        if action == "verify":
            return _verify(client, wanted, timeout_s)
        return _cancel(client, wanted, timeout_s)


def _generate(client: ProtocolClient, topics: list[str], broker_list: str,
              rng: random.Random) -> int:
    try:
        brokers = [check_int(int(b), 32, "broker id") for b in broker_list.split(",")
                   if b.strip()]
    except ValueError:
        raise UsageError(f"--broker-list must be broker ids separated by commas, got "
                         f"{broker_list!r}") from None
    if not brokers or len(set(brokers)) != len(brokers):
        raise UsageError("--broker-list must name each broker once")
    current, live = _current(client, topics)
    unknown = sorted(set(brokers) - set(live))
    if unknown:
        raise CommandError(f"The following brokers are not present: {unknown}")
    print("Current partition replica assignment")
    print(_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(_json(propose(current, brokers, rng)))
    return 0


def _execute(client: ProtocolClient, wanted: Assignment, timeout_s: float) -> int:
    current, _ = _current(client, sorted({topic for topic, _ in wanted}))
    missing = sorted(set(wanted) - set(current))
    if missing:
        raise CommandError(f"Topic or partition not found: {_names(missing)}")
    print("Current partition replica assignment")
    print()
    print(_json({key: current[key] for key in wanted}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    failed = _alter(client, dict(wanted), timeout_s)
    started = [key for key in wanted if key not in failed]
    if started:
        print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} "
              f"for {_names(started)}")
    if failed:
        print("Error reassigning partition(s):")
        for key, message in sorted(failed.items()):
            print(f"{key[0]}-{key[1]}: {message}")
        raise CommandError(f"{len(failed)} partition reassignment(s) could not be started")
    return 0


def _verify(client: ProtocolClient, wanted: Assignment, timeout_s: float) -> int:
    ongoing = _ongoing(client, sorted(wanted), timeout_s)
    current, _ = _current(client, sorted({topic for topic, _ in wanted}))
    print("Status of partition reassignment:")
    for key in sorted(wanted):
        name = f"{key[0]}-{key[1]}"
        if key in ongoing:
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(key) == wanted[key]:
            print(f"Reassignment of partition {name} is completed.")
        else:
            replicas = ",".join(str(r) for r in current.get(key, ()))
            target = ",".join(str(r) for r in wanted[key])
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{replicas} rather than {target}.")
    return 0


def _cancel(client: ProtocolClient, wanted: Assignment, timeout_s: float) -> int:
    failed = _alter(client, dict.fromkeys(wanted), timeout_s)
    cancelled = [key for key in wanted if key not in failed]
    if cancelled:
        print(f"Successfully cancelled partition reassignment"
              f"{'s' if len(cancelled) > 1 else ''} for: {_names(cancelled)}")
    if failed:
        print("Error cancelling partition reassignment(s):")
        for key, message in sorted(failed.items()):
            print(f"{key[0]}-{key[1]}: {message}")
        raise CommandError(f"{len(failed)} partition reassignment(s) could not be cancelled")
    return 0


def _list(client: ProtocolClient, timeout_s: float) -> int:
    ongoing = _ongoing(client, None, timeout_s)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        print(f"{topic}-{partition}: replicas: {','.join(map(str, replicas))}. "
              f"adding: {','.join(map(str, adding))}. "
              f"removing: {','.join(map(str, removing))}.")
    return 0
