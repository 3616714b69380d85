"""`pykraft acls`: add, remove and list ACL bindings, like kafka-acls.sh (Kafka's AclCommand).

    pykraft acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read \
        --topic orders
    pykraft acls --bootstrap-server H:P --add --allow-principal User:bob --producer \
        --topic orders --idempotent
    pykraft acls --bootstrap-server H:P --list [--topic orders] [--principal User:alice]
    pykraft acls --bootstrap-server H:P --remove --topic orders [--force]

The options, their checks and messages, and the output lines are AclCommand's:
"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders,
patternType=LITERAL)`:" then one tab-indented `(principal=..., host=..., operation=...,
permissionType=...)` line per binding; a binding that exists already is reported as "Acl
... already exists." and not sent again. --remove asks for a `y` on standard input for each
resource filter unless --force. Operations are named as Kafka names them (Read,
IdempotentWrite, DescribeConfigs, ...; any case, with or without the underscores).

Kafka's tool prints its error and a stack trace on standard output; this one prints the same
first line ("Error while executing ACL command: ...") on standard error, with no stack trace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pykraft.cli.args import ArgumentParser, CommandError, UsageError, load_properties
from pykraft.cli.client_config import timeout_seconds
from pykraft.cli.protocol_client import ProtocolClient, error_message
from pykraft.errors import ErrorCode
from pykraft.protocol.acls import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from pykraft.protocol.api import ApiKey

__all__ = ["Entry", "Pattern", "add_parser", "operation_of", "plan"]

Op = AclOperation
# Kafka's AclEntry.supportedOperations, and the operations --operation may name
SUPPORTED: Final[dict[ResourceType, tuple[AclOperation, ...]]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}
OPERATION_NAMES: Final = ("Read", "Write", "Create", "Delete", "Alter", "Describe",
                          "ClusterAction", "AlterConfigs", "DescribeConfigs",
                          "IdempotentWrite", "CreateTokens", "DescribeTokens", "All")
PATTERN_CHOICES: Final = ("any", "match", "literal", "prefixed")
NO_RESOURCE: Final = ("You must provide at least one resource: --topic <topic> or --cluster "
                      "or --group <group> or --delegation-token <Delegation Token ID>")


@dataclass(frozen=True, slots=True, order=True)
class Pattern:
    """A resource pattern, or a pattern filter (name None: any name)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def __str__(self) -> str:
        name = "<any>" if self.name is None else self.name
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True, order=True)
class Entry:
    """An access control entry: who, from where, what, allowed or denied."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


def add_parser(commands: argparse._SubParsersAction[ArgumentParser]) -> None:
    parser = commands.add_parser(
        "acls", help="add, remove or list ACLs (kafka-acls.sh)",
        description="This tool helps to manage acls on kafka (kafka-acls.sh).")
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help="REQUIRED: the broker(s) to connect to, host1:port1,host2:port2")
    parser.add_argument("--command-config", metavar="FILE",
                        help="admin client properties file (security settings included)")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true",
                         help="list ACLs (of the resources named, or all)")
    resources = parser.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                           help="topic the ACLs apply to; '*' means all topics (repeatable)")
    resources.add_argument("--group", action="append", default=[], metavar="GROUP",
                           help="consumer group the ACLs apply to; '*' means all groups "
                                "(repeatable)")
    resources.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                           help="transactional id the ACLs apply to; '*' means all "
                                "(repeatable)")
    resources.add_argument("--cluster", action="store_true", help="the cluster's ACLs")
    resources.add_argument(
        "--resource-pattern-type", default="literal", type=str.lower, choices=PATTERN_CHOICES,
        help="literal or prefixed when adding; when listing or removing also any (every "
             "pattern type, the exact name) or match (every pattern that applies to the "
             "name: literal, '*' and prefixes; use with care with --remove). Default literal")
    entries = parser.add_argument_group("entries")
    entries.add_argument("--allow-principal", action="append", default=[],
                         metavar="TYPE:NAME", help="principal allowed, e.g. User:alice; "
                         "User:* is every user (repeatable)")
    entries.add_argument("--deny-principal", action="append", default=[],
                         metavar="TYPE:NAME", help="principal denied; DENY takes precedence "
                         "over ALLOW (repeatable)")
    entries.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                         help="host the allowed principals may come from (default *)")
    entries.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                         help="host the denied principals are denied from (default *)")
    entries.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                         help="operation allowed or denied (repeatable; default All): "
                              + ", ".join(OPERATION_NAMES))
    entries.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                         help="with --list: only the ACLs of this principal (repeatable)")
    shortcuts = parser.add_argument_group("shortcuts")
    shortcuts.add_argument("--producer", action="store_true",
                           help="a producer's ACLs: WRITE, DESCRIBE and CREATE on each "
                                "--topic, WRITE and DESCRIBE on each --transactional-id")
    shortcuts.add_argument("--idempotent", action="store_true",
                           help="with --producer: IDEMPOTENT_WRITE on the cluster too")
    shortcuts.add_argument("--consumer", action="store_true",
                           help="a consumer's ACLs: READ and DESCRIBE on each --topic, READ "
                                "on each --group")
    parser.add_argument("--force", action="store_true",
                        help="assume yes to every question (--remove asks before removing)")
    parser.set_defaults(handler=_run_args)


def operation_of(text: str) -> AclOperation:
    """Kafka's SecurityUtils.operation: `IdempotentWrite`, `idempotent_write`, `READ` ...;
    a name Kafka does not know is UNKNOWN (refused later, per resource type)."""
    words = "".join(("_" + c if c.isupper() and i and text[i - 1].islower() else c)
                    for i, c in enumerate(text.strip()))
    try:
        return AclOperation[words.upper()]
    except KeyError:
        return AclOperation.UNKNOWN


def _principal(text: str) -> str:
    kind, colon, name = text.strip().partition(":")
    if not colon or not kind:
        raise UsageError(f"Could not parse principal from `{text}` (no colon is present "
                         f"separating the principal type from the principal name)")
    return f"{kind}:{name}"


def _check_args(args: argparse.Namespace) -> None:
    if not args.bootstrap_server and not args.command_config:
        raise UsageError("One of --bootstrap-server or --bootstrap-controller must be specified")
    if [args.add, args.remove, args.list].count(True) != 1:
        raise UsageError("Command must include exactly one action: --list, --add, --remove. ")
    if args.list:
        for name, given in (("--producer", args.producer), ("--consumer", args.consumer),
                            ("--allow-host", args.allow_host),
                            ("--allow-principal", args.allow_principal),
                            ("--deny-host", args.deny_host),
                            ("--deny-principal", args.deny_principal)):
            if given:
                raise UsageError(f"Option \"[list]\" can't be used with option \"[{name[2:]}]\"")
    for shortcut, flag in (("producer", args.producer), ("consumer", args.consumer)):
        if not flag:
            continue
        for name, given in (("operation", args.operation), ("deny-principal",
                                                           args.deny_principal),
                            ("deny-host", args.deny_host)):
            if given:
                raise UsageError(f"Option \"[{shortcut}]\" can't be used with option "
                                 f"\"[{name}]\"")
    if args.principal and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise UsageError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise UsageError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise UsageError("With --consumer you must specify a --topic and a --group and no "
                         "--cluster or --transactional-id option should be specified.")


def _patterns(args: argparse.Namespace, *, required: bool) -> list[Pattern]:
    pattern_type = PatternType[args.resource_pattern_type.upper()]
    found = [Pattern(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic]
    if pattern_type == PatternType.LITERAL and (args.cluster or args.idempotent):
        found.append(Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    found += [Pattern(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group]
    found += [Pattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type)
              for t in args.transactional_id]
    if not found and required:
        raise UsageError(NO_RESOURCE)
    return sorted(set(found))


def _entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> set[Entry]:
    operations = set(operations)
    entries = set()
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        hosts = [h.strip() for h in hosts] or (["*"] if principals else [])
        entries |= {Entry(_principal(p), host, op, permission)
                    for p in principals for host in hosts for op in operations}
    return entries


def plan(args: argparse.Namespace) -> dict[Pattern, set[Entry]]:
    """Kafka's getResourceFilterToAcls: the entries to add or remove, per resource pattern
    (an empty set with --remove: every ACL of the pattern)."""
    patterns = _patterns(args, required=True)
    planned: dict[Pattern, set[Entry]] = {}
    if not args.producer and not args.consumer:
        entries = _entries(args, [operation_of(o) for o in args.operation] or [Op.ALL])
        planned = {pattern: set(entries) for pattern in patterns}
    if args.producer:
        for pattern in patterns:
            if pattern.resource_type == ResourceType.TOPIC:
                planned[pattern] = _entries(args, (Op.WRITE, Op.DESCRIBE, Op.CREATE))
            elif pattern.resource_type == ResourceType.TRANSACTIONAL_ID:
                planned[pattern] = _entries(args, (Op.WRITE, Op.DESCRIBE))
        if args.idempotent:
            cluster = Pattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
            planned[cluster] = _entries(args, (Op.IDEMPOTENT_WRITE,))
    if args.consumer:
        for pattern in patterns:
            if pattern.resource_type == ResourceType.TOPIC:
                planned.setdefault(pattern, set()).update(
                    _entries(args, (Op.READ, Op.DESCRIBE)))
            elif pattern.resource_type == ResourceType.GROUP:
                planned.setdefault(pattern, set()).update(_entries(args, (Op.READ,)))
    for pattern, entries in planned.items():
        valid = {*SUPPORTED.get(pattern.resource_type, ()), Op.ALL}
        if any(entry.operation not in valid for entry in entries):
            names = ", ".join(op.name for op in sorted(valid))
            raise UsageError(f"ResourceType {pattern.resource_type.name} only supports "
                             f"operations [{names}]")
    return planned


def _run_args(args: argparse.Namespace) -> int:
    _check_args(args)
    properties = load_properties(args.command_config) if args.command_config else {}
    if args.add and PatternType[args.resource_pattern_type.upper()] not in (
            PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of "
                         f"'{args.resource_pattern_type.upper()}' is not valid when adding "
                         f"acls.")
    planned = None if args.list else plan(args)
    if args.add and planned is not None and any(not e for e in planned.values()):
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when "
                         "trying to add ACLs.")
    bootstrap = args.bootstrap_server or properties.get("bootstrap.servers")
    if not bootstrap:
        raise UsageError("One of --bootstrap-server or --bootstrap-controller must be specified")
    # raw requests, not librdkafka: its DescribeAcls drops the answer's error (a principal
    # without DESCRIBE on the cluster would list nothing and succeed)
    with ProtocolClient(bootstrap, timeout_s=timeout_seconds(properties),
                        client_id="acls-tool", properties=properties) as client:
        tool = _Tool(client)
        if args.add:
            assert planned is not None
            tool.add(planned)
        elif args.remove:
            assert planned is not None
            tool.remove(planned, force=args.force)
        else:
            tool.list(_patterns(args, required=False),
                      [_principal(p) for p in args.principal])
    return 0


VERSIONS: Final = (1, 3)  # of the three ACL APIs, as Kafka 4.0 serves them


def _failed(code: int, message: str | None) -> CommandError:
    return CommandError(f"Error while executing ACL command: "
                        f"{message or error_message(code)}")


def _lines(entries: Iterable[Entry]) -> str:
    return "\n".join(f"\t{entry}" for entry in sorted(entries))


class _Tool:
    def __init__(self, client: ProtocolClient) -> None:
        self.client = client

    def _describe(self, pattern: Pattern) -> list[tuple[Pattern, Entry]]:
        def build(module: Any, _: int) -> Any:
            return module.DescribeAclsRequest(
                resource_type_filter=int(pattern.resource_type),
                resource_name_filter=pattern.name,
                pattern_type_filter=int(pattern.pattern_type), principal_filter=None,
                host_filter=None, operation=int(Op.ANY),
                permission_type=int(AclPermissionType.ANY))

        _, answer = self.client.request(ApiKey.DESCRIBE_ACLS, "DescribeAcls", VERSIONS, build)
        if answer.error_code != ErrorCode.none:
            raise _failed(answer.error_code, answer.error_message)
        return [(Pattern(ResourceType(r.resource_type), r.resource_name,
                         PatternType(r.pattern_type)),
                 Entry(acl.principal, acl.host, AclOperation(acl.operation),
                       AclPermissionType(acl.permission_type)))
                for r in answer.resources for acl in r.acls]

    def add(self, planned: dict[Pattern, set[Entry]]) -> None:
        for pattern, entries in sorted(planned.items()):
            existing = {entry for found, entry in self._describe(pattern) if found == pattern}
            new = set()
            for entry in sorted(entries):
                if entry in existing:
                    print(f"Acl (pattern={pattern}, entry={entry}) already exists.")
                else:
                    new.add(entry)
            if not new:
                continue
            print(f"Adding ACLs for resource `{pattern}`: \n {_lines(new)}\n", flush=True)

            def build(module: Any, _: int, new: set[Entry] = new,
                      pattern: Pattern = pattern) -> Any:
                return module.CreateAclsRequest(creations=tuple(
                    module.AclCreation(resource_type=int(pattern.resource_type),
                                       resource_name=pattern.name,
                                       resource_pattern_type=int(pattern.pattern_type),
                                       principal=e.principal, host=e.host,
                                       operation=int(e.operation),
                                       permission_type=int(e.permission_type))
                    for e in sorted(new)))

            _, answer = self.client.request(ApiKey.CREATE_ACLS, "CreateAcls", VERSIONS, build)
            for result in answer.results:
                if result.error_code != ErrorCode.none:
                    raise _failed(result.error_code, result.error_message)

    def remove(self, planned: dict[Pattern, set[Entry]], *, force: bool) -> None:
        for pattern, entries in sorted(planned.items()):
            if entries:
                question = (f"Are you sure you want to remove ACLs: \n {_lines(entries)}\n"
                            f" from resource filter `{pattern}`? (y/n)")
            else:
                question = (f"Are you sure you want to delete all ACLs for resource filter "
                            f"`{pattern}`? (y/n)")
            if not force:
                print(question, flush=True)
                if sys.stdin.readline().strip().lower() != "y":
                    continue
            filters = ([(e.principal, e.host, e.operation, e.permission_type)
                        for e in sorted(entries)] if entries
                       else [(None, None, Op.ANY, AclPermissionType.ANY)])

            def build(module: Any, _: int, filters: list[Any] = filters,
                      pattern: Pattern = pattern) -> Any:
                return module.DeleteAclsRequest(filters=tuple(
                    module.DeleteAclsFilter(
                        resource_type_filter=int(pattern.resource_type),
                        resource_name_filter=pattern.name,
                        pattern_type_filter=int(pattern.pattern_type), principal_filter=who,
                        host_filter=host, operation=int(operation),
                        permission_type=int(permission))
                    for who, host, operation, permission in filters))

            _, answer = self.client.request(ApiKey.DELETE_ACLS, "DeleteAcls", VERSIONS, build)
            for result in answer.filter_results:
                if result.error_code != ErrorCode.none:
                    raise _failed(result.error_code, result.error_message)

    def list(self, patterns: Sequence[Pattern], principals: Sequence[str]) -> None:
        found: dict[Pattern, set[Entry]] = {}
        for pattern in patterns or [Pattern(ResourceType.ANY, None, PatternType.ANY)]:
            for resource, entry in self._describe(pattern):
                found.setdefault(resource, set()).add(entry)
        if not principals:
            self._print(found)
            return
        for principal in principals:
            print(f"ACLs for principal `{principal}`")
            self._print({pattern: mine for pattern, entries in found.items()
                         if (mine := {e for e in entries if e.principal == principal})})

    @staticmethod
    def _print(found: dict[Pattern, set[Entry]]) -> None:
        for pattern, entries in sorted(found.items()):
            print(f"Current ACLs for resource `{pattern}`:\n{_lines(entries)}\n")
