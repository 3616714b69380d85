"""`pykraft consumer-groups`: list, describe, reset offsets of and delete consumer groups,
like kafka-consumer-groups.sh.

    --list [--state [STATE,...]]
    --describe (--group G [--group G2 ...] | --all-groups) [--offsets | --members | --state]
        [--verbose]
    --reset-offsets (--group G [--group G2 ...] | --all-groups) (--topic T[:P,...]
        | --all-topics) (--to-earliest | --to-latest | --to-current | --to-offset N
        | --shift-by N | --to-datetime T | --by-duration PnDTnHnMnS) [--dry-run | --execute]
        [--export]
    --reset-offsets (--group G ... | --all-groups) --from-file CSV [--dry-run | --execute]
    --delete (--group G [--group G2 ...] | --all-groups)
    --delete-offsets --group G --topic T[:P,...] [--topic ...]

The tool speaks the Kafka protocol through confluent-kafka's AdminClient. Describe shows,
per partition, the committed offset, the log end offset and the lag between them, and the
member that owns the partition. Offsets are reset only while the group has no active
members, as Kafka requires; new offsets are clamped to the partition's [log start, log end].
--export prints the plan as Kafka's CSV (`topic,partition,offset`, or
`group,topic,partition,offset` when several groups are reset), which --from-file reads back.
Several groups (or --all-groups) are reset as Kafka's tool resets them: one table of every
group's new offsets; a group with active members is reported ("Error: Assignments can only
be reset ...") and skipped, and the command then exits 1. --delete-offsets sends OffsetDelete
(api 47, which confluent-kafka does not offer) to the group's coordinator and prints Kafka's
TOPIC / PARTITION / STATUS table.

A group that does not exist is described with Kafka's "Error: Consumer group 'G' does not
exist." (on stderr, and exit code 1; Kafka's tool prints it on stdout and exits 0); an
empty one with "Consumer group 'G' has no active members." on stderr, then its committed
offsets if it has any. A failed admin call ends as Kafka's "Error: Executing consumer group
command failed due to ..." and exit code 1.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    OffsetSpec,
)
from kio.schema.errors import ErrorCode

from pykraft.cli.args import (
    INT64,
    ArgumentParser,
    CommandError,
    UsageError,
    check_int,
    load_properties,
    read_text_file,
)
from pykraft.cli.client_config import (
    ErrorReporter,
    admin_client,
    client_config,
    kafka_error_message,
    result_of,
    timeout_seconds,
    warn,
)
from pykraft.cli.protocol_client import (
    ProtocolClient,
    check_login,
    error_message,
    error_name,
    find_coordinator,
    topic_partition_counts,
)

__all__ = ["OffsetRow", "ResetSpec", "add_parser", "format_table", "parse_topic_partitions",
           "reset_target", "run"]

ACTION_HELP: Final = {
    "list": "list all consumer groups",
    "describe": "describe consumer groups and their offset lag",
    "reset-offsets": "reset the offsets of inactive consumer groups (a dry run unless "
                     "--execute)",
    "delete": "delete consumer groups and their committed offsets",
    "delete-offsets": "delete some committed offsets of a consumer group",
}
ACTIONS: Final = tuple(ACTION_HELP)
# in Kafka's order, as its messages list them
RESET_SPECS: Final = ("to-datetime", "by-duration", "to-earliest", "to-latest", "shift-by",
                      "from-file", "to-current", "to-offset")
OFFSET_DELETE: Final = 47
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
        "(kafka-consumer-groups.sh)",
        description="This tool helps to list all consumer groups, describe a consumer group, "
        "delete consumer group info, or reset consumer group offsets.")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the server(s) to connect to")
    parser.add_argument("--command-config", metavar="FILE",
                        help="a properties file of admin client configs (security settings "
                             "included), used for every connection")
    for action, text in ACTION_HELP.items():
        parser.add_argument(f"--{action}", action="store_true", help=text)
    parser.add_argument("--group", action="append", metavar="GROUP",
                        help="the consumer group to act on (repeat --group for --describe, "
                        "--delete and --reset-offsets; one for --delete-offsets)")
    parser.add_argument("--all-groups", action="store_true",
                        help="apply to all consumer groups (--describe, --delete, "
                        "--reset-offsets)")
    parser.add_argument("--members", action="store_true",
                        help="with --describe: the group's members")
    parser.add_argument("--offsets", action="store_true",
                        help="with --describe: each partition's committed offset and lag "
                        "(the default)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --describe: more columns (the committed offsets' leader "
                        "epochs; members' assignments; the group's epochs)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                        help="with --describe: the group's state; with --list: each group's "
                        "state, or only the groups in STATES (comma-separated)")
    parser.add_argument("--topic", action="append", metavar="TOPIC[:P,...]",
                        help="a topic (or some of its partitions) to reset or delete offsets of")
    parser.add_argument("--all-topics", action="store_true",
                        help="with --reset-offsets: every topic the group has offsets for")
    parser.add_argument("--to-earliest", action="store_true",
                        help="reset offsets to the earliest offset")
    parser.add_argument("--to-latest", action="store_true",
                        help="reset offsets to the latest offset")
    parser.add_argument("--to-current", action="store_true",
                        help="reset offsets to the committed offset (the latest where none)")
    parser.add_argument("--to-offset", type=INT64, metavar="N",
                        help="reset offsets to offset N")
    parser.add_argument("--shift-by", type=INT64, metavar="N",
                        help="reset offsets to the committed offset plus N (N may be negative)")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="reset offsets to the first record at or after this time")
    parser.add_argument("--by-duration", metavar="PnDTnHnMnS",
                        help="reset offsets to the first record at or after now minus this "
                        "ISO-8601 duration")
    parser.add_argument("--from-file", metavar="FILE",
                        help="reset offsets to those of a CSV file (topic,partition,offset "
                        "lines, or group,topic,partition,offset)")
    parser.add_argument("--dry-run", action="store_true",
                        help="only show the new offsets (the default)")
    parser.add_argument("--execute", action="store_true", help="reset the offsets")
    parser.add_argument("--export", action="store_true",
                        help="print the reset plan as CSV, for a later --from-file")
    parser.set_defaults(handler=_run_args)


@dataclass(frozen=True, slots=True)
class ResetSpec:
    kind: str  # one of RESET_SPECS
    value: int = 0  # the offset, the shift, or the timestamp in ms
    # --from-file: group -> (topic, partition) -> offset
    plan: Mapping[str, Mapping[tuple[str, int], int]] | None = None


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
    leader_epoch: int | None = None  # of the committed offset, when the client gave one

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
                         "--delete, --reset-offsets, --delete-offsets")
    action = actions[0]
    properties = load_properties(args.command_config) if args.command_config else {}
    config = client_config(args.bootstrap_server, properties, warn=warn)
    groups = list(args.group or ())
    if action in ("describe", "reset-offsets", "delete") and not groups and not args.all_groups:
        raise UsageError(f"Option [{action}] takes one of these options: [all-groups], [group]")
    if groups and args.all_groups:
        raise UsageError("Option \"[group]\" can't be used with option \"[all-groups]\"")
    if groups and action == "list":
        raise UsageError("Option \"[group]\" can't be used with option \"[list]\"")
    if args.topic and action in ("list", "describe"):
        raise UsageError(f"Option \"[topic]\" can't be used with option \"[{action}]\"")
    if args.topic and action == "delete":
        raise UsageError("The consumer does not support topic-specific offset deletion from a "
                         "consumer group.")
    if args.all_groups and action not in ("describe", "reset-offsets", "delete"):
        raise UsageError(f"Option \"[all-groups]\" can't be used with option \"[{action}]\"")
    if action == "delete-offsets" and (len(groups) != 1 or not args.topic):
        raise UsageError("Option [delete-offsets] takes the following options: [group], "
                         "[topic] (one group)")
    if args.verbose and action != "describe":
        raise UsageError("Option [verbose] can be used only with [describe]")
    if args.export and action != "reset-offsets":
        raise UsageError("Option [export] can be used only with [reset-offsets]")
    check_login(config, properties)
    admin, errors = admin_client(config)
    connections.append((admin, errors))
    timeout_s = timeout_seconds(properties)
    if action == "list":
        return run_list(admin, args.state, timeout_s)
    if args.all_groups:
        groups = sorted(g.group_id for g in _list_groups(admin, timeout_s))
    if action == "describe":
        view = "members" if args.members else "state" if args.state is not None else "offsets"
        return run_describe(admin, groups, view, timeout_s, verbose=args.verbose)
    if action == "delete":
        return run_delete(admin, groups, timeout_s)
    if action == "delete-offsets":
        return run_delete_offsets(args.bootstrap_server, groups[0], args.topic, properties,
                                  timeout_s)
    if args.dry_run and args.execute:
        raise UsageError("Option [reset-offsets] only accepts one of [execute] and [dry-run]")
    spec = reset_spec(args)
    if not args.topic and not args.all_topics and spec.kind != "from-file":
        raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
    if not args.dry_run and not args.execute:
        warn("WARN: No action will be performed as the --execute option is missing. "
             "In a future major release, the default behavior of this command will be to "
             "prompt the user before executing the reset rather than doing a dry run. You "
             "should add the --dry-run option explicitly if you are scripting this command "
             "and want to keep the current default behavior without prompting.")
    topics = parse_topic_partitions(args.topic or ())
    scoped = bool(args.topic or args.all_topics)
    return run_reset(admin, groups, topics if scoped else None, spec, args.execute,
                     timeout_s, export=args.export)


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
    if kind == "by-duration":  # the same lookup as --to-datetime, from now minus the duration
        now_ms = int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)
        return ResetSpec("to-datetime", now_ms - parse_duration_ms(args.by_duration))
    if kind == "from-file":
        return ResetSpec(kind, plan=parse_reset_plan(
            read_text_file(args.from_file, "reset plan"), args.group or ()))
    return ResetSpec(kind)


_DURATION: Final = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
    r"(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (PnDTnHnMn.nS, signs allowed),
    in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper().endswith("T") or not any(match.groups()[1:]):
        raise UsageError(f"Error parsing duration '{text}': Text cannot be parsed to a "
                         "Duration (use PnDTnHnMnS, e.g. PT1H30M)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    millis = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
              + int(minutes or 0) * 60_000 + int(seconds or 0) * 1000)
    if fraction:
        part = int(fraction.ljust(9, "0")[:3])
        millis += -part if (seconds or "").startswith("-") else part
    return -millis if sign == "-" else millis


def parse_reset_plan(text: str, groups: Sequence[str]) -> dict[str, dict[tuple[str, int], int]]:
    """Kafka's reset-plan CSV: `topic,partition,offset` lines for the one --group given, or
    `group,topic,partition,offset` lines (what --export prints)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    plan: dict[str, dict[tuple[str, int], int]] = {}
    without_group = len(groups) == 1 and bool(lines) and len(lines[0].split(",")) == 3
    for number, line in enumerate(lines, start=1):
        fields = [field.strip() for field in line.split(",")]
        try:
            if without_group and len(fields) == 3:
                group, (topic, partition, offset) = groups[0], fields
            elif not without_group and len(fields) == 4:
                group, topic, partition, offset = fields
            else:
                raise ValueError
            key = (topic, check_int(int(partition), 32, "partition"))
            plan.setdefault(group, {})[key] = check_int(int(offset), 64, "offset")
        except (ValueError, CommandError):
            shape = "topic,partition,offset" if without_group else "group,topic,partition,offset"
            raise CommandError(f"invalid reset plan line {number} '{line}': expected "
                               f"{shape}") from None
    return plan


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
                 by_time: int | None, *, partition: str = "") -> int:
    """The offset a partition is reset to, clamped to [earliest, latest] as Kafka does
    (--to-earliest, --to-latest and the time lookups need no clamping; --to-current takes
    the committed offset as it is, or the log end where there is none)."""
    if spec.kind == "to-earliest":
        wanted = earliest
    elif spec.kind == "to-latest":
        wanted = latest
    elif spec.kind == "to-current":
        return latest if current is None else current
    elif spec.kind == "to-offset":
        wanted = spec.value
    elif spec.kind == "shift-by":
        if current is None:
            raise CommandError(f"Cannot shift offset for partition {partition} since there "
                               "is no current committed offset")
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


