"""The dispatcher of controller listeners: ApiVersions, descriptions and metadata changes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from pykraft.broker.admin_apis import AdminApis
from pykraft.broker.apis import ApiGroup, answer_api_versions, api_versions_response
from pykraft.net.server import ConnectionObserver, RequestContext
from pykraft.protocol.api import CONTROLLER_APIS, ApiKey


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
        for group in groups:
            self._apis.update(group.versions)
            self._handlers.update(group.handlers())
        self._handlers[ApiKey.API_VERSIONS] = self.api_versions

    @property
    def apis(self) -> dict[int, tuple[int, int]]:
        return self._apis

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        return await self._handlers[context.header.api_key](context, request)

    def connection_closed(self, client_host: str, client_port: int) -> None:
        for observer in self._observers:
            observer.connection_closed(client_host, client_port)

    def unsupported_api_versions_response(self) -> Any:
        return api_versions_response(self.apis, self.admin.cache.image, 0,
                                     ErrorCode.unsupported_version)

    async def api_versions(self, context: RequestContext, request: Any) -> Any:
        return answer_api_versions(self.apis, self.admin.cache.image, context, request)
