"""Authorization: may this request's principal do this operation on this resource?

`Authorizer` is what the request handlers ask; `AllowAll` answers yes to everything and is
what a node uses when `authorizer.class.name` is empty (Kafka's default: no authorizer).
"""

from __future__ import annotations

from typing import Final, Protocol

from pykraft.net.server import RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType

__all__ = ["ALLOW_ALL", "AllowAll", "Authorizer"]


class Authorizer(Protocol):
    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether `context.principal` from `context.client_host` may do `operation` on the
        resource (for the cluster, `name` is "kafka-cluster")."""
        ...

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: whether some resource of the type allows the
        operation and no DENY covers it all (e.g. idempotent producers: WRITE on any topic)."""
        ...


class AllowAll:
    """No authorizer configured: every request is allowed."""

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return True

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return True


ALLOW_ALL: Final = AllowAll()
