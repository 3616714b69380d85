"""The StandardAuthorizer decides as Kafka's StandardAuthorizerData: a table of bindings and
checks, incremental updates from metadata deltas, and authorize_by_resource_type."""

from __future__ import annotations

import itertools
import random
import uuid

import pytest

from pykraft.broker.authorizer import AuthorizerSettings, StandardAuthorizer
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from pykraft.metadata.registrations import StandardAcl
from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from pykraft.protocol.framing import RequestHeader

Op, Rt, Pt = AclOperation, ResourceType, PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_ids = itertools.count(1)


def acl(resource: str, *, op: AclOperation = Op.READ, perm: AclPermissionType = ALLOW,
        principal: str = "User:alice", host: str = "*", rt: ResourceType = Rt.TOPIC,
        pt: PatternType = Pt.LITERAL) -> StandardAcl:
    return StandardAcl(int(rt), resource, int(pt), principal, host, int(op), int(perm))


def context(principal: str = "User:alice", host: str = "10.0.0.1") -> RequestContext:
    return RequestContext(RequestHeader(3, 12, 1, "test", 0), "PLAINTEXT", host, 1,
                          principal=KafkaPrincipal.parse(principal))


def authorizer(*acls: StandardAcl, **settings: object) -> StandardAuthorizer:
    result = StandardAuthorizer(AuthorizerSettings(**settings))  # type: ignore[arg-type]
    result.load({uuid.UUID(int=next(_ids)): a for a in acls})
    return result