def run_describe(admin: AdminClient, groups: Sequence[str], view: str, timeout_s: float, *,
                 verbose: bool = False) -> int:
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
            # the epochs are a KIP-848 group's, which the client library does not report
            rows = [(group, f"{coordinator.host}:{coordinator.port} ({coordinator.id})",
                     description.partition_assignor or "", state,
                     *((None, None) if verbose else ()), len(description.members))]
            header = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                      *(("GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH") if verbose else ()),
                      "#MEMBERS")
        elif view == "members":
            instances = _has_instance_ids(description)  # a column only when some member has
            rows = [(group, m.member_id, *((m.group_instance_id or "",) if instances else ()),
                     m.host, m.client_id, len(m.assignment.topic_partitions),
                     *(_verbose_member(m) if verbose else ()))
                    for m in description.members]
            header = ("GROUP", "CONSUMER-ID", *(("GROUP-INSTANCE-ID",) if instances else ()),
                      "HOST", "CLIENT-ID", "#PARTITIONS",
                      *(("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                         "TARGET-ASSIGNMENT") if verbose else ()))
        else:
            rows = [(r.group, r.topic, r.partition, *((r.leader_epoch,) if verbose else ()),
                     r.current_offset, r.log_end_offset, r.lag,
                     r.consumer_id or None, r.host or None, r.client_id or None)
                    for r in offset_rows(admin, group, description, timeout_s)]
            header = ("GROUP", "TOPIC", "PARTITION", *(("LEADER-EPOCH",) if verbose else ()),
                      "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                      "CLIENT-ID")
        if not rows:  # as Kafka: nothing to show beyond the note above
            continue
        print()
        for line in format_table(header, rows):
            print(line)
    return 1 if missing else 0


def _has_instance_ids(description: Any) -> bool:
    return any(getattr(m, "group_instance_id", None) for m in description.members)


def assignment_text(partitions: Sequence[Any]) -> str:
    """Kafka 4's --verbose assignment cell: `t1:0,1;t2:0`, or "-" for none."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ";".join(sorted(f"{topic}:{','.join(str(p) for p in sorted(found))}"
                           for topic, found in by_topic.items())) or "-"


def _verbose_member(member: Any) -> tuple[Any, ...]:
    """CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH, TARGET-ASSIGNMENT: the epochs and
    the target are a KIP-848 member's ("-" for a classic one); the client library reports
    the target but not the epochs."""
    target = getattr(member, "target_assignment", None)
    return (None, assignment_text(member.assignment.topic_partitions), None,
            assignment_text(target.topic_partitions) if target is not None else None)


def committed_offsets(admin: AdminClient, group: str, timeout_s: float) -> dict[
        tuple[str, int], int]:
    return {tp: offset for tp, (offset, _) in committed_positions(admin, group,
                                                                   timeout_s).items()}


def committed_positions(admin: AdminClient, group: str, timeout_s: float) -> dict[
        tuple[str, int], tuple[int, int | None]]:
    """Each committed partition's (offset, leader epoch or None)."""
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group]
    found = result_of(result, timeout_s)
    positions = {}
    for tp in found.topic_partitions:
        if tp.offset >= 0:
            epoch = getattr(tp, "leader_epoch", None)
            positions[(tp.topic, tp.partition)] = (
                tp.offset, epoch if isinstance(epoch, int) and epoch >= 0 else None)
    return positions


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
    committed = committed_positions(admin, group, timeout_s)
    owners: dict[tuple[str, int], Any] = {}
    for member in description.members:
        for tp in member.assignment.topic_partitions:
            owners[(tp.topic, tp.partition)] = member
    partitions = sorted(set(committed) | set(owners))
    ends = log_offsets(admin, partitions, _LATEST(), timeout_s, strict=False)
    rows = []
    for topic, partition in partitions:
        owner = owners.get((topic, partition))
        offset, epoch = committed.get((topic, partition), (None, None))
        rows.append(OffsetRow(group, topic, partition, offset, ends.get((topic, partition)),
                              owner.member_id if owner else "", owner.host if owner else "",
                              owner.client_id if owner else "", epoch))
    return rows


def run_reset(admin: AdminClient, groups: Sequence[str],
              topics: Mapping[str, list[int] | None] | None, spec: ResetSpec, execute: bool,
              timeout_s: float, *, export: bool = False) -> int:
    """Plan (and with `execute`, commit) the groups' new offsets, as Kafka's tool: one table
    (or CSV) of every group's plan; a group with active members is reported and skipped.
    `topics` None: the partitions of the --from-file plan; empty: --all-topics."""
    described = _describe(admin, groups, timeout_s) if groups else {}
    plans: dict[str, dict[tuple[str, int], int]] = {}
    failed = False
    for group in groups:
        description = described[group]
        state = "Dead" if description is None else _state_name(description.state)
        if state.upper() not in INACTIVE_STATES:
            message = (f"Assignments can only be reset if the group '{group}' is inactive, "
                       f"but the current state is {state}.")
            if len(groups) == 1:
                raise CommandError(message)
            print(f"\nError: {message}", file=sys.stderr)
            failed = True
            continue
        try:
            plans[group] = _plan_reset(admin, group, topics, spec, timeout_s)
        except CommandError as error:  # e.g. no --from-file plan for it: the next group
            if len(groups) == 1:
                raise
            print(f"\nError: {error}", file=sys.stderr)
            failed = True
    if export:  # Kafka's CSV, which --from-file reads back; the group first if several
        for group, targets in plans.items():
            for (topic, partition), offset in sorted(targets.items()):
                print(f"{group},{topic},{partition},{offset}" if len(groups) > 1
                      else f"{topic},{partition},{offset}")
        print()
    elif plans:
        for line in format_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                                 [(group, t, p, o) for group, targets in plans.items()
                                  for (t, p), o in sorted(targets.items())]):
            print(line)
    for group, targets in plans.items():
        if execute and targets:  # a group without offsets on --all-topics: nothing to reset
            request = [ConsumerGroupTopicPartitions(group, [
                TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())])]
            future = admin.alter_consumer_group_offsets(request, request_timeout=timeout_s)[group]
            try:
                result_of(future, timeout_s)
            except KafkaException as exception:
                raise CommandError(f"resetting the offsets of group '{group}' failed: "
                                   f"{kafka_error_message(exception)}") from None
    return 1 if failed else 0


def _plan_reset(admin: AdminClient, group: str, topics: Mapping[str, list[int] | None] | None,
                spec: ResetSpec, timeout_s: float) -> dict[tuple[str, int], int]:
    """An inactive group's new offsets."""
    committed = committed_offsets(admin, group, timeout_s)
    from_file: Mapping[tuple[str, int], int] = {}
    if spec.kind == "from-file":
        assert spec.plan is not None
        if group not in spec.plan:
            raise CommandError(f"No reset plan for group {group} found")
        from_file = spec.plan[group]
        partitions = sorted(from_file)
        _check_partitions_exist(admin, partitions, timeout_s)
    else:
        partitions = _reset_partitions(admin, topics or {}, committed, timeout_s)
    earliest = log_offsets(admin, partitions, _EARLIEST(), timeout_s)
    latest = log_offsets(admin, partitions, _LATEST(), timeout_s)
    by_time = (log_offsets(admin, partitions, OffsetSpec.for_timestamp(spec.value), timeout_s)
               if spec.kind == "to-datetime" else {})
    targets = {}
    for tp in partitions:
        wanted = spec if spec.kind != "from-file" else ResetSpec("to-offset", from_file[tp])
        targets[tp] = reset_target(wanted, committed.get(tp), earliest[tp], latest[tp],
                                   by_time.get(tp), partition=f"{tp[0]}-{tp[1]}")
    return targets


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


def _check_partitions_exist(admin: AdminClient, partitions: Sequence[tuple[str, int]],
                            timeout_s: float) -> None:
    metadata = admin.list_topics(timeout=timeout_s)
    for topic, partition in partitions:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise CommandError(f"Topic '{topic}' does not exist")
        if partition not in found.partitions:
            raise CommandError(f"Partition {topic}-{partition} does not exist")


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


def run_delete_offsets(bootstrap: str, group: str, topics: Sequence[str],
                       properties: Mapping[str, str], timeout_s: float) -> int:
    """OffsetDelete (api 47) to the group's coordinator, as Kafka's --delete-offsets: a topic
    without partitions means all of its partitions; an unknown one is reported as such."""
    wanted = parse_topic_partitions(topics)
    client_id = properties.get("client.id", "pykraft-consumer-groups")
    results: dict[tuple[str, int], int] = {}
    partitions: list[tuple[str, int]] = []
    with ProtocolClient(bootstrap, timeout_s=timeout_s, client_id=client_id,
                        properties=properties) as client:
        whole = [topic for topic, chosen in wanted.items() if chosen is None]
        counts = topic_partition_counts(client, whole) if whole else {}
        for topic, chosen in wanted.items():
            if chosen is not None:
                partitions += [(topic, p) for p in chosen]
            elif (count := counts.get(topic)) is None:
                results[(topic, -1)] = ErrorCode.unknown_topic_or_partition
            else:
                partitions += [(topic, p) for p in range(count)]
        address = find_coordinator(client, group, key_type=0)
    top_level = ErrorCode.none
    if partitions:
        with ProtocolClient(address, timeout_s=timeout_s, client_id=client_id,
                            properties=properties) as coordinator:
            top_level, answered = _offset_delete(coordinator, group, partitions)
        results.update(answered)
    if top_level == ErrorCode.none:  # as Kafka's admin client: a partition's error fails all
        top_level = next((ErrorCode(code) for code in results.values()
                          if code != ErrorCode.none), ErrorCode.none)
    message = _DELETE_OFFSETS_ERRORS.get(top_level)
    if top_level == ErrorCode.none:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group "
              f"{group}")
    else:
        text = (message or "Encounter some unknown error: {name}").format(
            group=group, name=error_name(top_level))
        print(f"\nError: {text}")
    rows = [(topic, partition if partition >= 0 else "Not Provided",
             "Successful" if code == ErrorCode.none else f"Error: :{error_message(code)}")
            for (topic, partition), code in sorted(results.items())]
    print()
    for line in format_table(("TOPIC", "PARTITION", "STATUS"), rows):
        print(line)
    return 0 if top_level == ErrorCode.none else 1


