"""A broker's way to the active controller over the network.

The active controller is the metadata quorum's leader: `ActiveControllerClient` reads the
leader id from the node's Raft (a voter's or an observer's view), looks its controller
listener up in controller.quorum.voters, and sends one request at a time on one TCP
connection to it, in Kafka's wire protocol. `send` makes one attempt; callers that must get
through (registration, heartbeats, forwarded admin requests) loop over it with
`retry_backoff`, re-reading the leader each time, until their own deadline. A connection
that fails or times out is closed; the next attempt opens a new one (to whichever node
leads then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from pykraft.net.connect import ClientSecurity, open_connection
from pykraft.protocol.framing import FrameError, decode_response, encode_request

log = logging.getLogger(__name__)

_SIZE: Final = struct.Struct(">i")
RESPONSE_BYTES_MAX: Final = 100 * 1024 * 1024
NO_LEADER: Final = -1


class ControllerUnavailable(Exception):
    """No answer from the active controller this time (unknown leader, connection failed,
    timed out). `sent` says whether the request may have reached it (then a change may
    have been made) or certainly did not."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class ActiveControllerClient:
    def __init__(
        self,
        node_id: int,
        voters: Mapping[int, tuple[str, int]],
        leader_id: Callable[[], int],
        *,
        request_timeout_ms: int,
        client_id: str | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.security = security  # the controller listener's TLS / SASL, None: plaintext
        self.voters = dict(voters)
        self.leader_id = leader_id
        self.request_timeout_ms = request_timeout_ms
        self.client_id = client_id or f"broker-{node_id}-controller-channel"
        self._destination: int | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()
        self._sent = False

    def active_controller(self) -> int | None:
        """The id of the voter that leads now, if it is known and has an address."""
        leader = self.leader_id()
        return leader if leader != NO_LEADER and leader in self.voters else None

    async def send(self, api_key: int, api_version: int, request: Any) -> tuple[int, Any]:
        """Send `request` to the active controller once: (its id, its answer). Raises
        ControllerUnavailable when there is none to ask or it does not answer in time."""
        destination = self.active_controller()
        if destination is None:
            raise ControllerUnavailable("the metadata quorum has no known leader", sent=False)
        async with self._lock:
            self._sent = False
            try:
                async with asyncio.timeout(self.request_timeout_ms / 1000):
                    answer = await self._exchange(destination, api_key, api_version, request)
            except (OSError, TimeoutError, asyncio.IncompleteReadError, FrameError) as error:
                self._close()
                raise ControllerUnavailable(
                    f"controller {destination} at {self._address(destination)}: "
                    f"{str(error) or type(error).__name__}", sent=self._sent) from error
            except BaseException:
                self._close()
                raise
        return destination, answer

    async def _exchange(self, destination: int, api_key: int, api_version: int,
                        request: Any) -> Any:
        if self._destination != destination or (self._reader and self._reader.at_eof()):
            self._close()  # (or the controller closed it: idle for connections.max.idle.ms)
        if self._writer is None:
            host, port = self.voters[destination]
            self._reader, self._writer = await open_connection(host, port, self.security)
            self._destination = destination
        reader, writer = self._reader, self._writer
        assert reader is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        self._sent = True  # from here on the controller may have received it
        writer.write(encode_request(api_key, api_version, self._correlation_id,
                                    self.client_id, request))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        if not 4 <= size <= RESPONSE_BYTES_MAX:
            raise FrameError(f"response of {size} bytes")
        frame = await reader.readexactly(size)
        try:
            correlation_id, answer = decode_response(api_key, api_version, frame)
        except Exception as error:
            raise FrameError(f"cannot decode the answer: {error}") from error
        if correlation_id != self._correlation_id:
            raise FrameError(f"correlation id {correlation_id}, "
                             f"expected {self._correlation_id}")
        return answer

    def _address(self, destination: int) -> str:
        host, port = self.voters[destination]
        return f"{host}:{port}"

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        self._destination = None

    async def close(self) -> None:
        async with self._lock:
            writer = self._writer
            self._close()
            if writer is not None:
                with contextlib.suppress(Exception):
                    await writer.wait_closed()


class Backoff:
    """Exponential retry backoff (doubling from `initial_ms` up to `max_ms`)."""

    def __init__(self, initial_ms: int = 20, max_ms: int = 500) -> None:
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self._next_ms = initial_ms

    async def wait(self) -> None:
        delay_ms = self._next_ms
        self._next_ms = min(self.max_ms, 2 * self._next_ms)
        await asyncio.sleep(delay_ms / 1000)

    def reset(self) -> None:
        self._next_ms = self.initial_ms