# (bindings, principal, host, operation, resource type, name, allowed?)
CASES = [
    ("no bindings: deny", (), "User:alice", Op.READ, Rt.TOPIC, "t", False),
    ("literal allow", (acl("t"),), "User:alice", Op.READ, Rt.TOPIC, "t", True),
    ("literal is not a prefix", (acl("t"),), "User:alice", Op.READ, Rt.TOPIC, "t2", False),
    ("other principal", (acl("t"),), "User:bob", Op.READ, Rt.TOPIC, "t", False),
    ("other operation", (acl("t"),), "User:alice", Op.WRITE, Rt.TOPIC, "t", False),
    ("other resource type", (acl("t"),), "User:alice", Op.READ, Rt.GROUP, "t", False),
    ("deny wins over allow", (acl("t"), acl("t", perm=DENY)), "User:alice", Op.READ,
     Rt.TOPIC, "t", False),
    ("deny by wildcard principal wins", (acl("t"), acl("t", perm=DENY, principal="User:*")),
     "User:alice", Op.READ, Rt.TOPIC, "t", False),
    ("deny on a prefix wins over a literal allow",
     (acl("orders"), acl("ord", perm=DENY, pt=Pt.PREFIXED)), "User:alice", Op.READ,
     Rt.TOPIC, "orders", False),
    ("prefixed allow", (acl("ord", pt=Pt.PREFIXED),), "User:alice", Op.READ, Rt.TOPIC,
     "orders", True),
    ("prefixed: the whole name is a prefix", (acl("orders", pt=Pt.PREFIXED),), "User:alice",
     Op.READ, Rt.TOPIC, "orders", True),
    ("prefixed does not match a shorter name", (acl("orders", pt=Pt.PREFIXED),),
     "User:alice", Op.READ, Rt.TOPIC, "order", False),
    ("wildcard resource name", (acl("*"),), "User:alice", Op.READ, Rt.TOPIC, "anything",
     True),
    ("wildcard deny", (acl("t"), acl("*", perm=DENY)), "User:alice", Op.READ, Rt.TOPIC, "t",
     False),
    ("prefixed '*' is no wildcard", (acl("*", pt=Pt.PREFIXED),), "User:alice", Op.READ,
     Rt.TOPIC, "t", False),
    ("wildcard principal", (acl("t", principal="User:*"),), "User:bob", Op.READ, Rt.TOPIC,
     "t", True),
    ("host must match", (acl("t", host="10.0.0.2"),), "User:alice", Op.READ, Rt.TOPIC, "t",
     False),
    ("host matches", (acl("t", host="10.0.0.1"),), "User:alice", Op.READ, Rt.TOPIC, "t",
     True),
    ("deny from another host does not apply",
     (acl("t"), acl("t", perm=DENY, host="10.0.0.2")), "User:alice", Op.READ, Rt.TOPIC, "t",
     True),
    ("READ implies DESCRIBE", (acl("t"),), "User:alice", Op.DESCRIBE, Rt.TOPIC, "t", True),
    ("WRITE implies DESCRIBE", (acl("t", op=Op.WRITE),), "User:alice", Op.DESCRIBE,
     Rt.TOPIC, "t", True),
    ("DELETE implies DESCRIBE", (acl("t", op=Op.DELETE),), "User:alice", Op.DESCRIBE,
     Rt.TOPIC, "t", True),
    ("ALTER implies DESCRIBE", (acl("t", op=Op.ALTER),), "User:alice", Op.DESCRIBE,
     Rt.TOPIC, "t", True),
    ("CREATE does not imply DESCRIBE", (acl("t", op=Op.CREATE),), "User:alice",
     Op.DESCRIBE, Rt.TOPIC, "t", False),
    ("DESCRIBE does not imply READ", (acl("t", op=Op.DESCRIBE),), "User:alice", Op.READ,
     Rt.TOPIC, "t", False),
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS", (acl("t", op=Op.ALTER_CONFIGS),),
     "User:alice", Op.DESCRIBE_CONFIGS, Rt.TOPIC, "t", True),
    ("a DENY of READ does not deny DESCRIBE",
     (acl("t", op=Op.DESCRIBE), acl("t", perm=DENY)), "User:alice", Op.DESCRIBE, Rt.TOPIC,
     "t", True),
    ("ALL allows every operation", (acl("t", op=Op.ALL),), "User:alice", Op.ALTER_CONFIGS,
     Rt.TOPIC, "t", True),
    ("a DENY of ALL denies every operation", (acl("t", op=Op.ALL), acl("t", op=Op.ALL,
     perm=DENY)), "User:alice", Op.DESCRIBE, Rt.TOPIC, "t", False),
    ("cluster", (acl("kafka-cluster", rt=Rt.CLUSTER, op=Op.CLUSTER_ACTION),), "User:alice",
     Op.CLUSTER_ACTION, Rt.CLUSTER, "kafka-cluster", True),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_decisions(case: tuple) -> None:  # type: ignore[type-arg]
    """Each binding table gives Kafka's answer for the check."""
    _, acls, principal, op, rt, name, expected = case
    assert authorizer(*acls).authorize(context(principal), op, rt, name) is expected


def test_super_users_pass_every_check_even_a_deny() -> None:
    """A super user is allowed before any binding is read, DENY included."""
    subject = authorizer(acl("*", op=Op.ALL, perm=DENY, principal="User:*"),
                         super_users=frozenset({"User:admin"}))
    assert subject.authorize(context("User:admin"), Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    assert not subject.authorize(context("User:alice"), Op.READ, Rt.TOPIC, "t")


def test_allow_everyone_if_no_acl_found_only_where_no_binding_applies() -> None:
    """allow.everyone.if.no.acl.found opens resources no binding applies to; a resource
    with a binding for someone else stays closed."""
    subject = authorizer(acl("guarded", principal="User:bob"),
                         allow_everyone_if_no_acl_found=True)
    assert subject.authorize(context(), Op.WRITE, Rt.TOPIC, "open")
    assert not subject.authorize(context(), Op.READ, Rt.TOPIC, "guarded")
    assert not authorizer(acl("guarded", principal="User:bob")).authorize(
        context(), Op.WRITE, Rt.TOPIC, "open")


def _record(acl_id: uuid.UUID, binding: StandardAcl) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id, resource_type=binding.resource_type, resource_name=binding.resource_name,
        pattern_type=binding.pattern_type, principal=binding.principal, host=binding.host,
        operation=binding.operation, permission_type=binding.permission_type)