_PARTITION_LEVEL: Final = "Encounter some partition level error, see the follow-up details:"
_DELETE_OFFSETS_ERRORS: Final = {
    ErrorCode.invalid_group_id: "'{group}' is not valid.",
    ErrorCode.group_id_not_found: "'{group}' does not exist.",
    ErrorCode.group_authorization_failed: "Access to '{group}' is not authorized.",
    ErrorCode.non_empty_group: "Deleting offsets of a consumer group '{group}' is forbidden "
                               "if the group is not empty.",
    ErrorCode.group_subscribed_to_topic: _PARTITION_LEVEL,
    ErrorCode.topic_authorization_failed: _PARTITION_LEVEL,
    ErrorCode.unknown_topic_or_partition: _PARTITION_LEVEL,
}


def _offset_delete(client: ProtocolClient, group: str, partitions: Sequence[tuple[str, int]]
                   ) -> tuple[ErrorCode, dict[tuple[str, int], int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)

    def build(module: Any, version: int) -> Any:
        return module.OffsetDeleteRequest(group_id=group, topics=tuple(
            module.OffsetDeleteRequestTopic(name=topic, partitions=tuple(
                module.OffsetDeleteRequestPartition(partition_index=p) for p in chosen))
            for topic, chosen in by_topic.items()))

    _, answer = client.request(OFFSET_DELETE, "OffsetDelete", (0, 0), build)
    results = {(topic.name, int(p.partition_index)): int(p.error_code)
               for topic in answer.topics for p in topic.partitions}
    return ErrorCode(answer.error_code), results
