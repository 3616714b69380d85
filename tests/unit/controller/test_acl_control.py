"""The controller's ACL decisions (Kafka's AclControlManager): validation and its messages,
idempotent creation, ids from the given rng, filters matched as Kafka's AclBindingFilter,
deletion once per binding, and the records replaying to the same image."""

from __future__ import annotations

import random
import uuid

import pytest

from pykraft.controller.acls import (
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSION_TYPES,
    RESOURCE_TYPES,
    AclBindingFilter,
    create_acls,
    delete_acls,
    describe_acls,
)
from pykraft.errors import ErrorCode
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.registrations import StandardAcl
from pykraft.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType

Op, Rt, Pt, Perm = AclOperation, ResourceType, PatternType, AclPermissionType


def binding(name: str = "t", *, rt: int = Rt.TOPIC, pt: int = Pt.LITERAL,
            principal: str = "User:alice", host: str = "*", op: int = Op.READ,
            perm: int = Perm.ALLOW) -> StandardAcl:
    return StandardAcl(int(rt), name, int(pt), principal, host, int(op), int(perm))


def acl_filter(name: str | None = None, *, rt: int = Rt.ANY, pt: int = Pt.ANY,
               principal: str | None = None, host: str | None = None, op: int = Op.ANY,
               perm: int = Perm.ANY) -> AclBindingFilter:
    return AclBindingFilter(int(rt), name, int(pt), principal, host, int(op), int(perm))


def image_with(*bindings: StandardAcl) -> MetadataImage:
    records, _ = create_acls({}, bindings, random.Random(1))
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(len(records), 1)


REFUSED = [
    (binding(rt=Rt.ANY), "Invalid resourceType ANY"),
    (binding(rt=Rt.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (binding(rt=99), "Invalid resourceType UNKNOWN"),
    (binding(pt=Pt.MATCH), "Invalid patternType MATCH"),
    (binding(pt=Pt.ANY), "Invalid patternType ANY"),
    (binding(op=Op.ANY), "Invalid operation ANY"),
    (binding(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (binding(perm=Perm.ANY), "Invalid permissionType ANY"),
    (binding(""), "Resource name should not be empty"),
    (binding("other", rt=Rt.CLUSTER), "The only valid name for the CLUSTER resource is "
     "kafka-cluster"),
    (binding(principal="alice"), "Could not parse principal from `alice` (no colon is "
     "present separating the principal type from the principal name)"),
]


@pytest.mark.parametrize(("creation", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_invalid_creations_are_refused_alone(creation: StandardAcl, message: str) -> None:
    """An invalid creation gets INVALID_REQUEST with Kafka's message; the valid one beside
    it is still created."""
    records, results = create_acls({}, [creation, binding()], random.Random(0))
    assert [(r.error_code, r.error_message) for r in results] == [
        (ErrorCode.invalid_request, message), (ErrorCode.none, None)]
    assert len(records) == 1 and records[0].resource_name == "t"


def test_creation_is_idempotent_and_ids_come_from_the_rng() -> None:
    """A binding already present, or twice in one request, makes no second record; the
    same seed draws the same ids, none zero."""
    image = image_with(binding("a"))
    records, results = create_acls(image.acls.by_id, [binding("a"), binding("b"),
                                                      binding("b")], random.Random(7))
    assert [r.error_code for r in results] == [ErrorCode.none] * 3
    assert [r.resource_name for r in records] == ["b"]
    again, _ = create_acls(image.acls.by_id, [binding("b")], random.Random(7))
    assert again[0].id == records[0].id != uuid.UUID(int=0)
    assert records[0].id not in image.acls.by_id


MATCHES = [
    # (filter, the names of the bindings it matches)
    (acl_filter(), {"orders", "ord", "*", "other", "kafka-cluster"}),
    (acl_filter("orders", pt=Pt.MATCH, rt=Rt.TOPIC), {"orders", "ord", "*"}),
    (acl_filter("orders"), {"orders"}),
    (acl_filter("ord", pt=Pt.LITERAL), set()),
    (acl_filter("ord", pt=Pt.PREFIXED), {"ord"}),
    (acl_filter(pt=Pt.PREFIXED), {"ord"}),
    (acl_filter(rt=Rt.CLUSTER), {"kafka-cluster"}),
    (acl_filter(principal="User:bob"), {"other"}),
    (acl_filter(op=Op.WRITE), {"other"}),
    (acl_filter(perm=Perm.DENY), {"*"}),
    (acl_filter(host="10.0.0.1"), {"other"}),
]


@pytest.mark.parametrize(("acl_filter_", "names"), MATCHES, ids=[str(i) for i in
                                                                 range(len(MATCHES))])
def test_filters_match_as_kafka(acl_filter_: AclBindingFilter, names: set[str]) -> None:
    """DescribeAcls' filter: ANY, exact names, MATCH over literal, wildcard and prefixes."""
    image = image_with(binding("orders"), binding("ord", pt=Pt.PREFIXED),
                       binding("*", perm=Perm.DENY),
                       binding("other", principal="User:bob", op=Op.WRITE, host="10.0.0.1"),
                       binding("kafka-cluster", rt=Rt.CLUSTER, op=Op.ALTER))
    assert {b.resource_name for b in describe_acls(image.acls.by_id, acl_filter_)} == names


def test_delete_removes_each_match_once_and_lists_it_per_filter() -> None:
    """Two filters matching one binding both list it; one record removes it; an unknown
    filter fails alone; the records replay to an image without the bindings."""
    image = image_with(binding("a"), binding("b"))
    records, results = delete_acls(image.acls.by_id, [
        acl_filter("a"), acl_filter(rt=Rt.TOPIC), acl_filter(op=Op.UNKNOWN),
        acl_filter(pt=Pt.UNKNOWN)])
    assert [sorted(m.resource_name for m in r.matching) for r in results] == [
        ["a"], ["a", "b"], [], []]
    assert [(r.error_code, r.error_message) for r in results[2:]] == [
        (ErrorCode.invalid_request, "Unknown entryFilter."),
        (ErrorCode.invalid_request, "Unknown patternFilter.")]
    assert len(records) == 2
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    assert len(delta.apply(image.offset + 2, 1).acls.by_id) == 0


def test_delete_is_bounded() -> None:
    """A filter that would remove more than 10,000 bindings in one request fails whole."""
    existing = {uuid.UUID(int=i + 1): binding(f"t{i}") for i in range(10_001)}
    records, results = delete_acls(existing, [acl_filter()])
    assert records == [] and results[0].error_code == ErrorCode.unknown_server_error


@pytest.mark.parametrize(("names", "kind"), [(RESOURCE_TYPES, Rt), (PATTERN_TYPES, Pt),
                                             (OPERATIONS, Op), (PERMISSION_TYPES, Perm)])
def test_the_core_codes_are_the_protocols(names: tuple[str, ...], kind: type) -> None:
    """controller.acls keeps its own copy of Kafka's codes (a core may not import
    pykraft.protocol): it names every code as protocol.acls does."""
    assert names == tuple(member.name for member in sorted(kind))


def test_create_is_bounded() -> None:
    """A CreateAcls that would write more than 10,000 records fails whole, writing none."""
    creations = [binding(f"t{i}") for i in range(10_001)]
    records, results = create_acls({}, creations, random.Random(3))
    assert records == [] and {r.error_code for r in results} == {ErrorCode.unknown_server_error}
    records, _ = create_acls({}, creations[:10_000], random.Random(3))
    assert len(records) == 10_000