def test_follows_metadata_deltas_incrementally() -> None:
    """Bindings added and removed by committed records change the answers at once, through
    the delta (not a rebuild), and an image adopted with an empty delta is taken whole."""
    subject = StandardAuthorizer()
    image = MetadataImage.EMPTY
    subject.publish(MetadataDelta(image), image)
    allow_id, deny_id = uuid.UUID(int=1), uuid.UUID(int=2)
    delta = MetadataDelta(image)
    delta.replay(_record(allow_id, acl("t")))
    image = delta.apply(1, 1)
    subject.publish(delta, image)
    assert subject.authorize(context(), Op.READ, Rt.TOPIC, "t")
    delta = MetadataDelta(image)
    delta.replay(_record(deny_id, acl("t", perm=DENY)))
    image = delta.apply(2, 1)
    subject.publish(delta, image)
    assert not subject.authorize(context(), Op.READ, Rt.TOPIC, "t")
    delta = MetadataDelta(image)
    delta.replay(RemoveAccessControlEntryRecord(id=deny_id))
    image = delta.apply(3, 1)
    subject.publish(delta, image)
    assert subject.authorize(context(), Op.READ, Rt.TOPIC, "t") and len(subject) == 1
    delta = MetadataDelta(image)
    delta.replay(RemoveAccessControlEntryRecord(id=allow_id))
    adopted = delta.apply(4, 1)
    subject.publish(MetadataDelta(adopted), adopted)  # adopted: the delta says nothing
    assert not subject.authorize(context(), Op.READ, Rt.TOPIC, "t") and len(subject) == 0


def test_removing_a_prefix_forgets_its_length() -> None:
    """The prefix lengths probed shrink with the bindings: a removed prefix no longer
    applies, and the one left still does."""
    subject = authorizer(acl("ab", pt=Pt.PREFIXED), acl("abc", pt=Pt.PREFIXED, perm=DENY))
    assert not subject.authorize(context(), Op.READ, Rt.TOPIC, "abcd")
    deny_id = next(i for i, a in subject._by_id.items() if a.permission_type == DENY)
    subject.apply_changes([(deny_id, None)])
    assert subject.authorize(context(), Op.READ, Rt.TOPIC, "abcd")
    assert subject._prefix_lengths[int(Rt.TOPIC)] == (2,)


BY_TYPE = [
    ("nothing", (), False),
    ("one literal allow", (acl("t", op=Op.WRITE),), True),
    ("implied operations do not count", (acl("t", op=Op.ALL, perm=DENY), acl("t")), False),
    ("a literal allow denied literally", (acl("t", op=Op.WRITE),
                                         acl("t", op=Op.WRITE, perm=DENY)), False),
    ("a literal allow under a denied prefix", (acl("tx", op=Op.WRITE),
                                              acl("t", op=Op.WRITE, perm=DENY,
                                                  pt=Pt.PREFIXED)), False),
    ("a prefix allow beside an unrelated deny", (acl("a", op=Op.WRITE, pt=Pt.PREFIXED),
                                                acl("b", op=Op.WRITE, perm=DENY,
                                                    pt=Pt.PREFIXED)), True),
    ("wildcard allow", (acl("*", op=Op.WRITE),), True),
    ("wildcard deny beats everything", (acl("*", op=Op.WRITE), acl("t", op=Op.WRITE),
                                        acl("*", op=Op.WRITE, perm=DENY)), False),
    ("another principal's allow", (acl("t", op=Op.WRITE, principal="User:bob"),), False),
]


@pytest.mark.parametrize("case", BY_TYPE, ids=[case[0] for case in BY_TYPE])
def test_authorize_by_resource_type(case: tuple) -> None:  # type: ignore[type-arg]
    """Kafka's authorizeByResourceType: WRITE on some topic, no DENY covering it."""
    _, acls, expected = case
    subject = authorizer(*acls)
    assert subject.authorize_by_resource_type(context(), Op.WRITE, Rt.TOPIC) is expected


