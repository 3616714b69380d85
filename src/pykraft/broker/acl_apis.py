"""The ACL APIs: DescribeAcls, CreateAcls and DeleteAcls.

DescribeAcls is answered from this node's metadata image (every broker holds the bindings,
as Kafka's StandardAuthorizer does); CreateAcls and DeleteAcls go through the `AclChannel`
to the active controller (in-process on a node whose controller is active), which decides
them (`pykraft.controller.acls`) and answers once its records are committed.

Served on broker listeners and, as Kafka 4.0 does, on controller listeners (KIP-919).
Kafka's AclApis in order: without an authorizer (`authorizer.class.name` empty) each answers
SECURITY_DISABLED, "No Authorizer is configured."; DescribeAcls needs DESCRIBE on the
cluster, CreateAcls and DeleteAcls ALTER on the cluster, and a request refused is answered
CLUSTER_AUTHORIZATION_FAILED for each creation or filter. The broker checks before it
forwards: the controller sees the broker's principal, not the client's.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode

from pykraft.broker.authorizer import ALLOW_ALL, AllowAll, Authorizer
from pykraft.broker.metadata_cache import MetadataCache
from pykraft.controller.acls import (
    AclBindingFilter,
    AclCreationResult,
    AclDeletionResult,
    describe_acls,
)
from pykraft.metadata.registrations import StandardAcl
from pykraft.net.server import RequestContext
from pykraft.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from pykraft.protocol.api import ACL_APIS, ApiKey
from pykraft.protocol.entities import NO_THROTTLE, make, response_module

__all__ = ["AclApis", "AclChannel"]

NO_AUTHORIZER: Final = "No Authorizer is configured."
NOT_AUTHORIZED: Final = "Cluster authorization failed."  # Kafka's default message for it


class AclChannel(Protocol):
    """The way to the active controller, for CreateAcls and DeleteAcls."""

    async def create_acls(
        self, creations: Sequence[StandardAcl]) -> Sequence[AclCreationResult]: ...

    async def delete_acls(
        self, filters: Sequence[AclBindingFilter]) -> Sequence[AclDeletionResult]: ...


def _filter(entity: Any) -> AclBindingFilter:
    return AclBindingFilter(int(entity.resource_type_filter), entity.resource_name_filter,
                            int(entity.pattern_type_filter), entity.principal_filter,
                            entity.host_filter, int(entity.operation),
                            int(entity.permission_type))


class AclApis:
    """The ApiGroup of the three ACL APIs."""

    def __init__(self, cache: MetadataCache, controller: AclChannel) -> None:
        self.cache = cache
        self.controller = controller
        self.authorizer: Authorizer = ALLOW_ALL  # the node sets its own (authorizer.class.name)

    @property
    def versions(self) -> Mapping[int, tuple[int, int]]:
        return ACL_APIS

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Awaitable[Any]]]:
        return {
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
        }

    def _refusal(self, context: RequestContext,
                 operation: AclOperation) -> tuple[ErrorCode, str] | None:
        if self.authorizer is ALLOW_ALL or isinstance(self.authorizer, AllowAll):
            return ErrorCode.security_disabled, NO_AUTHORIZER
        if not self.authorizer.authorize(context, operation, ResourceType.CLUSTER,
                                         CLUSTER_NAME):
            return ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED
        return None

    async def describe_acls(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DESCRIBE_ACLS, context.header.api_version)
        refusal = self._refusal(context, AclOperation.DESCRIBE)
        acl_filter = _filter(request)
        if refusal is None and acl_filter.unknown() is not None:
            # Kafka refuses such a request as a whole (DescribeAclsRequest.validate)
            refusal = ErrorCode.invalid_request, "Filter contain UNKNOWN elements"
        if refusal is not None:
            return make(module.DescribeAclsResponse, throttle_time=NO_THROTTLE,
                        error_code=refusal[0], error_message=refusal[1], resources=())
        found = describe_acls(self.cache.image.acls.by_id, acl_filter)
        resources = itertools.groupby(
            found, key=lambda acl: (acl.resource_type, acl.resource_name, acl.pattern_type))
        return make(
            module.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
            error_message=None, resources=tuple(
                make(module.DescribeAclsResource, resource_type=resource_type,
                     resource_name=name, pattern_type=pattern_type, acls=tuple(
                         make(module.AclDescription, principal=acl.principal, host=acl.host,
                              operation=acl.operation, permission_type=acl.permission_type)
                         for acl in acls))
                for (resource_type, name, pattern_type), acls in resources))

    async def create_acls(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.CREATE_ACLS, context.header.api_version)
        creations = [StandardAcl(int(c.resource_type), c.resource_name,
                                 int(c.resource_pattern_type), c.principal, c.host,
                                 int(c.operation), int(c.permission_type))
                     for c in request.creations]
        refusal = self._refusal(context, AclOperation.ALTER)
        results: Sequence[AclCreationResult]
        if refusal is not None:
            results = [AclCreationResult(*refusal) for _ in creations]
        elif creations:
            results = await self.controller.create_acls(creations)
        else:
            results = ()
        return make(module.CreateAclsResponse, throttle_time=NO_THROTTLE, results=tuple(
            make(module.AclCreationResult, error_code=r.error_code,
                 error_message=r.error_message) for r in results))

    async def delete_acls(self, context: RequestContext, request: Any) -> Any:
        module = response_module(ApiKey.DELETE_ACLS, context.header.api_version)
        filters = [_filter(f) for f in request.filters]
        refusal = self._refusal(context, AclOperation.ALTER)
        results: Sequence[AclDeletionResult]
        if refusal is not None:
            results = [AclDeletionResult(*refusal, ()) for _ in filters]
        elif filters:
            results = await self.controller.delete_acls(filters)
        else:
            results = ()
        return make(module.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(
            make(module.DeleteAclsFilterResult, error_code=r.error_code,
                 error_message=r.error_message, matching_acls=tuple(
                     make(module.DeleteAclsMatchingAcl, error_code=ErrorCode.none,
                          error_message=None, resource_type=acl.resource_type,
                          resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                          principal=acl.principal, host=acl.host, operation=acl.operation,
                          permission_type=acl.permission_type)
                     for acl in r.matching))
            for r in results))
