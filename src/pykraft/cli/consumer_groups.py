"""`pykraft consumer-groups`: list, describe, reset offsets of and delete consumer groups,
like kafka-consumer-groups.sh.

    --list [--state [STATE,...]]
    --describe (--group G | --all-groups) [--offsets | --members | --state]
    --reset-offsets --group G (--topic T[:P,...] | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --shift-by N | --to-datetime T)
        [--dry-run | --execute]
    --delete --group G [--group G2 ...]

The tool speaks the Kafka protocol through confluent-kafka's AdminClient. Describe shows,
per partition, the committed offset, the log end offset and the lag between them, and the
member that owns the partition. Offsets are reset only while the group has no active
members, as Kafka requires; new offsets are clamped to the partition's [log start, log end].

A group that does not exist is described with Kafka's "Error: Consumer group 'G' does not
exist." (on stderr, and exit code 1; Kafka's tool prints it on stdout and exits 0); an
empty one with "Consumer group 'G' has no active members." on stderr, then its committed
offsets if it has any. A failed admin call ends as Kafka's "Error: Executing consumer group
command failed due to ..." and exit code 1.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    OffsetSpec,
)

from pykraft.cli.args import INT64, ArgumentParser, CommandError, UsageError, load_properties
from pykraft.cli.client_config import (
    ErrorReporter,
    admin_client,
    client_config,
    kafka_error_message,
    result_of,
    timeout_seconds,
    warn,
)

__all__ = ["OffsetRow", "ResetSpec", "add_parser", "format_table", "parse_topic_partitions",
           "reset_target", "run"]

ACTIONS: Final = ("list", "describe", "reset-offsets", "delete")
RESET_SPECS: Final = ("to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime")
INACTIVE_STATES: Final = frozenset({"EMPTY", "DEAD", "UNKNOWN"})
# the states a consumer group (classic or KIP-848) can be in, as Kafka's --state accepts them
GROUP_STATES: Final = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
                       "Assigning", "Reconciling")
REBALANCING_STATES: Final = frozenset(
    {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
_EARLIEST: Final[Any] = OffsetSpec.earliest  # confluent-kafka leaves these untyped
_LATEST: Final[Any] = OffsetSpec.latest


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consumer-groups", help="list, describe, reset or delete consumer groups "
        "(kafka-consumer-groups.sh)")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED")
    parser.add_argument("--command-config", metavar="FILE", help="admin client properties")
    for action in ACTIONS:
        parser.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--group", action="append", metavar="GROUP")
    parser.add_argument("--all-groups", action="store_true")
    parser.add_argument("--members", action="store_true")
    parser.add_argument("--offsets", action="store_true")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATES")
    parser.add_argument("--topic", action="append", metavar="TOPIC[:P,...]")
    parser.add_argument("--all-topics", action="store_true")
    parser.add_argument("--to-earliest", action="store_true")
    parser.add_argument("--to-latest", action="store_true")
    parser.add_argument("--to-offset", type=INT64, metavar="N")
    parser.add_argument("--shift-by", type=INT64, metavar="N")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--execute", action="store_true")
    parser.set_defaults(handler=_run_args)


@dataclass(frozen=True, slots=True)
class ResetSpec:
    kind: str  # one of RESET_SPECS
    value: int = 0  # the offset, the shift, or the timestamp in ms


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    consumer_id: str
    host: str
    client_id: str

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(0, self.log_end_offset - self.current_offset)


def _run_args(args: argparse.Namespace) -> int:
    connections: list[tuple[AdminClient, ErrorReporter]] = []
    try:
        return _run_action(args, connections)
    except KafkaException as exception:
        # librdkafka's own error ("Local: Timed out") does not say why; the connection errors
        # it reported meanwhile (served by poll) do: "Connection refused"
        last = ""
        for admin, errors in connections:
            admin.poll(0)
            last = errors.describe_last()
        raise CommandError("Executing consumer group command failed due to "
                           f"{kafka_error_message(exception)}{last}") from None


def _run_action(args: argparse.Namespace,
                connections: list[tuple[AdminClient, ErrorReporter]]) -> int:
    actions = [a for a in ACTIONS if getattr(args, a.replace("-", "_"))]
    if len(actions) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, "
                         "--delete, --reset-offsets")
    action = actions[0]
    properties = load_properties(args.command_config) if args.command_config else {}
    config = client_config(args.bootstrap_server, properties, warn=warn)
    groups = list(args.group or ())
    if action in ("describe", "reset-offsets", "delete") and not groups and not (
            action == "describe" and args.all_groups):
        raise UsageError(f"Option [{action}] takes one of these options: [all-groups], [group]"
                         if action == "describe" else f"Option [{action}] needs --group")
    admin, errors = admin_client(config)
    connections.append((admin, errors))
    timeout_s = timeout_seconds(properties)
    if action == "list":
        return run_list(admin, args.state, timeout_s)
    if action == "describe":
        if args.all_groups:
            groups = sorted(g.group_id for g in _list_groups(admin, timeout_s))
        view = "members" if args.members else "state" if args.state is not None else "offsets"
        return run_describe(admin, groups, view, timeout_s)
    if action == "delete":
        return run_delete(admin, groups, timeout_s)
    if len(groups) != 1:
        raise UsageError("--reset-offsets takes exactly one --group")
    spec = reset_spec(args)
    if not args.topic and not args.all_topics:
        raise UsageError("--reset-offsets needs --topic or --all-topics")
    if not args.dry_run and not args.execute:
        warn("WARN: No action will be performed as the --execute option is missing. "
             "In a future major release, the default behavior of this command will be to "
             "prompt the user before executing the reset rather than doing a dry run.")
    topics = parse_topic_partitions(args.topic or ())
    return run_reset(admin, groups[0], topics, spec, args.execute, timeout_s)


def run(argv: Sequence[str]) -> int:
    from pykraft.cli.main import build_parser

    return int(_run_args(build_parser().parse_args(["consumer-groups", *argv])))


def reset_spec(args: argparse.Namespace) -> ResetSpec:
    given = [s for s in RESET_SPECS if getattr(args, s.replace("-", "_")) not in (None, False)]
    if len(given) != 1:
        raise UsageError("Option [reset-offsets] takes exactly one of these options: "
                         + ", ".join(f"[{s}]" for s in RESET_SPECS))
    kind = given[0]
    if kind == "to-offset":
        return ResetSpec(kind, args.to_offset)
    if kind == "shift-by":
        return ResetSpec(kind, args.shift_by)
    if kind == "to-datetime":
        return ResetSpec(kind, parse_datetime_ms(args.to_datetime))
    return ResetSpec(kind)


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime format, e.g. 2024-01-31T12:00:00.000 (UTC unless an offset
    such as +02:00 or Z is given)."""
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"Error parsing timestamp '{text}': use YYYY-MM-DDTHH:mm:SS.sss") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def parse_topic_partitions(values: Sequence[str]) -> dict[str, list[int] | None]:
    """`t` -> every partition of t; `t:0,2` -> partitions 0 and 2."""
    topics: dict[str, list[int] | None] = {}
    for value in values:
        name, _, partitions = value.partition(":")
        if not name:
            raise UsageError(f"invalid --topic '{value}'")
        if not partitions:
            topics[name] = None
            continue
        try:
            topics[name] = [int(p) for p in partitions.split(",")]
        except ValueError:
            raise UsageError(f"invalid partitions in --topic '{value}'") from None
    return topics


