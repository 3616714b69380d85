"""The dispatcher of controller listeners: ApiVersions, descriptions and metadata changes.

Authorization (as Kafka's ControllerApis): the quorum's RPCs and the brokers' lifecycle RPCs
(registration, heartbeats, AlterPartition, AllocateProducerIds) need CLUSTER_ACTION on the
cluster, and are refused as a whole with CLUSTER_AUTHORIZATION_FAILED without it: the
controller listener serves brokers and controllers, nobody else. The admin APIs, and any API
group that authorizes itself (one with an `authorizer`, such as the SCRAM credential APIs),
keep their own checks for an admin tool that talks to a controller directly (KIP-919); an API
group without one is a peer's RPCs and gets the CLUSTER_ACTION check. A principal allowed
CLUSTER_ACTION passes those too: it is a broker forwarding a client's request that the broker
has authorized already for the client's principal (Kafka carries that principal in an
Envelope; our brokers re-send the request as themselves, docs/deviations.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.broker.admin_apis import AdminApis
from pykraft.broker.apis import ApiGroup, answer_api_versions, api_versions_response
from pykraft.broker.authorization import allows_cluster, refusal
from pykraft.broker.authorizer import ALLOW_ALL, Authorizer
from pykraft.net.server import ConnectionObserver, RequestContext
from pykraft.protocol.acls import AclOperation, ResourceType
from pykraft.protocol.api import CONTROLLER_APIS, ApiKey


class BrokersTrusted:
    """The admin APIs' authorizer on a controller listener: what `inner` allows, and every
    operation to a principal `inner` allows CLUSTER_ACTION (a broker forwarding)."""

    def __init__(self, inner: Authorizer) -> None:
        self.inner = inner

    def _broker(self, context: RequestContext) -> bool:
        return allows_cluster(self.inner, context, AclOperation.CLUSTER_ACTION)

    def authorize(self, context: RequestContext, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return (self.inner.authorize(context, operation, resource_type, name)
                or self._broker(context))

    def authorize_by_resource_type(self, context: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return (self.inner.authorize_by_resource_type(context, operation, resource_type)
                or self._broker(context))


class ControllerApis:
    def __init__(self, admin: AdminApis, groups: Sequence[ApiGroup] = ()) -> None:
        """`groups` bring more APIs to the listener, e.g. the quorum's RPCs
        (raft.network.RaftApis: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot)."""
        self.admin = admin
        handlers = admin.handlers()
        self._handlers: dict[int, Callable[[RequestContext, Any], Awaitable[Any]]] = {
            key: handlers[key] for key in CONTROLLER_APIS if key in handlers
        }
        self._apis = dict(CONTROLLER_APIS)
        self._observers = [g for g in groups if isinstance(g, ConnectionObserver)]
        self._authorizing = [g for g in groups if hasattr(g, "authorizer")]
        self_authorizing = set(self._handlers)
        for group in groups:
            self._apis.update(group.versions)
            self._handlers.update(group.handlers())
            if hasattr(group, "authorizer"):
                self_authorizing.update(group.handlers())
        self._self_authorizing = frozenset(self_authorizing)
        self._handlers[ApiKey.API_VERSIONS] = self.api_versions
        self._authorizer: Authorizer = ALLOW_ALL

    @property
    def authorizer(self) -> Authorizer:
        return self._authorizer

    @authorizer.setter
    def authorizer(self, authorizer: Authorizer) -> None:
        """What the node sets once its authorizer is built (`authorizer.class.name`)."""
        self._authorizer = authorizer
        trusted = authorizer if authorizer is ALLOW_ALL else BrokersTrusted(authorizer)
        self.admin.authorizer = trusted
        for group in self._authorizing:
            setattr(group, "authorizer", trusted)  # noqa: B010 - not in ApiGroup

    @property
    def apis(self) -> dict[int, tuple[int, int]]:
        return self._apis

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        api_key = context.header.api_key
        if (api_key != ApiKey.API_VERSIONS and api_key not in self._self_authorizing
                and not allows_cluster(self._authorizer, context,
                                       AclOperation.CLUSTER_ACTION)):
            return refusal(api_key, context.header.api_version,
                           ErrorCode.cluster_authorization_failed)
        return await self._handlers[api_key](context, request)

    def connection_closed(self, client_host: str, client_port: int) -> None:
        for observer in self._observers:
            observer.connection_closed(client_host, client_port)

    def unsupported_api_versions_response(self) -> Any:
        return api_versions_response(self.apis, self.admin.cache.image, 0,
                                     ErrorCode.unsupported_version)

    async def api_versions(self, context: RequestContext, request: Any) -> Any:
        return answer_api_versions(self.apis, self.admin.cache.image, context, request)