def test_authorize_by_resource_type_super_user_and_bad_arguments() -> None:
    """A super user passes by resource type too; ANY is no operation to ask about."""
    subject = authorizer(super_users=frozenset({"User:admin"}))
    assert subject.authorize_by_resource_type(context("User:admin"), Op.WRITE, Rt.TOPIC)
    with pytest.raises(ValueError):
        subject.authorize_by_resource_type(context(), Op.ANY, Rt.TOPIC)


# -- the index agrees with a plain reading of the rules -----------------------------------

def _reference(acls: list[StandardAcl], principal: str, host: str, operation: int,
               resource_type: int, name: str, *, allow_everyone: bool = False) -> bool:
    """Kafka's rules read literally, scanning every binding: the index must agree."""
    applying = [a for a in acls if a.resource_type == resource_type and (
        (a.pattern_type == Pt.LITERAL and a.resource_name in (name, "*"))
        or (a.pattern_type == Pt.PREFIXED and name.startswith(a.resource_name)))]
    matching = []
    for a in applying:
        if a.principal not in (principal, "User:*") or a.host not in (host, "*"):
            continue
        implied = {Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
                   Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS}}.get(Op(operation), set())
        if a.operation in (operation, Op.ALL) or (a.permission_type == ALLOW
                                                  and a.operation in implied):
            matching.append(a)
    if any(a.permission_type == DENY for a in matching):
        return False
    return bool(matching) or (not applying and allow_everyone)


NAMES = ("a", "ab", "abc", "b", "*", "ba")
PRINCIPALS = ("User:alice", "User:bob", "User:*")
HOSTS = ("*", "10.0.0.1", "10.0.0.2")
OPERATIONS = (Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALTER_CONFIGS,
              Op.DESCRIBE_CONFIGS)


def _random_acl(rng: random.Random) -> StandardAcl:
    return StandardAcl(int(rng.choice((Rt.TOPIC, Rt.GROUP))), rng.choice(NAMES),
                       int(rng.choice((Pt.LITERAL, Pt.PREFIXED))), rng.choice(PRINCIPALS),
                       rng.choice(HOSTS), int(rng.choice(OPERATIONS)),
                       int(rng.choice((ALLOW, DENY))))


@pytest.mark.parametrize("seed", range(40))
def test_the_index_agrees_with_the_rules_through_random_changes(seed: int) -> None:
    """Random bindings added and removed one delta at a time: after each change, every check
    over a small universe of names, principals, hosts and operations answers as the rules
    read literally (replay: pytest -k 'agrees_with_the_rules and <seed>')."""
    rng = random.Random(seed)
    allow_everyone = seed % 2 == 1
    subject = StandardAuthorizer(AuthorizerSettings(allow_everyone_if_no_acl_found=allow_everyone))
    live: dict[uuid.UUID, StandardAcl] = {}
    for step in range(12):
        if live and rng.random() < 0.3:
            gone = rng.choice(sorted(live))
            del live[gone]
            subject.apply_changes([(gone, None)])
        else:
            acl_id = uuid.UUID(int=seed * 1000 + step + 1)
            live[acl_id] = _random_acl(rng)
            subject.apply_changes([(acl_id, live[acl_id])])
        acls = list(live.values())
        for _ in range(60):
            principal = rng.choice(("User:alice", "User:bob", "User:carol"))
            host, operation = rng.choice(HOSTS[1:]), rng.choice(OPERATIONS[1:])
            resource_type, name = rng.choice((Rt.TOPIC, Rt.GROUP)), rng.choice(
                ("a", "ab", "abc", "abcd", "b", "ba", "c", "*"))
            expected = _reference(acls, principal, host, operation, resource_type, name,
                                  allow_everyone=allow_everyone)
            got = subject.authorize(context(principal, host), operation, resource_type, name)
            assert got is expected, (acls, principal, host, operation, resource_type, name)