def reset_target(spec: ResetSpec, current: int | None, earliest: int, latest: int,
                 by_time: int | None) -> int:
    """The offset a partition is reset to, clamped to [earliest, latest] as Kafka does."""
    if spec.kind == "to-earliest":
        wanted = earliest
    elif spec.kind == "to-latest":
        wanted = latest
    elif spec.kind == "to-offset":
        wanted = spec.value
    elif spec.kind == "shift-by":
        if current is None:
            raise CommandError("Cannot shift offset for a partition with no committed offset")
        wanted = current + spec.value
    else:
        wanted = latest if by_time is None or by_time < 0 else by_time
    return min(max(wanted, earliest), latest)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    return [" ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in [list(header), *cells]]


# -- actions -------------------------------------------------------------------------------


def _list_groups(admin: AdminClient, timeout_s: float) -> list[Any]:
    """Every group; confluent-kafka reports an unreachable cluster (or a broker's refusal)
    in the result's `errors` rather than raising, so they are raised here."""
    result = result_of(admin.list_consumer_groups(request_timeout=timeout_s), timeout_s)
    if result.errors:
        raise KafkaException(result.errors[0])
    return list(result.valid)


def run_list(admin: AdminClient, states: str | None, timeout_s: float) -> int:
    listed = sorted(_list_groups(admin, timeout_s), key=lambda g: g.group_id)
    if states is None:
        for group in listed:
            print(group.group_id)
        return 0
    wanted = {s.strip().upper() for s in states.split(",") if s.strip()}
    valid = {state.upper() for state in GROUP_STATES}
    if not wanted <= valid:
        raise UsageError(f"Invalid state list '{states}'. Valid states are: "
                         + ", ".join(GROUP_STATES))
    rows = [(g.group_id, _state_name(g.state)) for g in listed
            if not wanted or _state_name(g.state).upper() in wanted]
    for line in format_table(("GROUP", "STATE"), rows):
        print(line)
    return 0


def _state_name(state: Any) -> str:
    names = {"PREPARING_REBALANCING": "PreparingRebalance",
             "COMPLETING_REBALANCING": "CompletingRebalance"}
    raw = getattr(state, "name", str(state))
    return names.get(raw, raw.title().replace("_", ""))


def _describe(admin: AdminClient, groups: Sequence[str],
              timeout_s: float) -> dict[str, Any | None]:
    """Each group's description; None for a group that does not exist (Kafka's brokers
    answer it as state Dead, or since KIP-848 as GROUP_ID_NOT_FOUND)."""
    if not groups:
        return {}  # confluent-kafka refuses an empty list
    futures = admin.describe_consumer_groups(list(groups), request_timeout=timeout_s)
    described: dict[str, Any | None] = {}
    for group, future in futures.items():
        try:
            description = result_of(future, timeout_s)
        except KafkaException as exception:
            if exception.args and getattr(exception.args[0], "code", lambda: None)() == (
                    KafkaError.GROUP_ID_NOT_FOUND):
                described[group] = None
                continue
            raise CommandError(f"cannot describe group '{group}': "
                               f"{kafka_error_message(exception)}") from None
        described[group] = None if _state_name(description.state) == "Dead" else description
    return described


def _print_state(group: str, state: str) -> None:
    """Kafka's notes on a group's state, on stderr before its table."""
    if state == "Empty":
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING_STATES:
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)


