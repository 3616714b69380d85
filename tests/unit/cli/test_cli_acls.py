"""`pykraft acls` without a cluster: Kafka's usage refusals (one line on stderr, exit 1, no
traceback), operation names as Kafka spells them, and the --producer/--consumer shortcuts'
bindings."""

from __future__ import annotations

import pytest

from pykraft.cli.acls import Entry, Pattern, operation_of, plan
from pykraft.cli.main import build_parser, main
from pykraft.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType

Op = AclOperation
REFUSALS = [
    (("--add", "--topic", "t"), "You must specify one of: --allow-principal, "
     "--deny-principal when trying to add ACLs."),
    (("--add", "--list", "--topic", "t"), "Command must include exactly one action: --list, "
     "--add, --remove."),
    (("--add", "--allow-principal", "alice", "--topic", "t"), "Could not parse principal from "
     "`alice` (no colon is present separating the principal type from the principal name)"),
    (("--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"),
     "ResourceType GROUP only supports operations"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Frobnicate"),
     "ResourceType TOPIC only supports operations"),
    (("--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"), "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
    (("--add", "--allow-principal", "User:a"), "You must provide at least one resource"),
    (("--list", "--consumer", "--topic", "t"), "Option \"[list]\" can't be used with option "
     "\"[consumer]\""),
    (("--add", "--producer", "--allow-principal", "User:a"), "With --producer you must specify "
     "a --topic"),
    (("--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"), "With --consumer "
     "you must specify a --topic and a --group"),
    (("--add", "--producer", "--topic", "t", "--operation", "Read"), "Option \"[producer]\" "
     "can't be used with option \"[operation]\""),
    (("--add", "--idempotent", "--topic", "t"), "The --idempotent option is only available if "
     "--producer is set"),
    (("--remove", "--principal", "User:a", "--topic", "t"), "The --principal option is only "
     "available if --list is set"),
    (("--list", "--resource-pattern-type", "sideways"), "invalid choice"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSALS, ids=[m[:40] for _, m in REFUSALS])
def test_refusals_are_one_line_in_kafkas_words(argv: tuple[str, ...], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Each usage mistake exits 1 with Kafka's message on stderr and nothing else."""
    assert main(["acls", "--bootstrap-server", "localhost:1", *argv]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""


@pytest.mark.parametrize(("text", "operation"), [
    ("Read", Op.READ), ("read", Op.READ), ("IdempotentWrite", Op.IDEMPOTENT_WRITE),
    ("idempotent_write", Op.IDEMPOTENT_WRITE), ("DescribeConfigs", Op.DESCRIBE_CONFIGS),
    ("ALL", Op.ALL), ("ClusterAction", Op.CLUSTER_ACTION), ("nope", Op.UNKNOWN)])
def test_operation_names(text: str, operation: AclOperation) -> None:
    """--operation takes Kafka's names in any case, camel or snake."""
    assert operation_of(text) is operation


def _plan(*argv: str) -> dict[Pattern, set[Entry]]:
    return plan(build_parser().parse_args(["acls", "--bootstrap-server", "h:1", *argv]))


def test_producer_and_consumer_shortcuts_make_kafkas_bindings() -> None:
    """--producer --idempotent: WRITE/DESCRIBE/CREATE on the topic, WRITE/DESCRIBE on the
    transactional id, IDEMPOTENT_WRITE on the cluster; --consumer: READ/DESCRIBE on the
    topic, READ on the group; hosts default to *."""
    planned = _plan("--add", "--allow-principal", "User:p", "--producer", "--consumer",
                    "--topic", "t", "--group", "g", "--transactional-id", "tx",
                    "--idempotent")
    operations = {p.resource_type: {e.operation for e in entries}
                  for p, entries in planned.items()}
    assert operations == {
        ResourceType.TOPIC: {Op.WRITE, Op.DESCRIBE, Op.CREATE, Op.READ},
        ResourceType.TRANSACTIONAL_ID: {Op.WRITE, Op.DESCRIBE},
        ResourceType.CLUSTER: {Op.IDEMPOTENT_WRITE},
        ResourceType.GROUP: {Op.READ}}
    assert {e.host for entries in planned.values() for e in entries} == {"*"}


def test_allow_and_deny_with_hosts_and_default_operation() -> None:
    """--allow-principal/--deny-principal with their hosts; no --operation means ALL."""
    planned = _plan("--add", "--allow-principal", "User:a", "--allow-host", "10.0.0.1",
                    "--deny-principal", "User:b", "--topic", "x",
                    "--resource-pattern-type", "prefixed")
    assert planned == {Pattern(ResourceType.TOPIC, "x", PatternType.PREFIXED): {
        Entry("User:a", "10.0.0.1", Op.ALL, AclPermissionType.ALLOW),
        Entry("User:b", "*", Op.ALL, AclPermissionType.DENY)}}
    assert str(next(iter(planned))) == ("ResourcePattern(resourceType=TOPIC, name=x, "
                                        "patternType=PREFIXED)")
