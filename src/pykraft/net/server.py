"""Asyncio listeners: read size-prefixed frames, dispatch them in order, write responses.

Like Kafka's SocketServer, a connection has at most one request in process: the next frame is
read only after the previous response was queued (the channel is "muted" meanwhile). That
keeps responses in request order without bookkeeping, and gives backpressure for free: a
client that floods requests is simply not read. A frame that is garbled, truncated, oversized
or of an unknown API closes its connection; nothing else is affected.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from kio.index import UnknownAPIKey, UnknownEntity

from pykraft.errors import InvalidRequest, InvariantViolation
from pykraft.protocol.api import ApiKey, supports
from pykraft.protocol.framing import (
    FrameError,
    RequestHeader,
    decode_request,
    encode_response,
    is_flexible,
    parse_request_header,
    skip_header_tags,
)

log = logging.getLogger(__name__)

_SIZE: Final = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    listener_name: str
    client_host: str
    client_port: int


@runtime_checkable
class ConnectionObserver(Protocol):
    """A dispatcher that wants to know when a client's connection ends."""

    def connection_closed(self, client_host: str, client_port: int) -> None: ...


class Dispatcher(Protocol):
    """What a listener serves: the API table and the handler for decoded requests."""

    @property
    def apis(self) -> dict[int, tuple[int, int]]: ...

    async def handle(self, context: RequestContext, request: Any) -> Any | None:
        """Return the response entity, or None for no response (produce with acks=0)."""
        ...

    def unsupported_api_versions_response(self) -> Any:
        """The ApiVersions v0 answer to an ApiVersions request of a version we lack."""
        ...


class Listener:
    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        dispatcher: Dispatcher,
        *,
        request_bytes_max: int,
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.name = name
        self.host = host
        self.port = port
        self.dispatcher = dispatcher
        self.request_bytes_max = request_bytes_max
        self.on_fatal = on_fatal
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._closing = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_address=True, limit=1 << 20
        )
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        log.info("listener %s on %s:%d", self.name, self.host, self.port)

    async def close(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        # a connection accepted just before has its handler task scheduled but not started:
        # let it run its first step, which sees `_closing` and closes the connection
        await asyncio.sleep(0)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            await self._serve(reader, writer, str(peer[0]), int(peer[1]))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        except FrameError as error:
            log.info("closing connection from %s:%s: %s", peer[0], peer[1], error)
        except InvariantViolation as error:
            self.on_fatal(error)
        except Exception:
            log.exception("closing connection from %s:%s after an unexpected error", *peer[:2])
        finally:
            self._connections.discard(task)
            writer.close()
            if isinstance(self.dispatcher, ConnectionObserver):
                self.dispatcher.connection_closed(str(peer[0]), int(peer[1]))

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int
    ) -> None:
        while True:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if size <= 0 or size > self.request_bytes_max:
                raise FrameError(
                    f"request of {size} bytes (socket.request.max.bytes={self.request_bytes_max})"
                )
            frame = await reader.readexactly(size)
            response = await self._respond(frame, host, port)
            if response is not None:
                writer.write(response)
                await writer.drain()

    async def _respond(self, frame: bytes, host: str, port: int) -> bytes | None:
        header = parse_request_header(frame)
        if not supports(self.dispatcher.apis, header.api_key, header.api_version):
            if header.api_key == ApiKey.API_VERSIONS:
                return encode_response(
                    header.correlation_id, self.dispatcher.unsupported_api_versions_response()
                )
            raise FrameError(
                f"unsupported API {header.api_key} v{header.api_version} "
                f"from client {header.client_id!r}"
            )
        try:
            if is_flexible(header.api_key, header.api_version):
                header = skip_header_tags(header, frame)
            request = decode_request(header, frame)
        except (InvalidRequest, UnknownAPIKey, UnknownEntity) as error:
            raise FrameError(str(error)) from error
        context = RequestContext(header, self.name, host, port)
        response = await self.dispatcher.handle(context, request)
        if response is None:
            return None
        return encode_response(header.correlation_id, response)


Handler = Callable[[RequestContext, Any], Awaitable[Any | None]]