def run_describe(admin: AdminClient, groups: Sequence[str], view: str, timeout_s: float) -> int:
    """Describe each group; exit code 1 if any does not exist (all are still described)."""
    described = _describe(admin, groups, timeout_s)
    rows: list[tuple[Any, ...]]
    header: tuple[str, ...]
    missing = 0
    for group in groups:
        description = described[group]
        if description is None:
            print(f"\nError: Consumer group '{group}' does not exist.", file=sys.stderr)
            missing += 1
            continue
        state = _state_name(description.state)
        _print_state(group, state)
        if view == "state":
            coordinator = description.coordinator
            rows = [(group, f"{coordinator.host}:{coordinator.port} ({coordinator.id})",
                     description.partition_assignor or "", state, len(description.members))]
            header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
        elif view == "members":
            rows = [(group, m.member_id, m.host, m.client_id,
                     len(m.assignment.topic_partitions)) for m in description.members]
            header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
        else:
            rows = [(r.group, r.topic, r.partition, r.current_offset, r.log_end_offset, r.lag,
                     r.consumer_id or None, r.host or None, r.client_id or None)
                    for r in offset_rows(admin, group, description, timeout_s)]
            header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID")
        if not rows:  # as Kafka: nothing to show beyond the note above
            continue
        print()
        for line in format_table(header, rows):
            print(line)
    return 1 if missing else 0


def committed_offsets(admin: AdminClient, group: str, timeout_s: float) -> dict[
        tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group]
    found = result_of(result, timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions
            if tp.offset >= 0}


