"""The ACL APIs' own checks (broker/acl_apis.py), one layer with a recording channel:
no authorizer answers SECURITY_DISABLED, DESCRIBE/ALTER on the cluster are asked, a refusal
reaches no controller, and DescribeAcls groups the image's bindings by resource."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from kio.schema.create_acls.v3 import request as create_v3
from kio.schema.delete_acls.v3 import request as delete_v3
from kio.schema.describe_acls.v3 import request as describe_v3
from kio.schema.errors import ErrorCode

from pykraft.broker.acl_apis import AclApis
from pykraft.broker.authorizer import ALLOW_ALL, AuthorizerSettings, StandardAuthorizer
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.controller.acls import (
    AclBindingFilter,
    AclCreationResult,
    AclDeletionResult,
    create_acls,
)
from pykraft.metadata.image import MetadataDelta, MetadataImage
from pykraft.metadata.registrations import StandardAcl
from pykraft.net.principal import KafkaPrincipal
from pykraft.net.server import RequestContext
from pykraft.protocol.api import ApiKey
from pykraft.protocol.framing import RequestHeader

DESCRIBE_ALL = describe_v3.DescribeAclsRequest(
    resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
    principal_filter=None, host_filter=None, operation=1, permission_type=1)


class Recording:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def create_acls(self, creations: Sequence[StandardAcl]) -> list[AclCreationResult]:
        self.calls.append("create")
        return [AclCreationResult() for _ in creations]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeletionResult]:
        self.calls.append("delete")
        return [AclDeletionResult(ErrorCode.none, None, ()) for _ in filters]


def _context(api_key: int, principal: str) -> RequestContext:
    return RequestContext(RequestHeader(api_key, 3, 1, "test", 0), "PLAINTEXT", "10.0.0.1", 1,
                          principal=KafkaPrincipal.parse(principal))


def _apis(*bindings: StandardAcl) -> tuple[AclApis, Recording]:
    records, _ = create_acls({}, bindings, random.Random(1))
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    image = delta.apply(max(1, len(records)), 1)
    cache = MetadataCache(1, "cluster")
    cache.publish(delta, image)
    channel = Recording()
    apis = AclApis(cache, channel)
    authorizer = StandardAuthorizer(AuthorizerSettings(super_users=frozenset({"User:admin"})))
    authorizer.publish(delta, image)
    apis.authorizer = authorizer
    return apis, channel


def _call(apis: AclApis, api_key: int, principal: str, request: Any) -> Any:
    return asyncio.run(apis.handlers()[api_key](_context(api_key, principal), request))


def test_without_an_authorizer_every_acl_api_is_security_disabled() -> None:
    """authorizer.class.name empty: Kafka's SECURITY_DISABLED, and no controller asked."""
    apis, channel = _apis()
    apis.authorizer = ALLOW_ALL
    described = _call(apis, ApiKey.DESCRIBE_ACLS, "User:admin", DESCRIBE_ALL)
    assert (described.error_code, described.error_message) == (
        ErrorCode.security_disabled, "No Authorizer is configured.")
    created = _call(apis, ApiKey.CREATE_ACLS, "User:admin", create_v3.CreateAclsRequest(
        creations=(create_v3.AclCreation(resource_type=2, resource_name="t",
                                         resource_pattern_type=3, principal="User:a",
                                         host="*", operation=3, permission_type=3),)))
    assert [r.error_code for r in created.results] == [ErrorCode.security_disabled]
    assert channel.calls == []


def test_describe_needs_describe_and_changes_need_alter_on_the_cluster() -> None:
    """User:ops, granted DESCRIBE on the cluster and nothing more, lists the bindings, but
    its CreateAcls/DeleteAcls are CLUSTER_AUTHORIZATION_FAILED per
    item and never forwarded; User:eve may do neither; the super user may do both."""
    apis, channel = _apis(StandardAcl(4, "kafka-cluster", 3, "User:ops", "*", 8, 3),
                          StandardAcl(2, "t", 3, "User:a", "*", 3, 3),
                          StandardAcl(2, "t", 3, "User:b", "*", 4, 2))
    described = _call(apis, ApiKey.DESCRIBE_ACLS, "User:ops", DESCRIBE_ALL)
    assert described.error_code == ErrorCode.none
    topic = [r for r in described.resources if r.resource_name == "t"]
    assert len(topic) == 1 and len(topic[0].acls) == 2  # grouped by resource
    refused = _call(apis, ApiKey.DESCRIBE_ACLS, "User:eve", DESCRIBE_ALL)
    assert refused.error_code == ErrorCode.cluster_authorization_failed
    assert refused.resources == ()
    deletion = delete_v3.DeleteAclsRequest(filters=(delete_v3.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1),) * 2)
    deleted = _call(apis, ApiKey.DELETE_ACLS, "User:ops", deletion)
    assert [r.error_code for r in deleted.filter_results] == [
        ErrorCode.cluster_authorization_failed] * 2
    assert channel.calls == []
    _call(apis, ApiKey.DELETE_ACLS, "User:admin", deletion)
    assert channel.calls == ["delete"]


def test_describe_refuses_a_filter_with_unknown_parts() -> None:
    """A DescribeAcls filter with an UNKNOWN operation is refused whole (INVALID_REQUEST)."""
    apis, _ = _apis()
    request = describe_v3.DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=0, permission_type=1)
    answer = _call(apis, ApiKey.DESCRIBE_ACLS, "User:admin", request)
    assert answer.error_code == ErrorCode.invalid_request and answer.resources == ()