def log_offsets(admin: AdminClient, partitions: Sequence[tuple[str, int]], spec: OffsetSpec,
                timeout_s: float, *, strict: bool = True) -> dict[tuple[str, int], int]:
    """Each partition's offset for `spec`. A partition that cannot answer (its topic was
    deleted since the group committed to it) is an error when `strict`, else left out: a
    describe shows "-" for it, as Kafka's tool does."""
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in partitions},
                                 request_timeout=timeout_s)
    offsets = {}
    for tp, future in futures.items():
        try:
            offsets[(tp.topic, tp.partition)] = result_of(future, timeout_s).offset
        except KafkaException as exception:
            if strict:
                raise CommandError(f"cannot read the offsets of {tp.topic}-{tp.partition}: "
                                   f"{kafka_error_message(exception)}") from None
    return offsets


def offset_rows(admin: AdminClient, group: str, description: Any,
                timeout_s: float) -> list[OffsetRow]:
    committed = committed_offsets(admin, group, timeout_s)
    owners: dict[tuple[str, int], Any] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = member
    partitions = sorted(set(committed) | set(owners))
    ends = log_offsets(admin, partitions, _LATEST(), timeout_s, strict=False)
    rows = []
    for topic, partition in partitions:
        owner = owners.get((topic, partition))
        rows.append(OffsetRow(group, topic, partition, committed.get((topic, partition)),
                              ends.get((topic, partition)),
                              owner.member_id if owner else "", owner.host if owner else "",
                              owner.client_id if owner else ""))
    return rows


def run_reset(admin: AdminClient, group: str, topics: Mapping[str, list[int] | None],
              spec: ResetSpec, execute: bool, timeout_s: float) -> int:
    description = _describe(admin, [group], timeout_s)[group]
    state = "Dead" if description is None else _state_name(description.state)
    if state.upper() not in INACTIVE_STATES:
        raise CommandError(f"Assignments can only be reset if the group '{group}' is "
                           f"inactive, but the current state is {state}.")
    committed = committed_offsets(admin, group, timeout_s)
    partitions = _reset_partitions(admin, topics, committed, timeout_s)
    earliest = log_offsets(admin, partitions, _EARLIEST(), timeout_s)
    latest = log_offsets(admin, partitions, _LATEST(), timeout_s)
    by_time = (log_offsets(admin, partitions, OffsetSpec.for_timestamp(spec.value), timeout_s)
               if spec.kind == "to-datetime" else {})
    targets = {tp: reset_target(spec, committed.get(tp), earliest[tp], latest[tp],
                                by_time.get(tp)) for tp in partitions}
    for line in format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                             [(group, t, p, o) for (t, p), o in sorted(targets.items())]):
        print(line)
    if execute and targets:  # a group without offsets on --all-topics: nothing to reset
        request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o
                                                        in sorted(targets.items())])]
        future = admin.alter_consumer_group_offsets(request, request_timeout=timeout_s)[group]
        try:
            result_of(future, timeout_s)
        except KafkaException as exception:
            raise CommandError(f"resetting the offsets of group '{group}' failed: "
                               f"{kafka_error_message(exception)}") from None
    return 0


def _reset_partitions(admin: AdminClient, topics: Mapping[str, list[int] | None],
                      committed: Mapping[tuple[str, int], int],
                      timeout_s: float) -> list[tuple[str, int]]:
    if not topics:  # --all-topics: those the group has offsets for
        return sorted(committed)
    metadata = admin.list_topics(timeout=timeout_s)
    partitions = []
    for topic, wanted in topics.items():
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise CommandError(f"Topic '{topic}' does not exist")
        known = sorted(found.partitions)
        for partition in wanted if wanted is not None else known:
            if partition not in known:
                raise CommandError(f"Partition {topic}-{partition} does not exist")
            partitions.append((topic, partition))
    return partitions


def run_delete(admin: AdminClient, groups: Sequence[str], timeout_s: float) -> int:
    futures = admin.delete_consumer_groups(list(groups), request_timeout=timeout_s)
    failed = {}
    for group, future in futures.items():
        try:
            result_of(future, timeout_s)
        except KafkaException as exception:
            failed[group] = kafka_error_message(exception)
    deleted = [g for g in groups if g not in failed]
    if deleted:
        listed = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({listed}) was successful.")
    if failed:
        print("Deletion of some consumer groups failed:")
        for group, message in failed.items():
            print(f"* Group '{group}' could not be deleted due to: {message}")
        return 1
    return 0
